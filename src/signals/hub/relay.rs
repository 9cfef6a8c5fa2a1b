//! The hub's side of several replicas, through the `Peers` seam: which
//! agents another replica holds, waking it for the signals recorded for
//! them (the `signals` row is the outbox), and delivering what another
//! replica recorded for agents held here. Alone on its database, `Alone`
//! answers that nobody else holds anything.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use tracing::{info_span, warn};

use super::{lock, wire, Ask, Hub, InFlight};
use crate::clock::Ts;
use crate::domain::Outcome;
use crate::signals::peers::Holder;
use crate::stats::{SignalKind, SignalOutcome};
use crate::store::signals::{self as audit, SignalRecord, SignalUpdate};

/// Which agents have a stream on some live replica, and which of those
/// streams are restart-only peers' (sidecars).
#[derive(Debug, Default)]
pub struct Reach {
    pub streams: HashSet<String>,
    pub restart_only: HashSet<String>,
}

impl Reach {
    fn add(&mut self, agent: String, h: &Holder) {
        if h.restart_only {
            self.restart_only.insert(agent.clone());
        }
        self.streams.insert(agent);
    }
}

/// What this replica last read of the other replicas' streams: agent →
/// holder, and how many of them are sidecars not also streaming here.
#[derive(Default)]
pub(super) struct Remote {
    holders: Mutex<HashMap<String, Holder>>,
    sidecars: AtomicUsize,
}

impl Remote {
    /// Replaces the view; `here` says which agents stream here too (a
    /// sidecar streams to every replica, and counts once).
    pub fn set(&self, holders: HashMap<String, Holder>, here: impl FnOnce(&[&str]) -> Vec<bool>) {
        let sidecars: Vec<&str> = holders
            .iter()
            .filter(|(_, h)| h.restart_only)
            .map(|(a, _)| a.as_str())
            .collect();
        let elsewhere_only = here(&sidecars).into_iter().filter(|h| !h).count();
        *lock(&self.holders) = holders;
        self.sidecars.store(elsewhere_only, Ordering::Relaxed);
    }

    pub fn contains(&self, agent: &str) -> bool {
        lock(&self.holders).contains_key(agent)
    }

    /// Each of `agents`' holder, in order.
    pub fn holders_of<'a>(&self, agents: impl Iterator<Item = &'a str>) -> Vec<Option<Holder>> {
        let m = lock(&self.holders);
        agents.map(|a| m.get(a).cloned()).collect()
    }

    pub fn agents(&self) -> Vec<String> {
        lock(&self.holders).keys().cloned().collect()
    }

    /// Sidecars on other replicas only.
    pub fn sidecars(&self) -> usize {
        self.sidecars.load(Ordering::Relaxed)
    }

    /// Those of `agents` whose stream elsewhere is a sidecar's.
    pub fn restart_only_of(&self, agents: &[String]) -> Vec<String> {
        let m = lock(&self.holders);
        agents
            .iter()
            .filter(|a| m.get(a.as_str()).is_some_and(|h| h.restart_only))
            .cloned()
            .collect()
    }
}

impl Hub {
    /// The agent's stream is here or on another live replica.
    pub fn reachable(&self, agent: &str) -> bool {
        self.is_connected(agent) || self.remote.contains(agent)
    }

    /// Which of `agents` have a stream on any live replica, and which of
    /// those streams are sidecars': those here, those the last read of the
    /// other replicas' streams has, and, among replicas, those the
    /// database says another holds now (they may have connected since that
    /// read).
    pub async fn reachable_of(&self, agents: &[String]) -> Reach {
        let mut reach = Reach {
            restart_only: self.restart_only_of(agents),
            ..Reach::default()
        };
        let mut ask = Vec::new();
        let here = self
            .streams
            .contains_each(agents.iter().map(String::as_str));
        let elsewhere = self.remote.holders_of(agents.iter().map(String::as_str));
        for ((a, here), h) in agents.iter().zip(here).zip(elsewhere) {
            if here {
                reach.streams.insert(a.clone());
            } else if let Some(h) = h {
                reach.add(a.clone(), &h);
            } else {
                ask.push(a.clone());
            }
        }
        if ask.is_empty() || !self.cfg.peers.replicated() {
            return reach;
        }
        match self.cfg.peers.owners(&ask).await {
            Ok(owners) => {
                for (a, h) in owners {
                    reach.add(a, &h);
                }
            }
            Err(e) => {
                warn!(agents = ask.len(), error = %e, "cannot tell which replica holds these agents");
            }
        }
        reach
    }

    /// Every agent with a stream on any live replica.
    pub fn reachable_agents(&self) -> Vec<String> {
        let mut v = self.connected_agents();
        v.extend(self.remote.agents());
        v.sort();
        v.dedup();
        v
    }

    /// Replaces what this replica knows of the others' streams. A sidecar
    /// streams to every replica: one that also streams here is counted
    /// among this replica's own, so each sidecar counts once.
    pub fn set_remote(&self, streams: HashMap<String, Holder>) {
        self.remote.set(streams, |sidecars| {
            self.streams.contains_each(sidecars.iter().copied())
        });
    }

    /// Which of these rows' agents another live replica holds (none
    /// without replicas, or when the database cannot say).
    pub(super) async fn held_elsewhere(&self, rows: &[SignalRecord]) -> HashMap<String, Holder> {
        if !self.cfg.peers.replicated() {
            return HashMap::new();
        }
        let away: Vec<String> = rows
            .iter()
            .filter(|r| !self.is_connected(&r.agent))
            .map(|r| r.agent.clone())
            .collect();
        if away.is_empty() {
            return HashMap::new();
        }
        match self.cfg.peers.owners(&away).await {
            Ok(owners) => owners,
            Err(e) => {
                warn!(error = %e, agents = away.len(), "cannot tell which replica holds these agents: their signals are undeliverable");
                HashMap::new()
            }
        }
    }

    /// Wakes each replica holding agents that `relayed` signals are for;
    /// a replica that cannot be woken leaves its signals undeliverable.
    pub(super) async fn wake(
        &self,
        relayed: HashMap<String, Vec<i64>>,
        rows: &mut [SignalRecord],
        now: Ts,
    ) {
        for (replica, ids) in relayed {
            if let Err(e) = self.cfg.peers.wake(&replica, &ids).await {
                warn!(%replica, signals = ids.len(), error = %e, "cannot wake the replica holding these agents");
                let detail = format!("cannot wake replica {replica}, which holds the agent: {e}");
                for row in rows.iter_mut().filter(|r| ids.contains(&r.id)) {
                    row.outcome = Outcome::Undeliverable;
                    row.detail = detail.clone();
                    self.rt.stats.signal(row.kind, SignalOutcome::Undeliverable);
                    self.update(SignalUpdate::Outcome {
                        id: row.id,
                        at: now,
                        outcome: Outcome::Undeliverable,
                        detail: detail.clone(),
                        acked: false,
                        latency_us: None,
                    });
                }
            }
        }
    }

    /// Delivers the signals `ids` another replica recorded for agents whose
    /// streams are here (it woke this one for them): see
    /// [`Self::deliver_recorded`].
    pub async fn deliver_relayed(&self, ids: &[i64]) {
        for chunk in ids.chunks(audit::LOOKUP_CHUNK) {
            match audit::by_ids(&self.audit.db, chunk).await {
                Ok(rows) => {
                    self.deliver_recorded(rows).await;
                }
                Err(e) => {
                    warn!(error = %e, signals = chunk.len(), "cannot read signals another replica relayed: they time out");
                }
            }
        }
    }

    /// Delivers signals already recorded (by another replica, or found
    /// after a lost notification). Each is claimed in the database first
    /// ([`audit::claim`]): one already answered, already on its way, or
    /// claimed by another reader of the same row (whatever its snapshot
    /// says) is left alone. One whose agent has left gets `undeliverable`.
    /// Returns how many were sent.
    pub async fn deliver_recorded(&self, rows: Vec<SignalRecord>) -> usize {
        let candidates: Vec<i64> = rows
            .iter()
            .filter(|r| r.outcome == Outcome::Pending && !self.flights.contains(r.id))
            .map(|r| r.id)
            .collect();
        let mut claimed = std::collections::HashSet::with_capacity(candidates.len());
        for chunk in candidates.chunks(audit::LOOKUP_CHUNK) {
            match audit::claim(&self.audit.db, chunk, self.audit_now()).await {
                Ok(ids) => claimed.extend(ids),
                Err(e) => {
                    warn!(error = %e, signals = chunk.len(), "cannot claim recorded signals for delivery: they time out");
                }
            }
        }
        let agents: Vec<String> = rows.iter().map(|r| r.agent.clone()).collect();
        let restarting = self.restart_only_of(&agents);
        let mut sent = 0;
        for row in rows {
            if !claimed.contains(&row.id) {
                continue;
            }
            let _span =
                info_span!("signal.relayed", signal.id = row.id, agent = %row.agent).entered();
            // A sidecar here restarts its agent whatever the replica that
            // recorded the signal knew of it.
            let restart = row.restart || restarting.contains(&row.agent);
            let said = self.streams.restart_wait_of(&row.agent);
            let deadline = row.created.saturating_add(self.ack_wait(restart, said));
            let ask = match row.kind {
                SignalKind::Reconnect => Ask::Reconnect { proxy: row.proxy },
                SignalKind::CloseTunnel => Ask::CloseTunnel { proxy: row.proxy },
            };
            let signal = wire(row.id, ask, row.reason, row.requested_by, deadline, None);
            let flight = InFlight {
                agent: row.agent,
                kind: row.kind,
                created: row.created,
                deadline,
                trace: None,
                restart,
            };
            match self.enqueue(signal, flight) {
                Ok(()) => sent += 1,
                Err(why) => {
                    let detail = why.to_string();
                    self.rt.stats.signal(row.kind, SignalOutcome::Undeliverable);
                    self.update(SignalUpdate::Outcome {
                        id: row.id,
                        at: self.audit_now(),
                        outcome: Outcome::Undeliverable,
                        detail,
                        acked: false,
                        latency_us: None,
                    });
                }
            }
        }
        sent
    }
}
