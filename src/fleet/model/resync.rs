//! Start-up and resync: loading the last known (stale) state, replacing a
//! kind's data with a new watcher generation's listing, re-arming every
//! timer of it, and turning data stale when its stream is lost.

use rustc_hash::FxHashSet as HashSet;
use tracing::{info, warn};

use super::schedule::TimerKey;
use super::{AgentEntry, AuthEntry, Model, ResEntry, TunnelEntry};
use super::{BoardOp, Resync, Snapshot, WatchState};
use crate::clock::Ts;
use crate::model::{AgentState, Cause, EndReason, Health, HistoryEvent, Kind, Reasons, Subject};
use crate::store::read::Loaded;
use crate::store::EpisodeOp;

impl Model {
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
                    self.agents.insert(AgentEntry::new(e, now));
                }
                Kind::TunnelConnection => {}
            }
        }
        for t in loaded.tunnels {
            self.index_tunnel(&t);
            self.tunnels.insert(TunnelEntry {
                tunnel: t,
                expired: false,
            });
        }
        self.incidents
            .load(loaded.open_incidents, loaded.next_incident_id);
        for ep in loaded.open_episodes {
            match self.agents.get_mut(&ep.agent) {
                Some(a) => {
                    a.state = ep.state;
                    if ep.state != AgentState::Healthy {
                        self.unhealthy.insert(ep.agent.clone());
                    }
                    a.reasons = Reasons::parse_joined(&ep.reasons.join(","));
                    a.since = ep.started_at;
                    a.cause = ep.cause.map(|kind| Cause {
                        kind,
                        resource: ep.cause_resource.clone(),
                    });
                    a.episode = Some(ep.id);
                    if let Some(incident) = ep.incident {
                        self.incidents
                            .restore(&ep.agent, ep.state, ep.started_at, incident);
                    }
                }
                None => self.out.writes.episodes.push(EpisodeOp::close(
                    ep.id,
                    now,
                    EndReason::AgentUnknown,
                )),
            }
        }
        let ended = self.incidents.end_empty(now);
        self.out.writes.incidents(ended);
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
        self.readiness_changed();
        self.auth_targets_changed();
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

    pub fn resync(&mut self, r: Resync) {
        let now = self.now();
        for kind in &r.rejected {
            // Partial-cache RFD: a rejected kind's old data is cleared too,
            // so nobody reads it as current.
            self.replace(Snapshot::empty(*kind), now);
            self.set_kind(*kind, WatchState::Rejected, r.generation);
            self.note(
                (*kind).into(),
                "",
                HistoryEvent::RejectedKind,
                format!("generation {}", r.generation),
            );
        }
        for snap in r.snapshots {
            let kind = snap.kind();
            let count = snap.len();
            self.replace(snap, now);
            self.set_kind(kind, WatchState::Ready, r.generation);
            self.note(
                kind.into(),
                "",
                HistoryEvent::Resync,
                format!("generation {}: {count} listed", r.generation),
            );
        }
        self.dirty_all = true;
        self.after_resync = true;
        self.auth_targets_changed();
        self.readiness_changed();
    }

    pub(super) fn replace(&mut self, snap: Snapshot, now: Ts) {
        match snap {
            Snapshot::Servers(kind, list) => {
                self.out.writes.replace_kind(kind, list.clone());
                match kind {
                    Kind::Proxy => {
                        let mut old = std::mem::take(&mut self.proxies);
                        self.proxies.reserve(list.len());
                        for s in list {
                            let e = match old.remove(&s.name) {
                                Some(mut e) => {
                                    if e.update(s, now).0 {
                                        self.out.tally.heartbeats += 1;
                                    }
                                    e
                                }
                                None => ResEntry::new(s, now),
                            };
                            self.proxies.insert(e.server.name.clone(), e);
                        }
                        let listed = self.proxies.values().map(|e| e.server.clone()).collect();
                        self.out.board.push(BoardOp::Replace(listed));
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
                            let a = match old.remove(&s.name) {
                                Some(mut a) => {
                                    if a.res.update(s, now).0 {
                                        self.out.tally.heartbeats += 1;
                                    }
                                    a
                                }
                                None => AgentEntry::new(ResEntry::new(s, now), now),
                            };
                            let server = &a.res.server;
                            self.index_agent_auth(&server.name, &server.auth_server);
                            if !self.agent_order.contains(&server.name) {
                                self.agent_order.insert(server.name.clone());
                            }
                            self.agents.insert(a);
                        }
                        for gone in old {
                            let name = gone.res.server.name.as_str();
                            self.left_incident(name, now);
                            self.agent_order.remove(name);
                            self.unhealthy.remove(name);
                            if let Some(id) = gone.episode {
                                self.out.writes.episodes.push(EpisodeOp::close(
                                    id,
                                    now,
                                    EndReason::AgentDeleted,
                                ));
                            }
                        }
                    }
                    Kind::TunnelConnection => {}
                }
                // Re-arm every unexpired resource of the kind: timers that fired
                // while the data was stale were dropped.
                let arms: Vec<(std::sync::Arc<str>, Ts)> = match kind {
                    Kind::Proxy => self
                        .proxies
                        .iter()
                        .filter(|(_, e)| !e.expired)
                        .map(|(n, e)| (n.as_str().into(), e.server.expires))
                        .collect(),
                    Kind::AuthServer => self
                        .auths
                        .iter()
                        .filter_map(|(n, a)| a.resource.as_ref().map(|e| (n, e)))
                        .filter(|(_, e)| !e.expired)
                        .map(|(n, e)| (n.as_str().into(), e.server.expires))
                        .collect(),
                    Kind::Agent => self
                        .agents
                        .iter()
                        .filter(|(_, a)| !a.res.expired)
                        .map(|(n, a)| (n.into(), a.res.server.expires))
                        .collect(),
                    Kind::TunnelConnection => Vec::new(),
                };
                for (n, at) in arms {
                    self.schedule.arm(TimerKey::Expiry(kind, n), at);
                }
                if kind == Kind::AuthServer {
                    let names: Vec<String> = self.auths.keys().cloned().collect();
                    for n in names {
                        self.auth_heartbeat_decides(&n);
                    }
                }
            }
            Snapshot::Tunnels(list) => {
                self.out.writes.replace_tunnels(list.clone());
                self.tunnels.clear();
                self.agent_tunnels.clear();
                self.proxy_agents.clear();
                self.tunnels.reserve(list.len());
                for t in list {
                    self.index_tunnel(&t);
                    let expired = t.expires.is_some_and(|e| e <= now);
                    if let (Some(e), false) = (t.expires, expired) {
                        self.schedule.arm(
                            TimerKey::Expiry(Kind::TunnelConnection, t.name.as_str().into()),
                            e,
                        );
                    }
                    self.tunnels.insert(TunnelEntry { tunnel: t, expired });
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
            self.note(Subject::Watcher, "", HistoryEvent::Stale, error.to_string());
            self.readiness_changed();
        }
    }
}

impl Snapshot {
    pub(super) fn empty(kind: Kind) -> Snapshot {
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
    use super::{Resync, Snapshot};
    use crate::fleet::model::fixture::*;
    use crate::model::{AgentState, Kind};

    /// Guards resync re-arming: a timer that came due while the data was
    /// stale was dropped; the resync arms it again, so the proxy expires
    /// (at once if its expiry has passed) and strands its agents.
    #[test]
    fn a_resync_re_arms_expiries_that_passed_while_stale() {
        let mut f = ready(&[("p1", 10), ("p2", 3600)], &["a1"]);
        f.watch_down(1, "reset by peer");
        advance_to(&mut f, at(20));
        assert!(!f.proxies["p1"].expired, "stale: nothing expires");
        f.resync(Resync {
            generation: 2,
            snapshots: vec![
                Snapshot::Servers(
                    Kind::Proxy,
                    vec![
                        server(Kind::Proxy, "p1", at(10)),
                        server(Kind::Proxy, "p2", at(30)),
                    ],
                ),
                Snapshot::Servers(
                    Kind::AuthServer,
                    vec![server(Kind::AuthServer, "auth-1", at(3600))],
                ),
                Snapshot::Servers(Kind::Agent, vec![agent("a1", at(3600))]),
                Snapshot::Tunnels(vec![tunnel("a1", "p1"), tunnel("a1", "p2")]),
            ],
            rejected: Vec::new(),
        });
        f.fire_due();
        f.settle();
        assert!(f.proxies["p1"].expired, "past expiry: at once");
        assert!(!f.proxies["p2"].expired);
        assert_eq!(f.agents["a1"].state, AgentState::Degraded);
        advance_to(&mut f, at(30));
        assert!(f.proxies["p2"].expired, "future expiry: re-armed");
        assert_eq!(f.agents["a1"].state, AgentState::Stranded);
    }
}
