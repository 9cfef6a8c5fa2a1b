//! The fleet's state and the rules that change it. Plain synchronous code:
//! the actor calls it, unit tests call it directly with a paused clock.

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, watch};
use tracing::{debug, info, info_span, warn};

use super::classify::{classify, Inputs, TunnelView, Verdict};
use super::schedule::{Schedule, TimerKey};
use super::{
    Changes, HealthUpdate, Ingested, KindStatus, Readiness, Resync, Snapshot, StateChange,
    WatchState,
};
use crate::clock::{dur_micros, Clock, Ts};
use crate::fleet::board::Board;
use crate::model::Change;
use crate::model::{
    AgentState, Cause, CauseKind, Health, HealthMode, Kind, Reasons, Server, Tunnel,
};
use crate::stats::Stats;
use crate::store::read::Loaded;
use crate::store::{EpisodeOp, EventRow, HealthRow, WriteBatch};
use crate::telemetry::propagate::{self, TraceRef};

/// How often the current-state snapshot is written at most.
pub const STATE_WRITE_EVERY: Duration = Duration::from_secs(1);

/// Tunables of the rules.
#[derive(Clone, Copy, Debug)]
pub struct Rules {
    /// UNKNOWN longer than this makes an auth server's agents `auth_unhealthy`.
    pub unknown_grace: Duration,
    /// History rows held while SQLite is behind.
    pub max_pending_events: usize,
}

/// What one PUT did: (event name, liveness flipped or new, now expired).
type Observed = (&'static str, bool, bool);

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
    fn new(server: Server, now: Ts) -> Self {
        ResEntry {
            expired: server.expires <= now,
            server,
            heartbeats: 0,
            first_seen: now,
        }
    }

    /// A first PUT: the entry, and ("added", new, expired).
    fn added(server: Server, now: Ts) -> (ResEntry, Observed) {
        let e = ResEntry::new(server, now);
        let expired = e.expired;
        (e, ("added", true, expired))
    }

    /// A PUT to a known resource: (event, liveness flipped, expired).
    fn observe(&mut self, server: Server, now: Ts) -> Observed {
        let (hb, flipped) = self.update(server, now);
        (
            if hb { "heartbeat" } else { "update" },
            flipped,
            self.expired,
        )
    }

    /// Returns (heartbeat, liveness flipped).
    fn update(&mut self, server: Server, now: Ts) -> (bool, bool) {
        let heartbeat = server.expires != self.server.expires;
        if server.expires < self.server.expires {
            debug!(kind = %server.kind, name = %server.name, "expiry moved backwards; accepted");
        }
        let expired = server.expires <= now;
        let flipped = expired != self.expired;
        self.expired = expired;
        if heartbeat {
            self.heartbeats += 1;
        }
        self.server = server;
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
    /// NOT_SERVING, or UNKNOWN past the grace: its agents are stranded.
    pub unhealthy: bool,
}

impl AuthEntry {
    fn new(now: Ts) -> Self {
        AuthEntry {
            resource: None,
            static_addr: None,
            health: Health::Unknown,
            health_since: now,
            mode: HealthMode::Watch,
            detail: "not watched yet".into(),
            unhealthy: false,
        }
    }

    pub fn addr(&self) -> &str {
        self.static_addr
            .as_deref()
            .or(self.resource.as_ref().map(|r| r.server.addr.as_str()))
            .unwrap_or("")
    }

    /// When the unhealthy condition began, and its cause.
    pub fn unhealthy_cause(&self, grace: Duration) -> Option<(CauseKind, Ts)> {
        if !self.unhealthy {
            return None;
        }
        Some(match self.health {
            Health::NotServing => (CauseKind::AuthNotServing, self.health_since),
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
#[derive(Clone, Debug, serde::Serialize)]
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
    fn new(res: ResEntry, now: Ts) -> Self {
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
    pub(super) tunnels: HashMap<String, TunnelEntry>,
    /// agent → its tunnel names.
    pub(super) agent_tunnels: HashMap<String, BTreeSet<String>>,
    /// proxy → agent → number of tunnels.
    pub(super) proxy_agents: HashMap<String, HashMap<String, u32>>,
    /// auth server → agents attached to it.
    pub(super) auth_agents: HashMap<String, BTreeSet<String>>,
    schedule: Schedule,
    dirty: HashSet<String>,
    pending: WriteBatch,
    /// When current-state rows last went to the store.
    state_written: Ts,
    next_episode: i64,
    changes: broadcast::Sender<Changes>,
    /// Changes of the current classification pass, published at its end.
    changed: Vec<StateChange>,
    readiness: watch::Sender<Readiness>,
    auth_targets: watch::Sender<BTreeMap<String, String>>,
    /// Proxy expiries for discovery; the signals room reads it.
    pub(super) board: Arc<Board>,
    /// Agents connected to Lifeline's signal stream.
    pub(super) links: HashMap<String, Link>,
    /// Failure traces by (cause, resource, since): later agents stranded by
    /// the same failure join its trace. At `MAX_FAILURE_TRACES` it is
    /// emptied: a failure seen again after that starts a new trace.
    failures: HashMap<(Option<CauseKind>, String, Ts), TraceRef>,
    /// The pending classification follows a resync: its latencies measure
    /// staleness, not detection, and are not recorded.
    after_resync: bool,
}

/// Failure traces remembered for joining.
const MAX_FAILURE_TRACES: usize = 1024;

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
            tunnels: HashMap::default(),
            agent_tunnels: HashMap::default(),
            proxy_agents: HashMap::default(),
            auth_agents: HashMap::default(),
            schedule: Schedule::default(),
            dirty: HashSet::default(),
            pending: WriteBatch::default(),
            state_written: now,
            next_episode: 1,
            changes,
            changed: Vec::new(),
            readiness,
            auth_targets,
            board,
            links: HashMap::default(),
            failures: HashMap::default(),
            after_resync: false,
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

    fn set_kind(&mut self, k: Kind, state: WatchState, generation: u64) {
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

    fn fresh(&self, k: Kind) -> bool {
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

    fn publish_readiness(&self) {
        let r = self.readiness_now();
        self.readiness.send_replace(r);
    }

    fn publish_auth_targets(&self) {
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

    fn history(&mut self, row: EventRow) {
        self.pending.event(row, self.rules.max_pending_events);
    }

    fn note(&mut self, kind: &'static str, name: &str, event: &'static str, detail: String) {
        let now = self.now();
        self.history(EventRow {
            at: now,
            kind,
            name: name.to_string(),
            event,
            expires: None,
            ttl_us: None,
            detail,
        });
    }

    /// Takes everything that must be written; the actor hands it over.
    pub fn take_pending(&mut self) -> WriteBatch {
        self.state_written = self.now();
        std::mem::take(&mut self.pending)
    }

    /// Takes what is due: history at once; the current-state snapshot (what
    /// a restart loads) at most every `STATE_WRITE_EVERY`, coalesced per
    /// resource, so a heartbeat storm costs one row per resource per period.
    pub fn take_due(&mut self) -> WriteBatch {
        let now = self.now();
        if self.pending.has_state() && now.since(self.state_written) >= STATE_WRITE_EVERY {
            return self.take_pending();
        }
        self.pending.take_history()
    }

    /// True when something is due for the store now.
    pub fn has_due(&self) -> bool {
        let p = &self.pending;
        !p.events.is_empty()
            || !p.health.is_empty()
            || !p.episodes.is_empty()
            || p.dropped_events > 0
            || (p.has_state() && self.now().since(self.state_written) >= STATE_WRITE_EVERY)
    }

    /// When the held current-state rows fall due, if any are held.
    pub fn state_due_at(&self) -> Option<Ts> {
        self.pending
            .has_state()
            .then(|| self.state_written.saturating_add(STATE_WRITE_EVERY))
    }

    /// Puts back a batch the store had no room for; newer rows win.
    pub fn restore_pending(&mut self, mut older: WriteBatch) {
        let mut newer = std::mem::take(&mut self.pending);
        if older.has_state() {
            for (k, rows) in newer.replace_servers.drain(..) {
                older.replace_kind(k, rows);
            }
            older.servers.extend(newer.servers.drain());
            if let Some(rows) = newer.replace_tunnels.take() {
                older.replace_tunnels(rows);
            }
            older.tunnels.extend(newer.tunnels.drain());
            std::mem::swap(&mut older.servers, &mut newer.servers);
            std::mem::swap(&mut older.tunnels, &mut newer.tunnels);
            newer.replace_servers = std::mem::take(&mut older.replace_servers);
            newer.replace_tunnels = older.replace_tunnels.take();
        }
        // History keeps its order: the older rows first.
        older.events.append(&mut newer.events);
        older.health.append(&mut newer.health);
        older.episodes.append(&mut newer.episodes);
        newer.events = older.events;
        newer.health = older.health;
        newer.episodes = older.episodes;
        newer.dropped_events += older.dropped_events;
        let cap = self.rules.max_pending_events;
        if newer.events.len() > cap {
            newer.dropped_events += (newer.events.len() - cap) as u64;
            newer.events.truncate(cap);
        }
        self.pending = newer;
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || self.pending.dropped_events > 0
    }

    // ---- start-up ---------------------------------------------------------

    /// Loads the last known state from SQLite. All of it is stale until the
    /// watcher resyncs: nothing expires from it and no agent is reclassified.
    pub fn load(&mut self, loaded: Loaded) {
        let now = self.now();
        self.next_episode = loaded.next_episode_id.max(1);
        let (mut n_servers, n_tunnels) = (0usize, loaded.tunnels.len());
        for s in loaded.servers {
            n_servers += 1;
            // Loaded data never counts as expired: it is stale, not fresh.
            let mut e = ResEntry::new(s, now);
            e.expired = false;
            match e.server.kind {
                Kind::Proxy => {
                    self.proxies.insert(e.server.name.clone(), e);
                }
                Kind::AuthServer => {
                    let name = e.server.name.clone();
                    self.auths
                        .entry(name)
                        .or_insert_with(|| AuthEntry::new(now))
                        .resource = Some(e);
                }
                Kind::Agent => {
                    let name = e.server.name.clone();
                    self.index_agent_auth(&name, &e.server.auth_server);
                    self.agent_order.insert(name.clone());
                    self.agents.insert(name, AgentEntry::new(e, now));
                }
                Kind::TunnelConnection => {}
            }
        }
        for t in loaded.tunnels {
            self.index_tunnel(&t);
            self.tunnels.insert(
                t.name.clone(),
                TunnelEntry {
                    tunnel: t,
                    expired: false,
                },
            );
        }
        for ep in loaded.open_episodes {
            match self.agents.get_mut(&ep.agent) {
                Some(a) => {
                    a.state = AgentState::parse(&ep.state).unwrap_or(AgentState::Stranded);
                    a.reasons = Reasons::parse_joined(&ep.reasons.join(","));
                    a.since = ep.started_at;
                    a.cause = CauseKind::parse(&ep.cause).map(|kind| Cause {
                        kind,
                        resource: ep.cause_resource.clone(),
                    });
                    a.episode = Some(ep.id);
                }
                None => self.pending.episodes.push(EpisodeOp::Close {
                    id: ep.id,
                    ended: now,
                    ended_by_signal: None,
                    end_reason: "agent_unknown",
                }),
            }
        }
        for k in Kind::ALL {
            if self.kind(k).state == WatchState::Initializing && n_servers + n_tunnels > 0 {
                self.set_kind(k, WatchState::Stale, 0);
            }
        }
        let now = self.now();
        for a in self.auths.values_mut() {
            a.health_since = now;
            a.detail = "loaded from storage; not watched yet".into();
        }
        let names: Vec<String> = self.auths.keys().cloned().collect();
        for n in names {
            self.schedule.arm(
                TimerKey::AuthGrace(n),
                now.saturating_add(self.rules.unknown_grace),
            );
        }
        info!(
            servers = n_servers,
            tunnels = n_tunnels,
            open_episodes = self.agents.values().filter(|a| a.episode.is_some()).count(),
            "loaded last known state (stale until the watcher resyncs)"
        );
        self.publish_readiness();
        self.publish_auth_targets();
    }

    /// Registers a statically configured auth server.
    pub fn add_static_auth(&mut self, name: &str, addr: &str) {
        let now = self.now();
        let e = self
            .auths
            .entry(name.to_string())
            .or_insert_with(|| AuthEntry::new(now));
        e.static_addr = Some(addr.to_string());
        self.schedule.arm(
            TimerKey::AuthGrace(name.to_string()),
            now.saturating_add(self.rules.unknown_grace),
        );
    }

    // ---- indexes ----------------------------------------------------------

    fn index_tunnel(&mut self, t: &Tunnel) {
        self.agent_tunnels
            .entry(t.agent.clone())
            .or_default()
            .insert(t.name.clone());
        *self
            .proxy_agents
            .entry(t.proxy.clone())
            .or_default()
            .entry(t.agent.clone())
            .or_default() += 1;
    }

    fn unindex_tunnel(&mut self, t: &Tunnel) {
        if let Some(set) = self.agent_tunnels.get_mut(&t.agent) {
            set.remove(&t.name);
            if set.is_empty() {
                self.agent_tunnels.remove(&t.agent);
            }
        }
        if let Some(m) = self.proxy_agents.get_mut(&t.proxy) {
            if let Some(n) = m.get_mut(&t.agent) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    m.remove(&t.agent);
                }
            }
            if m.is_empty() {
                self.proxy_agents.remove(&t.proxy);
            }
        }
    }

    fn index_agent_auth(&mut self, agent: &str, auth: &str) {
        if !auth.is_empty() {
            self.auth_agents
                .entry(auth.to_string())
                .or_default()
                .insert(agent.to_string());
        }
    }

    fn unindex_agent_auth(&mut self, agent: &str, auth: &str) {
        if let Some(set) = self.auth_agents.get_mut(auth) {
            set.remove(agent);
            if set.is_empty() {
                self.auth_agents.remove(auth);
            }
        }
    }

    fn dirty_proxy_agents(&mut self, proxy: &str) {
        if let Some(m) = self.proxy_agents.get(proxy) {
            self.dirty.extend(m.keys().cloned());
        }
    }

    fn dirty_auth_agents(&mut self, auth: &str) {
        if let Some(s) = self.auth_agents.get(auth) {
            self.dirty.extend(s.iter().cloned());
        }
    }

    /// The tunnels an agent holds, as far as Lifeline knows: the one walk
    /// from an agent to its tunnels.
    pub(super) fn tunnels_of<'a>(
        &'a self,
        agent: &str,
    ) -> impl Iterator<Item = &'a TunnelEntry> + 'a {
        self.agent_tunnels
            .get(agent)
            .into_iter()
            .flatten()
            .filter_map(|t| self.tunnels.get(t))
    }

    // ---- named reads (see `query`) -----------------------------------------

    pub(super) fn sizes(&self) -> super::query::Sizes {
        super::query::Sizes {
            agents: self.agents.len(),
            proxies: self.proxies.len(),
            tunnels: self.tunnels.len(),
        }
    }

    pub(super) fn auth_names(&self) -> Vec<String> {
        self.auths.keys().cloned().collect()
    }

    pub(super) fn select(&self, sel: &super::query::Selection) -> Option<Vec<String>> {
        use super::query::Selection;
        match sel {
            Selection::Proxy(p) => {
                if !self.proxies.contains_key(p) && !self.proxy_agents.contains_key(p) {
                    return None;
                }
                let mut v: Vec<String> = self
                    .proxy_agents
                    .get(p)
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default();
                v.sort();
                Some(v)
            }
            Selection::AuthServer(a) => {
                if !self.auths.contains_key(a) && !self.auth_agents.contains_key(a) {
                    return None;
                }
                // A BTreeSet: already in order.
                Some(
                    self.auth_agents
                        .get(a)
                        .map(|s| s.iter().cloned().collect())
                        .unwrap_or_default(),
                )
            }
            Selection::State(st) => Some(
                self.agent_order
                    .iter()
                    .filter(|n| self.agents.get(*n).is_some_and(|a| a.state == *st))
                    .cloned()
                    .collect(),
            ),
        }
    }

    pub(super) fn holds_tunnel(&self, agent: &str, proxy: Option<&str>) -> Option<bool> {
        if !self.agents.contains_key(agent) {
            return None;
        }
        Some(proxy.is_none_or(|p| self.tunnels_of(agent).any(|t| t.tunnel.proxy == p)))
    }

    pub(super) fn knows_address(&self, addr: &str) -> bool {
        self.proxies.values().any(|p| p.server.addr == addr)
            || self.auths.values().any(|a| {
                a.static_addr.as_deref() == Some(addr)
                    || a.resource.as_ref().is_some_and(|r| r.server.addr == addr)
            })
    }

    pub(super) fn not_healthy(&self) -> Vec<StateChange> {
        self.agents
            .iter()
            .filter(|(_, a)| a.state != AgentState::Healthy)
            .map(|(name, a)| StateChange {
                agent: name.clone(),
                from: a.state,
                to: a.state,
                reasons: a.reasons,
                cause: a.cause.as_ref().map(|c| c.kind),
                cause_resource: a.cause.as_ref().map(|c| c.resource.clone()),
                since: a.since,
                detected_at: a.since,
                episode: a.episode,
                trace: a.trace.clone(),
            })
            .collect()
    }

    pub(super) fn surplus_tunnels(&self) -> Vec<super::query::Surplus> {
        let now = self.now();
        let mut out = Vec::new();
        for (agent, link) in &self.links {
            if link.desired_tunnels == 0 {
                continue;
            }
            let tunnels: Vec<(String, bool)> = self
                .tunnels_of(agent)
                .map(|t| (t.tunnel.proxy.clone(), self.tunnel_dead(t, now).is_none()))
                .collect();
            if tunnels.len() > link.desired_tunnels as usize {
                out.push(super::query::Surplus {
                    agent: agent.clone(),
                    desired: link.desired_tunnels,
                    tunnels,
                });
            }
        }
        out
    }

    // ---- changes ----------------------------------------------------------

    pub fn apply(&mut self, batch: Vec<Ingested>) {
        let now = self.now();
        for item in batch {
            match item {
                Ingested::Change(c) => {
                    Stats::inc(&self.stats.events_applied);
                    let (kind, op, _) = c.describe();
                    Stats::inc(&self.stats.ingested[kind.index()][op as usize]);
                    match c {
                        Change::PutServer(s) => self.put_server(s, now),
                        Change::DeleteServer(k, n) => self.delete_server(k, &n, now),
                        Change::PutTunnel(t) => self.put_tunnel(t, now),
                        Change::DeleteTunnel(n) => self.delete_tunnel(&n, now),
                    }
                }
                Ingested::Rejected(r) => {
                    let kind = match r.kind.parse::<Kind>() {
                        Ok(k) => k.as_str(),
                        Err(_) => "unknown",
                    };
                    self.history(EventRow {
                        at: now,
                        kind,
                        name: r.name.clone(),
                        event: "rejected",
                        expires: None,
                        ttl_us: None,
                        detail: format!("{}: {}", r.code.as_str(), r.message),
                    });
                }
            }
        }
    }

    fn put_server(&mut self, s: Server, now: Ts) {
        let kind = s.kind;
        let name = s.name.clone();
        let expires = s.expires;
        let ttl_us = dur_micros(s.ttl);
        self.pending.put_server(&s);
        let (event, flipped_or_new, expired) = match kind {
            Kind::Proxy => match self.proxies.get_mut(&name) {
                Some(e) => {
                    let r = e.observe(s, now);
                    self.board.put(&e.server, now);
                    r
                }
                None => {
                    let (e, r) = ResEntry::added(s, now);
                    self.board.put(&e.server, now);
                    self.proxies.insert(name.clone(), e);
                    r
                }
            },
            Kind::AuthServer => {
                let entry = self
                    .auths
                    .entry(name.clone())
                    .or_insert_with(|| AuthEntry::new(now));
                let fresh_entry = entry.resource.is_none() && entry.static_addr.is_none();
                // Health watchers follow addresses: only a new or moved one
                // needs publishing, not every heartbeat.
                let addr_changed = entry
                    .resource
                    .as_ref()
                    .is_none_or(|r| r.server.addr != s.addr);
                let r = match entry.resource.as_mut() {
                    Some(e) => e.observe(s, now),
                    None => {
                        let (e, r) = ResEntry::added(s, now);
                        entry.resource = Some(e);
                        r
                    }
                };
                if fresh_entry {
                    self.schedule.arm(
                        TimerKey::AuthGrace(name.clone()),
                        now.saturating_add(self.rules.unknown_grace),
                    );
                }
                if addr_changed {
                    self.publish_auth_targets();
                }
                r
            }
            Kind::Agent => {
                let old_auth = self
                    .agents
                    .get(&name)
                    .map(|a| a.res.server.auth_server.clone());
                let new_auth = s.auth_server.clone();
                let r = match self.agents.get_mut(&name) {
                    Some(a) => a.res.observe(s, now),
                    None => {
                        let (e, r) = ResEntry::added(s, now);
                        self.agent_order.insert(name.clone());
                        self.agents.insert(name.clone(), AgentEntry::new(e, now));
                        r
                    }
                };
                if old_auth.as_deref() != Some(new_auth.as_str()) {
                    if let Some(old) = old_auth {
                        self.unindex_agent_auth(&name, &old);
                    }
                    self.index_agent_auth(&name, &new_auth);
                    self.dirty.insert(name.clone());
                }
                r
            }
            Kind::TunnelConnection => return,
        };
        if event == "heartbeat" {
            Stats::inc(&self.stats.heartbeats);
        }
        self.history(EventRow {
            at: now,
            kind: kind.as_str(),
            name: name.clone(),
            event,
            expires: Some(expires),
            ttl_us: Some(ttl_us),
            detail: String::new(),
        });
        if !expired {
            self.schedule
                .arm(TimerKey::Expiry(kind, name.clone()), expires);
        }
        if flipped_or_new {
            match kind {
                Kind::Proxy => self.dirty_proxy_agents(&name),
                Kind::Agent => {
                    self.dirty.insert(name);
                }
                _ => {}
            }
        }
    }

    fn delete_server(&mut self, kind: Kind, name: &str, now: Ts) {
        self.pending.delete_server(kind, name);
        let existed = match kind {
            Kind::Proxy => {
                let r = self.proxies.remove(name).is_some();
                self.board.remove(name, now);
                self.dirty_proxy_agents(name);
                r
            }
            Kind::AuthServer => {
                let mut existed = false;
                if let Some(a) = self.auths.get_mut(name) {
                    existed = a.resource.take().is_some();
                    if a.static_addr.is_none() {
                        self.auths.remove(name);
                        self.dirty_auth_agents(name);
                    }
                }
                self.publish_auth_targets();
                existed
            }
            Kind::Agent => match self.agents.remove(name) {
                Some(a) => {
                    self.agent_order.remove(name);
                    self.unindex_agent_auth(name, &a.res.server.auth_server);
                    if let Some(id) = a.episode {
                        self.pending.episodes.push(EpisodeOp::Close {
                            id,
                            ended: now,
                            ended_by_signal: None,
                            end_reason: "agent_deleted",
                        });
                    }
                    self.dirty.remove(name);
                    true
                }
                None => false,
            },
            Kind::TunnelConnection => false,
        };
        if existed {
            self.note(kind.as_str(), name, "delete", String::new());
        }
    }

    fn put_tunnel(&mut self, t: Tunnel, now: Ts) {
        self.pending.put_tunnel(&t);
        let expired = t.expires.is_some_and(|e| e <= now);
        let mut event = "added";
        let old = self.tunnels.get(&t.name).map(|o| {
            let moved = o.tunnel.agent != t.agent || o.tunnel.proxy != t.proxy;
            // Only a moved tunnel needs its old record (to unindex it).
            (o.tunnel.expires, o.expired, moved.then(|| o.tunnel.clone()))
        });
        match old {
            Some((old_expires, old_expired, moved)) => {
                event = if old_expires != t.expires {
                    "heartbeat"
                } else {
                    "update"
                };
                if let Some(old) = moved {
                    self.unindex_tunnel(&old);
                    self.index_tunnel(&t);
                    self.dirty.insert(old.agent);
                    self.dirty.insert(t.agent.clone());
                } else if old_expired != expired {
                    self.dirty.insert(t.agent.clone());
                }
            }
            None => {
                self.index_tunnel(&t);
                self.dirty.insert(t.agent.clone());
            }
        }
        if let (Some(e), false) = (t.expires, expired) {
            self.schedule
                .arm(TimerKey::Expiry(Kind::TunnelConnection, t.name.clone()), e);
        }
        self.history(EventRow {
            at: now,
            kind: Kind::TunnelConnection.as_str(),
            name: t.name.clone(),
            event,
            expires: t.expires,
            ttl_us: None,
            detail: format!("{} → {}", t.agent, t.proxy),
        });
        self.tunnels
            .insert(t.name.clone(), TunnelEntry { tunnel: t, expired });
    }

    fn delete_tunnel(&mut self, name: &str, _now: Ts) {
        self.pending.delete_tunnel(name);
        if let Some(old) = self.tunnels.remove(name) {
            self.unindex_tunnel(&old.tunnel);
            self.dirty.insert(old.tunnel.agent.clone());
            self.note(
                Kind::TunnelConnection.as_str(),
                name,
                "delete",
                format!("{} → {}", old.tunnel.agent, old.tunnel.proxy),
            );
        }
    }

    /// Replaces the state of every listed kind (a new watcher generation).
    pub fn resync(&mut self, r: Resync) {
        let now = self.now();
        for kind in &r.rejected {
            // Partial-cache RFD: a rejected kind's old data is cleared too,
            // so nobody reads it as current.
            self.replace(Snapshot::empty(*kind), now);
            self.set_kind(*kind, WatchState::Rejected, r.generation);
            self.note(
                kind.as_str(),
                "",
                "rejected_kind",
                format!("generation {}", r.generation),
            );
        }
        for snap in r.snapshots {
            let kind = snap.kind();
            let count = snap.len();
            self.replace(snap, now);
            self.set_kind(kind, WatchState::Ready, r.generation);
            self.note(
                kind.as_str(),
                "",
                "resync",
                format!("generation {}: {count} listed", r.generation),
            );
        }
        self.dirty.extend(self.agents.keys().cloned());
        self.after_resync = true;
        self.publish_auth_targets();
        self.publish_readiness();
    }

    fn replace(&mut self, snap: Snapshot, now: Ts) {
        match snap {
            Snapshot::Servers(kind, list) => {
                self.pending.replace_kind(kind, list.clone());
                match kind {
                    Kind::Proxy => {
                        let mut old = std::mem::take(&mut self.proxies);
                        self.proxies.reserve(list.len());
                        for s in list {
                            let e = match old.remove(&s.name) {
                                Some(mut e) => {
                                    if e.update(s, now).0 {
                                        Stats::inc(&self.stats.heartbeats);
                                    }
                                    e
                                }
                                None => ResEntry::new(s, now),
                            };
                            self.proxies.insert(e.server.name.clone(), e);
                        }
                        self.board
                            .replace(self.proxies.values().map(|e| &e.server), now);
                    }
                    Kind::AuthServer => {
                        let listed: HashSet<String> = list.iter().map(|s| s.name.clone()).collect();
                        self.auths.retain(|name, a| {
                            if !listed.contains(name) {
                                a.resource = None;
                            }
                            a.resource.is_some() || a.static_addr.is_some() || listed.contains(name)
                        });
                        for s in list {
                            let name = s.name.clone();
                            let entry = self
                                .auths
                                .entry(name.clone())
                                .or_insert_with(|| AuthEntry::new(now));
                            match entry.resource.as_mut() {
                                Some(e) => {
                                    e.update(s, now);
                                }
                                None => entry.resource = Some(ResEntry::new(s, now)),
                            }
                            if entry.health == Health::Unknown && !entry.unhealthy {
                                let at =
                                    entry.health_since.saturating_add(self.rules.unknown_grace);
                                self.schedule.arm(TimerKey::AuthGrace(name), at);
                            }
                        }
                    }
                    Kind::Agent => {
                        let mut old = std::mem::take(&mut self.agents);
                        self.agents.reserve(list.len());
                        self.auth_agents.clear();
                        for s in list {
                            let name = s.name.clone();
                            let auth = s.auth_server.clone();
                            let a = match old.remove(&name) {
                                Some(mut a) => {
                                    if a.res.update(s, now).0 {
                                        Stats::inc(&self.stats.heartbeats);
                                    }
                                    a
                                }
                                None => AgentEntry::new(ResEntry::new(s, now), now),
                            };
                            self.index_agent_auth(&name, &auth);
                            if !self.agent_order.contains(&name) {
                                self.agent_order.insert(name.clone());
                            }
                            self.agents.insert(name, a);
                        }
                        for (name, gone) in old {
                            self.agent_order.remove(&name);
                            if let Some(id) = gone.episode {
                                self.pending.episodes.push(EpisodeOp::Close {
                                    id,
                                    ended: now,
                                    ended_by_signal: None,
                                    end_reason: "agent_deleted",
                                });
                            }
                        }
                    }
                    Kind::TunnelConnection => {}
                }
                // Re-arm every unexpired resource of the kind: timers that fired
                // while the data was stale were dropped.
                let arms: Vec<(String, Ts)> = match kind {
                    Kind::Proxy => self
                        .proxies
                        .iter()
                        .filter(|(_, e)| !e.expired)
                        .map(|(n, e)| (n.clone(), e.server.expires))
                        .collect(),
                    Kind::AuthServer => self
                        .auths
                        .iter()
                        .filter_map(|(n, a)| a.resource.as_ref().map(|e| (n, e)))
                        .filter(|(_, e)| !e.expired)
                        .map(|(n, e)| (n.clone(), e.server.expires))
                        .collect(),
                    Kind::Agent => self
                        .agents
                        .iter()
                        .filter(|(_, a)| !a.res.expired)
                        .map(|(n, a)| (n.clone(), a.res.server.expires))
                        .collect(),
                    Kind::TunnelConnection => Vec::new(),
                };
                for (n, at) in arms {
                    self.schedule.arm(TimerKey::Expiry(kind, n), at);
                }
            }
            Snapshot::Tunnels(list) => {
                self.pending.replace_tunnels(list.clone());
                self.tunnels.clear();
                self.agent_tunnels.clear();
                self.proxy_agents.clear();
                for t in list {
                    self.index_tunnel(&t);
                    let expired = t.expires.is_some_and(|e| e <= now);
                    if let (Some(e), false) = (t.expires, expired) {
                        self.schedule
                            .arm(TimerKey::Expiry(Kind::TunnelConnection, t.name.clone()), e);
                    }
                    self.tunnels
                        .insert(t.name.clone(), TunnelEntry { tunnel: t, expired });
                }
            }
        }
    }

    /// The stream of `generation` is gone: its kinds turn stale.
    pub fn watch_down(&mut self, generation: u64, error: &str) {
        let mut changed = false;
        for k in Kind::ALL {
            let s = self.kind(k);
            if s.state == WatchState::Ready && s.generation <= generation {
                self.set_kind(k, WatchState::Stale, s.generation);
                changed = true;
            }
        }
        if changed {
            warn!(
                generation,
                error, "watch stream lost: cluster data is stale until resync"
            );
            self.note("watcher", "", "stale", error.to_string());
            self.publish_readiness();
        }
    }

    pub fn health(&mut self, u: HealthUpdate) {
        let now = self.now();
        let grace = self.rules.unknown_grace;
        let entry = self
            .auths
            .entry(u.auth_server.clone())
            .or_insert_with(|| AuthEntry::new(now));
        entry.mode = u.mode;
        entry.detail = u.detail.clone();
        if entry.health == u.health {
            return;
        }
        let from = entry.health;
        entry.health = u.health;
        entry.health_since = now;
        let was = entry.unhealthy;
        entry.unhealthy = u.health == Health::NotServing;
        let now_unhealthy = entry.unhealthy;
        let arm_grace = matches!(u.health, Health::Unknown | Health::ServiceUnknown);
        info!(auth_server = %u.auth_server, from = from.as_str(), to = u.health.as_str(), detail = %u.detail, "auth health changed");
        self.pending.health.push(HealthRow {
            auth_server: u.auth_server.clone(),
            addr: u.addr.clone(),
            at: now,
            from: from.as_str(),
            to: u.health.as_str(),
            mode: u.mode.as_str(),
            detail: u.detail.clone(),
        });
        self.note(
            Kind::AuthServer.as_str(),
            &u.auth_server,
            "health",
            format!("{} → {} ({})", from.as_str(), u.health.as_str(), u.detail),
        );
        if arm_grace {
            self.schedule.arm(
                TimerKey::AuthGrace(u.auth_server.clone()),
                now.saturating_add(grace),
            );
        }
        if was != now_unhealthy {
            self.dirty_auth_agents(&u.auth_server);
        }
    }

    // ---- agent streams ----------------------------------------------------

    /// An agent opened (`Some`) or lost (`None`) its signal stream. Losing
    /// it is recorded, never a reason to strand the agent.
    pub fn link(&mut self, agent: &str, link: Option<Link>) {
        match link {
            Some(l) => {
                self.note(
                    Kind::Agent.as_str(),
                    agent,
                    "connected",
                    format!(
                        "signal stream open (version {}, wants {} tunnels)",
                        l.version, l.desired_tunnels
                    ),
                );
                self.links.insert(agent.to_string(), l);
            }
            None => {
                if self.links.remove(agent).is_some() {
                    self.note(
                        Kind::Agent.as_str(),
                        agent,
                        "disconnected",
                        "signal stream closed".into(),
                    );
                }
            }
        }
    }

    /// An agent's own report of its tunnels. Merged with the cluster's
    /// tunnel records, latest observation wins: a proxy it no longer names
    /// loses its tunnel, a proxy it names without a tunnel gains one.
    pub fn report(&mut self, agent: &str, proxies: Vec<String>, auth_server: String) {
        let now = self.now();
        if let Some(l) = self.links.get_mut(agent) {
            l.reports += 1;
            l.auth_server = auth_server;
        }
        let current: Vec<(String, String)> = self
            .tunnels_of(agent)
            .map(|t| (t.tunnel.name.clone(), t.tunnel.proxy.clone()))
            .collect();
        for p in &proxies {
            if !current.iter().any(|(_, cp)| cp == p) {
                self.put_tunnel(
                    Tunnel {
                        name: format!("{agent}.{p}"),
                        agent: agent.to_string(),
                        proxy: p.clone(),
                        last_heartbeat: Some(now),
                        expires: None,
                    },
                    now,
                );
            }
        }
        for (name, proxy) in current {
            if !proxies.contains(&proxy) {
                self.delete_tunnel(&name, now);
            }
        }
    }

    /// An audited signal went to `agent` at `at`.
    pub fn signaled(&mut self, agent: &str, id: i64, at: Ts) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.last_signal = Some((id, at));
        }
    }

    // ---- time -------------------------------------------------------------

    pub fn next_deadline(&self) -> Option<Ts> {
        self.schedule.next()
    }

    /// Fires every timer that is due. Returns how many fired.
    pub fn fire_due(&mut self) -> usize {
        let now = self.now();
        let due = self.schedule.pop_due(now);
        let n = due.len();
        for (_, key) in due {
            Stats::inc(&self.stats.timers_fired);
            match key {
                TimerKey::Expiry(kind, name) => self.expire(kind, name, now),
                TimerKey::AuthGrace(name) => self.grace_over(name, now),
            }
        }
        n
    }

    fn expire(&mut self, kind: Kind, name: String, now: Ts) {
        // Nothing expires from stale data; the resync re-arms everything.
        if !self.fresh(kind) {
            return;
        }
        let current = match kind {
            Kind::Proxy => self
                .proxies
                .get_mut(&name)
                .map(|e| (&mut e.expired, e.server.expires)),
            Kind::AuthServer => self
                .auths
                .get_mut(&name)
                .and_then(|a| a.resource.as_mut())
                .map(|e| (&mut e.expired, e.server.expires)),
            Kind::Agent => self
                .agents
                .get_mut(&name)
                .map(|a| (&mut a.res.expired, a.res.server.expires)),
            Kind::TunnelConnection => self
                .tunnels
                .get_mut(&name)
                .and_then(|t| t.tunnel.expires.map(|e| (&mut t.expired, e))),
        };
        let Some((expired, expires)) = current else {
            return;
        };
        if *expired {
            return;
        }
        if expires > now {
            // It heartbeated since this timer was armed.
            self.schedule.arm(TimerKey::Expiry(kind, name), expires);
            return;
        }
        *expired = true;
        debug!(%kind, %name, "expired");
        self.history(EventRow {
            at: expires,
            kind: kind.as_str(),
            name: name.clone(),
            event: "expired",
            expires: Some(expires),
            ttl_us: None,
            detail: String::new(),
        });
        match kind {
            Kind::Proxy => self.dirty_proxy_agents(&name),
            Kind::Agent => {
                self.dirty.insert(name);
            }
            Kind::TunnelConnection => {
                if let Some(t) = self.tunnels.get(&name) {
                    self.dirty.insert(t.tunnel.agent.clone());
                }
            }
            Kind::AuthServer => {}
        }
    }

    fn grace_over(&mut self, name: String, now: Ts) {
        let grace = self.rules.unknown_grace;
        let Some(a) = self.auths.get_mut(&name) else {
            return;
        };
        if a.unhealthy || !matches!(a.health, Health::Unknown | Health::ServiceUnknown) {
            return;
        }
        let end = a.health_since.saturating_add(grace);
        if end > now {
            self.schedule.arm(TimerKey::AuthGrace(name), end);
            return;
        }
        a.unhealthy = true;
        warn!(auth_server = %name, health = a.health.as_str(), "auth health unknown past the grace: its agents count as auth_unhealthy");
        self.dirty_auth_agents(&name);
    }

    // ---- classification ---------------------------------------------------

    /// Reclassifies every agent touched since the last call.
    pub fn settle(&mut self) {
        self.board.publish();
        if self.dirty.is_empty() || !self.classification_enabled() {
            return;
        }
        let now = self.now();
        let dirty = std::mem::take(&mut self.dirty);
        #[allow(clippy::disallowed_methods)] // classification duration histogram
        let started = std::time::Instant::now();
        let n = dirty.len();
        for name in dirty {
            if let Some(v) = self.verdict(&name, now) {
                self.apply_verdict(&name, v, now);
            }
        }
        let measured = !std::mem::take(&mut self.after_resync);
        for c in &self.changed {
            if measured && c.to != AgentState::Healthy && c.from == AgentState::Healthy {
                let latency = c.detected_at.since(c.since);
                self.stats.hist.detection.record(latency.as_secs_f64());
            }
        }
        if !self.changed.is_empty() && crate::telemetry::exporting() {
            self.trace_failures(now);
        }
        if !self.changed.is_empty() {
            let batch = std::sync::Arc::new(std::mem::take(&mut self.changed));
            let _ = self.changes.send(batch);
        }
        if n > 1000 {
            debug!(
                agents = n,
                us = started.elapsed().as_micros() as u64,
                "classified"
            );
        }
    }

    /// One trace per failure: a root span for each (cause, resource, since)
    /// among this pass's new non-healthy states, a `classify` child naming
    /// how many agents it took and why, and the trace handed to each change
    /// (signals continue it) and to the agent (its episode's close ends it).
    fn trace_failures(&mut self, now: Ts) {
        let mut groups: BTreeMap<(Option<CauseKind>, String, Ts), Vec<usize>> = BTreeMap::new();
        for (i, c) in self.changed.iter().enumerate() {
            if c.to == AgentState::Healthy {
                continue;
            }
            let key = (
                c.cause,
                c.cause_resource.clone().unwrap_or_default(),
                c.since,
            );
            groups.entry(key).or_default().push(i);
        }
        if self.failures.len() + groups.len() > MAX_FAILURE_TRACES {
            self.failures.clear();
        }
        for (key, idx) in groups {
            let stranded = idx
                .iter()
                .filter(|&&i| self.changed[i].to == AgentState::Stranded)
                .count();
            let reasons: BTreeSet<String> = idx
                .iter()
                .map(|&i| self.changed[i].reasons.join())
                .collect();
            let reasons = reasons.into_iter().collect::<Vec<_>>().join(";");
            let cause = key.0.map_or("unknown", CauseKind::as_str);
            let (resource, since) = (key.1.as_str(), key.2);
            let root = match self.failures.get(&key) {
                Some(t) => t.clone(),
                None => {
                    let span = info_span!(
                        parent: None,
                        "failure",
                        otel.name = %format!("{cause} {resource}"),
                        cause,
                        resource,
                        since = %since,
                        agents = idx.len(),
                        stranded,
                        reasons = %reasons,
                        detection_ms = now.since(since).as_secs_f64() * 1e3,
                    );
                    let Some(t) = TraceRef::of(&span) else {
                        continue;
                    };
                    self.failures.insert(key.clone(), t.clone());
                    t
                }
            };
            let first = idx
                .first()
                .map(|&i| self.changed[i].agent.as_str())
                .unwrap_or("");
            let _classify = propagate::child(Some(&root), || {
                info_span!(
                    parent: None,
                    "classify",
                    cause,
                    resource,
                    agents = idx.len(),
                    stranded,
                    degraded = idx.len() - stranded,
                    reasons = %reasons,
                    first_agent = %first,
                )
            });
            for &i in &idx {
                let c = &mut self.changed[i];
                c.trace = Some(root.clone());
                if let Some(a) = self.agents.get_mut(&c.agent) {
                    a.trace = Some(root.clone());
                }
            }
        }
    }

    /// The classifier's verdict for one agent from current state.
    pub fn verdict(&self, name: &str, now: Ts) -> Option<Verdict> {
        let a = self.agents.get(name)?;
        let auth_unhealthy = self
            .auths
            .get(&a.res.server.auth_server)
            .and_then(|e| e.unhealthy_cause(self.rules.unknown_grace));
        let tunnels_known = self.fresh(Kind::TunnelConnection) && self.fresh(Kind::Proxy);
        let tunnels = self
            .tunnels_of(name)
            .map(|t| TunnelView {
                proxy: &t.tunnel.proxy,
                dead: self.tunnel_dead(t, now),
            })
            .collect();
        Some(classify(&Inputs {
            now,
            agent_expired: (a.res.expired && self.kind(Kind::Agent).state == WatchState::Ready)
                .then_some(a.res.server.expires),
            auth_server: &a.res.server.auth_server,
            auth_unhealthy,
            tunnels_known,
            tunnels,
        }))
    }

    /// Why (and since when) a tunnel is dead, or `None` when live.
    pub fn tunnel_dead(&self, t: &TunnelEntry, now: Ts) -> Option<(CauseKind, Ts)> {
        if t.expired {
            return Some((CauseKind::TunnelExpired, t.tunnel.expires.unwrap_or(now)));
        }
        match self.proxies.get(&t.tunnel.proxy) {
            None => Some((CauseKind::ProxyMissing, now)),
            Some(p) if p.expired => Some((CauseKind::ProxyExpired, p.server.expires)),
            Some(_) => None,
        }
    }

    fn apply_verdict(&mut self, name: &str, v: Verdict, now: Ts) {
        let next_id = self.next_episode;
        let Some(a) = self.agents.get_mut(name) else {
            return;
        };
        if v.state != a.state {
            let since = if v.state == AgentState::Healthy {
                now
            } else {
                v.since.clamp(a.since, now)
            };
            if let Some(id) = a.episode.take() {
                let started = a.since;
                let ended_by_signal = a
                    .last_signal
                    .filter(|(_, at)| *at >= started)
                    .map(|(id, _)| id);
                let end_reason = if v.state == AgentState::Healthy {
                    "recovered"
                } else {
                    "state_changed"
                };
                let _close = propagate::child(a.trace.take().as_ref(), || {
                    info_span!(
                        parent: None,
                        "episode.close",
                        agent = %name,
                        episode = id,
                        end_reason,
                        ended_by_signal,
                        to = v.state.as_str(),
                        lasted_ms = since.since(started).as_secs_f64() * 1e3,
                    )
                });
                self.pending.episodes.push(EpisodeOp::Close {
                    id,
                    ended: since,
                    ended_by_signal,
                    end_reason,
                });
            }
            if v.state != AgentState::Healthy {
                a.episode = Some(next_id);
                self.next_episode += 1;
                self.pending.episodes.push(EpisodeOp::Open {
                    id: next_id,
                    agent: name.to_string(),
                    state: v.state.as_str(),
                    reasons: v.reasons.join(),
                    cause: v.cause.as_ref().map_or("", |c| c.kind.as_str()),
                    cause_resource: v
                        .cause
                        .as_ref()
                        .map(|c| c.resource.clone())
                        .unwrap_or_default(),
                    started: since,
                });
            }
            let change = StateChange {
                agent: name.to_string(),
                // Stamped per agent, when its own classification is done.
                detected_at: self.clock.now(),
                from: a.state,
                to: v.state,
                reasons: v.reasons,
                cause: v.cause.as_ref().map(|c| c.kind),
                cause_resource: v.cause.as_ref().map(|c| c.resource.clone()),
                since,
                episode: a.episode,
                trace: None,
            };
            debug!(agent = %name, from = a.state.as_str(), to = v.state.as_str(), reasons = %v.reasons.join(), "agent state changed");
            a.state = v.state;
            a.since = since;
            a.reasons = v.reasons;
            a.cause = v.cause;
            Stats::inc(&self.stats.state_changes);
            self.changed.push(change);
        } else if v.reasons != a.reasons || v.cause != a.cause {
            if let Some(id) = a.episode {
                self.pending.episodes.push(EpisodeOp::Update {
                    id,
                    reasons: v.reasons.join(),
                    cause: v.cause.as_ref().map_or("", |c| c.kind.as_str()),
                    cause_resource: v
                        .cause
                        .as_ref()
                        .map(|c| c.resource.clone())
                        .unwrap_or_default(),
                });
            }
            a.reasons = v.reasons;
            a.cause = v.cause;
        }
    }
}

impl Snapshot {
    fn empty(kind: Kind) -> Snapshot {
        match kind {
            Kind::TunnelConnection => Snapshot::Tunnels(Vec::new()),
            k => Snapshot::Servers(k, Vec::new()),
        }
    }

    pub fn kind(&self) -> Kind {
        match self {
            Snapshot::Servers(k, _) => *k,
            Snapshot::Tunnels(_) => Kind::TunnelConnection,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Snapshot::Servers(_, v) => v.len(),
            Snapshot::Tunnels(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EpisodeOp;

    fn fleet() -> Fleet {
        let (changes, _) = broadcast::channel(16);
        let (ready, _) = watch::channel(Readiness {
            ready: false,
            kinds: BTreeMap::new(),
        });
        let (targets, _) = watch::channel(BTreeMap::new());
        Fleet::new(
            Clock::starting_at(Ts(1_000_000)),
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

    fn proxy(name: &str, expires: i64) -> Server {
        crate::model::test_server(Kind::Proxy, name, Ts(expires))
    }

    fn close(id: i64) -> EpisodeOp {
        EpisodeOp::Close {
            id,
            ended: Ts(0),
            ended_by_signal: None,
            end_reason: "recovered",
        }
    }

    /// Guards the store-busy path: a batch the writer had no room for goes
    /// back in front of newer writes; newer current state wins.
    #[test]
    fn restored_batch_keeps_history_order_and_newer_state_wins() {
        let mut f = fleet();
        f.pending.put_server(&proxy("p1", 1));
        f.pending.episodes.push(close(1));
        let older = f.take_pending();
        f.pending.put_server(&proxy("p1", 2));
        f.pending.episodes.push(close(2));
        f.restore_pending(older);
        let ids: Vec<i64> = f
            .pending
            .episodes
            .iter()
            .map(|e| match e {
                EpisodeOp::Close { id, .. } => *id,
                _ => 0,
            })
            .collect();
        assert_eq!(ids, vec![1, 2]);
        let p1 = &f.pending.servers[&(Kind::Proxy, "p1".to_string())];
        assert_eq!(p1.as_ref().map(|s| s.expires), Some(Ts(2)));
    }

    /// Guards the snapshot throttle: history is due at once, current state
    /// only after STATE_WRITE_EVERY.
    #[tokio::test(start_paused = true)]
    async fn current_state_is_written_at_most_every_period() {
        let mut f = fleet();
        f.take_pending();
        f.pending.put_server(&proxy("p1", 5));
        f.note("proxy", "p1", "update", String::new());
        let first = f.take_due();
        assert_eq!(first.events.len(), 1);
        assert!(!first.has_state(), "state waits for its period");
        assert!(f.has_pending() && !f.has_due());
        tokio::time::advance(STATE_WRITE_EVERY).await;
        assert!(f.has_due());
        assert!(f.take_due().has_state());
    }
}
