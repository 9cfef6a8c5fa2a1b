//! Restarts asked of sidecars, for the cap on restarts in flight and the
//! pause after failed ones. Alone on its database the hub's own counts are
//! the fleet's; among replicas the audit is (each signal row says whether
//! it asks for a restart, each stream row whether its peer is a sidecar),
//! so a restart counts wherever the sidecar's stream is held.

use std::collections::HashSet;

use super::{Hub, RESTART_FAILURES_PAUSE};
use crate::store::signals as audit;

impl Hub {
    /// Restarts awaiting their ack and the restart-only peers (sidecars)
    /// connected, across the fleet: alone, this replica's own counts;
    /// among replicas, the restarts every replica recorded (as last read,
    /// see [`Self::refresh_restarts`]) and the sidecars here and on the
    /// other live replicas.
    pub fn restarts(&self) -> (usize, usize) {
        let here = self.streams.sidecars();
        if self.cfg.peers.replicated() {
            (
                self.flights.fleet_in_flight(),
                here + self.remote.sidecars(),
            )
        } else {
            (self.flights.restarting(), here)
        }
    }

    /// Among replicas, reads the restarts every replica asked for from the
    /// audit; alone, there is nothing to read. On an error the last read
    /// stands (the caller says so, at its level).
    pub async fn refresh_restarts(&self) -> Result<(), sqlx::Error> {
        if !self.cfg.peers.replicated() {
            return Ok(());
        }
        let r =
            audit::restarts(&self.audit.db, self.fleet.cluster(), RESTART_FAILURES_PAUSE).await?;
        self.flights.set_fleet(r);
        Ok(())
    }

    /// Records how a restart sent here ended: `Some(true)` acked ready,
    /// `Some(false)` tried and failed or timed out, `None` refused by the
    /// sidecar without trying (a dry run, its cooldown, one already under
    /// way, a target it could not prove): that frees its slot but is not
    /// remembered, so it never pauses the fleet's restarts.
    pub(super) fn restart_ended(&self, ok: Option<bool>) {
        self.flights.restart_ended(ok);
    }

    /// Why automatic restarts wait: the last few restarts did not bring
    /// their agents back (failed, or no ack in time), here or, among
    /// replicas, anywhere. One that succeeds, or a restart a person asks
    /// for that does, lifts it.
    pub fn restarts_failing(&self) -> Option<String> {
        let paused = self.flights.failing(self.cfg.peers.replicated());
        paused.then(|| {
            format!(
                "the last {RESTART_FAILURES_PAUSE} restarts did not bring their agents back: automatic restarts wait until one does"
            )
        })
    }

    /// The agents among `agents` whose stream here is a restart-only
    /// peer's.
    pub fn restart_only_of(&self, agents: &[String]) -> HashSet<String> {
        self.streams.restart_only_of(agents)
    }

    /// Which of `agents` have a sidecar on any replica this one knows of:
    /// here, or in its last read of the other replicas' streams. A
    /// sidecar that streams to another replica only (its stream here
    /// lost, or never opened) is restarted through that one.
    pub fn restarted_by_sidecar(&self, agents: &[String]) -> HashSet<String> {
        let mut out = self.restart_only_of(agents);
        out.extend(self.remote.restart_only_of(agents));
        out
    }
}
