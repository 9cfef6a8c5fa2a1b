//! Incidents: one root cause's occurrence ("proxy-1 expired", "auth-2
//! NOT_SERVING", "agents' own heartbeats expired" on one auth server). An
//! incident opens when the first agent is stranded or degraded for its
//! cause, counts the agents it holds by state (and their peaks), the
//! agents it ever held and the signals sent to them, and ends when its last
//! agent recovers or moves to another cause. An agent's time to recover is
//! from joining to turning healthy.
//!
//! Pure bookkeeping over the classifier's verdicts: the model tells it each
//! agent's state and cause as they change, and writes the rows it returns.

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::quantiles::Recoveries;
use crate::clock::Ts;
use crate::domain::{AgentState, Cause, CauseKind, Plan};
use crate::domain::{Attribution, IncidentRecord};

/// An incident's key: its root cause's kind and resource, and its plan: a
/// planned stranding and an unplanned one of the same cause are two
/// incidents (the window that explained one may end while it lasts).
pub type Key = (CauseKind, String, Option<Plan>);

/// The agents an open incident keeps for its figures past which it keeps
/// counting but no longer names them (a fleet far larger than this is
/// stranded by one cause only in a total outage).
const MAX_AFFECTED_NAMED: usize = 2_000_000;

#[derive(Debug)]
struct Open {
    row: IncidentRecord,
    /// Agents held now, by standing (a planned incident's are all planned).
    stranded: u32,
    degraded: u32,
    planned: u32,
    affected: HashSet<String>,
    /// Each recovered agent's time from joining to healthy, in µs: fixed
    /// memory, however many recover.
    recoveries: Recoveries,
}

#[derive(Debug)]
struct Member {
    key: Key,
    state: AgentState,
    /// When it joined, and when it took its current state.
    since: Ts,
    state_since: Ts,
}

#[derive(Debug)]
pub struct Incidents {
    next_id: i64,
    open: HashMap<Key, Open>,
    members: HashMap<String, Member>,
    /// Agents in unplanned incidents now, stranded and degraded, and the
    /// most of each at once since [`Self::take_peaks`].
    now: [u32; 2],
    peaks: [u32; 2],
    /// The model's time: a stranded period ends no earlier (a verdict's
    /// `since` can be back-dated to its cause).
    clock: Ts,
}

impl Default for Incidents {
    fn default() -> Self {
        Incidents {
            next_id: 1,
            open: HashMap::default(),
            members: HashMap::default(),
            now: [0; 2],
            peaks: [0; 2],
            clock: Ts::ZERO,
        }
    }
}

fn slot(state: AgentState) -> Option<usize> {
    match state {
        AgentState::Stranded => Some(0),
        AgentState::Degraded => Some(1),
        AgentState::Healthy => None,
    }
}

/// The key of a cause: agents whose own heartbeats expired are grouped by
/// their auth server, as the cause already names it.
fn key_of(cause: &Cause) -> Key {
    (cause.kind, cause.resource.clone(), cause.planned)
}

fn key_of_row(row: &IncidentRecord) -> Key {
    (row.cause, row.resource.clone(), row.planned)
}

impl Incidents {
    /// Counts an agent of incident `key` into (or out of) the fleet's
    /// figures: planned ones are not counted.
    fn tally(&mut self, key: &Key, state: AgentState, by: i32) {
        if key.2.is_some() {
            return;
        }
        if let Some(i) = slot(state) {
            self.now[i] = self.now[i].saturating_add_signed(by);
            self.peaks[i] = self.peaks[i].max(self.now[i]);
        }
    }

    /// The model's time is now `now`.
    pub fn at(&mut self, now: Ts) {
        self.clock = now;
    }

    /// The most agents stranded and degraded at once (in incidents) since
    /// the last call; the next period starts from those now.
    pub fn take_peaks(&mut self) -> (u32, u32) {
        let p = self.peaks;
        self.peaks = self.now;
        (p[0], p[1])
    }

    /// Open incidents.
    pub fn open_count(&self) -> usize {
        self.open.len()
    }

    /// The open incident `agent` is in, if any.
    pub fn of(&self, agent: &str) -> Option<i64> {
        let m = self.members.get(agent)?;
        self.open.get(&m.key).map(|o| o.row.id)
    }

    /// `agent` is now `state` for `cause` since `since` (healthy, or no
    /// cause: it leaves its incident). Returns the incident it is in and
    /// pushes every incident row that changed onto `rows`.
    pub fn set(
        &mut self,
        agent: &str,
        state: AgentState,
        cause: Option<&Cause>,
        since: Ts,
        rows: &mut Vec<IncidentRecord>,
    ) -> Option<i64> {
        let key = match cause {
            Some(c) if state != AgentState::Healthy => key_of(c),
            _ => {
                self.leave(agent, since, state == AgentState::Healthy, rows);
                return None;
            }
        };
        if let Some(m) = self.members.get_mut(agent).filter(|m| m.key == key) {
            // Same cause: at most a change of state within the incident.
            if m.state == state {
                return self.open.get(&key).map(|o| o.row.id);
            }
            let (was, state_since) = (m.state, m.state_since);
            m.state = state;
            m.state_since = since;
            let us = since.max(self.clock).since(state_since).as_micros() as i64;
            self.tally(&key, was, -1);
            self.tally(&key, state, 1);
            let o = self.open.get_mut(&key)?;
            o.spent(was, us);
            o.count(was, -1);
            o.count(state, 1);
            rows.push(o.row.clone());
            return Some(o.row.id);
        }
        self.leave(agent, since, false, rows);
        let next = &mut self.next_id;
        self.open.entry(key.clone()).or_insert_with(|| {
            let id = *next;
            *next += 1;
            Open::new(id, &key, since)
        });
        let first = self.join(agent, key.clone(), state, since);
        let o = self.open.get_mut(&key)?;
        if first {
            o.row.agents = o.row.agents.saturating_add(1);
        }
        rows.push(o.row.clone());
        Some(o.row.id)
    }

    /// Puts `agent` into the open incident of `key` as `state` since
    /// `since`. True the first time it is among the incident's agents
    /// while it is open (past the bound, every time).
    fn join(&mut self, agent: &str, key: Key, state: AgentState, since: Ts) -> bool {
        self.tally(&key, state, 1);
        let Some(o) = self.open.get_mut(&key) else {
            return false;
        };
        o.count(state, 1);
        let first = o.affected.len() >= MAX_AFFECTED_NAMED || o.affected.insert(agent.to_string());
        self.members.insert(
            agent.to_string(),
            Member {
                key,
                state,
                since,
                state_since: since,
            },
        );
        first
    }

    /// `agent` leaves its incident at `at`: recovered (healthy), or gone
    /// or moved on. The incident ends with its last agent.
    pub fn leave(&mut self, agent: &str, at: Ts, recovered: bool, rows: &mut Vec<IncidentRecord>) {
        let Some(m) = self.members.remove(agent) else {
            return;
        };
        self.tally(&m.key, m.state, -1);
        let Some(o) = self.open.get_mut(&m.key) else {
            return;
        };
        o.count(m.state, -1);
        o.spent(
            m.state,
            at.max(self.clock).since(m.state_since).as_micros() as i64,
        );
        if recovered {
            o.recoveries
                .record(i64::try_from(at.since(m.since).as_micros()).unwrap_or(i64::MAX));
        }
        if o.held() == 0 {
            if let Some(o) = self.open.remove(&m.key) {
                rows.push(o.end(at));
            }
        } else {
            rows.push(o.row.clone());
        }
    }

    /// Signal `id` was sent to `agent`: counted on its open incident, and
    /// the signal row marked as that incident's (in the same write).
    pub fn signaled(
        &mut self,
        agent: &str,
        id: i64,
        rows: &mut Vec<IncidentRecord>,
        attributed: &mut Vec<Attribution>,
    ) {
        let Some(m) = self.members.get(agent) else {
            return;
        };
        if let Some(o) = self.open.get_mut(&m.key) {
            o.row.signals = o.row.signals.saturating_add(1);
            attributed.push(Attribution {
                signal: id,
                incident: o.row.id,
            });
            rows.push(o.row.clone());
        }
    }

    /// Every open incident's row, as it stands.
    pub fn open_rows(&self) -> Vec<IncidentRecord> {
        self.open.values().map(|o| o.row.clone()).collect()
    }

    /// Takes up the incidents the database has open (at start, or when
    /// this replica takes the lead), with ids after `next_id` for new ones.
    /// An open incident this model has too keeps the stored id and start;
    /// a stored one it does not have ends `now`; one only here gets a new
    /// id. Returns every row to write.
    pub fn adopt(
        &mut self,
        stored: Vec<IncidentRecord>,
        next_id: i64,
        now: Ts,
    ) -> Vec<IncidentRecord> {
        self.next_id = self.next_id.max(next_id);
        let mut rows = Vec::new();
        let mut taken: HashSet<Key> = HashSet::default();
        for s in stored {
            let key = key_of_row(&s);
            match self.open.get_mut(&key) {
                Some(o) if !taken.contains(&key) => {
                    o.row.id = s.id;
                    o.row.started = o.row.started.min(s.started);
                    o.row.agents = o.row.agents.max(s.agents);
                    o.row.signals = o.row.signals.max(s.signals);
                    o.row.stranded_us = o.row.stranded_us.max(s.stranded_us);
                    o.row.degraded_us = o.row.degraded_us.max(s.degraded_us);
                    o.row.planned_us = o.row.planned_us.max(s.planned_us);
                    o.row.peak_stranded = o.row.peak_stranded.max(s.peak_stranded);
                    o.row.peak_degraded = o.row.peak_degraded.max(s.peak_degraded);
                    o.row.peak_planned = o.row.peak_planned.max(s.peak_planned);
                    taken.insert(key);
                }
                _ => rows.push(IncidentRecord {
                    ended: Some(now.max(s.started)),
                    ..s
                }),
            }
        }
        for (key, o) in &mut self.open {
            if !taken.contains(key) {
                o.row.id = self.next_id;
                self.next_id += 1;
            }
            rows.push(o.row.clone());
        }
        rows
    }

    /// Takes an agent back into the open incident `id` (loaded from the
    /// database: its open episode names it). Returns the incident's plan.
    pub fn restore(
        &mut self,
        agent: &str,
        state: AgentState,
        since: Ts,
        incident: i64,
    ) -> Option<Plan> {
        let key = self
            .open
            .iter()
            .find(|(_, o)| o.row.id == incident)
            .map(|(k, _)| k.clone())?;
        let plan = key.2;
        // Its stored row already counts it among the agents.
        self.join(agent, key, state, since);
        plan
    }

    /// Loads the incidents the database has open, before their agents are
    /// restored; returns those left without an agent once all are, ended.
    pub fn load(&mut self, stored: Vec<IncidentRecord>, next_id: i64) {
        self.next_id = self.next_id.max(next_id);
        for s in stored {
            let key = key_of_row(&s);
            self.open.entry(key).or_insert_with(|| Open::from_row(s));
        }
    }

    /// Ends the loaded incidents no agent was restored into.
    pub fn end_empty(&mut self, now: Ts) -> Vec<IncidentRecord> {
        let empty: Vec<Key> = self
            .open
            .iter()
            .filter(|(_, o)| o.held() == 0)
            .map(|(k, _)| k.clone())
            .collect();
        empty
            .into_iter()
            .filter_map(|k| self.open.remove(&k))
            .map(|o| o.end(now))
            .collect()
    }
}

impl Open {
    fn new(id: i64, key: &Key, started: Ts) -> Open {
        Open::from_row(IncidentRecord {
            id,
            cause: key.0,
            resource: key.1.clone(),
            started,
            ended: None,
            peak_stranded: 0,
            peak_degraded: 0,
            peak_planned: 0,
            agents: 0,
            signals: 0,
            stranded_us: 0,
            degraded_us: 0,
            planned_us: 0,
            recover_p50_us: None,
            recover_max_us: None,
            planned: key.2,
        })
    }

    /// An open incident as stored, before its agents are counted back in.
    fn from_row(row: IncidentRecord) -> Open {
        Open {
            row,
            stranded: 0,
            degraded: 0,
            planned: 0,
            affected: HashSet::default(),
            recoveries: Recoveries::default(),
        }
    }

    /// Counts an agent in or out by its standing ([`crate::domain::Standing`]):
    /// every agent of a planned incident is planned.
    /// An agent of it was `state` for `us`: its minutes by standing
    /// (planned agents are in no agent-minutes stranded or degraded).
    fn spent(&mut self, state: AgentState, us: i64) {
        let sum = match state {
            AgentState::Healthy => return,
            _ if self.row.planned.is_some() => &mut self.row.planned_us,
            AgentState::Stranded => &mut self.row.stranded_us,
            AgentState::Degraded => &mut self.row.degraded_us,
        };
        *sum = sum.saturating_add(us.max(0));
    }

    fn count(&mut self, state: AgentState, by: i32) {
        let n = match state {
            AgentState::Healthy => return,
            _ if self.row.planned.is_some() => &mut self.planned,
            AgentState::Stranded => &mut self.stranded,
            AgentState::Degraded => &mut self.degraded,
        };
        *n = n.saturating_add_signed(by);
        self.row.peak_stranded = self.row.peak_stranded.max(self.stranded);
        self.row.peak_degraded = self.row.peak_degraded.max(self.degraded);
        self.row.peak_planned = self.row.peak_planned.max(self.planned);
    }

    /// Agents it holds now.
    fn held(&self) -> u32 {
        self.stranded + self.degraded + self.planned
    }

    /// The row of the incident ended at `at`, with its recovery figures.
    fn end(mut self, at: Ts) -> IncidentRecord {
        self.row.ended = Some(at.max(self.row.started));
        if let Some(mid) = self.recoveries.p50() {
            self.row.recover_p50_us = Some(mid);
            self.row.recover_max_us = Some(self.recoveries.max());
        }
        self.row
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn cause(kind: CauseKind, r: &str) -> Cause {
        Cause {
            kind,
            resource: r.into(),
            planned: None,
        }
    }

    fn t(s: u64) -> Ts {
        Ts::ZERO.saturating_add(Duration::from_secs(s))
    }

    #[test]
    fn an_incident_opens_with_its_first_agent_and_ends_with_its_last() {
        let mut inc = Incidents::default();
        let mut rows = Vec::new();
        let p1 = cause(CauseKind::ProxyExpired, "p1");
        let id = inc.set("a1", AgentState::Stranded, Some(&p1), t(10), &mut rows);
        assert_eq!(id, Some(1));
        assert_eq!(
            inc.set("a2", AgentState::Degraded, Some(&p1), t(11), &mut rows),
            id
        );
        assert_eq!(
            inc.set("a2", AgentState::Stranded, Some(&p1), t(12), &mut rows),
            id,
            "a state change keeps the incident"
        );
        let last = rows.last().cloned().expect("a row");
        assert_eq!(
            (last.peak_stranded, last.peak_degraded, last.agents),
            (2, 1, 2)
        );
        inc.set("a1", AgentState::Healthy, None, t(20), &mut rows);
        assert!(rows.last().is_some_and(|r| r.ended.is_none()));
        inc.set("a2", AgentState::Healthy, None, t(40), &mut rows);
        let end = rows.last().cloned().expect("a row");
        assert_eq!(end.ended, Some(t(40)));
        // The median within 1/32 (fixed memory), the max exact.
        let p50 = end.recover_p50_us.expect("a median");
        assert!((p50 - 10_000_000).abs() <= 10_000_000 / 32, "{p50}");
        assert_eq!(end.recover_max_us, Some(29_000_000));
        // a1 stranded 10 s; a2 stranded from 12 to 40.
        assert_eq!(end.stranded_us, 38_000_000);
        assert_eq!(inc.open_count(), 0);
        // The same cause again is a new incident.
        assert_eq!(
            inc.set("a1", AgentState::Stranded, Some(&p1), t(50), &mut rows),
            Some(2)
        );
    }

    #[test]
    fn an_incident_sums_its_agents_time_by_standing_and_a_planned_one_only_as_planned() {
        let mut inc = Incidents::default();
        let mut rows = Vec::new();
        let p1 = cause(CauseKind::ProxyExpired, "p1");
        inc.set("a1", AgentState::Degraded, Some(&p1), t(0), &mut rows);
        inc.set("a1", AgentState::Stranded, Some(&p1), t(10), &mut rows);
        inc.set("a1", AgentState::Degraded, Some(&p1), t(15), &mut rows);
        inc.set("a1", AgentState::Healthy, None, t(18), &mut rows);
        let end = rows.last().cloned().expect("a row");
        assert_eq!(
            (end.stranded_us, end.degraded_us, end.planned_us),
            (5_000_000, 13_000_000, 0)
        );
        let planned = Cause {
            planned: Some(crate::domain::Plan::Maintenance(7)),
            ..cause(CauseKind::ProxyExpired, "p2")
        };
        inc.set("a2", AgentState::Stranded, Some(&planned), t(20), &mut rows);
        inc.set("a2", AgentState::Degraded, Some(&planned), t(30), &mut rows);
        inc.set("a2", AgentState::Healthy, None, t(32), &mut rows);
        let end = rows.last().cloned().expect("a row");
        assert_eq!(
            (end.stranded_us, end.degraded_us, end.planned_us),
            (0, 0, 12_000_000),
            "planned time is in no stranded or degraded figure"
        );
    }

    #[test]
    fn an_agent_that_moves_to_another_cause_moves_incident_without_recovering() {
        let mut inc = Incidents::default();
        let mut rows = Vec::new();
        let p1 = cause(CauseKind::ProxyExpired, "p1");
        let auth = cause(CauseKind::AuthNotServing, "auth-1");
        inc.set("a1", AgentState::Stranded, Some(&p1), t(1), &mut rows);
        let second = inc.set("a1", AgentState::Stranded, Some(&auth), t(5), &mut rows);
        assert_eq!(second, Some(2));
        let first = rows.iter().rfind(|r| r.id == 1).expect("the first");
        assert_eq!(first.ended, Some(t(5)));
        assert_eq!(first.recover_p50_us, None, "it did not recover");
        let (mut signals, mut attributed) = (Vec::new(), Vec::new());
        inc.signaled("a1", 9, &mut signals, &mut attributed);
        assert_eq!(signals[0].signals, 1);
        assert_eq!(signals[0].id, 2);
        assert_eq!(
            attributed,
            [Attribution {
                signal: 9,
                incident: 2
            }]
        );
    }

    #[test]
    fn adopting_keeps_stored_ids_ends_the_unmatched_and_numbers_the_new() {
        let mut inc = Incidents::default();
        let mut rows = Vec::new();
        let p1 = cause(CauseKind::ProxyExpired, "p1");
        let p2 = cause(CauseKind::ProxyExpired, "p2");
        inc.set("a1", AgentState::Stranded, Some(&p1), t(10), &mut rows);
        inc.set("a2", AgentState::Stranded, Some(&p2), t(10), &mut rows);
        let stored = |id, r: &str| IncidentRecord {
            ended: None,
            ..Open::new(id, &(CauseKind::ProxyExpired, r.into(), None), t(3)).row
        };
        let rows = inc.adopt(vec![stored(40, "p1"), stored(41, "p9")], 50, t(20));
        let by = |id: i64| rows.iter().find(|r| r.id == id).cloned();
        assert_eq!(by(40).map(|r| (r.started, r.ended)), Some((t(3), None)));
        assert_eq!(by(41).and_then(|r| r.ended), Some(t(20)), "p9 ended");
        assert_eq!(by(50).map(|r| r.resource), Some("p2".into()));
        assert_eq!(inc.of("a1"), Some(40));
    }
}
