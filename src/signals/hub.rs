//! The hub: every agent's `AgentSignals.Connect` stream, and the one place
//! audited signals are created, queued, delivered and acked.
//!
//! Each stream costs a bounded queue of control signals and one version
//! number for discovery (see `board`): a stuck agent's stream only stops
//! pulling; nothing else waits on it and nothing grows.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::Db;
use futures::Stream;
use prost::Message;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{debug, info, info_span, warn, Instrument};

use super::peers::{Inbound, Peers};
use crate::access::AgentGrant;
use crate::clock::{Clock, Ts};
use crate::domain::{text, Outcome};
use crate::fleet::board::{Board, Pending};
use crate::fleet::{Command, FleetHandle};
use crate::fleet::{Link, PeerReport, Restarter};
use crate::proto::v1 as pb;
use crate::proto::v1::agent_signals_server::{AgentSignals, AgentSignalsServer};
use crate::stats::{SignalKind, SignalOutcome, Stats};
use crate::store::health::StoreHealth;
use crate::store::signals::{self as audit, SignalIds, SignalRecord, SignalUpdate};
use crate::store::Leadership;
use crate::telemetry::propagate::{self, TraceRef};

mod ack;
mod flights;
mod relay;
mod restarts;
mod send;
mod stream;
mod streams;
mod tasks;
mod wakes;

pub use flights::RESTART_FAILURES_PAUSE;
use flights::{Flights, InFlight};
pub use relay::Reach;
use relay::Remote;
use send::wire;
pub use stream::{Service, MAX_RESTART_WAIT};
use streams::{Opening, Streams};
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

/// The signal audit as the hub writes it: its database, the ids it hands
/// out, and the queue of outcomes its writer commits.
struct Audit {
    db: Db,
    ids: SignalIds,
    updates: mpsc::Sender<SignalUpdate>,
}

/// What every room starts from, as the hub keeps it.
struct Rt {
    clock: Clock,
    stats: Arc<Stats>,
    shutdown: CancellationToken,
}

pub struct Hub {
    cfg: HubConfig,
    pub settings: Arc<LiveSettings>,
    rt: Rt,
    board: Arc<Board>,
    fleet: FleetHandle,
    audit: Audit,
    streams: Streams,
    /// What this replica last read of the other replicas' streams.
    remote: Remote,
    /// Signals awaiting their ack, and the restarts among them.
    flights: Flights,
    /// What reaches the hub from outside its streams (see `peers`).
    inbound: mpsc::Sender<Inbound>,
    /// Discovery wakes, a connection's streams together.
    wakes: Wakes,
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
            rt: Rt {
                clock,
                stats,
                shutdown: shutdown.clone(),
            },
            board,
            fleet,
            audit: Audit {
                db: db.clone(),
                ids,
                updates,
            },
            streams: Streams::new(),
            remote: Remote::default(),
            flights: Flights::default(),
            inbound,
            wakes: Wakes::default(),
        });
        let audit = audit_writer(
            db,
            rx,
            hub.rt.stats.clone(),
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
    pub fn connected_peers(&self) -> HashMap<String, crate::signals::peers::PeerKind> {
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
        self.cfg.leadership.borrow().acting(self.rt.clock.instant())
    }

    pub fn leadership(&self) -> watch::Receiver<Leadership> {
        self.cfg.leadership.clone()
    }

    pub fn in_flight(&self) -> usize {
        self.flights.len()
    }

    fn update(&self, u: SignalUpdate) {
        if self.audit.updates.try_send(u).is_err() {
            Stats::inc(&self.rt.stats.signal_updates_dropped);
        }
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

    /// Removes the stream if it is still the agent's current one.
    fn unregister(&self, agent: &str, conn: u64) -> bool {
        self.streams.unregister(agent, conn)
    }

    /// Wraps a Discovery for the wire and counts it (by mode, and bytes).
    fn discovery(&self, p: Pending) -> pb::Signal {
        let (messages, bytes) = if p.full {
            (
                &self.rt.stats.discovery_full,
                &self.rt.stats.discovery_bytes_full,
            )
        } else {
            (
                &self.rt.stats.discovery_delta,
                &self.rt.stats.discovery_bytes_delta,
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
