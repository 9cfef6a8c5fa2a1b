//! Taking the lead and giving it up. Every replica classifies the same
//! events on its own; only the leader writes. A replica that takes the
//! lease goes on from what the database holds: it writes the current state
//! in full, keeps the open episodes it agrees with (their ids), closes
//! those it does not, and opens its own with ids after the highest stored.

use rustc_hash::FxHashMap as HashMap;
use tracing::info;

use super::Model;
use crate::domain::Episode;
use crate::domain::{EndReason, Kind};
use crate::domain::{EpisodeChange, IncidentRecord};

/// What the lead changed, for the log and the tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Adopted {
    /// Open episodes kept with their stored ids.
    pub kept: usize,
    /// Stored open episodes closed: their agent is healthy, in another
    /// state, or unknown to this replica.
    pub closed: usize,
    /// Episodes this replica had open that the database had not.
    pub opened: usize,
}

impl Model {
    /// This replica now leads: the database is brought to this replica's
    /// view in the first batch of its tenure (the shell's outbox stamps it
    /// with the new fence and drops what was made before).
    pub fn lead(
        &mut self,
        open: Vec<Episode>,
        next_episode: i64,
        (incidents, next_incident): (Vec<IncidentRecord>, i64),
    ) -> Adopted {
        let now = self.now();
        self.next_episode = next_episode.max(1);
        // Incidents first: the episodes below name the adopted ids.
        let rows = self.incidents.adopt(incidents, next_incident, now);
        self.out.writes.incidents(rows);
        // The current state in full: the last leader's rows may be behind.
        let proxies = self.proxies.values().map(|e| e.server.clone()).collect();
        self.out.writes.replace_kind(Kind::Proxy, proxies);
        let auths = self
            .auths
            .values()
            .filter_map(|a| a.resource.as_ref().map(|e| e.server.clone()))
            .collect();
        self.out.writes.replace_kind(Kind::AuthServer, auths);
        let agents = self.agents.values().map(|a| a.res.server.clone()).collect();
        self.out.writes.replace_kind(Kind::Agent, agents);
        let tunnels = self.tunnels.values().map(|t| t.tunnel.clone()).collect();
        self.out.writes.replace_tunnels(tunnels);

        // Closes go first, then what is kept, then what is opened.
        let mut closes: Vec<EpisodeChange> = Vec::new();
        let mut ops: Vec<EpisodeChange> = Vec::new();
        let mut close = |id: i64, why: EndReason| closes.push(EpisodeChange::close(id, now, why));
        let mut stored: HashMap<String, Episode> = HashMap::default();
        for ep in open {
            // Two open episodes of one agent cannot both be right.
            if let Some(older) = stored.insert(ep.agent.clone(), ep) {
                close(older.id, EndReason::LeaderChange);
            }
        }
        let mut names: Vec<String> = self.agents.keys().map(str::to_string).collect();
        names.sort();
        let mut adopted = Adopted::default();
        for name in names {
            let Some(a) = self.agents.get_mut(&name) else {
                continue;
            };
            let theirs = stored.remove(&name);
            if a.episode.is_none() {
                // Healthy here: whatever the database had open ends.
                if let Some(ep) = theirs {
                    close(ep.id, EndReason::LeaderChange);
                }
                continue;
            }
            match theirs {
                Some(ep) if ep.state == a.state => {
                    a.episode = Some(ep.id);
                    ops.push(EpisodeChange::Update {
                        id: ep.id,
                        reasons: a.reasons.join(),
                        cause: a.cause.clone(),
                        incident: self.incidents.of(&name),
                    });
                    adopted.kept += 1;
                }
                other => {
                    if let Some(ep) = other {
                        close(ep.id, EndReason::LeaderChange);
                    }
                    let id = self.next_episode;
                    self.next_episode += 1;
                    a.episode = Some(id);
                    ops.push(EpisodeChange::Open {
                        id,
                        agent: name.clone(),
                        state: a.state,
                        reasons: a.reasons.join(),
                        cause: a.cause.clone(),
                        started: a.since,
                        incident: self.incidents.of(&name),
                    });
                    adopted.opened += 1;
                }
            }
        }
        for ep in stored.into_values() {
            close(ep.id, EndReason::AgentUnknown);
        }
        adopted.closed = closes.len();
        self.out.writes.episodes.extend(closes);
        self.out.writes.episodes.extend(ops);
        info!(
            kept = adopted.kept,
            closed = adopted.closed,
            opened = adopted.opened,
            "leading: the stored open episodes now match this replica's view"
        );
        adopted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Ts;
    use crate::domain::Episode;
    use crate::domain::{AgentState, CauseKind};
    use crate::fleet::model::fixture::*;

    fn stored(id: i64, agent: &str, state: AgentState) -> Episode {
        Episode {
            cluster: "default".into(),
            id,
            agent: agent.into(),
            state,
            reasons: vec![],
            cause: Some(CauseKind::ProxyExpired),
            cause_resource: "p1".into(),
            started_at: Ts(1),
            ended_at: None,
            ended_by_signal: None,
            end_reason: None,
            incident: None,
        }
    }

    /// Guards the hand-over: a new leader keeps the episodes it agrees
    /// with, closes the rest, opens its own after the stored ids, and writes
    /// every kind in full.
    #[test]
    fn a_new_leader_adopts_the_stored_episodes_it_agrees_with() {
        let mut f = ready(&[("p1", 3600)], &["a1", "a2", "a3", "a4"]);
        for (name, state) in [
            ("a1", AgentState::Stranded),
            ("a2", AgentState::Stranded),
            ("a3", AgentState::Healthy),
            ("a4", AgentState::Degraded),
        ] {
            let a = f.agents.get_mut(name).expect("listed");
            a.state = state;
            a.episode = (state != AgentState::Healthy).then_some(900);
        }
        f.take_effects();
        let got = f.lead(
            vec![
                stored(10, "a1", AgentState::Stranded),
                stored(11, "a3", AgentState::Stranded),
                stored(12, "a4", AgentState::Stranded),
                stored(13, "gone", AgentState::Stranded),
            ],
            20,
            (Vec::new(), 1),
        );
        assert_eq!(
            got,
            Adopted {
                kept: 1,
                closed: 3,
                opened: 2
            }
        );
        assert_eq!(f.agents["a1"].episode, Some(10));
        assert_eq!(f.agents["a2"].episode, Some(20));
        assert_eq!(f.agents["a4"].episode, Some(21));
        assert_eq!(f.agents["a3"].episode, None);
        let batch = f.take_effects().writes;
        assert_eq!(batch.replace_servers.len(), 3, "every kind in full");
        let closed: Vec<(i64, EndReason)> = batch
            .episodes
            .iter()
            .filter_map(|e| match e {
                EpisodeChange::Close { id, end_reason, .. } => Some((*id, *end_reason)),
                _ => None,
            })
            .collect();
        assert!(
            closed.contains(&(11, EndReason::LeaderChange)),
            "{closed:?}"
        );
        assert!(
            closed.contains(&(12, EndReason::LeaderChange)),
            "{closed:?}"
        );
        assert!(
            closed.contains(&(13, EndReason::AgentUnknown)),
            "{closed:?}"
        );
    }
}
