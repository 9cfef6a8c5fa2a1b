//! The indexes between agents, tunnels, proxies and auth servers, and the
//! named reads that walk them.
//!
//! Invariants: `agent_tunnels[a]` names exactly the tunnels whose agent is
//! `a`; `proxy_agents[p][a]` counts the tunnels from `a` to `p` (never 0:
//! empty entries are removed); `auth_agents[s]` holds exactly the agents
//! whose auth server is `s`; `agent_order` holds exactly the agents' names;
//! `unhealthy` holds exactly the agents whose state is not healthy.

use super::StateChange;
use super::{AgentEntry, Model, TunnelEntry};
use crate::domain::{Standing, Tunnel};

/// Which agents a bulk action names.
#[derive(Clone, Debug)]
pub enum Selection {
    /// Every agent of this standing (stranded ones are those the stranded
    /// figure counts: not planned).
    Standing(Standing),
    /// Every agent with a tunnel to this proxy.
    Proxy(String),
    /// Every agent attached to this auth server.
    AuthServer(String),
}

/// A connected agent holding more tunnels than it asked for.
#[derive(Debug)]
pub struct Surplus {
    pub agent: String,
    pub desired: u32,
    /// Its tunnels' proxies, each with whether the tunnel is live.
    pub tunnels: Vec<(String, bool)>,
}

/// How much the fleet holds.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub agents: usize,
    pub proxies: usize,
    pub tunnels: usize,
}

impl Model {
    // ---- indexes ----------------------------------------------------------

    pub(super) fn index_tunnel(&mut self, t: &Tunnel) {
        super::tunnel_tables::index_tunnel(&mut self.agent_tunnels, &mut self.proxy_agents, t);
    }

    pub(super) fn unindex_tunnel(&mut self, t: &Tunnel) {
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

    pub(super) fn index_agent_auth(&mut self, agent: &str, auth: &str) {
        if !auth.is_empty() {
            self.auth_agents
                .entry(auth.to_string())
                .or_default()
                .insert(agent.to_string());
        }
    }

    /// `auth_agents` again from the agents, each set built from its
    /// names in order rather than by a descent per agent.
    pub(super) fn rebuild_auth_agents(&mut self) {
        let mut by_auth: rustc_hash::FxHashMap<&str, Vec<&str>> = Default::default();
        for a in self.agents.values() {
            let s = &a.res.server;
            if !s.auth_server.is_empty() {
                by_auth.entry(&s.auth_server).or_default().push(&s.name);
            }
        }
        self.auth_agents = by_auth
            .into_iter()
            .map(|(auth, mut names)| {
                names.sort_unstable();
                let set = names.into_iter().map(str::to_string).collect();
                (auth.to_string(), set)
            })
            .collect();
    }

    pub(super) fn unindex_agent_auth(&mut self, agent: &str, auth: &str) {
        if let Some(set) = self.auth_agents.get_mut(auth) {
            set.remove(agent);
            if set.is_empty() {
                self.auth_agents.remove(auth);
            }
        }
    }

    pub(super) fn dirty_proxy_agents(&mut self, proxy: &str) {
        // Its group's newest live generation may have moved.
        self.generations_dirty = true;
        if let Some(m) = self.proxy_agents.get(proxy) {
            self.dirty.extend(m.keys().cloned());
        }
    }

    pub(super) fn dirty_auth_agents(&mut self, auth: &str) {
        if let Some(s) = self.auth_agents.get(auth) {
            self.dirty.extend(s.iter().cloned());
        }
    }

    /// The tunnels an agent holds, as far as Lifeline knows: the one walk
    /// from an agent to its tunnels.
    pub(in crate::fleet) fn tunnels_of<'a>(
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

    pub(in crate::fleet) fn sizes(&self) -> Sizes {
        Sizes {
            agents: self.agents.len(),
            proxies: self.proxies.len(),
            tunnels: self.tunnels.len(),
        }
    }

    pub(in crate::fleet) fn auth_names(&self) -> Vec<String> {
        self.auths.keys().cloned().collect()
    }

    /// For each target, whether it names at least one resource the fleet
    /// knows in its cluster (a window over nothing is likely a typo, and is
    /// said so).
    pub(in crate::fleet) fn known_targets(&self, targets: &[crate::domain::Target]) -> Vec<bool> {
        let cluster = self.cluster();
        use crate::domain::TargetKind;
        targets
            .iter()
            .map(|t| match t.kind {
                _ if !t.in_cluster(cluster) => false,
                TargetKind::Proxy => self.proxies.keys().any(|p| t.matches(t.kind, p)),
                TargetKind::AuthServer => self.auths.keys().any(|a| t.matches(t.kind, a)),
                TargetKind::Agent => self.agent_order.iter().any(|a| t.matches(t.kind, a)),
            })
            .collect()
    }

    pub(in crate::fleet) fn select(&self, sel: &Selection) -> Option<Vec<String>> {
        use Selection;
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
            Selection::Standing(st) => Some(
                self.agent_order
                    .iter()
                    .filter(|n| {
                        self.agents
                            .get(n)
                            .is_some_and(|a| Standing::of(a.state, a.cause.as_ref()) == *st)
                    })
                    .cloned()
                    .collect(),
            ),
        }
    }

    pub(in crate::fleet) fn holds_tunnel(&self, agent: &str, proxy: Option<&str>) -> Option<bool> {
        if !self.agents.contains_key(agent) {
            return None;
        }
        Some(proxy.is_none_or(|p| self.tunnels_of(agent).any(|t| t.tunnel.proxy == p)))
    }

    /// A graceful restart of `agent` can help it: it is stranded because
    /// its Auth is unhealthy, its own heartbeats expired, or it holds no
    /// live tunnel although tunnels of it were seen. Never for an agent
    /// that is merely degraded.
    pub(in crate::fleet) fn restart_helps(&self, agent: &str) -> bool {
        let Some(a) = self.agents.get(agent) else {
            return false;
        };
        a.state == crate::domain::AgentState::Stranded
            && (a.reasons.contains(crate::domain::Reason::AuthUnhealthy)
                || a.reasons.contains(crate::domain::Reason::AgentExpired)
                || (a.reasons.contains(crate::domain::Reason::NoLiveTunnel)
                    && self.tunnels_of(agent).next().is_some()))
    }

    pub(in crate::fleet) fn knows_address(&self, addr: &str) -> bool {
        self.proxies.values().any(|p| p.server.addr == addr)
            || self.auths.values().any(|a| {
                a.static_addr.as_deref() == Some(addr)
                    || a.resource.as_ref().is_some_and(|r| r.server.addr == addr)
            })
    }

    /// Degraded and stranded agents, in name order.
    pub(in crate::fleet) fn unhealthy_agents(
        &self,
    ) -> impl Iterator<Item = (&String, &AgentEntry)> {
        self.unhealthy
            .iter()
            .filter_map(|n| self.agents.get(n).map(|a| (n, a)))
    }

    pub(in crate::fleet) fn not_healthy(&self) -> Vec<StateChange> {
        self.unhealthy_agents()
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
                planned: a.cause.as_ref().and_then(|c| c.planned),
                trace: a.trace.clone(),
            })
            .collect()
    }

    pub(in crate::fleet) fn surplus_tunnels(&self) -> Vec<Surplus> {
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
                out.push(Surplus {
                    agent: agent.clone(),
                    desired: link.desired_tunnels,
                    tunnels,
                });
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::{AgentState, Change, Kind};
    use crate::fleet::model::fixture::{advance_to, agent, at, check_indexes, ready, server};
    use crate::fleet::model::{Ingested, Resync, Snapshot};

    fn names(f: &super::Model) -> Vec<&str> {
        f.unhealthy.iter().map(String::as_str).collect()
    }

    #[test]
    fn the_unhealthy_index_follows_strands_recoveries_deletes_and_resyncs() {
        let mut f = ready(&[("p1", 10)], &["a1", "a2", "a3"]);
        assert!(f.unhealthy.is_empty());
        advance_to(&mut f, at(10));
        assert_eq!(names(&f), ["a1", "a2", "a3"], "p1 expired: all stranded");
        assert_eq!(f.not_healthy().len(), 3);

        // p1 heartbeats again: everyone recovers.
        let put = |s| vec![Ingested::Change(Change::PutServer(s))];
        f.apply(put(server(Kind::Proxy, "p1", at(60))));
        f.settle();
        check_indexes(&f);
        assert!(names(&f).is_empty(), "recovered");

        // Stranded again, then a1 is deleted: out of the index.
        advance_to(&mut f, at(60));
        assert_eq!(names(&f), ["a1", "a2", "a3"]);
        f.apply(vec![Ingested::Change(Change::DeleteServer(
            Kind::Agent,
            "a1".into(),
        ))]);
        f.settle();
        check_indexes(&f);

        // A resync that no longer lists a2 drops it too.
        f.resync(Resync {
            generation: 2,
            snapshots: vec![Snapshot::Servers(Kind::Agent, vec![agent("a3", at(3600))])],
            rejected: Vec::new(),
        });
        f.settle();
        check_indexes(&f);
        assert_eq!(names(&f), ["a3"]);
        assert_eq!(f.agents["a3"].state, AgentState::Stranded);
    }

    #[test]
    fn the_expired_proxy_named_is_the_one_the_cause_names_while_the_agent_holds_it() {
        // p1 and p2 expire together: a1 is stranded with one cause.
        let mut f = ready(&[("p1", 10), ("p2", 10), ("p3", 3600)], &["a1"]);
        assert_eq!(f.expired_proxy_of("a1"), None, "all live");
        advance_to(&mut f, at(10));
        let cause = f.agents["a1"]
            .cause
            .as_ref()
            .map(|c| c.resource.clone())
            .expect("a cause");
        assert!(cause == "p1" || cause == "p2", "{cause}");
        assert_eq!(f.expired_proxy_of("a1"), Some(cause.clone()));

        // It leaves the cause's proxy: the other expired one is named.
        f.apply(vec![Ingested::Change(Change::DeleteTunnel(format!(
            "a1.{cause}"
        )))]);
        f.settle();
        let other = if cause == "p1" { "p2" } else { "p1" };
        assert_eq!(f.expired_proxy_of("a1").as_deref(), Some(other));
        assert_eq!(f.expired_proxy_of("nobody"), None);
    }
}
