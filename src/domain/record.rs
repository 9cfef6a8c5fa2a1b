//! What the fleet's model records for keeping, in its own words: history
//! entries, health transitions, episode changes, incidents, censuses and
//! resource changes, gathered in a [`Record`]. A record coalesces current
//! state by key (only the latest change per resource is kept) and appends
//! history in order. Bounded: history past `max_events` is dropped and
//! counted; coalesced state is bounded by the number of resources.
//!
//! Plain data: nothing here knows a table. The store maps each to its
//! rows (`store::batch`, `store::writer`); the model never names the store.

use rustc_hash::FxHashMap as HashMap;

use crate::clock::Ts;
use crate::domain::{
    AgentState, Cause, CauseKind, EndReason, Health, HealthMode, HistoryEvent, Kind, Server,
    Subject, Tunnel,
};

/// One row of history (`events` table).
#[derive(Clone, Debug)]
pub struct HistoryEntry {
    pub at: Ts,
    pub kind: Subject,
    pub name: String,
    pub event: HistoryEvent,
    pub expires: Option<Ts>,
    pub ttl_us: Option<i64>,
    pub detail: String,
}

#[derive(Clone, Debug)]
pub struct HealthTransition {
    pub auth_server: String,
    pub addr: String,
    pub at: Ts,
    pub from: Health,
    pub to: Health,
    pub mode: HealthMode,
    pub detail: String,
}

/// An incident as written: one root cause's occurrence (see
/// `fleet::model::incidents`). Written whole whenever it changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncidentRecord {
    pub id: i64,
    pub cause: CauseKind,
    pub resource: String,
    pub started: Ts,
    pub ended: Option<Ts>,
    pub peak_stranded: u32,
    pub peak_degraded: u32,
    /// Most agents at once of a planned incident (its agents are all
    /// planned, so its stranded and degraded peaks stay 0).
    pub peak_planned: u32,
    /// Agents it held, each counted once.
    pub agents: u32,
    /// Signals sent to its agents while they were in it.
    pub signals: u32,
    /// Agent time stranded, degraded and (a planned incident's) planned
    /// in it, summed, in µs (as of its agents' last change while it is
    /// open): a planned incident's agents are in its planned time alone.
    pub stranded_us: i64,
    pub degraded_us: i64,
    pub planned_us: i64,
    /// Time from joining to healthy of the agents that recovered (once
    /// it has ended).
    pub recover_p50_us: Option<i64>,
    pub recover_max_us: Option<i64>,
    /// Planned (a maintenance window, a rollout): its agents are shown,
    /// not acted on or notified, and its minutes are not counted.
    pub planned: Option<super::Plan>,
}

#[cfg(test)]
impl IncidentRecord {
    /// The tests' incident: proxy-1 expired, open, 12 agents and 5
    /// signals, with no figures yet; each test sets what it is about.
    pub(crate) fn example() -> IncidentRecord {
        IncidentRecord {
            id: 7,
            cause: CauseKind::ProxyExpired,
            resource: "proxy-1".into(),
            started: Ts(1_700_000_000_000_000),
            ended: None,
            peak_stranded: 0,
            peak_degraded: 0,
            peak_planned: 0,
            agents: 12,
            signals: 5,
            stranded_us: 0,
            degraded_us: 0,
            planned_us: 0,
            recover_p50_us: None,
            recover_max_us: None,
            planned: None,
        }
    }
}

/// An agent whose open episode left incident `from` for incident `to` at
/// `at` (its cause changed while its state did not): the figures of `from`
/// count it until then, those of `to` from then.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IncidentMove {
    pub episode: i64,
    pub agent: String,
    pub from: i64,
    pub to: i64,
    pub at: Ts,
}

/// Signal `signal` counts toward incident `incident`: its agent was in
/// that incident when it was sent. Written with the incident's row, so
/// an incident's signal figure is always the number of its signal rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribution {
    pub signal: i64,
    pub incident: i64,
}

/// The agents by state at the start of a minute (`history`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Census {
    pub at: Ts,
    pub agents: u32,
    pub stranded: u32,
    pub degraded: u32,
}

#[derive(Clone, Debug)]
pub enum EpisodeChange {
    Open {
        id: i64,
        agent: String,
        state: AgentState,
        reasons: String,
        cause: Option<Cause>,
        started: Ts,
        /// The incident of its cause.
        incident: Option<i64>,
    },
    Update {
        id: i64,
        reasons: String,
        cause: Option<Cause>,
        incident: Option<i64>,
    },
    Close {
        id: i64,
        ended: Ts,
        ended_by_signal: Option<i64>,
        end_reason: EndReason,
    },
}

impl EpisodeChange {
    /// Closes episode `id` at `ended` for a reason no signal caused.
    pub fn close(id: i64, ended: Ts, end_reason: EndReason) -> EpisodeChange {
        EpisodeChange::Close {
            id,
            ended,
            ended_by_signal: None,
            end_reason,
        }
    }
}

/// Most health transitions waiting for the store: an auth server flapping
/// through a long database outage cannot grow them without end (the
/// current health is kept by the fleet regardless).
pub const MAX_PENDING_HEALTH: usize = 100_000;

/// Episode changes waiting for the store past which the waiting ones are
/// compacted to half as many: changes to one episode merge into one, and
/// episodes that both opened and closed while they waited are dropped,
/// counted like history rows (a `gap`). What cannot be dropped is at most
/// an open or update and a close per agent, so the fleet's size bounds it.
pub const MAX_PENDING_EPISODES: usize = 100_000;

/// A resource's row waiting for the store.
#[derive(Clone, Debug, PartialEq)]
pub enum ResourceChange {
    /// Written whole.
    Put(Server),
    /// Only its expiry and TTL moved since it last went to the store whole
    /// (every heartbeat in a steady fleet): a store that can update those
    /// two columns in place does, and writes the row whole where it finds
    /// none.
    Expiry(Server),
    Delete,
}

impl ResourceChange {
    /// The server, unless the row is deleted.
    pub fn server(&self) -> Option<&Server> {
        match self {
            ResourceChange::Put(s) | ResourceChange::Expiry(s) => Some(s),
            ResourceChange::Delete => None,
        }
    }
}

#[derive(Debug, Default)]
pub struct Record {
    /// Whole-kind replacements (resync), applied before `servers`.
    pub replace_servers: Vec<(Kind, Vec<Server>)>,
    /// Latest row per (kind, name).
    pub servers: HashMap<(Kind, String), ResourceChange>,
    /// Whole replacement of tunnels (resync), applied before `tunnels`.
    pub replace_tunnels: Option<Vec<Tunnel>>,
    pub tunnels: HashMap<String, Option<Tunnel>>,
    pub events: Vec<HistoryEntry>,
    pub health: Vec<HealthTransition>,
    pub episodes: Vec<EpisodeChange>,
    /// Latest row per incident.
    pub incidents: HashMap<i64, IncidentRecord>,
    /// Counts of agents by state, a minute apart.
    pub samples: Vec<Census>,
    /// Agents whose open episode moved from one incident to another.
    pub moves: Vec<IncidentMove>,
    /// Signals counted toward an incident.
    pub attributions: Vec<Attribution>,
    /// History rows dropped while this record waited.
    pub dropped_events: u64,
}

/// Moves half of `rows` (rounded down) out, into a map of its own.
fn second_half<K: std::hash::Hash + Eq, V>(rows: &mut HashMap<K, V>) -> HashMap<K, V> {
    let all = std::mem::take(rows);
    let moved = all.len() / 2;
    let mut other = HashMap::with_capacity_and_hasher(moved, Default::default());
    rows.reserve(all.len() - moved);
    for (i, (k, v)) in all.into_iter().enumerate() {
        if i < moved {
            other.insert(k, v);
        } else {
            rows.insert(k, v);
        }
    }
    other
}

impl Record {
    pub fn is_empty(&self) -> bool {
        !self.has_state() && !self.has_history()
    }

    /// Whether anything but current state waits: history, health
    /// transitions, episodes, incidents or samples.
    fn has_history(&self) -> bool {
        !(self.events.is_empty()
            && self.health.is_empty()
            && self.episodes.is_empty()
            && self.incidents.is_empty()
            && self.samples.is_empty()
            && self.moves.is_empty()
            && self.attributions.is_empty())
    }

    pub fn put_server(&mut self, s: &Server) {
        self.put_row(s.clone(), false);
    }

    /// A server whose expiry and TTL alone moved: its waiting row, if
    /// one waits, is updated in place rather than replaced by a clone.
    pub fn put_expiry(&mut self, s: &Server) {
        let key = (s.kind, s.name.clone());
        match self.servers.get_mut(&key) {
            Some(ResourceChange::Put(waiting) | ResourceChange::Expiry(waiting)) => {
                waiting.expires = s.expires;
                waiting.ttl = s.ttl;
            }
            _ => self.put_row(s.clone(), true),
        }
    }

    /// A server's row: whole, or with `plain` (only its expiry and TTL
    /// moved since the fleet last held it) as [`Self::put_expiry`] would.
    pub fn put_row(&mut self, s: Server, plain: bool) {
        let key = (s.kind, s.name.clone());
        let row = match self.servers.get_mut(&key) {
            Some(ResourceChange::Put(waiting) | ResourceChange::Expiry(waiting)) if plain => {
                waiting.expires = s.expires;
                waiting.ttl = s.ttl;
                return;
            }
            None if plain => ResourceChange::Expiry(s),
            _ => ResourceChange::Put(s),
        };
        self.servers.insert(key, row);
    }

    /// Takes `newer`'s resource rows over this batch's: the newer row
    /// wins, but an expiry over a whole row (or a delete) that never went
    /// out stays whole.
    pub fn merge_servers(&mut self, newer: &mut Record) {
        for (key, row) in newer.servers.drain() {
            let row = match (self.servers.get(&key), row) {
                (
                    Some(ResourceChange::Put(_) | ResourceChange::Delete),
                    ResourceChange::Expiry(s),
                ) => ResourceChange::Put(s),
                (_, row) => row,
            };
            self.servers.insert(key, row);
        }
    }

    /// Incident rows, the latest of each kept.
    pub fn incidents(&mut self, rows: impl IntoIterator<Item = IncidentRecord>) {
        for r in rows {
            self.incidents.insert(r.id, r);
        }
    }

    pub fn delete_server(&mut self, kind: Kind, name: &str) {
        self.servers
            .insert((kind, name.to_string()), ResourceChange::Delete);
    }

    pub fn replace_kind(&mut self, kind: Kind, rows: Vec<Server>) {
        self.servers.retain(|(k, _), _| *k != kind);
        self.replace_servers.retain(|(k, _)| *k != kind);
        self.replace_servers.push((kind, rows));
    }

    pub fn put_tunnel(&mut self, t: &Tunnel) {
        self.tunnels.insert(t.name.clone(), Some(t.clone()));
    }

    pub fn delete_tunnel(&mut self, name: &str) {
        self.tunnels.insert(name.to_string(), None);
    }

    pub fn replace_tunnels(&mut self, rows: Vec<Tunnel>) {
        self.tunnels.clear();
        self.replace_tunnels = Some(rows);
    }

    /// True when current-state rows (servers, tunnels) are waiting.
    /// Current-state rows this batch writes.
    pub fn state_rows(&self) -> usize {
        self.replace_servers
            .iter()
            .map(|(_, rows)| rows.len())
            .sum::<usize>()
            + self.servers.len()
            + self.replace_tunnels.as_ref().map_or(0, Vec::len)
            + self.tunnels.len()
    }

    pub fn has_state(&self) -> bool {
        !self.replace_servers.is_empty()
            || !self.servers.is_empty()
            || self.replace_tunnels.is_some()
            || !self.tunnels.is_empty()
    }

    /// Moves out everything but the current-state rows, which keep
    /// coalescing: history, health transitions and episodes go out now.
    pub fn take_history(&mut self) -> Record {
        Record {
            events: std::mem::take(&mut self.events),
            health: std::mem::take(&mut self.health),
            episodes: std::mem::take(&mut self.episodes),
            incidents: std::mem::take(&mut self.incidents),
            samples: std::mem::take(&mut self.samples),
            moves: std::mem::take(&mut self.moves),
            attributions: std::mem::take(&mut self.attributions),
            dropped_events: std::mem::take(&mut self.dropped_events),
            ..Record::default()
        }
    }

    /// Moves out the current-state rows (resources and tunnels, with their
    /// whole-kind replacements); `None` when there
    /// are none. What stays is history, health, episodes and incidents.
    pub fn take_state(&mut self) -> Option<Record> {
        if !self.has_state() {
            return None;
        }
        Some(Record {
            replace_servers: std::mem::take(&mut self.replace_servers),
            servers: std::mem::take(&mut self.servers),
            replace_tunnels: self.replace_tunnels.take(),
            tunnels: std::mem::take(&mut self.tunnels),
            ..Record::default()
        })
    }

    /// Moves half of a record of current-state rows alone into a record of
    /// its own, so that the two can be committed at
    /// once on two connections: each resource and tunnel is in one of them
    /// (the rows are keyed), so neither can undo the other. A record with
    /// anything else (a whole-kind replacement deletes what it does not
    /// list; history has an order), or with fewer than `from` rows, stays
    /// whole (`None`).
    pub fn split_half(&mut self, from: usize) -> Option<Record> {
        let keyed_state_alone = self.replace_servers.is_empty()
            && self.replace_tunnels.is_none()
            && !self.has_history()
            && self.dropped_events == 0;
        if !keyed_state_alone || self.state_rows() < from.max(2) {
            return None;
        }
        Some(Record {
            servers: second_half(&mut self.servers),
            tunnels: second_half(&mut self.tunnels),
            ..Record::default()
        })
    }

    /// Appends a health transition unless [`MAX_PENDING_HEALTH`] are
    /// already waiting (then it is dropped and counted, like history).
    pub fn health_row(&mut self, row: HealthTransition) {
        if self.health.len() >= MAX_PENDING_HEALTH {
            self.dropped_events += 1;
        } else {
            self.health.push(row);
        }
    }

    /// Compacts the waiting episode changes once more than `cap` wait (see
    /// [`MAX_PENDING_EPISODES`]): an update merges into the open or update
    /// of its episode before it; then, while more than `cap` remain, the
    /// oldest episodes whose open and close both wait are dropped, both
    /// together, and counted as dropped history. The order of what stays
    /// is kept. Returns how many changes remain.
    pub fn bound_episodes(&mut self, cap: usize) -> usize {
        if self.episodes.len() <= cap {
            return self.episodes.len();
        }
        let ops = std::mem::take(&mut self.episodes);
        // Index, in the kept list, of each episode's open or last update.
        let mut head: HashMap<i64, usize> = HashMap::default();
        let mut opened: HashMap<i64, usize> = HashMap::default();
        let mut kept: Vec<Option<EpisodeChange>> = Vec::with_capacity(ops.len());
        let mut closed_after_open = Vec::new();
        for op in ops {
            match op {
                EpisodeChange::Open { id, .. } => {
                    head.insert(id, kept.len());
                    opened.insert(id, kept.len());
                    kept.push(Some(op));
                }
                EpisodeChange::Update {
                    id,
                    reasons,
                    cause,
                    incident,
                } => match head.get(&id).and_then(|&i| kept[i].as_mut()) {
                    Some(EpisodeChange::Open {
                        reasons: r,
                        cause: c,
                        incident: n,
                        ..
                    })
                    | Some(EpisodeChange::Update {
                        reasons: r,
                        cause: c,
                        incident: n,
                        ..
                    }) => {
                        *r = reasons;
                        *c = cause;
                        *n = incident;
                    }
                    _ => {
                        head.insert(id, kept.len());
                        kept.push(Some(EpisodeChange::Update {
                            id,
                            reasons,
                            cause,
                            incident,
                        }));
                    }
                },
                EpisodeChange::Close { id, .. } => {
                    head.remove(&id);
                    if let Some(open) = opened.remove(&id) {
                        closed_after_open.push((open, kept.len()));
                    }
                    kept.push(Some(op));
                }
            }
        }
        let mut left = kept.len();
        let mut dropped = 0u64;
        for (open, close) in closed_after_open {
            if left <= cap {
                break;
            }
            kept[open] = None;
            kept[close] = None;
            left -= 2;
            dropped += 1;
        }
        self.dropped_events += dropped;
        self.episodes = kept.into_iter().flatten().collect();
        self.episodes.len()
    }

    /// Keeps at most `max_events` history rows (the oldest), counting the
    /// rest as dropped.
    pub fn cap_events(&mut self, max_events: usize) {
        if self.events.len() > max_events {
            self.dropped_events += (self.events.len() - max_events) as u64;
            self.events.truncate(max_events);
        }
    }

    /// Appends history unless `max_events` are already waiting.
    pub fn event(&mut self, row: HistoryEntry, max_events: usize) {
        if self.events.len() >= max_events {
            self.dropped_events += 1;
        } else {
            self.events.push(row);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str, expires: i64) -> Server {
        crate::domain::test_server(Kind::Proxy, name, Ts(expires))
    }

    #[test]
    fn state_coalesces_to_the_latest_row() {
        let mut b = Record::default();
        b.put_server(&server("p1", 1));
        b.put_server(&server("p1", 2));
        b.put_server(&server("p2", 1));
        assert_eq!(b.servers.len(), 2);
        assert_eq!(
            b.servers[&(Kind::Proxy, "p1".to_string())]
                .server()
                .map(|s| s.expires),
            Some(Ts(2))
        );
        b.replace_kind(Kind::Proxy, vec![server("p3", 1)]);
        assert!(b.servers.is_empty());
        b.put_server(&server("p4", 1));
        assert_eq!(b.servers.len(), 1);
    }

    #[test]
    fn take_history_leaves_state_to_coalesce() {
        let mut b = Record::default();
        b.put_server(&server("p1", 1));
        b.episodes
            .push(EpisodeChange::close(1, Ts(1), EndReason::Recovered));
        let h = b.take_history();
        assert_eq!(h.episodes.len(), 1);
        assert!(!h.has_state());
        assert!(b.has_state());
        assert!(b.episodes.is_empty());
    }

    /// Guards what a plain heartbeat leaves for the store: an expiry over
    /// a whole row that never went out stays whole (with the newer expiry),
    /// over a delete it is whole again, and alone it is an expiry; the same
    /// holds when batches that waited merge.
    #[test]
    fn an_expiry_never_hides_a_whole_row_that_has_not_gone_out() {
        let key = |n: &str| (Kind::Proxy, n.to_string());
        let mut b = Record::default();
        b.put_server(&server("p1", 1));
        b.put_row(server("p1", 2), true);
        assert_eq!(b.servers[&key("p1")], ResourceChange::Put(server("p1", 2)));
        b.put_row(server("p2", 1), true);
        assert_eq!(
            b.servers[&key("p2")],
            ResourceChange::Expiry(server("p2", 1))
        );
        b.put_row(server("p2", 3), true);
        assert_eq!(
            b.servers[&key("p2")],
            ResourceChange::Expiry(server("p2", 3))
        );
        b.delete_server(Kind::Proxy, "p3");
        b.put_row(server("p3", 1), true);
        assert_eq!(b.servers[&key("p3")], ResourceChange::Put(server("p3", 1)));
        b.put_row(server("p2", 4), false);
        assert_eq!(b.servers[&key("p2")], ResourceChange::Put(server("p2", 4)));

        let mut older = Record::default();
        older.put_server(&server("p1", 1));
        older.delete_server(Kind::Proxy, "p2");
        older.put_expiry(&server("p4", 1));
        let mut newer = Record::default();
        for n in ["p1", "p2", "p4", "p5"] {
            newer.put_expiry(&server(n, 9));
        }
        older.merge_servers(&mut newer);
        assert_eq!(
            older.servers[&key("p1")],
            ResourceChange::Put(server("p1", 9))
        );
        assert_eq!(
            older.servers[&key("p2")],
            ResourceChange::Put(server("p2", 9))
        );
        assert_eq!(
            older.servers[&key("p4")],
            ResourceChange::Expiry(server("p4", 9))
        );
        assert_eq!(
            older.servers[&key("p5")],
            ResourceChange::Expiry(server("p5", 9))
        );
    }

    #[test]
    fn take_state_moves_the_current_state_alone() {
        let mut b = Record::default();
        assert!(b.take_state().is_none(), "nothing to move");
        b.put_server(&server("p1", 1));
        b.replace_kind(Kind::Agent, vec![server("a1", 1)]);
        b.put_tunnel(&crate::domain::Tunnel {
            name: "t1".into(),
            agent: "a1".into(),
            proxy: "p1".into(),
            last_heartbeat: None,
            expires: None,
        });
        b.episodes
            .push(EpisodeChange::close(1, Ts(1), EndReason::Recovered));
        b.dropped_events = 2;
        let s = b.take_state().expect("state");
        assert_eq!(s.servers.len(), 1);
        assert_eq!(s.replace_servers.len(), 1);
        assert_eq!(s.tunnels.len(), 1);
        assert!(s.episodes.is_empty() && s.dropped_events == 0);
        assert!(!b.has_state());
        assert_eq!((b.episodes.len(), b.dropped_events), (1, 2));
    }

    /// Guards the two-connection snapshot: the halves hold every row once,
    /// about as many each; anything that is not
    /// current state alone, or too few rows, stays whole.
    #[test]
    fn a_large_snapshot_splits_into_halves_that_hold_every_row_once() {
        let tunnel = |i: usize| crate::domain::Tunnel {
            name: format!("t{i}"),
            agent: format!("a{i}"),
            proxy: "p1".into(),
            last_heartbeat: None,
            expires: None,
        };
        let snapshot = || {
            let mut b = Record::default();
            for i in 0..101 {
                b.put_server(&server(&format!("p{i}"), i as i64));
            }
            for i in 0..7 {
                b.put_tunnel(&tunnel(i));
            }
            b.delete_tunnel("t-gone");
            b
        };
        let mut a = snapshot();
        let b = a.split_half(100).expect("large enough");
        assert_eq!((a.servers.len(), b.servers.len()), (51, 50));
        assert_eq!((a.tunnels.len(), b.tunnels.len()), (4, 4));
        assert!(a.servers.keys().all(|k| !b.servers.contains_key(k)));
        assert!(a.tunnels.keys().all(|k| !b.tunnels.contains_key(k)));
        let whole = snapshot();
        for half in [&a, &b] {
            for (k, row) in &half.servers {
                assert_eq!(Some(row), whole.servers.get(k), "{k:?} as it was");
            }
            for (k, row) in &half.tunnels {
                assert_eq!(Some(row), whole.tunnels.get(k), "{k} as it was");
            }
        }

        assert!(snapshot().split_half(200).is_none(), "too few rows");
        let mut replacing = snapshot();
        replacing.replace_kind(Kind::Agent, vec![server("a1", 1)]);
        assert!(
            replacing.split_half(1).is_none(),
            "a replacement stays whole"
        );
        assert_eq!(replacing.state_rows(), 110, "with every row");
        let mut with_history = snapshot();
        with_history
            .episodes
            .push(EpisodeChange::close(1, Ts(1), EndReason::Recovered));
        assert!(with_history.split_half(1).is_none(), "history stays whole");
        let mut with_gap = snapshot();
        with_gap.dropped_events = 1;
        assert!(with_gap.split_half(1).is_none(), "a gap in history too");
    }

    /// Guards the episode bound: over the cap, updates merge into their
    /// episode's open or update, and whole episodes that opened and closed
    /// while waiting go (oldest first, counted); an episode opened before
    /// keeps its update and close, and nothing is closed that is not
    /// opened before it or already stored.
    #[test]
    fn waiting_episode_changes_are_compacted_past_the_cap() {
        let open = |id: i64| EpisodeChange::Open {
            id,
            agent: format!("a{id}"),
            state: AgentState::Stranded,
            reasons: "r0".into(),
            cause: None,
            started: Ts(id),
            incident: None,
        };
        let update = |id: i64, r: &str| EpisodeChange::Update {
            id,
            reasons: r.into(),
            cause: None,
            incident: None,
        };
        let close = |id: i64| EpisodeChange::close(id, Ts(id + 1), EndReason::Recovered);
        let mut b = Record::default();
        // Episode 0 was opened before the outage: its changes stay.
        b.episodes.push(update(0, "r1"));
        b.episodes.push(update(0, "r2"));
        for id in 1..=1000 {
            b.episodes.push(open(id));
            b.episodes.push(update(id, "r1"));
            b.episodes.push(close(id));
        }
        b.episodes.push(open(5000));
        b.episodes.push(update(5000, "r9"));
        b.episodes.push(close(0));
        assert_eq!(
            b.bound_episodes(10_000),
            b.episodes.len(),
            "under the cap: untouched"
        );
        assert_eq!(b.episodes.len(), 3005);
        let left = b.bound_episodes(100);
        assert_eq!(left, b.episodes.len());
        assert!(left <= 100, "{left}");
        assert_eq!(b.dropped_events, 1000 - (left as u64 - 3) / 2);
        let mut seen_open = std::collections::HashSet::new();
        for op in &b.episodes {
            match op {
                EpisodeChange::Open { id, .. } => assert!(seen_open.insert(*id)),
                EpisodeChange::Update { id, reasons, .. } => {
                    assert_eq!((*id, reasons.as_str()), (0, "r2"), "one update, the last")
                }
                EpisodeChange::Close { id, .. } => {
                    assert!(*id == 0 || seen_open.contains(id), "close of {id}")
                }
            }
        }
        assert!(b.episodes.iter().any(|op| matches!(op,
            EpisodeChange::Open { id: 5000, reasons, .. } if reasons == "r9")));
        // The newest whole episodes are the ones kept.
        assert!(seen_open.contains(&1000) && !seen_open.contains(&1));
    }

    #[test]
    fn health_transitions_are_bounded_too() {
        let mut b = Record::default();
        let row = HealthTransition {
            auth_server: "a".into(),
            addr: String::new(),
            at: Ts(0),
            from: Health::Serving,
            to: Health::NotServing,
            mode: HealthMode::Watch,
            detail: String::new(),
        };
        for _ in 0..MAX_PENDING_HEALTH + 3 {
            b.health_row(row.clone());
        }
        assert_eq!(b.health.len(), MAX_PENDING_HEALTH);
        assert_eq!(b.dropped_events, 3);
    }

    #[test]
    fn history_is_bounded_and_drops_are_counted() {
        let mut b = Record::default();
        for i in 0..5 {
            b.event(
                HistoryEntry {
                    at: Ts(i),
                    kind: Subject::Proxy,
                    name: "p".into(),
                    event: HistoryEvent::Heartbeat,
                    expires: None,
                    ttl_us: None,
                    detail: String::new(),
                },
                3,
            );
        }
        assert_eq!(b.events.len(), 3);
        assert_eq!(b.dropped_events, 2);
    }
}
