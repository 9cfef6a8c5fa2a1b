//! The hub: every agent's `AgentSignals.Connect` stream, and the one place
//! audited signals are created, queued, delivered and acked.
//!
//! Each stream costs a bounded queue of control signals and one version
//! number for discovery (see `board`): a stuck agent's stream only stops
//! pulling; nothing else waits on it and nothing grows.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::Db;
use futures::Stream;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, info_span, warn, Instrument};

use super::peers::{Holder, Inbound, Peers};
use crate::access::AgentGrant;
use crate::clock::{dur_micros, Clock, Ts};
use crate::domain::{text, Outcome};
use crate::fleet::board::{Board, Pending};
use crate::fleet::{Command, FleetHandle};
use crate::fleet::{Link, PeerReport, Restarter};
use crate::proto::to_timestamp;
use crate::proto::v1 as pb;
use crate::proto::v1::agent_signals_server::{AgentSignals, AgentSignalsServer};
use crate::stats::{SignalKind, SignalOutcome, Stats};
use crate::store::health::StoreHealth;
use crate::store::signals::{self as audit, SignalIds, SignalRecord, SignalUpdate};
use crate::store::{Fence, Leadership};
use crate::telemetry::propagate::{self, TraceRef};

mod relay;
mod restarts;
mod stream;
mod streams;
mod tasks;
mod wakes;

pub use relay::Reach;
pub use restarts::RESTART_FAILURES_PAUSE;
pub use stream::Service;
use streams::{Opening, Streams, Undeliverable};
use tasks::{audit_writer, receive, timeouts};
use wakes::Wakes;

/// Longest agent or proxy name accepted from an agent: a resource name's.
const MAX_NAME: usize = crate::domain::MAX_NAME_LEN;
/// Most characters of an ack's detail kept in the audit.
const MAX_ACK_DETAIL: usize = 1024;
/// Most proxies one tunnel report may name.
const MAX_REPORTED: usize = 256;
/// Audit updates waiting for SQLite.
const UPDATE_QUEUE: usize = 16_384;
/// Messages from outside the streams waiting for the hub.
const INBOUND_QUEUE: usize = 1024;
/// Signals awaiting an ack, across all agents.
const MAX_IN_FLIGHT: usize = 200_000;

#[derive(Clone)]
pub struct HubConfig {
    pub full_discovery_interval: Duration,
    pub max_delta_proxies: usize,
    pub signal_queue: usize,
    pub hello_timeout: Duration,
    pub ack_timeout: Duration,
    /// A restart-only peer's ack may take this long (see `Capabilities`).
    pub restart_ack_timeout: Duration,
    pub max_message_bytes: usize,
    /// The other replicas that may hold agents' streams (or none).
    pub peers: Arc<dyn Peers>,
    /// Who leads: only the leader sends automatic, periodic and graceful
    /// signals.
    pub leadership: watch::Receiver<Leadership>,
}

impl HubConfig {
    /// `[signals]` as the hub takes it, with the other replicas and the
    /// leadership it acts under.
    pub fn new(
        c: &crate::config::SignalsConfig,
        peers: Arc<dyn Peers>,
        leadership: watch::Receiver<Leadership>,
    ) -> Self {
        HubConfig {
            full_discovery_interval: c.full_discovery_interval,
            max_delta_proxies: c.max_delta_proxies,
            signal_queue: c.signal_queue,
            hello_timeout: c.hello_timeout,
            ack_timeout: c.ack_timeout,
            restart_ack_timeout: c.restart_ack_timeout,
            max_message_bytes: c.max_message_bytes,
            peers,
            leadership,
        }
    }
}

/// Settings the hub and the reconnect loops read on every use, so they can
/// change at run time (owned by the settings room).
pub use crate::settings::Live as LiveSettings;

/// What to ask of an agent.
#[derive(Clone, Debug)]
pub enum Ask {
    Reconnect { proxy: String },
    CloseTunnel { proxy: String },
}

impl Ask {
    fn kind(&self) -> SignalKind {
        match self {
            Ask::Reconnect { .. } => SignalKind::Reconnect,
            Ask::CloseTunnel { .. } => SignalKind::CloseTunnel,
        }
    }
    pub(super) fn proxy(&self) -> &str {
        match self {
            Ask::Reconnect { proxy } | Ask::CloseTunnel { proxy } => proxy,
        }
    }
}

#[derive(Clone, Debug)]
pub struct SignalRequest {
    pub agent: String,
    pub ask: Ask,
    pub reason: String,
    pub requested_by: String,
    /// The trace this signal continues (the failure that stranded the
    /// agent); `None`: the current span's (an API request's).
    pub trace: Option<TraceRef>,
}

/// What a send recorded, and the restarts its transaction left out.
#[derive(Debug, Default)]
pub struct Sent {
    /// Recorded (and sent, relayed, or found undeliverable).
    pub rows: Vec<SignalRecord>,
    /// Agents whose restart would have passed `signals.max_restarts_in_flight`.
    pub at_cap: Vec<String>,
    /// Agents whose automatic restart waits: the last restarts failed.
    pub paused: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("cannot record the signal: {0}")]
    Db(#[from] sqlx::Error),
    #[error("the fleet has stopped")]
    FleetGone,
    /// A leader's signal from a replica that no longer leads (its term
    /// passed): nothing was recorded or sent.
    #[error("this replica no longer leads")]
    NotLeader,
    /// Automatic reconnects wait (the storm guard, or turned off).
    #[error("automatic reconnects are paused: {0}")]
    Paused(String),
}

struct InFlight {
    agent: String,
    kind: SignalKind,
    created: Ts,
    deadline: Ts,
    /// The `signal.send` span, parent of the ack's.
    trace: Option<TraceRef>,
    /// A restart: its peer restarts its agent.
    restart: bool,
}

pub struct Hub {
    cfg: HubConfig,
    pub settings: Arc<LiveSettings>,
    clock: Clock,
    board: Arc<Board>,
    fleet: FleetHandle,
    db: Db,
    stats: Arc<Stats>,
    streams: Streams,
    /// Agents whose streams other live replicas hold (agent → holder),
    /// as last read from the database.
    remote: Mutex<HashMap<String, Holder>>,
    /// How many of those are sidecars.
    remote_sidecars: AtomicUsize,
    /// Among replicas: the restarts every replica asked for, as last read
    /// from the audit (see `restarts`).
    fleet_restarts: Mutex<audit::Restarts>,
    ids: SignalIds,
    in_flight: Mutex<HashMap<i64, InFlight>>,
    /// How the last restarts ended (true: their agent turned ready).
    last_restarts: Mutex<std::collections::VecDeque<bool>>,
    /// Restarts awaiting their ack: counted as they change, so the pages
    /// read them without a scan.
    restarting: AtomicUsize,
    updates: mpsc::Sender<SignalUpdate>,
    /// What reaches the hub from outside its streams (see `peers`).
    inbound: mpsc::Sender<Inbound>,
    /// Discovery wakes, a connection's streams together.
    wakes: Wakes,
    /// Held while restarts are admitted and recorded: with SQLite's single
    /// writer (and PostgreSQL's advisory lock among replicas) the cap
    /// cannot be passed by two sends at once.
    admission: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Hub {
    /// Builds the hub and starts its audit and ack-timeout tasks on `rt`
    /// (both critical).
    pub async fn start(
        cfg: HubConfig,
        settings: Arc<LiveSettings>,
        board: Arc<Board>,
        fleet: FleetHandle,
        db: Db,
        store_health: Arc<StoreHealth>,
        rt: &mut crate::supervise::Runtime,
    ) -> Result<Arc<Hub>, sqlx::Error> {
        let (clock, stats, shutdown) = (rt.clock, rt.stats.clone(), rt.shutdown.clone());
        let ids = SignalIds::start(&db).await?;
        let (updates, rx) = mpsc::channel(UPDATE_QUEUE);
        let (inbound, inbound_rx) = mpsc::channel(INBOUND_QUEUE);
        let hub = Arc::new(Hub {
            cfg,
            settings,
            clock,
            board,
            fleet,
            db: db.clone(),
            stats,
            streams: Streams::new(),
            remote: Mutex::new(HashMap::new()),
            remote_sidecars: AtomicUsize::new(0),
            fleet_restarts: Mutex::default(),
            ids,
            in_flight: Mutex::new(HashMap::new()),
            last_restarts: Mutex::default(),
            restarting: AtomicUsize::new(0),
            updates,
            inbound,
            wakes: Wakes::default(),
            admission: tokio::sync::Mutex::new(()),
            shutdown: shutdown.clone(),
        });
        let audit = audit_writer(
            db,
            rx,
            hub.stats.clone(),
            (store_health, clock),
            shutdown.clone(),
        );
        rt.spawn_critical("hub", audit);
        rt.spawn_critical("hub", timeouts(hub.clone(), shutdown.clone()));
        rt.spawn_critical("hub", wakes::fan(hub.clone(), shutdown.clone()));
        rt.spawn_critical("hub", receive(hub.clone(), inbound_rx, shutdown));
        Ok(hub)
    }

    /// Where other rooms send what reaches the hub from outside its
    /// streams ([`Inbound`]): the channel is bounded, a sender waits.
    pub fn inbound(&self) -> mpsc::Sender<Inbound> {
        self.inbound.clone()
    }

    pub fn server(self: &Arc<Self>) -> AgentSignalsServer<Service> {
        AgentSignalsServer::new(Service { hub: self.clone() })
            .max_decoding_message_size(self.cfg.max_message_bytes)
            .max_encoding_message_size(self.cfg.max_message_bytes)
    }

    pub fn board(&self) -> &Board {
        &self.board
    }

    pub fn is_connected(&self, agent: &str) -> bool {
        self.streams.contains(agent)
    }

    pub fn connected(&self) -> usize {
        self.streams.len()
    }

    /// Changes whenever a stream opens or closes: a reader of
    /// [`Self::connected_agents`] need not read again while it stays.
    pub fn streams_version(&self) -> u64 {
        self.streams.version()
    }

    /// The agents whose streams are here, each with whether its peer is
    /// restart-only (a sidecar).
    pub fn connected_peers(&self) -> HashMap<String, bool> {
        self.streams.peers()
    }

    /// The sidecars whose streams are here that only say what they would
    /// do (`dry_run`): their restarts are all refused.
    pub fn dry_run_sidecars(&self) -> usize {
        self.streams.dry_run()
    }

    pub fn connected_agents(&self) -> Vec<String> {
        self.streams.agents()
    }

    /// This replica leads (always, alone on its database) and may act on
    /// it now: within its validity on the monotonic clock, so a leader
    /// that was paused sends nothing before its lease loop has looked.
    pub fn leads(&self) -> bool {
        self.cfg.leadership.borrow().acting(self.clock.instant())
    }

    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.cfg.leadership.clone()
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.in_flight).len()
    }

    fn update(&self, u: SignalUpdate) {
        if self.updates.try_send(u).is_err() {
            Stats::inc(&self.stats.signal_updates_dropped);
        }
    }

    /// Records each signal (committed before this returns), tells the fleet,
    /// and queues it on the agent's stream. An agent that is not connected,
    /// or whose queue is full, gets an `undeliverable` row instead.
    pub(super) async fn send(
        &self,
        reqs: Vec<SignalRequest>,
        admit: audit::Admission,
    ) -> Result<Sent, SendError> {
        self.send_fenced(reqs, Fence::Sole, admit).await
    }

    /// [`Self::send`] for what only the leader sends (automatic, periodic,
    /// graceful): recorded only while this replica still leads in its
    /// term, checked in the transaction that records them.
    pub(super) async fn send_as_leader(
        &self,
        reqs: Vec<SignalRequest>,
        admit: audit::Admission,
    ) -> Result<Sent, SendError> {
        let fence = self
            .cfg
            .leadership
            .borrow()
            .acting_fence(self.clock.instant())
            .ok_or(SendError::NotLeader)?;
        self.send_fenced(reqs, fence, admit).await
    }

    async fn send_fenced(
        &self,
        mut reqs: Vec<SignalRequest>,
        fence: Fence,
        admit: audit::Admission,
    ) -> Result<Sent, SendError> {
        if reqs.is_empty() {
            return Ok(Sent::default());
        }
        let now = self.clock.now();
        let stamp = self.audit_now();
        let ids = self.ids.take(&self.db, reqs.len()).await?;
        let mut rows: Vec<SignalRecord> = reqs
            .iter()
            .zip(ids)
            .map(|(r, id)| SignalRecord {
                id,
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
            .collect();
        // The row says whether the signal asks a sidecar for a restart,
        // wherever its stream is: the fleet's restarts are counted from it.
        let elsewhere = self.held_elsewhere(&rows).await;
        let agents: Vec<String> = rows.iter().map(|r| r.agent.clone()).collect();
        let here = self.restart_only_of(&agents);
        for r in &mut rows {
            r.restart =
                here.contains(&r.agent) || elsewhere.get(&r.agent).is_some_and(|h| h.restart_only);
            // On the audit's clock, for every replica's sweep to read.
            r.deadline = Some(stamp.saturating_add(self.ack_wait(r.restart)));
        }
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
            &rows
        };
        // Restarts are admitted in the transaction that records them.
        let left = if rows.iter().any(|r| r.restart) {
            let _one = self.admission.lock().await;
            audit::insert_admitting(&self.db, stored, &fence, admit)
                .await?
                .ok_or(SendError::NotLeader)?
        } else {
            if !audit::insert_fenced(&self.db, stored, &fence).await? {
                return Err(SendError::NotLeader);
            }
            audit::LeftOut::default()
        };
        let mut sent = Sent::default();
        if left != audit::LeftOut::default() {
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
            rows = kept;
            reqs = kept_reqs;
        }
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
            let kind = req.ask.kind();
            let span = propagate::child(req.trace.as_ref().or(current.as_ref()), || {
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
            let trace = TraceRef::of(&span);
            if let Some(owner) = elsewhere.get(&row.agent) {
                // The replica holding its stream delivers it.
                relayed
                    .entry(owner.replica.clone())
                    .or_default()
                    .push(row.id);
                self.stats.signal(kind, SignalOutcome::Sent);
                span.record("outcome", "relayed");
                continue;
            }
            let restart = row.restart;
            let deadline = now.saturating_add(self.ack_wait(restart));
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
                    self.stats.signal(kind, SignalOutcome::Sent);
                    span.record("outcome", "sent");
                }
                Err(why) => {
                    let detail = why.to_string();
                    self.stats.signal(kind, SignalOutcome::Undeliverable);
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
        self.wake(relayed, &mut rows, stamp).await;
        sent.rows = rows;
        Ok(sent)
    }

    /// Queues a signal on the agent's stream and awaits its ack; the error
    /// says why it cannot be delivered.
    fn enqueue(&self, signal: pb::Signal, flight: InFlight) -> Result<(), Undeliverable> {
        let id = signal.id as i64;
        let mut in_flight = lock(&self.in_flight);
        if in_flight.len() >= MAX_IN_FLIGHT {
            return Err(Undeliverable::TooManyAwaiting);
        }
        self.streams.try_send(&flight.agent, signal)?;
        if flight.restart {
            self.restarting.fetch_add(1, Ordering::Relaxed);
        }
        in_flight.insert(id, flight);
        Ok(())
    }

    /// The time the audit records: among replicas the database's clock
    /// (`store::db_time`), alone this process's.
    pub(crate) fn audit_now(&self) -> Ts {
        self.cfg.peers.now()
    }

    fn delivered(&self, id: i64) {
        if id > 0 {
            self.update(SignalUpdate::Delivered {
                id,
                at: self.audit_now(),
            });
        }
    }

    fn ack(&self, agent: &str, a: pb::SignalAck) {
        let id = a.signal_id as i64;
        let entry = {
            let mut m = lock(&self.in_flight);
            match m.get(&id) {
                Some(f) if f.agent == agent => m.remove(&id),
                _ => None,
            }
        };
        let Some(f) = entry else {
            Stats::inc(&self.stats.agent_messages_rejected);
            debug!(
                agent,
                id, "ack for a signal not awaiting one (late, duplicate or foreign)"
            );
            return;
        };
        // A refusal says the peer did not try: it is its own outcome, and
        // says nothing of whether restarts help (see `restart_ended`).
        let (outcome, counted) = match (a.ok, a.refused) {
            (true, _) => (Outcome::Acked, SignalOutcome::Acked),
            (false, true) => (Outcome::Refused, SignalOutcome::Refused),
            (false, false) => (Outcome::Failed, SignalOutcome::Failed),
        };
        if f.restart {
            self.restart_ended(match outcome {
                Outcome::Acked => Some(true),
                Outcome::Refused => None,
                _ => Some(false),
            });
        }
        let now = self.clock.now();
        let latency = now.since(f.created);
        self.stats.signal(f.kind, counted);
        self.stats.hist.signal[f.kind as usize].record(latency.as_secs_f64());
        // The agent's words: bounded and cleaned before they reach the
        // audit, a span or a log line.
        let detail = text::bounded(&a.detail, MAX_ACK_DETAIL);
        let _ack = propagate::child(f.trace.as_ref(), || {
            info_span!(
                parent: None,
                "signal.ack",
                otel.name = %format!("ack {}", f.kind.as_str()),
                signal.id = id,
                agent,
                outcome = outcome.as_str(),
                latency_ms = latency.as_secs_f64() * 1e3,
                detail = %text::excerpt(&detail),
            )
        });
        if outcome == Outcome::Failed {
            info!(agent, id, detail = %text::excerpt(&detail), "agent could not carry out a signal");
        } else if outcome == Outcome::Refused {
            info!(agent, id, detail = %text::excerpt(&detail), "agent's peer refused a signal without trying it");
        }
        self.update(SignalUpdate::Outcome {
            id,
            at: self.audit_now(),
            outcome,
            detail,
            acked: true,
            latency_us: Some(dur_micros(latency)),
        });
    }

    /// Makes `tx` the agent's stream, unless another that is still open
    /// holds the name: a second stream never takes a live one's signals
    /// (its peer is only told to wait; the first ends when its agent goes
    /// or its connection fails HTTP/2 keepalive). `None`: refused.
    fn register(&self, agent: &str, s: Opening<'_>) -> Option<u64> {
        let peer = s.peer.to_string();
        match self.streams.register(agent, s) {
            Err(holder) => {
                warn!(
                    agent = %text::excerpt(agent),
                    %peer,
                    %holder,
                    "a second signal stream for a connected agent refused"
                );
                None
            }
            Ok(r) => {
                if r.replaced {
                    info!(
                        agent,
                        "agent reconnected its signal stream; the old one had ended"
                    );
                }
                Some(r.id)
            }
        }
    }

    /// How long a signal's ack may take: a restart waits for its agent
    /// to turn ready first.
    fn ack_wait(&self, restart: bool) -> Duration {
        if restart {
            self.cfg.restart_ack_timeout
        } else {
            self.cfg.ack_timeout
        }
    }

    /// Removes the stream if it is still the agent's current one.
    fn unregister(&self, agent: &str, conn: u64) -> bool {
        self.streams.unregister(agent, conn)
    }

    /// Wraps a Discovery for the wire and counts it (by mode, and bytes).
    fn discovery(&self, p: Pending) -> pb::Signal {
        let (messages, bytes) = if p.full {
            (&self.stats.discovery_full, &self.stats.discovery_bytes_full)
        } else {
            (
                &self.stats.discovery_delta,
                &self.stats.discovery_bytes_delta,
            )
        };
        Stats::inc(messages);
        let s = pb::Signal {
            id: 0,
            kind: Some(pb::signal::Kind::Discovery(pb::Discovery {
                full: p.full,
                proxies: p.proxies,
            })),
            trace_context: Default::default(),
        };
        Stats::add(bytes, s.encoded_len() as u64);
        s
    }
}

/// A control signal as it goes on the wire.
fn wire(
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
