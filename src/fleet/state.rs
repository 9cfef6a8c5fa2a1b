//! The fleet's state: the entries it keeps per resource, its watcher
//! status and what it publishes. The rules that change it are split by
//! seam: `apply`, `resync`, `expiry`, `settle`, `traces`, `writes`, and the
//! indexes in `topology`. Plain synchronous code: the actor calls it, unit
//! tests call it directly with a manual clock.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tracing::debug;

use super::published::Published;
use super::schedule::Schedule;
use super::{Changes, KindStatus, Readiness, StateChange, WatchState};
use crate::clock::{Clock, Ts};
use crate::fleet::board::Board;
use crate::model::{
    AgentState, Cause, CauseKind, Health, HealthMode, HistoryEvent, Kind, Reasons, Server, Tunnel,
};
use crate::stats::Stats;
use crate::store::{Fence, WriteBatch};
use crate::telemetry::propagate::TraceRef;

/// How often the current-state snapshot is written at most.
pub const STATE_WRITE_EVERY: Duration = Duration::from_secs(1);
/// Current-state rows written per second at most, on average: after a
/// snapshot of n rows the next waits n / this (and at least
/// `STATE_WRITE_EVERY`). A quarter of what one SQLite writer commits here
/// (`bench ingest`, about 120 k rows/s), so that in a heartbeat storm over
/// a large fleet the snapshot, which a restart loads and a resync then
/// corrects, never takes the writer from the history.
pub const STATE_ROWS_PER_SECOND: u64 = 30_000;

/// Tunables of the rules.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// UNKNOWN longer than this makes an auth server's agents `auth_unhealthy`.
    pub unknown_grace: Duration,
    /// History rows held while SQLite is behind.
    pub max_pending_events: usize,
}

/// What one PUT did: (event name, liveness flipped or new, now expired).
type Observed = (HistoryEvent, bool, bool);

/// A heartbeating resource as last seen.
#[derive(Clone, Debug)]
pub struct ResEntry {
    pub server: Server,
    pub expired: bool,
    /// Heartbeats seen since Lifeline first saw it.
    pub heartbeats: u64,
    pub first_seen: Ts,
}

impl ResEntry {
    pub(super) fn new(server: Server, now: Ts) -> Self {
        ResEntry {
            expired: server.expires <= now,
            server,
            heartbeats: 0,
            first_seen: now,
        }
    }

    /// A first PUT: the entry, and ("added", new, expired).
    pub(super) fn added(server: Server, now: Ts) -> (ResEntry, Observed) {
        let e = ResEntry::new(server, now);
        let expired = e.expired;
        (e, (HistoryEvent::Added, true, expired))
    }

    /// A PUT to a known resource: (event, liveness flipped, expired).
    pub(super) fn observe(&mut self, server: Server, now: Ts) -> Observed {
        let (hb, flipped) = self.update(server, now);
        self.outcome(hb, flipped)
    }

    /// A heartbeat that moved only the expiry and TTL: the server is
    /// updated in place.
    pub(super) fn observe_expiry(&mut self, expires: Ts, ttl: Duration, now: Ts) -> Observed {
        let (hb, flipped) = self.beat(expires, now);
        self.server.expires = expires;
        self.server.ttl = ttl;
        self.outcome(hb, flipped)
    }

    fn outcome(&self, heartbeat: bool, flipped: bool) -> Observed {
        let event = if heartbeat {
            HistoryEvent::Heartbeat
        } else {
            HistoryEvent::Update
        };
        (event, flipped, self.expired)
    }

    /// Returns (heartbeat, liveness flipped).
    pub(super) fn update(&mut self, server: Server, now: Ts) -> (bool, bool) {
        let r = self.beat(server.expires, now);
        self.server = server;
        r
    }

    /// The liveness and heartbeat count for a new `expires`: (heartbeat,
    /// liveness flipped).
    fn beat(&mut self, expires: Ts, now: Ts) -> (bool, bool) {
        let heartbeat = expires != self.server.expires;
        if expires < self.server.expires {
            let s = &self.server;
            debug!(kind = %s.kind, name = %s.name, "expiry moved backwards; accepted");
        }
        let expired = expires <= now;
        let flipped = expired != self.expired;
        self.expired = expired;
        if heartbeat {
            self.heartbeats += 1;
        }
        (heartbeat, flipped)
    }
}

#[derive(Clone, Debug)]
pub struct AuthEntry {
    /// From the cluster's `auth_server` resources.
    pub resource: Option<ResEntry>,
    /// From static configuration.
    pub static_addr: Option<String>,
    pub health: Health,
    pub health_since: Ts,
    pub mode: HealthMode,
    pub detail: String,
    /// NOT_SERVING, UNKNOWN past the grace, or (on heartbeat evidence)
    /// its heartbeat expired: its agents are stranded.
    pub unhealthy: bool,
}

impl AuthEntry {
    pub(super) fn new(now: Ts) -> Self {
        AuthEntry {
            resource: None,
            static_addr: None,
            // Until a health call succeeds, only the heartbeat can strand.
            health: Health::NeverReached,
            health_since: now,
            mode: HealthMode::Watch,
            detail: "not reached yet".into(),
            unhealthy: false,
        }
    }

    pub fn addr(&self) -> &str {
        self.static_addr
            .as_deref()
            .or(self.resource.as_ref().map(|r| r.server.addr.as_str()))
            .unwrap_or("")
    }

    /// True when its health service gives no evidence (not served, never
    /// reached): its own heartbeat decides.
    pub fn on_heartbeat(&self) -> bool {
        matches!(self.health, Health::NotServed | Health::NeverReached)
    }

    /// What its state rests on (`AuthView::evidence`).
    pub fn evidence(&self) -> &'static str {
        match (self.on_heartbeat(), self.mode) {
            (true, _) => "heartbeat",
            (false, HealthMode::Watch) => "health_watch",
            (false, HealthMode::Poll) => "health_poll",
        }
    }

    /// True when its own heartbeat has expired.
    pub fn heartbeat_expired(&self) -> bool {
        self.resource.as_ref().is_some_and(|r| r.expired)
    }

    /// When the unhealthy condition began, and its cause.
    pub fn unhealthy_cause(&self, grace: Duration) -> Option<(CauseKind, Ts)> {
        if !self.unhealthy {
            return None;
        }
        Some(match self.health {
            Health::NotServing => (CauseKind::AuthNotServing, self.health_since),
            Health::NotServed | Health::NeverReached => (
                CauseKind::AuthExpired,
                self.resource
                    .as_ref()
                    .map_or(self.health_since, |r| r.server.expires),
            ),
            _ => (
                CauseKind::AuthUnknown,
                self.health_since.saturating_add(grace),
            ),
        })
    }
}

#[derive(Clone, Debug)]
pub struct AgentEntry {
    pub res: ResEntry,
    pub state: AgentState,
    pub reasons: Reasons,
    pub since: Ts,
    pub cause: Option<Cause>,
    pub episode: Option<i64>,
    /// The last audited signal sent to it, and when: an episode that ends
    /// after it is recorded as ended by that signal.
    pub last_signal: Option<(i64, Ts)>,
    /// The failure trace of the open episode (while exporting traces).
    pub trace: Option<TraceRef>,
}

/// An agent's own stream to Lifeline (`AgentSignals.Connect`).
#[derive(Clone, Debug, serde::Serialize, utoipa::ToSchema)]
pub struct Link {
    pub since: Ts,
    pub version: String,
    pub desired_tunnels: u32,
    /// The auth server the agent last reported.
    pub auth_server: String,
    pub reports: u64,
}

impl AgentEntry {
    /// A newly seen agent: healthy until classified.
    pub(super) fn new(res: ResEntry, now: Ts) -> Self {
        AgentEntry {
            res,
            state: AgentState::Healthy,
            reasons: Reasons::default(),
            since: now,
            cause: None,
            episode: None,
            last_signal: None,
            trace: None,
        }
    }
}

#[derive(Clone, Debug)]
pub struct TunnelEntry {
    pub tunnel: Tunnel,
    pub expired: bool,
}

pub struct Fleet {
    pub(super) clock: Clock,
    pub(super) rules: Rules,
    pub(super) stats: Arc<Stats>,
    pub(super) kinds: [KindStatus; 4],
    /// Hashed, not ordered: these are looked up for every classification.
    pub(super) proxies: HashMap<String, ResEntry>,
    pub(super) auths: BTreeMap<String, AuthEntry>,
    pub(super) agents: HashMap<String, AgentEntry>,
    /// Agent names in order, for paging only.
    pub(super) agent_order: BTreeSet<String>,
    /// Agents not healthy (degraded or stranded), in name order: counts,
    /// root causes and the stranded lists walk these, not every agent.
    pub(super) unhealthy: BTreeSet<String>,
    pub(super) tunnels: HashMap<String, TunnelEntry>,
    /// agent → its tunnel names.
    pub(super) agent_tunnels: HashMap<String, BTreeSet<String>>,
    /// proxy → agent → number of tunnels.
    pub(super) proxy_agents: HashMap<String, HashMap<String, u32>>,
    /// auth server → agents attached to it.
    pub(super) auth_agents: HashMap<String, BTreeSet<String>>,
    pub(super) schedule: Schedule,
    pub(super) dirty: HashSet<String>,
    pub(super) pending: WriteBatch,
    /// Waiting episode changes past which they are compacted
    /// (`WriteBatch::bound_episodes`).
    pub(super) episode_bound: usize,
    /// When current-state rows last went to the store.
    pub(super) state_written: Ts,
    /// How long after `state_written` the next snapshot may go.
    pub(super) state_gap: Duration,
    pub(super) next_episode: i64,
    /// Whether this replica writes history (see `lead`).
    pub(super) fence: Fence,
    pub(super) changes: broadcast::Sender<Changes>,
    /// Changes of the current classification pass, published at its end.
    pub(super) changed: Vec<StateChange>,
    pub(super) readiness: watch::Sender<Readiness>,
    pub(super) auth_targets: watch::Sender<BTreeMap<String, String>>,
    /// Proxy expiries for discovery; the signals room reads it.
    pub(super) board: Arc<Board>,
    /// Agents connected to Lifeline's signal stream.
    pub(super) links: HashMap<String, Link>,
    /// Failure traces by (cause, resource, since): later agents stranded by
    /// the same failure join its trace. At `MAX_FAILURE_TRACES` it is
    /// emptied: a failure seen again after that starts a new trace.
    pub(super) failures: HashMap<(Option<CauseKind>, String, Ts), TraceRef>,
    /// The pending classification follows a resync: its latencies measure
    /// staleness, not detection, and are not recorded.
    pub(super) after_resync: bool,
    /// The read model readers share (see `published`).
    pub(super) published: watch::Sender<Arc<Published>>,
    /// Changed since the last publish.
    pub(super) touched: bool,
    pub(super) published_at: Ts,
    /// A publish was put off until this timer fired.
    pub(super) publish_not_before: Ts,
    /// What the last publish took (real time).
    pub(super) publish_cost: Duration,
    /// How many agents were unhealthy at the last publish.
    pub(super) published_unhealthy: usize,
}

impl Fleet {
    pub fn new(
        clock: Clock,
        rules: Rules,
        stats: Arc<Stats>,
        changes: broadcast::Sender<Changes>,
        readiness: watch::Sender<Readiness>,
        auth_targets: watch::Sender<BTreeMap<String, String>>,
        board: Arc<Board>,
    ) -> Fleet {
        let now = clock.now();
        let status = KindStatus {
            state: WatchState::Initializing,
            generation: 0,
            since: now,
        };
        let fleet = Fleet {
            clock,
            rules,
            stats,
            kinds: [status; 4],
            proxies: HashMap::default(),
            auths: BTreeMap::new(),
            agents: HashMap::default(),
            agent_order: BTreeSet::new(),
            unhealthy: BTreeSet::new(),
            tunnels: HashMap::default(),
            agent_tunnels: HashMap::default(),
            proxy_agents: HashMap::default(),
            auth_agents: HashMap::default(),
            schedule: Schedule::default(),
            dirty: HashSet::default(),
            pending: WriteBatch::default(),
            episode_bound: crate::store::MAX_PENDING_EPISODES,
            state_written: now,
            state_gap: STATE_WRITE_EVERY,
            next_episode: 1,
            fence: Fence::Sole,
            changes,
            changed: Vec::new(),
            readiness,
            auth_targets,
            board,
            links: HashMap::default(),
            failures: HashMap::default(),
            after_resync: false,
            published: watch::Sender::new(Arc::new(Published::empty(now))),
            touched: true,
            published_at: now,
            publish_not_before: Ts(0),
            publish_cost: Duration::ZERO,
            published_unhealthy: 0,
        };
        fleet.publish_readiness();
        fleet
    }

    pub fn now(&self) -> Ts {
        self.clock.now()
    }

    pub fn kind(&self, k: Kind) -> KindStatus {
        self.kinds[k.index()]
    }

    pub(super) fn set_kind(&mut self, k: Kind, state: WatchState, generation: u64) {
        let now = self.now();
        let s = &mut self.kinds[k.index()];
        if s.state != state || s.generation != generation {
            *s = KindStatus {
                state,
                generation,
                since: now,
            };
        }
    }

    pub(super) fn fresh(&self, k: Kind) -> bool {
        self.kinds[k.index()].state == WatchState::Ready
    }

    /// Classification runs only when none of the data it reads is stale or
    /// still initialising: Lifeline's own blindness must not strand anyone.
    pub fn classification_enabled(&self) -> bool {
        [Kind::Proxy, Kind::Agent, Kind::TunnelConnection]
            .iter()
            .all(|k| {
                matches!(
                    self.kind(*k).state,
                    WatchState::Ready | WatchState::Rejected
                )
            })
    }

    pub fn readiness_now(&self) -> Readiness {
        Readiness {
            ready: self
                .kinds
                .iter()
                .all(|k| matches!(k.state, WatchState::Ready | WatchState::Rejected)),
            kinds: Kind::ALL
                .iter()
                .map(|k| (k.as_str(), self.kind(*k)))
                .collect(),
        }
    }

    /// Readers of what the fleet publishes (see `published`).
    pub fn published_watch(&self) -> watch::Receiver<Arc<Published>> {
        self.published.subscribe()
    }

    pub(super) fn publish_readiness(&self) {
        let r = self.readiness_now();
        self.readiness.send_replace(r);
    }

    pub(super) fn publish_auth_targets(&self) {
        let targets: BTreeMap<String, String> = self
            .auths
            .iter()
            .filter_map(|(name, a)| {
                a.resource
                    .as_ref()
                    .filter(|r| !r.server.addr.is_empty())
                    .map(|r| (name.clone(), r.server.addr.clone()))
            })
            .collect();
        self.auth_targets.send_if_modified(|cur| {
            if *cur == targets {
                false
            } else {
                *cur = targets;
                true
            }
        });
    }
}

/// A fleet on a manual clock starting at `start`, for the rule tests.
#[cfg(test)]
pub(super) fn test_fleet(start: Ts) -> Fleet {
    let (changes, _) = broadcast::channel(1024);
    let (ready, _) = watch::channel(Readiness {
        ready: false,
        kinds: BTreeMap::new(),
    });
    let (targets, _) = watch::channel(BTreeMap::new());
    Fleet::new(
        Clock::starting_at(start),
        Rules {
            unknown_grace: Duration::from_secs(5),
            max_pending_events: 10,
        },
        Arc::new(Stats::default()),
        changes,
        ready,
        targets,
        Board::new(64, Ts(0)),
    )
}

/// Fixtures for the rule tests: a ready fleet of proxies, agents and
/// tunnels on a manual clock, and what it recorded.
#[cfg(test)]
pub(super) mod fixture {
    use super::*;
    use crate::fleet::{Resync, Snapshot};
    use crate::model::test_server;

    /// The fleet's clock starts here (microseconds of wall time).
    pub const START: Ts = Ts(1_000_000_000);

    pub fn at(secs: u64) -> Ts {
        START.saturating_add(Duration::from_secs(secs))
    }

    pub fn server(kind: Kind, name: &str, expires: Ts) -> Server {
        test_server(kind, name, expires)
    }

    pub fn agent(name: &str, expires: Ts) -> Server {
        let mut s = test_server(Kind::Agent, name, expires);
        s.auth_server = "auth-1".into();
        s
    }

    pub fn tunnel(agent: &str, proxy: &str) -> Tunnel {
        Tunnel {
            name: format!("{agent}.{proxy}"),
            agent: agent.into(),
            proxy: proxy.into(),
            last_heartbeat: None,
            expires: None,
        }
    }

    /// A fleet whose every kind is ready: `proxies` expire at the given
    /// second, agents live an hour, each agent has a tunnel to each proxy.
    pub fn ready(proxies: &[(&str, u64)], agents: &[&str]) -> Fleet {
        let mut f = test_fleet(START);
        f.resync(Resync {
            generation: 1,
            snapshots: vec![
                Snapshot::Servers(
                    Kind::Proxy,
                    proxies
                        .iter()
                        .map(|(p, s)| server(Kind::Proxy, p, at(*s)))
                        .collect(),
                ),
                Snapshot::Servers(
                    Kind::AuthServer,
                    vec![server(Kind::AuthServer, "auth-1", at(3600))],
                ),
                Snapshot::Servers(
                    Kind::Agent,
                    agents.iter().map(|a| agent(a, at(3600))).collect(),
                ),
                Snapshot::Tunnels(
                    agents
                        .iter()
                        .flat_map(|a| proxies.iter().map(move |(p, _)| tunnel(a, p)))
                        .collect(),
                ),
            ],
            rejected: Vec::new(),
        });
        f.health(super::super::HealthUpdate {
            auth_server: "auth-1".into(),
            addr: String::new(),
            health: Health::Serving,
            mode: HealthMode::Watch,
            detail: String::new(),
        });
        f.settle();
        f
    }

    /// History rows recorded so far for `name`, as event names.
    pub fn events(f: &Fleet, name: &str) -> Vec<HistoryEvent> {
        f.pending
            .events
            .iter()
            .filter(|e| e.name == name)
            .map(|e| e.event)
            .collect()
    }

    /// Moves the manual clock to `t` and lets the fleet act on it.
    pub async fn advance_to(f: &mut Fleet, t: Ts) {
        let gap = t.since(f.now());
        tokio::time::advance(gap).await;
        f.fire_due();
        f.settle();
        check_indexes(f);
    }

    /// The indexes agree with the entries they index.
    pub fn check_indexes(f: &Fleet) {
        let unhealthy: BTreeSet<String> = f
            .agents
            .iter()
            .filter(|(_, a)| a.state != AgentState::Healthy)
            .map(|(n, _)| n.clone())
            .collect();
        assert_eq!(f.unhealthy, unhealthy, "the unhealthy index");
        let names: BTreeSet<String> = f.agents.keys().cloned().collect();
        assert_eq!(f.agent_order, names, "the name order");
    }
}
