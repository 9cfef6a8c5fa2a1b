//! Start-up and resync: loading the last known (stale) state, replacing a
//! kind's data with a new watcher generation's listing, re-arming every
//! timer of it, and turning data stale when its stream is lost.

use rustc_hash::FxHashSet as HashSet;
use tracing::{info, warn};

use super::schedule::TimerKey;
use super::tunnel_tables::TunnelTables;
use super::{AgentEntry, AuthEntry, Model, ResEntry, TunnelEntry};
use super::{BoardOp, Resync, Snapshot, WatchState};
use crate::clock::Ts;
use crate::domain::EpisodeChange;
use crate::domain::Loaded;
use crate::domain::{AgentState, Cause, EndReason, Health, HistoryEvent, Kind, Reasons, Subject};

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
                    self.agents.insert(AgentEntry::new(e, now));
                }
                Kind::TunnelConnection => {}
            }
        }
        self.agent_order.rebuild(self.agents.keys());
        self.rebuild_auth_agents();
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
                    // Planned as its incident is: the next settle judges
                    // afresh against the windows then in force.
                    let planned = ep.incident.and_then(|incident| {
                        self.incidents
                            .restore(&ep.agent, ep.state, ep.started_at, incident)
                    });
                    a.cause = ep.cause.map(|kind| Cause {
                        kind,
                        resource: ep.cause_resource.clone(),
                        planned,
                    });
                    a.episode = Some(ep.id);
                }
                None => self.out.writes.episodes.push(EpisodeChange::close(
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
        let generation = r.generation;
        let mut snapshots = r.snapshots;
        let tunnels = snapshots
            .iter()
            .position(|s| s.kind() == Kind::TunnelConnection)
            .and_then(|i| match snapshots.remove(i) {
                Snapshot::Tunnels(list) => Some(list),
                Snapshot::Servers(..) => None,
            });
        let Some(list) = tunnels else {
            for snap in snapshots {
                self.replace_listed(snap, now, generation);
            }
            return self.resynced();
        };
        let agents = snapshots
            .iter()
            .find(|s| s.kind() == Kind::Agent)
            .map_or(self.agents.len(), Snapshot::len);
        let count = list.len();
        // The tunnels' tables are built (a large listing on threads of its
        // own) while this one replaces the servers.
        let tables = TunnelTables::build_beside(list, now, agents, || {
            for snap in snapshots {
                self.replace_listed(snap, now, generation);
            }
        });
        self.install_tunnels(tables);
        self.listed(Kind::TunnelConnection, count, generation);
        self.resynced();
    }

    /// Replaces one kind by its listing and marks it ready.
    fn replace_listed(&mut self, snap: Snapshot, now: Ts, generation: u64) {
        let kind = snap.kind();
        let count = snap.len();
        self.replace(snap, now);
        self.listed(kind, count, generation);
    }

    fn listed(&mut self, kind: Kind, count: usize, generation: u64) {
        self.set_kind(kind, WatchState::Ready, generation);
        self.note(
            kind.into(),
            "",
            HistoryEvent::Resync,
            format!("generation {generation}: {count} listed"),
        );
    }

    fn resynced(&mut self) {
        self.dirty_all = true;
        self.after_resync = true;
        self.apply_held_reports();
        self.auth_targets_changed();
        self.readiness_changed();
    }

    pub(super) fn replace(&mut self, snap: Snapshot, now: Ts) {
        match snap {
            Snapshot::Servers(kind, list) => {
                self.out.writes.replace_kind(kind, list.clone());
                // No timer of the kind is armed yet: room for all at once.
                let mut cold = false;
                match kind {
                    Kind::Proxy => {
                        let mut old = std::mem::take(&mut self.proxies);
                        cold = old.is_empty();
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
                        self.generations_dirty = true;
                        // A departed proxy listed again is back.
                        let proxies = &self.proxies;
                        self.departed.retain(|n, _| !proxies.contains_key(n));
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
                        // Agents listed again are updated where they are;
                        // the table is not rebuilt (a million moves, and
                        // a cache miss each, at a million agents).
                        cold = self.agents.is_empty();
                        if cold {
                            self.agents.reserve(list.len());
                        }
                        let mut relisted = vec![false; self.agents.len()];
                        for s in list {
                            match self.agents.get_full_mut(&s.name) {
                                Some((i, a)) => {
                                    if let Some(r) = relisted.get_mut(i) {
                                        *r = true;
                                    }
                                    if a.res.update(s, now).0 {
                                        self.out.tally.heartbeats += 1;
                                    }
                                }
                                None => {
                                    self.agents
                                        .insert(AgentEntry::new(ResEntry::new(s, now), now));
                                }
                            }
                        }
                        // Those not listed again are gone (agents added
                        // above sit past the places `relisted` covers).
                        let old = self.agents.remove_at(|i| relisted.get(i) == Some(&false));
                        // The indexes by name and by Auth, built whole: a
                        // tree descent per agent costs a cache miss per
                        // level at a million.
                        self.agent_order.rebuild(self.agents.keys());
                        self.rebuild_auth_agents();
                        for gone in old {
                            let name = gone.res.server.name.as_str();
                            self.left_incident(name, now);
                            self.unhealthy.remove(name);
                            if let Some(id) = gone.episode {
                                self.out.writes.episodes.push(EpisodeChange::close(
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
                if cold {
                    self.schedule.reserve(arms.len());
                }
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
                let agents = self.agents.len();
                self.install_tunnels(TunnelTables::build(list, now, agents));
            }
        }
    }

    /// Puts a listing's tunnel tables in place of the old ones and arms
    /// their timers.
    fn install_tunnels(&mut self, t: TunnelTables) {
        self.out.writes.replace_tunnels(t.rows);
        if self.tunnels.is_empty() {
            self.schedule.reserve(t.arms.len());
        }
        let old = (
            std::mem::replace(&mut self.tunnels, t.tunnels),
            std::mem::replace(&mut self.agent_tunnels, t.agent_tunnels),
            std::mem::replace(&mut self.proxy_agents, t.proxy_agents),
        );
        if !old.0.is_empty() {
            self.out.replaced.0.push(Box::new(old));
        }
        for (name, at) in t.arms {
            self.schedule
                .arm(TimerKey::Expiry(Kind::TunnelConnection, name), at);
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
    use crate::domain::EpisodeChange;
    use crate::domain::{AgentState, Kind};
    use crate::fleet::model::fixture::*;
    use crate::fleet::model::settle::PARALLEL_AGENTS;
    use crate::fleet::model::tunnel_tables::PARALLEL_TUNNELS;
    use crate::fleet::model::WatchState;

    /// [`listing`] of `agents` behind two proxies, where the tunnel of
    /// `dying` to p1 expires at 100 s and that of `dead` has expired.
    fn expiring(agents: &[String], dying: &str, dead: &str) -> Resync {
        let names: Vec<&str> = agents.iter().map(String::as_str).collect();
        let mut snapshots = listing(&[("p1", 3600), ("p2", 3600)], &names);
        for s in &mut snapshots {
            if let Snapshot::Tunnels(list) = s {
                for t in list.iter_mut().filter(|t| t.proxy == "p1") {
                    if t.agent == dying {
                        t.expires = Some(at(100));
                    } else if t.agent == dead {
                        t.expires = Some(at(0));
                    }
                }
            }
        }
        Resync {
            generation: 0,
            snapshots,
            rejected: Vec::new(),
        }
    }

    /// Guards the large-listing path: tunnels indexed and filed on threads
    /// of their own while the servers are replaced, and every agent judged in
    /// slices on several threads, end in the same tables and states as
    /// one at a time would (`check_indexes` recomputes the indexes); a
    /// smaller listing then drops what it no longer holds.
    #[test]
    fn a_large_listing_is_indexed_and_judged_whole() {
        let large = PARALLEL_AGENTS.max(PARALLEL_TUNNELS / 2);
        let names: Vec<String> = (0..large + 5_000).map(|i| format!("a{i:06}")).collect();
        let (dying, dead) = (names[7].clone(), names[names.len() - 2].clone());
        let mut f = ready(&[("p1", 3600), ("p2", 3600)], &[]);
        f.resync(Resync {
            generation: 2,
            ..expiring(&names, &dying, &dead)
        });
        advance_to(&mut f, at(1));
        assert_eq!(f.tunnels.len(), names.len() * 2);
        assert_eq!(f.proxy_agents["p1"].len(), names.len());
        assert_eq!(f.kind(Kind::TunnelConnection).state, WatchState::Ready);
        assert_eq!(
            f.agents[dead.as_str()].state,
            AgentState::Degraded,
            "listed dead"
        );
        assert_eq!(f.unhealthy.len(), 1);
        advance_to(&mut f, at(100));
        assert_eq!(
            f.agents[dying.as_str()].state,
            AgentState::Degraded,
            "its tunnel's expiry was armed"
        );

        let fewer = &names[..large + 1_000];
        f.take_effects();
        f.resync(Resync {
            generation: 3,
            ..expiring(fewer, "", "")
        });
        assert_eq!(
            f.take_effects().replaced.0.len(),
            1,
            "the old tables go to the shell to be freed"
        );
        advance_to(&mut f, at(101));
        assert_eq!(f.agents.len(), fewer.len());
        assert_eq!(f.tunnels.len(), fewer.len() * 2);
        assert!(
            !f.agent_tunnels.contains_key(dead.as_str()),
            "gone with its agent"
        );
        assert_eq!(f.agent_order.containing(&dead, None, 10), Some(vec![]));
        assert!(f.unhealthy.is_empty(), "{:?}", f.unhealthy);
    }

    /// Guards the in-place update of a warm listing: an agent listed again
    /// keeps what the fleet knew of it (its state and episode) and takes
    /// the listing's data, one no longer listed is dropped with its
    /// episode closed, a new one is added, and a name listed twice is one
    /// agent with the later data.
    #[test]
    fn a_warm_listing_updates_agents_where_they_are() {
        let mut f = ready(&[("p1", 10), ("p2", 3600)], &["a1", "a2", "a3", "a4"]);
        for a in ["a1", "a2", "a3", "a4"] {
            f.apply(vec![crate::fleet::model::Ingested::Change(
                crate::domain::Change::DeleteTunnel(format!("{a}.p2")),
            )]);
        }
        advance_to(&mut f, at(10));
        assert_eq!(f.agents["a2"].state, AgentState::Stranded);
        let episode = f.agents["a2"].episode.expect("stranded: an episode");
        let gone = f.agents["a3"].episode.expect("stranded: an episode");
        f.take_effects();

        let mut agents = vec![
            agent("a4", at(3600)),
            agent("a2", at(3600)),
            agent("a5", at(3600)),
            agent("a1", at(3600)),
            agent("a2", at(7200)),
        ];
        agents[4].version = "later".into();
        f.resync(Resync {
            generation: 2,
            snapshots: vec![Snapshot::Servers(Kind::Agent, agents)],
            rejected: Vec::new(),
        });
        f.settle();
        check_indexes(&f);
        let mut names: Vec<&str> = f.agents.keys().collect();
        names.sort_unstable();
        assert_eq!(names, ["a1", "a2", "a4", "a5"]);
        let a2 = &f.agents["a2"];
        assert_eq!(a2.state, AgentState::Stranded, "what was known is kept");
        assert_eq!(a2.episode, Some(episode));
        assert_eq!(a2.res.server.expires, at(7200), "the later of the two");
        assert_eq!(a2.res.server.version, "later");
        assert_eq!(f.agents["a5"].state, AgentState::Stranded, "new: no tunnel");
        let closed = f.take_effects().writes.episodes;
        assert!(
            closed
                .iter()
                .any(|op| matches!(op, EpisodeChange::Close { id, .. } if *id == gone)),
            "a3's episode closed: {closed:?}"
        );
    }

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
