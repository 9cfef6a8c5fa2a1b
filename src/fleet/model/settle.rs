//! Settling: reclassifies every agent touched since the last pass, opens
//! and closes episodes, and publishes the pass's state changes together.

use tracing::{debug, info_span};

use super::classify::{classify, Inputs, TunnelView, Verdict};
use super::{Model, TunnelEntry};
use super::{StateChange, WatchState};
use crate::clock::Ts;
use crate::domain::{AgentState, CauseKind, EndReason, Kind, Plan};
use crate::domain::{EpisodeChange, IncidentMove};
use crate::supervise::{joined, scoped};
use crate::telemetry::propagate::{self};

/// A fleet this large is judged on several threads after a resync.
pub(super) const PARALLEL_AGENTS: usize = 50_000;
/// The most threads that judge at once.
const MAX_JUDGES: usize = 8;

/// Whether verdict `v` changes agent `a`: its state, or why it is in it.
fn changes(v: &Verdict, a: &super::AgentEntry) -> bool {
    v.state != a.state || v.reasons != a.reasons || v.cause != a.cause
}

impl Model {
    // ---- classification ---------------------------------------------------

    /// Reclassifies every agent touched since the last call.
    pub fn settle(&mut self) {
        if std::mem::take(&mut self.generations_dirty) && self.refresh_live_generations() {
            // A group's newest live generation moved: strandings by its
            // older proxies turn a rollout's, or no longer.
            self.dirty.extend(self.unhealthy.iter().cloned());
        }
        if (self.dirty.is_empty() && !self.dirty_all) || !self.classification_enabled() {
            return;
        }
        let now = self.now();
        let dirty = std::mem::take(&mut self.dirty);
        let first = self.out.changes.len();
        if std::mem::take(&mut self.dirty_all) {
            // In storage order: a million agents read front to back rather
            // than at random through a set of their names. Only the
            // verdicts that change something are applied.
            for (i, v) in self.changed_verdicts(now) {
                if let Some(name) = self.agents.name_at(i).map(str::to_string) {
                    self.apply_verdict(&name, v, now);
                }
            }
        } else {
            for name in dirty {
                self.reclassify(&name, now);
            }
        }
        let measured = !std::mem::take(&mut self.after_resync);
        let out = &mut self.out;
        for c in &out.changes[first..] {
            if measured && c.to != AgentState::Healthy && c.from == AgentState::Healthy {
                out.detections.push(c.since);
            }
        }
        if out.changes.len() > first && crate::telemetry::exporting() {
            self.trace_failures(first, now);
        }
    }

    fn reclassify(&mut self, name: &str, now: Ts) {
        if let Some(v) = self.verdict(name, now) {
            self.apply_verdict(name, v, now);
        }
    }

    /// Every agent whose verdict differs from its state, by its position
    /// in storage order, in that order. Verdicts read and never write, and
    /// one agent's never depends on another's: a large fleet is judged in
    /// slices on as many threads as the machine has (up to
    /// [`MAX_JUDGES`]), each slice's answers kept in order.
    fn changed_verdicts(&self, now: Ts) -> Vec<(usize, Verdict)> {
        let n = self.agents.len();
        let judge = |range: std::ops::Range<usize>| -> Vec<(usize, Verdict)> {
            range
                .filter_map(|i| {
                    let a = self.agents.at(i)?;
                    let v = self.verdict_of(a, now);
                    changes(&v, a).then_some((i, v))
                })
                .collect()
        };
        let threads = if n >= PARALLEL_AGENTS {
            std::thread::available_parallelism().map_or(1, |p| p.get().min(MAX_JUDGES))
        } else {
            1
        };
        if threads <= 1 {
            return judge(0..n);
        }
        let slice = n.div_ceil(threads);
        let range = |t: usize| (t * slice).min(n)..((t + 1) * slice).min(n);
        std::thread::scope(|scope| {
            let others: Vec<_> = (1..threads)
                .map(|t| (t, scoped(scope, "fleet-judge", move || judge(range(t)))))
                .collect();
            let mut out = judge(range(0));
            for (t, spawned) in others {
                // No thread to be had: this one judges the slice.
                out.extend(spawned.map_or_else(|| judge(range(t)), joined));
            }
            out
        })
    }

    /// The classifier's verdict for one agent from current state.
    pub fn verdict(&self, name: &str, now: Ts) -> Option<Verdict> {
        self.agents.get(name).map(|a| self.verdict_of(a, now))
    }

    fn verdict_of(&self, a: &super::AgentEntry, now: Ts) -> Verdict {
        let name = a.res.server.name.as_str();
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
        let mut v = classify(&Inputs {
            now,
            agent_expired: (a.res.expired && self.kind(Kind::Agent).state == WatchState::Ready)
                .then_some(a.res.server.expires),
            auth_server: &a.res.server.auth_server,
            auth_unhealthy,
            tunnels_known,
            tunnels,
        });
        if let Some(c) = v.cause.as_mut() {
            // An operator's window first: it says more than the cluster.
            if !self.windows.is_empty() {
                c.planned = self
                    .windows
                    .explains(name, Some(c), now)
                    .map(Plan::Maintenance);
            }
            if c.planned.is_none() {
                c.planned = self.rollout(c);
            }
        }
        v
    }

    /// Why (and since when) a tunnel is dead, or `None` when live.
    pub fn tunnel_dead(&self, t: &TunnelEntry, now: Ts) -> Option<(CauseKind, Ts)> {
        if t.expired {
            return Some((CauseKind::TunnelExpired, t.tunnel.expires.unwrap_or(now)));
        }
        match self.proxies.get(&t.tunnel.proxy) {
            None => match self.departed_at(&t.tunnel.proxy) {
                Some(at) => Some((CauseKind::ProxyDeparted, at)),
                None => Some((CauseKind::ProxyMissing, now)),
            },
            Some(p) if p.expired => Some((CauseKind::ProxyExpired, p.server.expires)),
            Some(_) => None,
        }
    }

    pub(super) fn apply_verdict(&mut self, name: &str, v: Verdict, now: Ts) {
        let next_id = self.next_episode;
        let Some(a) = self.agents.get_mut(name).filter(|a| changes(&v, a)) else {
            return;
        };
        if v.state != a.state {
            // A worse state is dated from its cause (it was true since
            // then, whenever Lifeline learned it), never before the state
            // it replaces began; a better one (healthy, or stranded to
            // degraded) from now: the worse state held until it cleared,
            // and its episode, its incident's minutes and its peak all say
            // so alike.
            let since = if v.state < a.state {
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
                    EndReason::Recovered
                } else {
                    EndReason::StateChanged
                };
                let _close = propagate::child(a.trace.take().as_ref(), || {
                    info_span!(
                        parent: None,
                        "episode.close",
                        agent = %name,
                        episode = id,
                        end_reason = end_reason.as_str(),
                        ended_by_signal,
                        to = v.state.as_str(),
                        lasted_ms = since.since(started).as_secs_f64() * 1e3,
                    )
                });
                self.out.writes.episodes.push(EpisodeChange::Close {
                    id,
                    ended: since,
                    ended_by_signal,
                    end_reason,
                });
            }
            let mut rows = Vec::new();
            let incident = self
                .incidents
                .set(name, v.state, v.cause.as_ref(), since, &mut rows);
            self.out.writes.incidents(rows);
            if v.state != AgentState::Healthy {
                a.episode = Some(next_id);
                self.next_episode += 1;
                self.out.writes.episodes.push(EpisodeChange::Open {
                    id: next_id,
                    agent: name.to_string(),
                    state: v.state,
                    reasons: v.reasons.join(),
                    cause: v.cause.clone(),
                    started: since,
                    incident,
                });
            }
            let change = StateChange {
                agent: name.to_string(),
                // Stamped per agent, when its own classification is done.
                detected_at: now,
                from: a.state,
                to: v.state,
                reasons: v.reasons,
                cause: v.cause.as_ref().map(|c| c.kind),
                cause_resource: v.cause.as_ref().map(|c| c.resource.clone()),
                since,
                episode: a.episode,
                planned: v.cause.as_ref().and_then(|c| c.planned),
                trace: None,
            };
            debug!(agent = %name, from = a.state.as_str(), to = v.state.as_str(), reasons = %v.reasons.join(), "agent state changed");
            a.state = v.state;
            if v.state == AgentState::Healthy {
                self.unhealthy.remove(name);
            } else if !self.unhealthy.contains(name) {
                // Degraded ↔ stranded keeps its entry: no new name to copy.
                self.unhealthy.insert(name.to_string());
            }
            a.since = since;
            a.reasons = v.reasons;
            a.cause = v.cause;
            self.out.tally.state_changes += 1;
            self.out.changes.push(change);
        } else {
            let plan = |c: &Option<crate::domain::Cause>| c.as_ref().and_then(|c| c.planned);
            if plan(&v.cause) != plan(&a.cause) {
                // Planned no longer (or now): whoever acts on agents hears
                // of it, with the state unchanged.
                self.out.changes.push(StateChange {
                    agent: name.to_string(),
                    detected_at: now,
                    from: a.state,
                    to: a.state,
                    reasons: v.reasons,
                    cause: v.cause.as_ref().map(|c| c.kind),
                    cause_resource: v.cause.as_ref().map(|c| c.resource.clone()),
                    since: a.since,
                    episode: a.episode,
                    planned: plan(&v.cause),
                    trace: None,
                });
            }
            if let Some(id) = a.episode {
                let mut rows = Vec::new();
                let incident = if v.cause != a.cause {
                    let was = self.incidents.of(name);
                    let to = self
                        .incidents
                        .set(name, a.state, v.cause.as_ref(), now, &mut rows);
                    if let (Some(from), Some(to)) = (was, to) {
                        if from != to {
                            self.out.writes.moves.push(IncidentMove {
                                episode: id,
                                agent: name.to_string(),
                                from,
                                to,
                                at: now,
                            });
                        }
                    }
                    to
                } else {
                    self.incidents.of(name)
                };
                self.out.writes.incidents(rows);
                self.out.writes.episodes.push(EpisodeChange::Update {
                    id,
                    reasons: v.reasons.join(),
                    cause: v.cause.clone(),
                    incident,
                });
            }
            a.reasons = v.reasons;
            a.cause = v.cause;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::domain::EpisodeChange;
    use crate::domain::{AgentState, Kind, Server};
    use crate::fleet::model::fixture::*;

    fn ended_by(f: &super::Model, id: i64) -> Option<Option<i64>> {
        f.out.writes.episodes.iter().find_map(|e| match e {
            EpisodeChange::Close {
                id: i,
                ended_by_signal,
                ..
            } if *i == id => Some(*ended_by_signal),
            _ => None,
        })
    }

    fn heartbeat(f: &mut super::Model, s: Server) {
        f.apply(vec![crate::fleet::Ingested::Change(
            crate::domain::Change::PutServer(s),
        )]);
        f.settle();
    }

    /// Guards incidents from the classifier's side: one proxy's expiry is
    /// one incident, from its first stranded agent to its last recovered;
    /// each episode names it, and a signal sent during it is counted.
    #[test]
    fn a_proxy_expiry_is_one_incident_its_episodes_name() {
        let mut f = ready(&[("p1", 10)], &["a1", "a2"]);
        advance_to(&mut f, at(10));
        let opened: Vec<Option<i64>> = f
            .out
            .writes
            .episodes
            .iter()
            .filter_map(|e| match e {
                EpisodeChange::Open { incident, .. } => Some(*incident),
                _ => None,
            })
            .collect();
        assert_eq!(opened, [Some(1), Some(1)], "both in incident 1");
        f.signaled("a1", 7, f.now());
        let row = f.out.writes.incidents[&1].clone();
        assert_eq!(row.cause, crate::domain::CauseKind::ProxyExpired);
        assert_eq!(row.resource, "p1");
        assert_eq!((row.agents, row.peak_stranded, row.signals), (2, 2, 1));
        assert_eq!(row.ended, None);
        advance_to(&mut f, at(13));
        heartbeat(&mut f, server(Kind::Proxy, "p1", at(60)));
        let row = &f.out.writes.incidents[&1];
        assert_eq!(row.ended, Some(at(13)), "ended with the last agent");
        assert_eq!(row.recover_max_us, Some(3_000_000));
    }

    /// Guards `ended_by_signal`: an episode that ends after a signal sent
    /// during it names that signal; a signal sent before it began does not.
    /// Guards when a better state begins: stranded until its cause
    /// cleared, so the stranded episode ends then, not back at the start
    /// of the degraded state's cause; its incident counts the same time.
    #[test]
    fn a_stranded_agent_turning_degraded_was_stranded_until_then() {
        let mut f = ready(&[("p1", 10), ("p2", 20)], &["a1"]);
        advance_to(&mut f, at(10));
        assert_eq!(f.agents["a1"].state, AgentState::Degraded);
        advance_to(&mut f, at(20));
        assert_eq!(f.agents["a1"].state, AgentState::Stranded);
        let stranded = f.agents["a1"].episode.expect("an open episode");
        advance_to(&mut f, at(25));
        heartbeat(&mut f, server(Kind::Proxy, "p1", at(60)));
        assert_eq!(f.agents["a1"].state, AgentState::Degraded);
        let ended = f.out.writes.episodes.iter().find_map(|e| match e {
            EpisodeChange::Close { id, ended, .. } if *id == stranded => Some(*ended),
            _ => None,
        });
        assert_eq!(ended, Some(at(25)), "stranded until p1 came back");
        assert_eq!(f.agents["a1"].since, at(25));
        let stranded_us: i64 = f.out.writes.incidents.values().map(|r| r.stranded_us).sum();
        assert_eq!(stranded_us, 5_000_000, "its incident counts the same 5 s");
    }

    #[test]
    fn an_episode_names_the_signal_that_ended_it() {
        // (signal sent at, names it)
        let cases = [(Some(12), true), (Some(5), false), (None, false)];
        for (sent, names) in cases {
            let mut f = ready(&[("p1", 10)], &["a1"]);
            if sent == Some(5) {
                advance_to(&mut f, at(5));
                f.signaled("a1", 7, f.now());
            }
            advance_to(&mut f, at(10));
            let id = f.agents["a1"].episode.expect("an open episode");
            if sent == Some(12) {
                advance_to(&mut f, at(12));
                f.signaled("a1", 7, f.now());
            }
            advance_to(&mut f, at(13));
            heartbeat(&mut f, server(Kind::Proxy, "p1", at(60)));
            assert_eq!(
                ended_by(&f, id),
                Some(names.then_some(7)),
                "signal at {sent:?}"
            );
        }
    }

    /// Guards maintenance windows: in one fleet, an agent stranded by a
    /// proxy in a window is planned (its own incident, no unplanned
    /// count), one stranded by another proxy is not; when the window ends
    /// with the first still stranded it turns unplanned, in a new
    /// incident, and whoever acts hears of it.
    #[test]
    fn a_window_plans_the_strandings_it_explains_until_it_ends() {
        use crate::domain::{Plan, Target, Window, Windows};
        let mut f = crate::fleet::model::test_model(START);
        let mut listing = listing(&[("p1", 10), ("p2", 10)], &["a1", "a2"]);
        listing.pop();
        listing.push(crate::fleet::Snapshot::Tunnels(vec![
            tunnel("a1", "p1"),
            tunnel("a2", "p2"),
        ]));
        f.resync(crate::fleet::Resync {
            generation: 1,
            snapshots: listing,
            rejected: Vec::new(),
        });
        f.settle();
        f.set_windows(Windows::new(vec![Window {
            id: 4,
            targets: vec![Target::parse("proxy/p1").unwrap()],
            from: at(0),
            until: at(100),
            reason: "patching".into(),
            created_by: "ops".into(),
            created_at: at(0),
            ended_by: None,
            ended_at: None,
            deleted_at: None,
        }]));
        advance_to(&mut f, at(10));
        let planned =
            |f: &super::Model, a: &str| f.agents[a].cause.as_ref().and_then(|c| c.planned);
        assert_eq!(planned(&f, "a1"), Some(Plan::Maintenance(4)));
        assert_eq!(planned(&f, "a2"), None);
        let changes = f.take_effects();
        let by_agent = |a: &str| {
            changes
                .changes
                .iter()
                .find(|c| c.agent == a)
                .map(|c| c.planned)
        };
        assert_eq!(by_agent("a1"), Some(Some(Plan::Maintenance(4))));
        assert_eq!(by_agent("a2"), Some(None));
        let rows: Vec<_> = changes.writes.incidents.values().cloned().collect();
        assert_eq!(rows.len(), 2, "two incidents: {rows:?}");
        let planned_row = rows.iter().find(|r| r.resource == "p1").unwrap();
        assert_eq!(planned_row.planned, Some(Plan::Maintenance(4)));
        assert_eq!(
            rows.iter().find(|r| r.resource == "p2").unwrap().planned,
            None
        );
        // Only the unplanned agent counts in the minute's figures.
        assert_eq!(f.incidents.take_peaks(), (1, 0));

        advance_to(&mut f, at(100));
        assert_eq!(planned(&f, "a1"), None, "the window is over");
        let after = f.take_effects();
        let c = after
            .changes
            .iter()
            .find(|c| c.agent == "a1")
            .expect("a1 is told");
        assert_eq!(
            (c.from, c.to, c.planned),
            (c.to, crate::domain::AgentState::Stranded, None)
        );
        let ended = &after.writes.incidents[&planned_row.id];
        assert!(ended.ended.is_some(), "the planned incident ends");
        let new = after
            .writes
            .incidents
            .values()
            .find(|r| r.resource == "p1" && r.ended.is_none())
            .expect("an unplanned incident opens");
        assert_eq!(new.planned, None);
        assert_ne!(new.id, planned_row.id);
    }

    /// Guards rollouts: a proxy that leaves by its own delete is a
    /// departure, and an older generation's proxy expiring while a newer
    /// one of its group is live is the rollout's; strandings by either are
    /// planned as a rollout. Once no newer proxy is live, an old one's
    /// expiry is an outage again.
    #[test]
    fn departures_and_older_generations_expiring_are_a_rollout() {
        use crate::domain::{AgentState, CauseKind, Change, Kind, Plan};
        let proxy = |name: &str, generation: u64, expires: u64| {
            let mut p = server(Kind::Proxy, name, at(expires));
            p.group_id = "g".into();
            p.group_generation = generation;
            p
        };
        let mut f = crate::fleet::model::test_model(START);
        let mut listing = listing(&[("p1", 100), ("p2", 20)], &["a1", "a2"]);
        listing[0] = crate::fleet::Snapshot::Servers(
            Kind::Proxy,
            vec![proxy("p1", 1, 100), proxy("p2", 1, 20)],
        );
        listing.pop();
        listing.push(crate::fleet::Snapshot::Tunnels(vec![
            tunnel("a1", "p1"),
            tunnel("a2", "p2"),
        ]));
        f.resync(crate::fleet::Resync {
            generation: 1,
            snapshots: listing,
            rejected: Vec::new(),
        });
        f.settle();
        let apply = |f: &mut super::Model, c: Change| {
            f.apply(vec![crate::fleet::Ingested::Change(c)]);
            f.settle();
        };
        apply(&mut f, Change::PutServer(proxy("p3", 2, 30)));
        advance_to(&mut f, at(5));
        apply(&mut f, Change::DeleteServer(Kind::Proxy, "p1".into()));
        let cause =
            |f: &super::Model, a: &str| f.agents[a].cause.clone().map(|c| (c.kind, c.planned));
        assert_eq!(f.agents["a1"].state, AgentState::Stranded);
        assert_eq!(
            cause(&f, "a1"),
            Some((CauseKind::ProxyDeparted, Some(Plan::Rollout)))
        );
        advance_to(&mut f, at(20));
        assert_eq!(
            cause(&f, "a2"),
            Some((CauseKind::ProxyExpired, Some(Plan::Rollout))),
            "p2 is gen 1, p3 gen 2 is live"
        );
        f.take_effects();
        advance_to(&mut f, at(30));
        assert_eq!(
            cause(&f, "a2"),
            Some((CauseKind::ProxyExpired, None)),
            "no newer proxy is live: an outage"
        );
        let told = f.take_effects();
        assert!(
            told.changes
                .iter()
                .any(|c| c.agent == "a2" && c.planned.is_none()),
            "whoever acts hears of it"
        );
        assert_eq!(
            cause(&f, "a1"),
            Some((CauseKind::ProxyDeparted, Some(Plan::Rollout))),
            "a departure stays one"
        );
        // The departed proxy returns: it is no longer departed.
        apply(&mut f, Change::PutServer(proxy("p1", 2, 100)));
        assert_eq!(f.agents["a1"].state, AgentState::Healthy);
    }
}
