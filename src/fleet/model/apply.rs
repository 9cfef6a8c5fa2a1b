//! Applying the watcher's changes, auth health and agents' own reports:
//! each updates state and its indexes, records history, arms expiry timers
//! and marks the agents it may have changed for the next settle.

use std::time::Duration;

use tracing::{info, warn};

use super::schedule::TimerKey;

/// Tunnel reports held at most while the cluster's listing is not in (one
/// per agent with a signal stream; past it a report is refused, counted).
pub const MAX_HELD_REPORTS: usize = 1_000_000;
use super::{AgentEntry, AuthEntry, Link, Model, ResEntry, TunnelEntry};
use super::{BoardOp, HealthUpdate, Ingested};
use crate::clock::{dur_micros, Ts};
use crate::domain::Subject;
use crate::domain::{Change, EndReason, Health, HistoryEvent, Kind, Server, Tunnel};
use crate::domain::{EpisodeChange, HealthTransition, HistoryEntry};

impl Model {
    // ---- changes ----------------------------------------------------------

    pub fn apply(&mut self, batch: Vec<Ingested>) {
        let now = self.now();
        for item in batch {
            match item {
                Ingested::Change(c) => {
                    self.out.tally.events_applied += 1;
                    let (kind, op, _) = c.describe();
                    self.out.tally.ingested[kind.index()][op as usize] += 1;
                    match c {
                        Change::PutServer(s) => self.put_server(s, now),
                        Change::Expiry {
                            kind,
                            name,
                            expires,
                            ttl,
                        } => self.expiry(kind, name, expires, ttl, now),
                        Change::DeleteServer(k, n) => self.delete_server(k, &n, now),
                        Change::PutTunnel(t) => self.put_tunnel(t, now),
                        Change::DeleteTunnel(n) => self.delete_tunnel(&n, now),
                    }
                }
                Ingested::Rejected(r) => {
                    let kind = r
                        .kind
                        .parse::<Kind>()
                        .map_or(Subject::Unknown, Subject::from);
                    self.history(HistoryEntry {
                        at: now,
                        kind,
                        name: r.name.clone(),
                        event: HistoryEvent::Rejected,
                        expires: None,
                        ttl_us: None,
                        detail: format!("{}: {}", r.code.as_str(), r.message),
                    });
                }
            }
        }
    }

    pub(super) fn put_server(&mut self, s: Server, now: Ts) {
        let kind = s.kind;
        let name = s.name.clone();
        let expires = s.expires;
        let ttl_us = dur_micros(s.ttl);
        let row = s.clone();
        // A plain heartbeat (only the expiry moved) moves only the stored
        // expiry.
        let mut plain = false;
        let (event, flipped_or_new, expired) = match kind {
            Kind::Proxy => match self.proxies.get_mut(&name) {
                Some(e) => {
                    plain = e.server.same_but_expiry(&s);
                    let r = e.observe(s, now);
                    self.out.board.push(BoardOp::Put(e.server.clone()));
                    r
                }
                None => {
                    let (e, r) = ResEntry::added(s, now);
                    self.out.board.push(BoardOp::Put(e.server.clone()));
                    self.proxies.insert(name.clone(), e);
                    self.returned(&name);
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
                    Some(e) => {
                        plain = e.server.same_but_expiry(&s);
                        e.observe(s, now)
                    }
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
                    self.auth_targets_changed();
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
                    Some(a) => {
                        plain = a.res.server.same_but_expiry(&s);
                        a.res.observe(s, now)
                    }
                    None => {
                        let (e, r) = ResEntry::added(s, now);
                        self.agent_order.insert(name.clone());
                        self.agents.insert(AgentEntry::new(e, now));
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
        self.out.writes.put_row(row, plain);
        self.observed(
            kind,
            name,
            expires,
            ttl_us,
            (event, flipped_or_new, expired),
            now,
        );
    }

    /// A heartbeat of a server the fleet holds that moved only its expiry
    /// and TTL. One it does not hold (a source's bug) is logged and
    /// skipped: without the rest of the server there is nothing to keep.
    pub(super) fn expiry(&mut self, kind: Kind, name: String, expires: Ts, ttl: Duration, now: Ts) {
        let entry = match kind {
            Kind::Proxy => self.proxies.get_mut(&name),
            Kind::AuthServer => self.auths.get_mut(&name).and_then(|a| a.resource.as_mut()),
            Kind::Agent => self.agents.get_mut(&name).map(|a| &mut a.res),
            Kind::TunnelConnection => None,
        };
        let Some(e) = entry else {
            warn!(%kind, %name, "an expiry-only heartbeat for a server the fleet does not hold; skipped");
            return;
        };
        let observed = e.observe_expiry(expires, ttl, now);
        self.out.writes.put_expiry(&e.server);
        if kind == Kind::Proxy {
            self.out.board.push(BoardOp::Put(e.server.clone()));
        }
        self.observed(kind, name, expires, dur_micros(ttl), observed, now);
    }

    /// What every PUT records once observed: history, the expiry timer,
    /// and the agents a flip or a new server may have changed.
    fn observed(
        &mut self,
        kind: Kind,
        name: String,
        expires: Ts,
        ttl_us: i64,
        (event, flipped_or_new, expired): (HistoryEvent, bool, bool),
        now: Ts,
    ) {
        if event == HistoryEvent::Heartbeat {
            self.out.tally.heartbeats += 1;
        }
        self.history(HistoryEntry {
            at: now,
            kind: kind.into(),
            name: name.clone(),
            event,
            expires: Some(expires),
            ttl_us: Some(ttl_us),
            detail: String::new(),
        });
        if !expired {
            self.schedule
                .arm(TimerKey::Expiry(kind, name.as_str().into()), expires);
        }
        if flipped_or_new {
            match kind {
                Kind::Proxy => self.dirty_proxy_agents(&name),
                Kind::Agent => {
                    self.dirty.insert(name);
                }
                Kind::AuthServer => self.auth_heartbeat_decides(&name),
                Kind::TunnelConnection => {}
            }
        }
    }

    pub(super) fn delete_server(&mut self, kind: Kind, name: &str, now: Ts) {
        self.out.writes.delete_server(kind, name);
        let existed = match kind {
            Kind::Proxy => {
                let r = self.proxies.remove(name).is_some();
                if r {
                    self.departed_now(name, now);
                }
                self.out.board.push(BoardOp::Remove(name.to_string()));
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
                self.auth_targets_changed();
                existed
            }
            Kind::Agent => match self.agents.remove(name) {
                Some(a) => {
                    self.left_incident(name, now);
                    self.agent_order.remove(name);
                    self.unhealthy.remove(name);
                    self.unindex_agent_auth(name, &a.res.server.auth_server);
                    if let Some(id) = a.episode {
                        self.out.writes.episodes.push(EpisodeChange::close(
                            id,
                            now,
                            EndReason::AgentDeleted,
                        ));
                    }
                    self.dirty.remove(name);
                    true
                }
                None => false,
            },
            Kind::TunnelConnection => false,
        };
        if existed {
            self.note(kind.into(), name, HistoryEvent::Delete, String::new());
        }
    }

    pub(super) fn put_tunnel(&mut self, t: Tunnel, now: Ts) {
        self.out.writes.put_tunnel(&t);
        let expired = t.expires.is_some_and(|e| e <= now);
        let mut event = HistoryEvent::Added;
        let old = self.tunnels.get(&t.name).map(|o| {
            let moved = o.tunnel.agent != t.agent || o.tunnel.proxy != t.proxy;
            // Only a moved tunnel needs its old record (to unindex it).
            (o.tunnel.expires, o.expired, moved.then(|| o.tunnel.clone()))
        });
        match old {
            Some((old_expires, old_expired, moved)) => {
                event = if old_expires != t.expires {
                    HistoryEvent::Heartbeat
                } else {
                    HistoryEvent::Update
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
            self.schedule.arm(
                TimerKey::Expiry(Kind::TunnelConnection, t.name.as_str().into()),
                e,
            );
        }
        self.history(HistoryEntry {
            at: now,
            kind: Subject::TunnelConnection,
            name: t.name.clone(),
            event,
            expires: t.expires,
            ttl_us: None,
            detail: format!("{} → {}", t.agent, t.proxy),
        });
        self.tunnels.insert(TunnelEntry { tunnel: t, expired });
    }

    pub(super) fn delete_tunnel(&mut self, name: &str, _now: Ts) {
        self.out.writes.delete_tunnel(name);
        if let Some(old) = self.tunnels.remove(name) {
            self.unindex_tunnel(&old.tunnel);
            self.dirty.insert(old.tunnel.agent.clone());
            self.note(
                Subject::TunnelConnection,
                name,
                HistoryEvent::Delete,
                format!("{} → {}", old.tunnel.agent, old.tunnel.proxy),
            );
        }
    }

    /// Replaces the state of every listed kind (a new watcher generation).
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
        // Without health evidence, the auth server's own heartbeat decides.
        entry.unhealthy =
            u.health == Health::NotServing || (entry.on_heartbeat() && entry.heartbeat_expired());
        let now_unhealthy = entry.unhealthy;
        let arm_grace = matches!(u.health, Health::Unknown | Health::ServiceUnknown);
        info!(auth_server = %u.auth_server, from = from.as_str(), to = u.health.as_str(), detail = %u.detail, "auth health changed");
        self.out.writes.health_row(HealthTransition {
            auth_server: u.auth_server.clone(),
            addr: u.addr.clone(),
            at: now,
            from,
            to: u.health,
            mode: u.mode,
            detail: u.detail.clone(),
        });
        self.note(
            Subject::AuthServer,
            &u.auth_server,
            HistoryEvent::Health,
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
                    Subject::Agent,
                    agent,
                    HistoryEvent::Connected,
                    format!(
                        "signal stream open (version {}, wants {} tunnels)",
                        l.version, l.desired_tunnels
                    ),
                );
                self.links.insert(agent.to_string(), l);
            }
            None => {
                // A stream that closed has nothing left to say.
                self.held_reports.remove(agent);
                if self.links.remove(agent).is_some() {
                    self.note(
                        Subject::Agent,
                        agent,
                        HistoryEvent::Disconnected,
                        "signal stream closed".into(),
                    );
                }
            }
        }
    }

    /// What a sidecar read of its agent: kept with the agent's link for
    /// its page, beside the cluster's own evidence.
    pub fn peer_report(&mut self, agent: &str, report: super::PeerReport) {
        if let Some(l) = self.links.get_mut(agent) {
            l.report = Some(report);
        }
    }

    /// An agent's own report of its tunnels. Only names the cluster knows
    /// count: a report from an agent it does not know is refused, and a
    /// proxy it does not know is left out (both counted), so a report can
    /// neither make tunnels nor grow the fleet beyond what the cluster
    /// says exists. Before the cluster's listing of agents and proxies is
    /// in, nothing is known yet: the report is held (the latest of each
    /// agent, up to [`MAX_HELD_REPORTS`]) and applied once it is.
    pub fn report(&mut self, agent: &str, proxies: Vec<String>, auth_server: String) {
        if !(self.fresh(Kind::Agent) && self.fresh(Kind::Proxy)) {
            let room = self.held_reports.len() < MAX_HELD_REPORTS;
            if room || self.held_reports.contains_key(agent) {
                self.held_reports
                    .insert(agent.to_string(), (proxies, auth_server));
            } else {
                self.out.tally.agent_messages_rejected += 1;
                tracing::debug!(
                    agent,
                    "tunnel report refused: too many held before the listing"
                );
            }
            return;
        }
        self.apply_report(agent, proxies, auth_server);
    }

    /// Applies the reports held for the listing, once it is in.
    pub(super) fn apply_held_reports(&mut self) {
        if self.held_reports.is_empty() || !(self.fresh(Kind::Agent) && self.fresh(Kind::Proxy)) {
            return;
        }
        for (agent, (proxies, auth_server)) in std::mem::take(&mut self.held_reports) {
            self.apply_report(&agent, proxies, auth_server);
        }
    }

    fn apply_report(&mut self, agent: &str, mut proxies: Vec<String>, auth_server: String) {
        if !self.agents.contains_key(agent) {
            self.out.tally.agent_messages_rejected += 1;
            tracing::debug!(
                agent,
                "tunnel report refused: the cluster knows no such agent"
            );
            return;
        }
        let named = proxies.len();
        proxies.retain(|p| self.proxies.contains_key(p));
        if proxies.len() < named {
            self.out.tally.agent_messages_rejected += 1;
            tracing::debug!(
                agent,
                unknown = named - proxies.len(),
                "tunnel report names proxies the cluster does not know: left out"
            );
        }
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
    /// `agent` is gone (deleted, or missing from a listing): it leaves its
    /// incident without recovering.
    pub(super) fn left_incident(&mut self, agent: &str, at: Ts) {
        let mut rows = Vec::new();
        self.incidents.leave(agent, at, false, &mut rows);
        self.out.writes.incidents(rows);
    }

    pub fn signaled(&mut self, agent: &str, id: i64, at: Ts) {
        if let Some(a) = self.agents.get_mut(agent) {
            a.last_signal = Some((id, at));
        }
        let mut rows = Vec::new();
        self.incidents
            .signaled(agent, id, &mut rows, &mut self.out.writes.attributions);
        self.out.writes.incidents(rows);
    }
}

#[cfg(test)]
mod tests {
    use super::Ingested;
    use crate::domain::{Change, HistoryEvent, Kind};
    use crate::fleet::model::fixture::*;

    fn put(f: &mut super::Model, s: crate::domain::Server) {
        f.apply(vec![Ingested::Change(Change::PutServer(s))]);
    }

    /// Guards the fleet's bounds against its agents: a report from an
    /// agent the cluster does not know makes nothing, and proxies it does
    /// not know are left out of a known agent's report.
    #[test]
    fn reports_only_count_names_the_cluster_knows() {
        let mut f = ready(&[("p1", 100), ("p2", 100)], &["a1"]);
        let tunnels = f.tunnels.len();
        f.report("stranger", vec!["p1".into()], String::new());
        assert!(!f.agents.contains_key("stranger"));
        assert_eq!(f.tunnels.len(), tunnels, "nothing made for a stranger");
        f.report("a1", vec!["p1".into(), "p-made-up".into()], String::new());
        assert!(f.tunnels.values().all(|t| t.tunnel.proxy != "p-made-up"));
        assert!(f
            .tunnels
            .values()
            .any(|t| t.tunnel.agent == "a1" && t.tunnel.proxy == "p1"));
        let refused = f.out.tally.agent_messages_rejected;
        assert_eq!(refused, 2);
    }

    /// Guards the healthy start: an agent's first tunnel report often
    /// comes before the cluster's listing. It is held, applied once the
    /// listing is in, and counted as nothing wrong.
    #[test]
    fn a_report_before_the_listing_is_held_and_applied_not_refused() {
        let mut f = crate::fleet::model::test_model(START);
        f.report("a1", vec!["p1".into()], "auth-1".into());
        f.report("a1", vec!["p2".into()], "auth-1".into());
        assert_eq!(f.tunnels.len(), 0, "nothing is known yet");
        f.resync(crate::fleet::model::Resync {
            generation: 1,
            snapshots: listing(&[("p1", 100), ("p2", 100)], &["a1"]),
            rejected: Vec::new(),
        });
        // The listing has a1 on both; its latest report says p2 only.
        let on: Vec<&str> = f
            .tunnels
            .values()
            .filter(|t| t.tunnel.agent == "a1")
            .map(|t| t.tunnel.proxy.as_str())
            .collect();
        assert_eq!(on, ["p2"], "the latest report applied");
        assert_eq!(f.out.tally.agent_messages_rejected, 0);
        assert!(f.held_reports.is_empty());
    }

    /// Guards what counts as a heartbeat: a PUT that moves the expiry, in
    /// either direction; a PUT with the same expiry is an update.
    #[test]
    fn a_heartbeat_moves_the_expiry_an_update_does_not() {
        let cases: [(&str, u64, HistoryEvent); 3] = [
            ("later expiry", 20, HistoryEvent::Heartbeat),
            ("same expiry", 10, HistoryEvent::Update),
            ("earlier expiry", 5, HistoryEvent::Heartbeat),
        ];
        for (what, expires, event) in cases {
            let mut f = ready(&[("p1", 10)], &["a1"]);
            let before = f.out.tally.heartbeats;
            put(&mut f, server(Kind::Proxy, "p1", at(expires)));
            assert_eq!(events(&f, "p1").last(), Some(&event), "{what}");
            let after = f.out.tally.heartbeats;
            assert_eq!(
                after - before,
                u64::from(event == HistoryEvent::Heartbeat),
                "{what}"
            );
            assert_eq!(f.proxies["p1"].server.expires, at(expires), "{what}");
        }
    }

    /// Guards what a PUT leaves for the store: one that moved only the
    /// expiry is an expiry row (the store may update those two columns in
    /// place); one that changed anything else, or a new server, is whole.
    #[test]
    fn a_put_that_moved_only_the_expiry_is_stored_as_an_expiry() {
        use crate::domain::ResourceChange;
        let mut f = ready(&[("p1", 10)], &["a1"]);
        let stored = |f: &super::Model, n: &str| {
            f.out
                .writes
                .servers
                .get(&(Kind::Proxy, n.to_string()))
                .cloned()
        };
        put(&mut f, server(Kind::Proxy, "p1", at(20)));
        let plain = f.proxies["p1"].server.clone();
        assert_eq!(stored(&f, "p1"), Some(ResourceChange::Expiry(plain)));
        f.out.writes = Default::default();
        let mut moved = server(Kind::Proxy, "p1", at(30));
        moved.version = "18.0.0".into();
        put(&mut f, moved.clone());
        assert!(matches!(stored(&f, "p1"), Some(ResourceChange::Put(s)) if s.version == "18.0.0"));
        put(&mut f, server(Kind::Proxy, "p9", at(30)));
        assert!(matches!(stored(&f, "p9"), Some(ResourceChange::Put(_))));
    }

    /// Guards a backwards expiry: it is accepted, and an expiry already
    /// in the past marks the proxy expired at once (its agents with it).
    #[test]
    fn a_backwards_expiry_is_accepted_and_can_expire_at_once() {
        let mut f = ready(&[("p1", 10)], &["a1"]);
        advance_to(&mut f, at(4));
        put(&mut f, server(Kind::Proxy, "p1", at(3)));
        assert_eq!(f.proxies["p1"].server.expires, at(3), "accepted");
        assert!(f.proxies["p1"].expired);
        f.settle();
        assert_eq!(f.agents["a1"].state, crate::domain::AgentState::Stranded);
    }

    /// Guards the expiry-only heartbeat: it moves a held server's expiry
    /// and TTL as a full PUT would, keeping the rest, and one for a
    /// server the fleet does not hold changes nothing.
    #[test]
    fn an_expiry_heartbeat_moves_only_the_expiry() {
        let expiry = |kind, name: &str, expires| {
            Ingested::Change(Change::Expiry {
                kind,
                name: name.into(),
                expires,
                ttl: std::time::Duration::from_secs(7),
            })
        };
        let mut f = ready(&[("p1", 10)], &["a1"]);
        let before = f.agents["a1"].res.server.clone();
        f.apply(vec![expiry(Kind::Agent, "a1", at(30))]);
        let after = &f.agents["a1"].res;
        assert_eq!(after.server.expires, at(30));
        assert_eq!(after.server.ttl, std::time::Duration::from_secs(7));
        assert_eq!(after.server.version, before.version);
        assert_eq!(after.server.labels, before.labels);
        assert_eq!(events(&f, "a1").last(), Some(&HistoryEvent::Heartbeat));
        // Stored with the whole server, newer expiry, as an expiry: a store
        // that finds no row to update writes it whole.
        let stored = f.out.writes.servers.get(&(Kind::Agent, "a1".to_string()));
        assert_eq!(
            stored,
            Some(&crate::domain::ResourceChange::Expiry(after.server.clone()))
        );

        f.apply(vec![expiry(Kind::Proxy, "p1", at(40))]);
        assert_eq!(f.proxies["p1"].server.expires, at(40));

        let n = events(&f, "ghost").len();
        f.apply(vec![expiry(Kind::Agent, "ghost", at(30))]);
        assert!(!f.agents.contains_key("ghost"));
        assert_eq!(events(&f, "ghost").len(), n);
    }
}
