//! A tunnel listing turned into the tunnels' tables: the entries, each
//! agent's tunnel names, each proxy's agents, and the expiry timers to
//! arm. Built apart from the model, so that a large listing is indexed on
//! one thread and filed on another while the fleet's task replaces the
//! servers (they share nothing until the tables are installed).
//!
//! Owns: building the tables from a listing, and the one way a tunnel is
//! indexed. Must not touch: the rest of the model.

use std::sync::Arc;

use rustc_hash::FxHashMap as HashMap;

use super::by_name::ByName;
use super::names::FewNames;
use super::TunnelEntry;
use crate::clock::Ts;
use crate::domain::Tunnel;
use crate::supervise::{joined, scoped};

/// Each agent's tunnel names.
pub type AgentTunnels = HashMap<String, FewNames>;
/// Each proxy's agents, with how many tunnels each holds to it.
pub type ProxyAgents = HashMap<String, HashMap<String, u32>>;

pub struct TunnelTables {
    pub tunnels: ByName<TunnelEntry>,
    pub agent_tunnels: AgentTunnels,
    pub proxy_agents: ProxyAgents,
    /// The name and expiry of each tunnel whose expiry is still ahead.
    pub arms: Vec<(Arc<str>, Ts)>,
    /// The listing as it came, for the store.
    pub rows: Vec<Tunnel>,
}

/// A tunnel listing this long is built on threads of its own.
pub const PARALLEL_TUNNELS: usize = 50_000;

impl TunnelTables {
    /// The tables of `list` at `now`, for a fleet of about `agents`.
    pub fn build(list: Vec<Tunnel>, now: Ts, agents: usize) -> TunnelTables {
        TunnelTables::build_beside(list, now, agents, || {})
    }

    /// [`TunnelTables::build`] while `beside` runs on this thread: a
    /// listing of [`PARALLEL_TUNNELS`] or more is indexed on one thread and
    /// filed on another meanwhile; a thread that cannot be had leaves its
    /// part to this one. The listing itself is kept for the store.
    pub fn build_beside(
        list: Vec<Tunnel>,
        now: Ts,
        agents: usize,
        beside: impl FnOnce(),
    ) -> TunnelTables {
        let listed = &list;
        let parallel = list.len() >= PARALLEL_TUNNELS;
        let ((tunnels, arms), (agent_tunnels, proxy_agents)) = std::thread::scope(|scope| {
            let indexing = parallel
                .then(|| scoped(scope, "fleet-tunnels", move || index(listed, agents)))
                .flatten();
            let filing = parallel
                .then(|| scoped(scope, "fleet-tunnel-entries", move || entries(listed, now)))
                .flatten();
            beside();
            (
                filing.map_or_else(|| entries(listed, now), joined),
                indexing.map_or_else(|| index(listed, agents), joined),
            )
        });
        TunnelTables {
            tunnels,
            agent_tunnels,
            proxy_agents,
            arms,
            rows: list,
        }
    }
}

/// Each agent's tunnel names and each proxy's agents, for a fleet of about
/// `agents`.
pub fn index(list: &[Tunnel], agents: usize) -> (AgentTunnels, ProxyAgents) {
    // Every table sized before it fills: growing one hashes each name it
    // holds again, a cache miss each at a million.
    let mut agent_tunnels = AgentTunnels::default();
    agent_tunnels.reserve(agents);
    let mut per_proxy: HashMap<&str, usize> = HashMap::default();
    for t in list {
        *per_proxy.entry(t.proxy.as_str()).or_default() += 1;
    }
    let mut proxy_agents = ProxyAgents::default();
    proxy_agents.reserve(per_proxy.len());
    for (proxy, n) in per_proxy {
        let mut agents = HashMap::default();
        agents.reserve(n);
        proxy_agents.insert(proxy.to_string(), agents);
    }
    for t in list {
        index_tunnel(&mut agent_tunnels, &mut proxy_agents, t);
    }
    (agent_tunnels, proxy_agents)
}

/// The entries of `list` at `now`, and the name and expiry of each tunnel
/// whose expiry is still ahead. Each tunnel is copied as it is filed, while
/// its name is still in the cache from the copy: the listing itself goes
/// to the store.
pub fn entries(list: &[Tunnel], now: Ts) -> (ByName<TunnelEntry>, Vec<(Arc<str>, Ts)>) {
    let mut tunnels = ByName::default();
    tunnels.reserve(list.len());
    let mut arms = Vec::new();
    for t in list {
        let expired = t.expires.is_some_and(|e| e <= now);
        if let (Some(e), false) = (t.expires, expired) {
            arms.push((t.name.as_str().into(), e));
        }
        tunnels.insert(TunnelEntry {
            tunnel: t.clone(),
            expired,
        });
    }
    (tunnels, arms)
}

/// Adds `t` to its agent's names and its proxy's agents. Looks up before
/// inserting: the entry API would clone the agent's and the proxy's names
/// for every tunnel, though most find theirs.
pub fn index_tunnel(agent_tunnels: &mut AgentTunnels, proxy_agents: &mut ProxyAgents, t: &Tunnel) {
    match agent_tunnels.get_mut(&t.agent) {
        Some(names) => {
            names.insert(t.name.clone());
        }
        None => {
            let mut names = FewNames::default();
            names.insert(t.name.clone());
            agent_tunnels.insert(t.agent.clone(), names);
        }
    }
    let agents = match proxy_agents.get_mut(&t.proxy) {
        Some(agents) => agents,
        None => proxy_agents.entry(t.proxy.clone()).or_default(),
    };
    match agents.get_mut(&t.agent) {
        Some(n) => *n = n.saturating_add(1),
        None => {
            agents.insert(t.agent.clone(), 1);
        }
    }
}
