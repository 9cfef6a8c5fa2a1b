//! The fleet's model: every proxy, auth server, agent and tunnel as last
//! seen, the watcher's state per kind, the expiry schedule, and each
//! agent's classification and open episode.
//!
//! Pure and synchronous: its methods take an input (a change, a listing,
//! a health update, the time) and record the effects in its outbox
//! ([`Effects`]), which the shell takes after each step. No channel, no
//! task, no clock of its own: the shell tells it the time (`at`). The rule
//! tests drive it directly, with no runtime. Two bulk steps of a large
//! fleet's resync (indexing the tunnels, judging every agent) run on
//! scoped threads that end before the step does.
//!
//! The rules that change it are split by seam: `apply`, `resync`,
//! `expiry`, `settle`, `traces`, `lead`, and the indexes in `topology`;
//! `classify` and `destination` are the pure rules they use.
//! Must not touch: channels, the store, the network, the read model
//! (`view`, `published`) or the shell.

mod apply;
mod by_name;
pub mod classify;
pub mod destination;
mod entries;
mod expiry;
pub mod incidents;
mod io;
mod lead;
mod names;
mod quantiles;
mod resync;
mod rollout;
pub mod schedule;
mod settle;
mod topology;
mod traces;
mod tunnel_tables;

use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

pub use entries::{
    AgentEntry, AuthEntry, Link, PeerReport, ResEntry, Restarter, Rules, TunnelEntry,
};
pub use expiry::SAMPLE_EVERY;
pub use io::{
    BoardOp, Changes, Effects, HealthUpdate, Ingested, KindStatus, Readiness, Resync, Snapshot,
    StateChange, Tally, WatchState,
};
pub use lead::Adopted;
pub use topology::{Selection, Sizes, Surplus};

use crate::clock::Ts;
use crate::domain::{CauseKind, HistoryEvent, Kind, Subject, Windows};
use crate::domain::{ClusterName, HistoryEntry, Record};
use crate::telemetry::propagate::TraceRef;
use schedule::Schedule;

pub struct Model {
    /// The cluster whose resources these are: every key below is within it.
    cluster: ClusterName,
    /// The time of the current step, as the shell said.
    now: Ts,
    rules: Rules,
    kinds: [KindStatus; 4],
    /// Hashed, not ordered: these are looked up for every classification.
    proxies: HashMap<String, ResEntry>,
    auths: BTreeMap<String, AuthEntry>,
    /// By the name each agent's server holds (one copy of the name).
    agents: by_name::ByName<AgentEntry>,
    /// Agent names in order, for paging only.
    agent_order: names::AgentNames,
    /// Agents not healthy (degraded or stranded), in name order: counts,
    /// root causes and the stranded lists walk these, not every agent.
    unhealthy: BTreeSet<String>,
    tunnels: by_name::ByName<TunnelEntry>,
    /// agent → its tunnel names.
    agent_tunnels: tunnel_tables::AgentTunnels,
    /// proxy → agent → number of tunnels.
    proxy_agents: tunnel_tables::ProxyAgents,
    /// auth server → agents attached to it.
    auth_agents: HashMap<String, BTreeSet<String>>,
    schedule: Schedule,
    /// Agents to classify at the next settle.
    dirty: HashSet<String>,
    /// Every agent is to be classified at the next settle (after a
    /// resync): walked in storage order instead of listed by name.
    dirty_all: bool,
    next_episode: i64,
    /// Open incidents and the agents in them.
    incidents: incidents::Incidents,
    /// The maintenance windows not yet over: which strandings are planned.
    windows: Windows,
    /// Proxies that left by their own delete, and when (a departure, not
    /// an expiry); forgotten when they return, oldest first past a bound.
    departed: HashMap<String, Ts>,
    /// Each proxy group's newest generation with a live proxy, as of the
    /// last settle: a proxy of an older one that expires is a rollout's.
    live_generations: HashMap<String, u64>,
    /// A proxy turned live or expired, came or went since that was read.
    generations_dirty: bool,
    /// Agents connected to Lifeline's signal stream.
    links: HashMap<String, Link>,
    /// Agents' own tunnel reports that came before the cluster's listing
    /// of agents and proxies (the latest of each): applied once it is in.
    held_reports: HashMap<String, (Vec<String>, String)>,
    /// Failure traces by (cause, resource, since): later agents stranded by
    /// the same failure join its trace. At `MAX_FAILURE_TRACES` it is
    /// emptied: a failure seen again after that starts a new trace.
    failures: HashMap<(Option<CauseKind>, String, Ts), TraceRef>,
    /// The pending classification follows a resync: its latencies measure
    /// staleness, not detection, and are not recorded.
    after_resync: bool,
    /// What this model produced since the shell last took it.
    out: Effects,
}

impl Model {
    pub fn new(cluster: ClusterName, rules: Rules, now: Ts) -> Model {
        let status = KindStatus {
            state: WatchState::Initializing,
            generation: 0,
            since: now,
        };
        let mut model = Model {
            cluster,
            now,
            rules,
            kinds: [status; 4],
            proxies: HashMap::default(),
            auths: BTreeMap::new(),
            agents: by_name::ByName::default(),
            agent_order: names::AgentNames::default(),
            unhealthy: BTreeSet::new(),
            tunnels: by_name::ByName::default(),
            agent_tunnels: HashMap::default(),
            proxy_agents: HashMap::default(),
            auth_agents: HashMap::default(),
            schedule: Schedule::default(),
            dirty: HashSet::default(),
            dirty_all: false,
            next_episode: 1,
            incidents: incidents::Incidents::default(),
            windows: Windows::default(),
            departed: HashMap::default(),
            live_generations: HashMap::default(),
            generations_dirty: true,
            links: HashMap::default(),
            held_reports: HashMap::default(),
            failures: HashMap::default(),
            after_resync: false,
            out: Effects::default(),
        };
        model.schedule.arm(
            schedule::TimerKey::Sample,
            now.floor_to(expiry::SAMPLE_EVERY)
                .saturating_add(expiry::SAMPLE_EVERY),
        );
        model.readiness_changed();
        model
    }

    /// The time of this step: what the shell last said with [`Self::at`].
    pub fn now(&self) -> Ts {
        self.now
    }

    /// The shell's clock reads `now`: timers due by then may fire.
    pub fn at(&mut self, now: Ts) {
        self.now = now;
        self.incidents.at(now);
    }

    /// The maintenance windows are now `windows`: every agent not healthy
    /// is judged again (a window may explain it, or no longer).
    pub fn set_windows(&mut self, windows: Windows) {
        self.windows = windows;
        self.windows_turned(self.now);
    }

    /// A window started or ended (or the list changed): judges again every
    /// agent not healthy, and arms the next start or end.
    pub(super) fn windows_turned(&mut self, now: Ts) {
        self.dirty.extend(self.unhealthy.iter().cloned());
        if let Some(at) = self.windows.next_change(now) {
            self.schedule.arm(schedule::TimerKey::Windows, at);
        }
    }

    /// Rows the shell gathered for the store, lent for one step: this
    /// step's rows coalesce into them (taken back with the effects). Given
    /// back when the model still holds rows of its own (they are newer and
    /// must follow the lent ones: the shell merges them on taking).
    pub fn lend_writes(&mut self, rows: Record) -> Option<Record> {
        if self.out.writes.is_empty() && self.out.writes.dropped_events == 0 {
            self.out.writes = rows;
            None
        } else {
            Some(rows)
        }
    }

    /// Takes what the model produced since the last take.
    pub fn take_effects(&mut self) -> Effects {
        std::mem::take(&mut self.out)
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

    pub(super) fn readiness_changed(&mut self) {
        self.out.readiness = Some(self.readiness_now());
    }

    /// The auth servers the cluster announces: name → health address.
    pub fn auth_targets(&self) -> BTreeMap<String, String> {
        self.auths
            .iter()
            .filter_map(|(name, a)| {
                a.resource
                    .as_ref()
                    .filter(|r| !r.server.addr.is_empty())
                    .map(|r| (name.clone(), r.server.addr.clone()))
            })
            .collect()
    }

    pub(super) fn auth_targets_changed(&mut self) {
        self.out.auth_targets = Some(self.auth_targets());
    }

    /// A history row for the store.
    pub(super) fn history(&mut self, row: HistoryEntry) {
        self.out.writes.event(row, self.rules.max_pending_events);
    }

    pub(super) fn note(&mut self, kind: Subject, name: &str, event: HistoryEvent, detail: String) {
        let now = self.now();
        self.history(HistoryEntry {
            at: now,
            kind,
            name: name.to_string(),
            event,
            expires: None,
            ttl_us: None,
            detail,
        });
    }

    /// Agents not healthy (degraded or stranded), in name order.
    pub fn unhealthy_count(&self) -> usize {
        self.unhealthy.len()
    }
}

/// What the read models see (`fleet::view`): the model's tables, read-only
/// and by name, never its fields.
impl Model {
    pub fn rules(&self) -> &Rules {
        &self.rules
    }

    pub fn agent_count(&self) -> usize {
        self.agents.len()
    }

    pub fn agent(&self, name: &str) -> Option<&AgentEntry> {
        self.agents.get(name)
    }

    /// Agent names in order, for paging.
    pub fn agent_names(&self) -> &names::AgentNames {
        &self.agent_order
    }

    /// Agents not healthy (degraded or stranded), in name order.
    pub fn unhealthy_names(&self) -> &BTreeSet<String> {
        &self.unhealthy
    }

    /// The proxies, in no order.
    pub fn proxies(&self) -> impl Iterator<Item = &ResEntry> {
        self.proxies.values()
    }

    pub fn proxy(&self, name: &str) -> Option<&ResEntry> {
        self.proxies.get(name)
    }

    /// The agents holding tunnels to `proxy`, with how many each.
    pub fn agents_on_proxy(&self, proxy: &str) -> Option<&HashMap<String, u32>> {
        self.proxy_agents.get(proxy)
    }

    /// The auth servers, in name order.
    pub fn auths(&self) -> &BTreeMap<String, AuthEntry> {
        &self.auths
    }

    pub fn auth(&self, name: &str) -> Option<&AuthEntry> {
        self.auths.get(name)
    }

    /// How many agents are attached to auth server `name`.
    pub fn agents_on_auth(&self, name: &str) -> usize {
        self.auth_agents.get(name).map_or(0, BTreeSet::len)
    }

    /// Agent `name`'s link to Lifeline's signal stream, if it has one.
    pub fn link_of(&self, name: &str) -> Option<&Link> {
        self.links.get(name)
    }

    /// The cluster whose resources these are.
    pub fn cluster(&self) -> &ClusterName {
        &self.cluster
    }
}

/// A model starting at `start`, for the rule tests.
#[cfg(test)]
pub(crate) fn test_model(start: Ts) -> Model {
    Model::new(
        ClusterName::new("default"),
        Rules {
            unknown_grace: std::time::Duration::from_secs(5),
            max_pending_events: 10,
        },
        start,
    )
}

/// Fixtures for the rule tests: a ready fleet of proxies, agents and
/// tunnels on a manual clock, and what it recorded.
#[cfg(test)]
pub(crate) mod fixture {
    use super::*;
    use crate::domain::{
        test_server, AgentState, Health, HealthMode, HistoryEvent, Server, Tunnel,
    };
    use std::time::Duration;

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

    /// A listing of every kind: `proxies` expire at the given second,
    /// agents live an hour on `auth-1`, each agent has a tunnel to each
    /// proxy.
    pub fn listing(proxies: &[(&str, u64)], agents: &[&str]) -> Vec<Snapshot> {
        vec![
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
        ]
    }

    /// A fleet whose every kind is ready, from [`listing`].
    pub fn ready(proxies: &[(&str, u64)], agents: &[&str]) -> Model {
        let mut f = test_model(START);
        f.resync(Resync {
            generation: 1,
            snapshots: listing(proxies, agents),
            rejected: Vec::new(),
        });
        f.health(HealthUpdate {
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
    pub fn events(f: &Model, name: &str) -> Vec<HistoryEvent> {
        f.out
            .writes
            .events
            .iter()
            .filter(|e| e.name == name)
            .map(|e| e.event)
            .collect()
    }

    /// Moves the time to `t` and lets the model act on it.
    pub fn advance_to(f: &mut Model, t: Ts) {
        f.at(t);
        f.fire_due();
        f.settle();
        check_indexes(f);
    }

    /// The indexes agree with the entries they index.
    pub fn check_indexes(f: &Model) {
        let unhealthy: BTreeSet<String> = f
            .agents
            .iter()
            .filter(|(_, a)| a.state != AgentState::Healthy)
            .map(|(n, _)| n.to_string())
            .collect();
        assert_eq!(f.unhealthy, unhealthy, "the unhealthy index");
        let names: BTreeSet<String> = f.agents.keys().map(str::to_string).collect();
        assert_eq!(f.agent_order, names, "the name order");
        let mut by_auth: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (n, a) in f.agents.iter() {
            if !a.res.server.auth_server.is_empty() {
                by_auth
                    .entry(a.res.server.auth_server.clone())
                    .or_default()
                    .insert(n.to_string());
            }
        }
        let held: BTreeMap<String, BTreeSet<String>> = f
            .auth_agents
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        assert_eq!(held, by_auth, "the agents by auth server");
        let mut by_agent: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        let mut by_proxy: BTreeMap<String, BTreeMap<String, u32>> = BTreeMap::new();
        for t in f.tunnels.values() {
            let t = &t.tunnel;
            by_agent
                .entry(t.agent.clone())
                .or_default()
                .insert(t.name.clone());
            *by_proxy
                .entry(t.proxy.clone())
                .or_default()
                .entry(t.agent.clone())
                .or_default() += 1;
        }
        let held: BTreeMap<String, BTreeSet<String>> = f
            .agent_tunnels
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().cloned().collect()))
            .collect();
        assert_eq!(held, by_agent, "each agent's tunnels");
        let held: BTreeMap<String, BTreeMap<String, u32>> = f
            .proxy_agents
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().map(|(a, n)| (a.clone(), *n)).collect()))
            .collect();
        assert_eq!(held, by_proxy, "each proxy's agents");
    }
}
