//! The signals sent from here that await their ack, and the restarts
//! among them: how many are running, how the last ones ended, what the
//! other replicas' audit said of theirs, and the lock restarts are
//! admitted under. A restart is counted when it is queued and uncounted
//! when it ends, both here, so the count cannot drift.
//!
//! Owns: the table of signals awaiting acks and the restart counts. Must
//! not touch: the streams (a signal is queued by the caller's closure) or
//! the audit's rows.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::streams::Undeliverable;
use crate::clock::Ts;
use crate::stats::SignalKind;
use crate::store::signals as audit;
use crate::telemetry::propagate::TraceRef;

/// Signals awaiting an ack, at most (a bound on memory).
const MAX_AWAITING: usize = 200_000;
/// Restart outcomes remembered.
const RESTARTS_REMEMBERED: usize = 8;
/// Automatic restarts pause after this many failed in a row.
pub const RESTART_FAILURES_PAUSE: usize = 3;

/// A signal sent from here, awaiting its ack.
pub(super) struct InFlight {
    pub agent: String,
    pub kind: SignalKind,
    pub created: Ts,
    pub deadline: Ts,
    /// The `signal.send` span, parent of the ack's.
    pub trace: Option<TraceRef>,
    /// A restart: its peer restarts its agent.
    pub restart: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// True when the last [`RESTART_FAILURES_PAUSE`] restarts (newest first)
/// all failed.
fn failing(newest_first: impl Iterator<Item = bool>) -> bool {
    let last: Vec<bool> = newest_first.take(RESTART_FAILURES_PAUSE).collect();
    last.len() == RESTART_FAILURES_PAUSE && last.iter().all(|ok| !ok)
}

#[derive(Default)]
pub(super) struct Flights {
    awaiting: Mutex<HashMap<i64, InFlight>>,
    /// Restarts awaiting their ack: counted as they change, so the pages
    /// read them without a scan.
    restarting: AtomicUsize,
    /// How the last restarts sent here ended (true: their agent turned
    /// ready); refusals are not remembered.
    last: Mutex<VecDeque<bool>>,
    /// Among replicas: the restarts every replica asked for, as last read
    /// from the audit.
    fleet: Mutex<audit::Restarts>,
    /// Held while restarts are admitted and recorded: with SQLite's single
    /// writer (and PostgreSQL's advisory lock among replicas) the cap
    /// cannot be passed by two sends at once.
    admission: tokio::sync::Mutex<()>,
}

impl Flights {
    /// Queues a signal through `send` (given its agent) and keeps it
    /// awaiting its ack; a restart is counted in the same step.
    pub fn send(
        &self,
        id: i64,
        flight: InFlight,
        send: impl FnOnce(&str) -> Result<(), Undeliverable>,
    ) -> Result<(), Undeliverable> {
        let mut awaiting = lock(&self.awaiting);
        if awaiting.len() >= MAX_AWAITING {
            return Err(Undeliverable::TooManyAwaiting);
        }
        send(&flight.agent)?;
        if flight.restart {
            self.restarting.fetch_add(1, Ordering::Relaxed);
        }
        awaiting.insert(id, flight);
        Ok(())
    }

    /// The signal `id` if `agent` is the one it was sent to (an ack from
    /// anyone else changes nothing). A restart taken here must be ended
    /// with [`Self::restart_ended`].
    pub fn take(&self, id: i64, agent: &str) -> Option<InFlight> {
        let mut m = lock(&self.awaiting);
        match m.get(&id) {
            Some(f) if f.agent == agent => m.remove(&id),
            _ => None,
        }
    }

    /// The signals whose deadline has passed, taken out.
    pub fn expired(&self, now: Ts) -> Vec<(i64, InFlight)> {
        let mut m = lock(&self.awaiting);
        let ids: Vec<i64> = m
            .iter()
            .filter(|(_, f)| f.deadline <= now)
            .map(|(id, _)| *id)
            .collect();
        ids.into_iter()
            .filter_map(|id| m.remove(&id).map(|f| (id, f)))
            .collect()
    }

    pub fn contains(&self, id: i64) -> bool {
        lock(&self.awaiting).contains_key(&id)
    }

    pub fn len(&self) -> usize {
        lock(&self.awaiting).len()
    }

    /// How a restart sent here ended: `Some(true)` acked ready,
    /// `Some(false)` tried and failed or timed out, `None` refused without
    /// trying: that frees its slot but is not remembered, so it never
    /// pauses the fleet's restarts.
    pub fn restart_ended(&self, ok: Option<bool>) {
        // Never below zero, whatever a caller does twice.
        let _ = self
            .restarting
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        let Some(ok) = ok else { return };
        let mut last = lock(&self.last);
        if last.len() == RESTARTS_REMEMBERED {
            last.pop_front();
        }
        last.push_back(ok);
    }

    /// Restarts sent here awaiting their ack.
    pub fn restarting(&self) -> usize {
        self.restarting.load(Ordering::Relaxed)
    }

    /// What the audit last said of every replica's restarts.
    pub fn set_fleet(&self, r: audit::Restarts) {
        *lock(&self.fleet) = r;
    }

    pub fn fleet_in_flight(&self) -> usize {
        lock(&self.fleet).in_flight
    }

    /// Whether the last restarts all failed: this replica's own, or
    /// (`fleet`) every replica's as the audit last said.
    pub fn failing(&self, fleet: bool) -> bool {
        if fleet {
            failing(lock(&self.fleet).last.iter().copied())
        } else {
            failing(lock(&self.last).iter().rev().copied())
        }
    }

    /// Held while restarts are admitted and recorded.
    pub async fn admission(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.admission.lock().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flight(agent: &str, restart: bool, deadline: i64) -> InFlight {
        InFlight {
            agent: agent.into(),
            kind: SignalKind::Reconnect,
            created: Ts(0),
            deadline: Ts(deadline),
            trace: None,
            restart,
        }
    }

    #[test]
    fn restarts_pause_after_three_failures_in_a_row_only() {
        assert!(!failing([false, false].into_iter()), "two are not three");
        assert!(failing([false, false, false, true].into_iter()));
        assert!(
            !failing([true, false, false, false].into_iter()),
            "the newest succeeded"
        );
        assert!(!failing(std::iter::empty()));
    }

    #[test]
    fn a_restart_is_counted_when_queued_and_uncounted_when_it_ends() {
        let f = Flights::default();
        f.send(1, flight("a", true, 10), |_| Ok(()))
            .expect("queued");
        f.send(2, flight("b", false, 10), |_| Ok(()))
            .expect("queued");
        assert_eq!((f.len(), f.restarting()), (2, 1));
        assert_eq!(
            f.send(3, flight("c", true, 10), |_| Err(
                Undeliverable::NotConnected
            ))
            .err(),
            Some(Undeliverable::NotConnected)
        );
        assert_eq!((f.len(), f.restarting()), (2, 1), "not queued, not counted");
        assert!(
            f.take(1, "someone-else").is_none(),
            "only its agent acks it"
        );
        let taken = f.take(1, "a").expect("its agent's ack");
        assert!(taken.restart);
        f.restart_ended(Some(true));
        assert_eq!(f.restarting(), 0);
        f.restart_ended(Some(true));
        assert_eq!(f.restarting(), 0, "never below zero");
    }

    #[test]
    fn refusals_are_not_remembered_but_tried_failures_are() {
        let f = Flights::default();
        for _ in 0..3 {
            f.restart_ended(None);
        }
        assert!(!f.failing(false), "refusals never pause");
        for _ in 0..3 {
            f.restart_ended(Some(false));
        }
        assert!(f.failing(false));
        f.restart_ended(Some(true));
        assert!(!f.failing(false), "one that succeeds lifts it");
    }

    #[test]
    fn expired_signals_are_taken_out_once() {
        let f = Flights::default();
        f.send(1, flight("a", false, 5), |_| Ok(()))
            .expect("queued");
        f.send(2, flight("b", false, 50), |_| Ok(()))
            .expect("queued");
        let gone: Vec<i64> = f.expired(Ts(10)).into_iter().map(|(id, _)| id).collect();
        assert_eq!(gone, vec![1]);
        assert!(f.expired(Ts(10)).is_empty());
        assert!(f.contains(2) && !f.contains(1));
    }
}
