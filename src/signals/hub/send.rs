//! Sending signals from here: each is recorded first (restarts admitted
//! in the same transaction), the fleet told, then queued on its agent's
//! stream here or relayed to the replica holding it. `send_fenced` takes
//! those steps in order; each is a function of its own below.
//!
//! Owns: the send path. Must not touch: the stream table's rules
//! (`streams.rs`) or the ack's (`hub.rs`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use tracing::info_span;

use super::flights::InFlight;
use super::streams::Undeliverable;
use super::{Ask, Hub, SendError, Sent, SignalRequest};
use crate::clock::Ts;
use crate::domain::{ClusterName, Outcome};
use crate::fleet::Command;
use crate::proto::to_timestamp;
use crate::proto::v1 as pb;
use crate::signals::peers::Holder;
use crate::stats::SignalOutcome;
use crate::store::signals::{self as audit, SignalRecord, SignalUpdate};
use crate::store::Fence;
use crate::telemetry::propagate::{self, TraceRef};

impl Hub {
    /// Records each signal (committed before this returns), tells the fleet,
    /// and queues it on the agent's stream. An agent that is not connected,
    /// or whose queue is full, gets an `undeliverable` row instead.
    pub(in crate::signals) async fn send(
        &self,
        reqs: Vec<SignalRequest>,
        admit: audit::Admission,
    ) -> Result<Sent, SendError> {
        self.send_fenced(reqs, Fence::Sole, admit).await
    }

    /// [`Self::send`] for what only the leader sends (automatic, periodic,
    /// graceful): recorded only while this replica still leads in its
    /// term, checked in the transaction that records them.
    pub(in crate::signals) async fn send_as_leader(
        &self,
        reqs: Vec<SignalRequest>,
        admit: audit::Admission,
    ) -> Result<Sent, SendError> {
        let fence = self
            .cfg
            .leadership
            .borrow()
            .acting_fence(self.rt.clock.instant())
            .ok_or(SendError::NotLeader)?;
        self.send_fenced(reqs, fence, admit).await
    }

    async fn send_fenced(
        &self,
        reqs: Vec<SignalRequest>,
        fence: Fence,
        admit: audit::Admission,
    ) -> Result<Sent, SendError> {
        if reqs.is_empty() {
            return Ok(Sent::default());
        }
        let now = self.rt.clock.now();
        let stamp = self.audit_now();
        let ids = self.audit.ids.take(&self.audit.db, reqs.len()).await?;
        let mut rows = rows_for(self.fleet.cluster(), &reqs, ids, stamp);
        let elsewhere = self.held_elsewhere(&rows).await;
        self.mark_restarts(&mut rows, &elsewhere, stamp);
        let left = self.record(&rows, &elsewhere, &fence, admit).await?;
        let mut sent = Sent::default();
        let (mut rows, reqs) = leave_out(rows, reqs, &left, &mut sent);
        self.fleet
            .send(Command::Signaled {
                signals: rows.iter().map(|r| (r.agent.clone(), r.id)).collect(),
                at: now,
            })
            .await
            .map_err(|_| SendError::FleetGone)?;
        let current = TraceRef::current();
        let mut relayed: HashMap<String, Vec<i64>> = HashMap::new();
        for (row, req) in rows.iter_mut().zip(reqs) {
            let parent = req.trace.clone().or_else(|| current.clone());
            match elsewhere.get(&row.agent) {
                // The replica holding its stream delivers it.
                Some(owner) => {
                    send_span(parent.as_ref(), row).record("outcome", "relayed");
                    relayed
                        .entry(owner.replica.clone())
                        .or_default()
                        .push(row.id);
                    self.rt.stats.signal(row.kind, SignalOutcome::Sent);
                }
                None => self.deliver_here(row, req, parent.as_ref(), now, stamp),
            }
        }
        self.wake(relayed, &mut rows, stamp).await;
        sent.rows = rows;
        Ok(sent)
    }

    /// Says on each row whether it asks a sidecar for a restart, wherever
    /// its stream is (the fleet's restarts are counted from the rows), and
    /// its deadline on the audit's clock, for every replica's sweep.
    fn mark_restarts(
        &self,
        rows: &mut [SignalRecord],
        elsewhere: &HashMap<String, Holder>,
        stamp: Ts,
    ) {
        let agents: Vec<String> = rows.iter().map(|r| r.agent.clone()).collect();
        // Sidecars here, with what each said its restart takes: one look.
        let here = self.streams.restart_waits_of(&agents);
        for r in rows {
            let there = elsewhere.get(&r.agent).filter(|h| h.restart_only);
            let said = match (here.get(&r.agent), there) {
                (Some(wait), _) => Some(*wait),
                (None, Some(h)) => Some(h.restart_wait),
                (None, None) => None,
            };
            r.restart = said.is_some();
            let wait = self.ack_wait(r.restart, said.unwrap_or(Duration::ZERO));
            r.deadline = Some(stamp.saturating_add(wait));
        }
    }

    /// Records the rows in one transaction, restarts admitted under the
    /// cap and the pause in that same transaction: what it left out.
    async fn record(
        &self,
        rows: &[SignalRecord],
        elsewhere: &HashMap<String, Holder>,
        fence: &Fence,
        admit: audit::Admission,
    ) -> Result<audit::LeftOut, SendError> {
        // With several replicas, a row this replica delivers itself is
        // claimed as it is recorded ('delivered', the time filled in when
        // it is written to the stream): the make-up that reads `pending`
        // rows for the agents held here must not send it again after its
        // ack has left memory but before the outcome is written.
        let claimed: Vec<SignalRecord>;
        let stored = if self.cfg.peers.replicated() {
            claimed = rows
                .iter()
                .map(|r| SignalRecord {
                    outcome: if elsewhere.contains_key(&r.agent) {
                        r.outcome
                    } else {
                        Outcome::Delivered
                    },
                    ..r.clone()
                })
                .collect();
            &claimed
        } else {
            rows
        };
        if rows.iter().any(|r| r.restart) {
            let _one = self.flights.admission().await;
            audit::insert_admitting(&self.audit.db, stored, fence, admit)
                .await?
                .ok_or(SendError::NotLeader)
        } else if audit::insert_fenced(&self.audit.db, stored, fence).await? {
            Ok(audit::LeftOut::default())
        } else {
            Err(SendError::NotLeader)
        }
    }

    /// Queues one recorded signal on its agent's stream here, or records
    /// it `undeliverable` with why.
    fn deliver_here(
        &self,
        row: &mut SignalRecord,
        req: SignalRequest,
        parent: Option<&TraceRef>,
        now: Ts,
        stamp: Ts,
    ) {
        let span = send_span(parent, row);
        let trace = TraceRef::of(&span);
        let kind = row.kind;
        let restart = row.restart;
        let said = self.streams.restart_wait_of(&row.agent);
        let deadline = now.saturating_add(self.ack_wait(restart, said));
        let signal = wire(
            row.id,
            req.ask,
            req.reason,
            req.requested_by,
            deadline,
            trace.as_ref(),
        );
        let flight = InFlight {
            agent: row.agent.clone(),
            kind,
            created: now,
            deadline,
            trace,
            restart,
        };
        match self.enqueue(signal, flight) {
            Ok(()) => {
                self.rt.stats.signal(kind, SignalOutcome::Sent);
                span.record("outcome", "sent");
            }
            Err(why) => {
                let detail = why.to_string();
                self.rt.stats.signal(kind, SignalOutcome::Undeliverable);
                span.record("outcome", "undeliverable");
                row.outcome = Outcome::Undeliverable;
                row.detail = detail.clone();
                self.update(SignalUpdate::Outcome {
                    id: row.id,
                    at: stamp,
                    outcome: Outcome::Undeliverable,
                    detail,
                    acked: false,
                    latency_us: None,
                });
            }
        }
    }

    /// Queues a signal on the agent's stream and awaits its ack; the error
    /// says why it cannot be delivered.
    pub(super) fn enqueue(
        &self,
        signal: pb::Signal,
        flight: InFlight,
    ) -> Result<(), Undeliverable> {
        let id = signal.id as i64;
        self.flights
            .send(id, flight, |agent| self.streams.try_send(agent, signal))
    }

    /// How long a signal's ack may take: a restart waits for its agent
    /// to turn ready first, at least `signals.restart_ack_timeout`, and as
    /// long as its sidecar said its restart may take (`said`: the drain of
    /// an eviction and the replacement's readiness, say), so a slow but
    /// sound restart is acked, never recorded as timed out, and keeps its
    /// place under the cap until then.
    pub(super) fn ack_wait(&self, restart: bool, said: Duration) -> Duration {
        if restart {
            self.cfg.restart_ack_timeout.max(said)
        } else {
            self.cfg.ack_timeout
        }
    }
}

/// The rows the requests are recorded as, pending.
fn rows_for(
    cluster: &ClusterName,
    reqs: &[SignalRequest],
    ids: Vec<i64>,
    stamp: Ts,
) -> Vec<SignalRecord> {
    reqs.iter()
        .zip(ids)
        .map(|(r, id)| SignalRecord {
            id,
            cluster: cluster.clone(),
            kind: r.ask.kind(),
            agent: r.agent.clone(),
            proxy: r.ask.proxy().to_string(),
            reason: r.reason.clone(),
            requested_by: r.requested_by.clone(),
            created: stamp,
            delivered: None,
            acked: None,
            outcome: Outcome::Pending,
            detail: String::new(),
            latency_ms: None,
            restart: false,
            deadline: None,
        })
        .collect()
}

/// The rows and requests the transaction kept; the agents it left out
/// (at the cap, or paused) are said in `sent`.
fn leave_out(
    rows: Vec<SignalRecord>,
    reqs: Vec<SignalRequest>,
    left: &audit::LeftOut,
    sent: &mut Sent,
) -> (Vec<SignalRecord>, Vec<SignalRequest>) {
    if *left == audit::LeftOut::default() {
        return (rows, reqs);
    }
    let at_cap: HashSet<i64> = left.at_cap.iter().copied().collect();
    let paused: HashSet<i64> = left.paused.iter().copied().collect();
    let mut kept = Vec::with_capacity(rows.len());
    let mut kept_reqs = Vec::with_capacity(rows.len());
    for (row, req) in rows.into_iter().zip(reqs) {
        if at_cap.contains(&row.id) {
            sent.at_cap.push(row.agent);
        } else if paused.contains(&row.id) {
            sent.paused.push(row.agent);
        } else {
            kept.push(row);
            kept_reqs.push(req);
        }
    }
    (kept, kept_reqs)
}

/// The `signal.send` span of one signal (its `outcome` recorded once
/// known).
fn send_span(parent: Option<&TraceRef>, row: &SignalRecord) -> tracing::Span {
    let kind = row.kind;
    let span = propagate::child(parent, || {
        info_span!(
            parent: None,
            "signal.send",
            otel.name = %format!("send {}", kind.as_str()),
            signal.id = row.id,
            signal.kind = kind.as_str(),
            agent = %row.agent,
            proxy = %row.proxy,
            reason = %row.reason,
            requested_by = %row.requested_by,
            outcome = tracing::field::Empty,
        )
    });
    span
}

/// A control signal as it goes on the wire.
pub(super) fn wire(
    id: i64,
    ask: Ask,
    reason: String,
    requested_by: String,
    deadline: Ts,
    trace: Option<&TraceRef>,
) -> pb::Signal {
    pb::Signal {
        id: id as u64,
        kind: Some(match ask {
            Ask::Reconnect { proxy } => pb::signal::Kind::Reconnect(pb::Reconnect {
                proxy,
                reason,
                requested_by,
                deadline: Some(to_timestamp(deadline)),
            }),
            Ask::CloseTunnel { proxy } => {
                pb::signal::Kind::CloseTunnel(pb::CloseTunnel { proxy, reason })
            }
        }),
        trace_context: trace.map(TraceRef::carrier).unwrap_or_default(),
    }
}
