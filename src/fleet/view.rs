//! Read models: plain serialisable views computed from the fleet's state.
//! The HTTP layer only serialises these; every rule about what an operator
//! sees (states, TTL windows, root causes) lives here, testable without a
//! server.

use std::collections::BTreeMap;
use std::ops::Bound;

use serde::Serialize;

use super::model::destination::LiveProxies;
use super::model::{Model, Readiness, ResEntry, WatchState};
use crate::clock::{dur_micros, Ts};
use crate::domain::{
    AgentState, CauseKind, ClusterName, Health, Kind, Plan, Planned, Reasons, Standing,
};

/// Name cursors are opaque to clients: the hex of the last key of a page,
/// and the page after it starts after that key. Anything that is not such
/// hex (empty, not hex, longer than any key) is refused rather than read
/// as "after everything"; hex that is not UTF-8 is still a position.
pub mod cursor {
    /// The longest key a cursor can hold (`kind:` and a name).
    pub const MAX_KEY: usize = 16 + crate::domain::MAX_NAME_LEN;

    pub fn encode(key: &str) -> String {
        hex::encode(key.as_bytes())
    }

    /// The key a cursor names, or `None` when it is not one of ours.
    pub fn decode(c: &str) -> Option<String> {
        if c.is_empty() || c.len() > 2 * MAX_KEY {
            return None;
        }
        Some(String::from_utf8_lossy(&hex::decode(c).ok()?).into_owned())
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn cursors_round_trip_and_junk_is_refused() {
            for k in ["agent-00001", "proxy:p ü", "a"] {
                assert_eq!(super::decode(&super::encode(k)).as_deref(), Some(k));
            }
            for bad in ["", "zz", "abc", "agent-00001"] {
                assert_eq!(super::decode(bad), None, "{bad:?}");
            }
            assert_eq!(super::decode(&"61".repeat(300)), None, "too long");
        }
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct Summary {
    pub generated_at: Ts,
    /// The read model's generation: every surface rendered from the same
    /// generation shows the same figures (it grows with each publish).
    pub generation: u64,
    pub agents: AgentCounts,
    pub proxies: ProxyCounts,
    pub auth_servers: BTreeMap<&'static str, usize>,
    pub watcher: Readiness,
    /// False while some kind is stale or initialising: agent states are
    /// frozen rather than computed from data Lifeline cannot trust.
    pub classification_live: bool,
    pub root_causes: Vec<RootCause>,
}

/// Agents by standing: `healthy + degraded + stranded + planned = total`
/// (see [`Standing`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct AgentCounts {
    pub total: usize,
    pub healthy: usize,
    /// Degraded, unplanned.
    pub degraded: usize,
    /// Stranded, unplanned.
    pub stranded: usize,
    /// Degraded or stranded with a plan that explains it (a maintenance
    /// window, a rollout): in neither figure above.
    pub planned: usize,
    /// Of the degraded and stranded (planned ones are not moved), those a
    /// Reconnect cannot help yet: every live proxy is one they are already
    /// on, or none is live. They are signalled as soon as one turns live.
    pub waiting_for_live_proxy: usize,
}

impl AgentCounts {
    /// Counts one more agent of `standing`.
    pub fn add(&mut self, standing: Standing) {
        self.total += 1;
        match standing {
            Standing::Healthy => self.healthy += 1,
            Standing::Degraded => self.degraded += 1,
            Standing::Stranded => self.stranded += 1,
            Standing::Planned => self.planned += 1,
        }
    }

    pub fn of(&self, standing: Standing) -> usize {
        match standing {
            Standing::Healthy => self.healthy,
            Standing::Degraded => self.degraded,
            Standing::Stranded => self.stranded,
            Standing::Planned => self.planned,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, utoipa::ToSchema)]
pub struct ProxyCounts {
    pub total: usize,
    pub live: usize,
    pub expired: usize,
}

/// Agents that are not healthy, grouped by what made them so: one
/// failure, one line. Every such agent is under exactly one root cause.
#[derive(Debug, Clone, Serialize, PartialEq, utoipa::ToSchema)]
pub struct RootCause {
    pub cause: CauseKind,
    pub resource: String,
    /// Planned: its agents are shown, not acted on or notified, and they
    /// are all `planned` (none degraded or stranded).
    pub planned: Option<Planned>,
    /// Every agent under it: `degraded + stranded`, or all planned.
    pub agents: usize,
    pub degraded: usize,
    pub stranded: usize,
    pub since: Ts,
}

/// Agents by state, and when they were counted. Walks only the agents
/// that are not healthy (only those can wait for a live proxy).
pub fn summary_counts(f: &Model) -> (Ts, AgentCounts) {
    let mut agents = AgentCounts::default();
    let live = f.live_proxies();
    for (name, a) in f.unhealthy_agents() {
        agents.add(standing(a));
        if waiting(f, name, a, live) {
            agents.waiting_for_live_proxy += 1;
        }
    }
    let unhealthy = agents.total;
    agents.total = f.agent_count().max(unhealthy);
    agents.healthy += agents.total - unhealthy;
    (f.now(), agents)
}

/// An agent's standing (the one rule is [`Standing::of`]).
pub fn standing(a: &super::model::AgentEntry) -> Standing {
    Standing::of(a.state, a.cause.as_ref())
}

/// Waiting for a live proxy: a Reconnect would move it, but there is no
/// live proxy it is not already on. Planned agents are not moved, so
/// they never wait.
fn waiting(f: &Model, name: &str, a: &super::model::AgentEntry, live: LiveProxies) -> bool {
    standing(a) != Standing::Planned && f.waiting_for_live_proxy(name, a, live)
}

fn proxy_counts(f: &Model) -> ProxyCounts {
    let mut proxies = ProxyCounts::default();
    for p in f.proxies() {
        proxies.total += 1;
        if p.expired {
            proxies.expired += 1;
        } else {
            proxies.live += 1;
        }
    }
    proxies
}

fn auth_counts(f: &Model) -> BTreeMap<&'static str, usize> {
    let mut auth_servers = BTreeMap::new();
    for a in f.auths().values() {
        *auth_servers.entry(a.health.as_str()).or_default() += 1;
    }
    auth_servers
}

pub fn summary(f: &Model, generation: u64) -> Summary {
    let (_, agents) = summary_counts(f);
    Summary {
        generated_at: f.now(),
        generation,
        agents,
        proxies: proxy_counts(f),
        auth_servers: auth_counts(f),
        watcher: f.readiness_now(),
        classification_live: f.classification_enabled(),
        root_causes: root_causes(f),
    }
}

pub fn root_causes(f: &Model) -> Vec<RootCause> {
    // Per group: agents, degraded, stranded (unplanned), earliest since.
    type Group = (usize, usize, usize, Ts);
    let mut groups: BTreeMap<(CauseKind, &str, Option<Plan>), Group> = BTreeMap::new();
    for (_, a) in f.unhealthy_agents() {
        if a.state == AgentState::Healthy {
            continue;
        }
        let (kind, res, plan) = match &a.cause {
            Some(c) => (c.kind, c.resource.as_str(), c.planned),
            None => (CauseKind::NoTunnels, "", None),
        };
        let g = groups
            .entry((kind, res, plan))
            .or_insert((0, 0, 0, a.since));
        g.0 += 1;
        match Standing::of(a.state, a.cause.as_ref()) {
            Standing::Degraded => g.1 += 1,
            Standing::Stranded => g.2 += 1,
            Standing::Healthy | Standing::Planned => {}
        }
        g.3 = g.3.min(a.since);
    }
    let mut out: Vec<RootCause> = groups
        .into_iter()
        .map(|((kind, res, plan), (n, degraded, stranded, min_since))| {
            // Prefer the resource's own moment ("proxy-2 expired 41 s ago").
            let since = match kind {
                CauseKind::ProxyExpired => f.proxy(res).map(|p| p.server.expires),
                CauseKind::AuthNotServing => f.auth(res).map(|a| a.health_since),
                CauseKind::AuthUnknown => f
                    .auth(res)
                    .map(|a| a.health_since.saturating_add(f.rules().unknown_grace)),
                CauseKind::AuthExpired => f
                    .auth(res)
                    .and_then(|a| a.resource.as_ref())
                    .map(|r| r.server.expires),
                _ => None,
            }
            .unwrap_or(min_since);
            RootCause {
                cause: kind,
                resource: res.to_string(),
                planned: plan.map(Planned::from),
                agents: n,
                degraded,
                stranded,
                since,
            }
        })
        .collect();
    out.sort_by(|a, b| b.agents.cmp(&a.agents).then(a.since.cmp(&b.since)));
    out
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TunnelItem {
    pub name: String,
    pub proxy: String,
    /// live | expired | missing | tunnel_expired
    pub proxy_state: &'static str,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct CauseView {
    pub kind: &'static str,
    pub resource: String,
    /// Planned (a maintenance window, a rollout): shown, not acted on.
    pub planned: Option<Planned>,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AgentItem {
    /// The cluster it belongs to.
    #[schema(value_type = String, example = "default")]
    pub cluster: ClusterName,
    pub name: String,
    /// What the classifier says, planned or not.
    pub state: AgentState,
    /// How every figure counts it: its state, or `planned`.
    pub standing: Standing,
    pub reasons: Reasons,
    pub since: Ts,
    pub cause: Option<CauseView>,
    pub auth_server: String,
    pub auth_health: Option<Health>,
    pub tunnels: Vec<TunnelItem>,
    pub last_heartbeat_at: Ts,
    pub expires_at: Ts,
    pub ttl_ms: i64,
    /// True while the data behind this agent is stale.
    pub stale: bool,
    /// A Reconnect cannot help it yet: no live proxy it is not already on.
    pub waiting_for_live_proxy: bool,
}

#[derive(Debug, Clone, Default)]
pub struct AgentFilter {
    pub state: Option<Standing>,
    pub proxy: Option<String>,
    pub auth_server: Option<String>,
    /// Substring of the name.
    pub q: Option<String>,
    /// Names after this one (the decoded paging cursor).
    pub after: Option<String>,
    pub limit: usize,
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AgentPage {
    pub items: Vec<AgentItem>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

fn tunnel_items(f: &Model, agent: &str, now: Ts) -> Vec<TunnelItem> {
    f.tunnels_of(agent)
        .map(|t| TunnelItem {
            name: t.tunnel.name.clone(),
            proxy: t.tunnel.proxy.clone(),
            proxy_state: match f.tunnel_dead(t, now) {
                None => "live",
                Some((CauseKind::TunnelExpired, _)) => "tunnel_expired",
                Some((CauseKind::ProxyMissing, _)) => "missing",
                Some((CauseKind::ProxyDeparted, _)) => "departed",
                Some(_) => "expired",
            },
        })
        .collect()
}

/// One agent as a list shows it; `live` is counted once per page.
fn agent_item(f: &Model, name: &str, now: Ts, live: LiveProxies) -> Option<AgentItem> {
    let a = f.agent(name)?;
    let s = &a.res.server;
    Some(AgentItem {
        cluster: f.cluster().clone(),
        name: name.to_string(),
        state: a.state,
        standing: standing(a),
        reasons: a.reasons,
        since: a.since,
        cause: a.cause.as_ref().map(|c| CauseView {
            kind: c.kind.as_str(),
            resource: c.resource.clone(),
            planned: c.planned.map(Planned::from),
        }),
        auth_server: s.auth_server.clone(),
        auth_health: f.auth(&s.auth_server).map(|e| e.health),
        tunnels: tunnel_items(f, name, now),
        last_heartbeat_at: s.last_heartbeat(),
        expires_at: s.expires,
        ttl_ms: dur_micros(s.ttl) / 1000,
        stale: !f.classification_enabled(),
        waiting_for_live_proxy: waiting(f, name, a, live),
    })
}

/// Substring matches from which a search walks the names in order instead
/// of sorting what the packed scan found: per row of the page, so that the
/// walk, where matches are then at least this dense, stops early.
const SEARCH_SORT_PER_ROW: usize = 64;

pub fn agents(f: &Model, filter: &AgentFilter) -> AgentPage {
    let now = f.now();
    let live = f.live_proxies();
    let after = filter.after.as_deref();
    // Everything but the substring, which each way of walking checks itself.
    let matches = |name: &str| -> bool {
        let Some(a) = f.agent(name) else {
            return false;
        };
        if filter.state.is_some_and(|s| s != standing(a)) {
            return false;
        }
        if let Some(auth) = &filter.auth_server {
            if &a.res.server.auth_server != auth {
                return false;
            }
        }
        if let Some(p) = &filter.proxy {
            let on = f.agents_on_proxy(p).is_some_and(|m| m.contains_key(name));
            if !on {
                return false;
            }
        }
        true
    };
    let bounds = (
        after.map_or(Bound::Unbounded, Bound::Excluded),
        Bound::Unbounded,
    );
    let q = filter.q.as_deref();
    let finder = q.map(|q| memchr::memmem::Finder::new(q.as_bytes()));
    let holds_q = |name: &str| {
        finder
            .as_ref()
            .is_none_or(|f| f.find(name.as_bytes()).is_some())
    };
    let cap = filter.limit.max(1).saturating_mul(SEARCH_SORT_PER_ROW);
    // Degraded and stranded agents have their own (small) index; a
    // substring few names hold is found by the packed scan; otherwise the
    // walk over every name stops at a page.
    let names: Box<dyn Iterator<Item = &str>> = match (filter.state, q) {
        (Some(Standing::Degraded | Standing::Stranded | Standing::Planned), _) => Box::new(
            f.unhealthy_names()
                .range::<str, _>(bounds)
                .map(String::as_str)
                .filter(|n| holds_q(n)),
        ),
        (_, Some(q)) => match f.agent_names().containing(q, after, cap) {
            Some(found) => Box::new(found.into_iter()),
            None => Box::new(
                f.agent_names()
                    .range(bounds)
                    .map(String::as_str)
                    .filter(|n| holds_q(n)),
            ),
        },
        (_, None) => Box::new(f.agent_names().range(bounds).map(String::as_str)),
    };
    let mut items = Vec::with_capacity(filter.limit.min(1000));
    let mut more = false;
    for name in names {
        if !matches(name) {
            continue;
        }
        if items.len() == filter.limit {
            more = true;
            break;
        }
        if let Some(item) = agent_item(f, name, now, live) {
            items.push(item);
        }
    }
    let next_cursor = if more {
        items.last().map(|i: &AgentItem| cursor::encode(&i.name))
    } else {
        None
    };
    AgentPage { items, next_cursor }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct AgentDetail {
    #[serde(flatten)]
    pub item: AgentItem,
    pub addr: String,
    pub version: String,
    pub labels: BTreeMap<String, String>,
    pub ttl_window: TtlWindow,
    pub open_episode: Option<i64>,
    /// Its signal stream to Lifeline, when connected.
    pub link: Option<super::model::Link>,
    pub last_signal: Option<i64>,
}

pub fn agent(f: &Model, name: &str) -> Option<AgentDetail> {
    let now = f.now();
    let item = agent_item(f, name, now, f.live_proxies())?;
    let a = f.agent(name)?;
    Some(AgentDetail {
        item,
        addr: a.res.server.addr.clone(),
        version: a.res.server.version.clone(),
        labels: a.res.server.labels.to_map(),
        ttl_window: ttl_window(f, &a.res, now),
        open_episode: a.episode,
        link: f.link_of(name).cloned(),
        last_signal: a.last_signal.map(|(id, _)| id),
    })
}

/// The TTL window of one resource.
#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct TtlWindow {
    /// The cluster it belongs to.
    #[schema(value_type = String, example = "default")]
    pub cluster: ClusterName,
    pub kind: Kind,
    pub name: String,
    pub last_heartbeat_at: Ts,
    pub ttl_ms: i64,
    pub expires_at: Ts,
    /// Negative once expired.
    pub remaining_ms: i64,
    pub expired: bool,
    pub stale: bool,
    /// Heartbeats come every TTL/2 + random(TTL/10).
    pub heartbeat_interval_ms: [i64; 2],
    /// The latest moment the next heartbeat was due.
    pub next_heartbeat_due_at: Ts,
    pub heartbeats_seen: u64,
    pub heartbeats_missed: u64,
}

pub fn ttl_window(f: &Model, e: &ResEntry, now: Ts) -> TtlWindow {
    let s = &e.server;
    let ttl_us = dur_micros(s.ttl).max(1);
    let last = s.last_heartbeat();
    let max_interval = ttl_us / 2 + ttl_us / 10;
    let elapsed = now.as_micros().saturating_sub(last.as_micros());
    TtlWindow {
        cluster: f.cluster().clone(),
        kind: s.kind,
        name: s.name.clone(),
        last_heartbeat_at: last,
        ttl_ms: ttl_us / 1000,
        expires_at: s.expires,
        remaining_ms: s.expires.as_micros().saturating_sub(now.as_micros()) / 1000,
        expired: e.expired,
        stale: f.kind(s.kind).state != WatchState::Ready,
        heartbeat_interval_ms: [ttl_us / 2000, max_interval / 1000],
        next_heartbeat_due_at: Ts(last.as_micros() + max_interval),
        heartbeats_seen: e.heartbeats,
        heartbeats_missed: if elapsed > 0 {
            (elapsed / max_interval.max(1)) as u64
        } else {
            0
        },
    }
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct TtlPage {
    pub items: Vec<TtlWindow>,
    pub next_cursor: Option<String>,
}

/// TTL windows of one kind, or of proxies and auth servers together when
/// `kind` is None, in a stable order. The cursor is opaque: the name for one
/// kind, `kind:name` for the mixed listing (names of different kinds may
/// collide, and each kind is ordered on its own).
pub fn ttl_windows(f: &Model, kind: Option<Kind>, after: Option<&str>, limit: usize) -> TtlPage {
    let now = f.now();
    let after_ok = |key: &String| after.is_none_or(|a| key.as_str() > a);
    let proxies = || {
        sorted_proxies(f)
            .into_iter()
            .map(|e| (e.server.name.clone(), e))
    };
    let auths = || {
        f.auths()
            .iter()
            .filter_map(|(n, a)| a.resource.as_ref().map(|e| (n.clone(), e)))
    };
    let entries: Vec<(String, &ResEntry)> = match kind {
        Some(Kind::Agent) => f
            .agent_names()
            .range::<(Bound<&str>, Bound<&str>)>((
                after.map_or(Bound::Unbounded, Bound::Excluded),
                Bound::Unbounded,
            ))
            .filter_map(|n| f.agent(n).map(|a| (n.clone(), &a.res)))
            .take(limit + 1)
            .collect(),
        Some(Kind::Proxy) => proxies()
            .filter(|(k, _)| after_ok(k))
            .take(limit + 1)
            .collect(),
        Some(Kind::AuthServer) => auths()
            .filter(|(k, _)| after_ok(k))
            .take(limit + 1)
            .collect(),
        // "auth_server:" sorts before "proxy:", so this chain is in key order.
        _ => auths()
            .map(|(n, e)| (format!("auth_server:{n}"), e))
            .chain(proxies().map(|(n, e)| (format!("proxy:{n}"), e)))
            .filter(|(k, _)| after_ok(k))
            .take(limit + 1)
            .collect(),
    };
    let more = entries.len() > limit;
    let page = &entries[..entries.len().min(limit)];
    TtlPage {
        items: page.iter().map(|(_, e)| ttl_window(f, e, now)).collect(),
        next_cursor: if more {
            page.last().map(|(k, _)| cursor::encode(k))
        } else {
            None
        },
    }
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct ProxyView {
    /// The cluster it belongs to.
    #[schema(value_type = String, example = "default")]
    pub cluster: ClusterName,
    pub name: String,
    pub addr: String,
    pub version: String,
    pub group_id: String,
    pub group_generation: u64,
    /// live | expired
    pub state: &'static str,
    pub stale: bool,
    pub last_heartbeat_at: Ts,
    pub expires_at: Ts,
    pub ttl_ms: i64,
    pub remaining_ms: i64,
    pub heartbeats_seen: u64,
    pub heartbeats_missed: u64,
    pub agents: usize,
}

fn proxy_view(f: &Model, e: &ResEntry, now: Ts) -> ProxyView {
    let w = ttl_window(f, e, now);
    let s = &e.server;
    ProxyView {
        cluster: f.cluster().clone(),
        name: s.name.clone(),
        addr: s.addr.clone(),
        version: s.version.clone(),
        group_id: s.group_id.clone(),
        group_generation: s.group_generation,
        state: if e.expired { "expired" } else { "live" },
        stale: w.stale,
        last_heartbeat_at: w.last_heartbeat_at,
        expires_at: w.expires_at,
        ttl_ms: w.ttl_ms,
        remaining_ms: w.remaining_ms,
        heartbeats_seen: w.heartbeats_seen,
        heartbeats_missed: w.heartbeats_missed,
        agents: f.agents_on_proxy(&s.name).map_or(0, |m| m.len()),
    }
}

pub fn proxies(f: &Model) -> Vec<ProxyView> {
    let now = f.now();
    sorted_proxies(f)
        .into_iter()
        .map(|e| proxy_view(f, e, now))
        .collect()
}

/// Proxies by name (the map is hashed for lookups; lists are small).
fn sorted_proxies(f: &Model) -> Vec<&ResEntry> {
    let mut v: Vec<&ResEntry> = f.proxies().collect();
    v.sort_unstable_by(|a, b| a.server.name.cmp(&b.server.name));
    v
}

#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ProxyDetail {
    #[serde(flatten)]
    pub proxy: ProxyView,
    pub agents_by_state: BTreeMap<&'static str, usize>,
}

pub fn proxy(f: &Model, name: &str) -> Option<ProxyDetail> {
    let e = f.proxy(name)?;
    let mut agents_by_state = BTreeMap::new();
    for agent in f.agents_on_proxy(name).into_iter().flat_map(|m| m.keys()) {
        if let Some(a) = f.agent(agent) {
            *agents_by_state.entry(a.state.as_str()).or_default() += 1;
        }
    }
    Some(ProxyDetail {
        proxy: proxy_view(f, e, f.now()),
        agents_by_state,
    })
}

#[derive(Debug, Clone, Serialize, utoipa::ToSchema)]
pub struct AuthView {
    /// The cluster it belongs to.
    #[schema(value_type = String, example = "default")]
    pub cluster: ClusterName,
    pub name: String,
    pub addr: String,
    pub health: Health,
    pub since: Ts,
    pub mode: &'static str,
    /// What its state rests on: `health_watch` or `health_poll` (its
    /// `grpc.health.v1` answers), or `heartbeat` (its health is not served
    /// or was never reached: its own heartbeat's expiry decides).
    pub evidence: &'static str,
    pub detail: String,
    /// True when its agents count as `auth_unhealthy`.
    pub strands_agents: bool,
    pub agents: usize,
    /// cluster | config | both
    pub source: &'static str,
    pub expires_at: Option<Ts>,
    pub expired: Option<bool>,
}

pub fn auth_servers(f: &Model) -> Vec<AuthView> {
    f.auths()
        .iter()
        .map(|(name, a)| AuthView {
            cluster: f.cluster().clone(),
            name: name.clone(),
            addr: a.addr().to_string(),
            health: a.health,
            since: a.health_since,
            mode: a.mode.as_str(),
            evidence: a.evidence(),
            detail: a.detail.clone(),
            strands_agents: a.unhealthy,
            agents: f.agents_on_auth(name),
            source: match (a.resource.is_some(), a.static_addr.is_some()) {
                (true, true) => "both",
                (false, true) => "config",
                _ => "cluster",
            },
            expires_at: a.resource.as_ref().map(|r| r.server.expires),
            expired: a.resource.as_ref().map(|r| r.expired),
        })
        .collect()
}

/// One page of agents and each one's last audited signal id.
pub fn agents_with_last_signal(f: &Model, filter: &AgentFilter) -> (AgentPage, Vec<Option<i64>>) {
    let page = agents(f, filter);
    let last = page
        .items
        .iter()
        .map(|i| {
            f.agent(&i.name)
                .and_then(|a| a.last_signal.map(|(id, _)| id))
        })
        .collect();
    (page, last)
}

/// Proxies and auth servers, soonest to expire first (expired on top), at
/// most `limit` of them; and how many there are.
pub fn ttl_soonest(f: &Model, limit: usize) -> (Vec<TtlWindow>, usize) {
    let now = f.now();
    let mut all: Vec<TtlWindow> = f
        .proxies()
        .chain(f.auths().values().filter_map(|a| a.resource.as_ref()))
        .map(|e| ttl_window(f, e, now))
        .collect();
    let total = all.len();
    let soonest = |a: &TtlWindow, b: &TtlWindow| {
        a.remaining_ms
            .cmp(&b.remaining_ms)
            .then_with(|| a.name.cmp(&b.name))
    };
    if all.len() > limit {
        all.select_nth_unstable_by(limit, soonest);
        all.truncate(limit);
    }
    all.sort_by(soonest);
    (all, total)
}
