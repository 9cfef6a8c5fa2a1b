//! What the fleet owes the store, between the model's steps and the
//! writer: the model's rows are gathered here, coalesced per resource.
//! History rows are due at once; current-state rows at most every
//! `STATE_WRITE_EVERY`, and no more than `STATE_ROWS_PER_SECOND` on
//! average; a batch the writer had no room for goes back in front. Each
//! batch carries the fence it was made under; a follower keeps nothing.

use std::time::Duration;

use crate::clock::Ts;
use crate::domain::{Record, MAX_PENDING_EPISODES};
use crate::stats::Stats;
use crate::store::{Fence, WriteBatch};

/// How often the current-state snapshot is written at most.
pub const STATE_WRITE_EVERY: Duration = Duration::from_secs(1);
/// Current-state rows written per second at most, on average: after a
/// snapshot of n rows the next waits n / this (and at least
/// `STATE_WRITE_EVERY`). A quarter of what one SQLite writer commits here
/// (`bench ingest`, about 120 k rows/s), so that in a heartbeat storm over
/// a large fleet the snapshot, which a restart loads and a resync then
/// corrects, never takes the writer from the history.
pub const STATE_ROWS_PER_SECOND: u64 = 30_000;

pub struct Outbox {
    pending: Record,
    /// Whether this replica writes (see `model::lead`).
    fence: Fence,
    /// History rows held while the store is behind.
    max_events: usize,
    /// Waiting episode changes past which they are compacted
    /// (`Record::bound_episodes`).
    episode_bound: usize,
    /// When current-state rows last went to the store.
    state_written: Ts,
    /// How long after `state_written` the next snapshot may go.
    state_gap: Duration,
}

impl Outbox {
    pub fn new(fence: Fence, max_events: usize, now: Ts) -> Outbox {
        Outbox {
            pending: Record::default(),
            fence,
            max_events,
            episode_bound: MAX_PENDING_EPISODES,
            state_written: now,
            state_gap: STATE_WRITE_EVERY,
        }
    }

    /// Gathers what a step of the model produced. A follower's rows are
    /// the leader's to write: they are not even kept.
    pub fn absorb(&mut self, rows: Record) {
        if self.fence == Fence::Follower || rows.is_empty() && rows.dropped_events == 0 {
            return;
        }
        if self.pending.is_empty() && self.pending.dropped_events == 0 {
            self.pending = rows;
            self.pending.cap_events(self.max_events);
            return;
        }
        let older = std::mem::take(&mut self.pending);
        self.pending = self.merged(older, rows);
    }

    /// Hands the rows gathered so far to the model for one step (see
    /// `shell::Shell::lend`); [`Self::absorb`] takes them back.
    pub fn lend(&mut self) -> Record {
        std::mem::take(&mut self.pending)
    }

    /// Takes back lent rows the model did not take.
    pub fn put_back(&mut self, rows: Record) {
        self.pending = rows;
    }

    /// This replica leads under `fence` from now on: nothing made before
    /// is written (the model's lead writes the state in full).
    pub fn lead(&mut self, fence: Fence) {
        self.pending = Record::default();
        self.fence = fence;
    }

    /// Another replica leads (or this one cannot tell): nothing is kept.
    pub fn follow(&mut self) {
        self.lead(Fence::Follower);
    }

    /// Takes everything that must be written.
    pub fn take_pending(&mut self, now: Ts) -> WriteBatch {
        self.state_written = now;
        let rows = self.pending.state_rows() as u64;
        let budget = Duration::from_millis(rows.saturating_mul(1000) / STATE_ROWS_PER_SECOND);
        self.state_gap = budget.max(STATE_WRITE_EVERY);
        let batch = std::mem::take(&mut self.pending);
        self.stamped(batch)
    }

    /// Takes what is due: history at once; the current-state snapshot (what
    /// a restart loads) once its gap has passed, coalesced per resource, so
    /// a heartbeat storm costs one row per resource per gap.
    pub fn take_due(&mut self, now: Ts) -> WriteBatch {
        if self.pending.has_state() && now.since(self.state_written) >= self.state_gap {
            return self.take_pending(now);
        }
        let batch = self.pending.take_history();
        self.stamped(batch)
    }

    /// Marks a batch with who may write it.
    fn stamped(&self, rows: Record) -> WriteBatch {
        WriteBatch::new(rows, self.fence.clone())
    }

    /// True when something is due for the store now.
    pub fn has_due(&self, now: Ts) -> bool {
        let p = &self.pending;
        !p.events.is_empty()
            || !p.health.is_empty()
            || !p.episodes.is_empty()
            || p.dropped_events > 0
            || (p.has_state() && now.since(self.state_written) >= self.state_gap)
    }

    /// When the held current-state rows fall due, if any are held.
    pub fn state_due_at(&self) -> Option<Ts> {
        self.pending
            .has_state()
            .then(|| self.state_written.saturating_add(self.state_gap))
    }

    /// Puts back a batch the store had no room for; newer rows win. One
    /// made under another lease is not ours to write any more.
    pub fn restore(&mut self, older: WriteBatch) {
        if older.fence != self.fence {
            return;
        }
        let newer = std::mem::take(&mut self.pending);
        self.pending = self.merged(older.rows, newer);
    }

    /// `older` then `newer`: history in order, the newer current state wins.
    fn merged(&mut self, mut older: Record, mut newer: Record) -> Record {
        if older.has_state() {
            for (k, rows) in newer.replace_servers.drain(..) {
                older.replace_kind(k, rows);
            }
            older.merge_servers(&mut newer);
            if let Some(rows) = newer.replace_tunnels.take() {
                older.replace_tunnels(rows);
            }
            older.tunnels.extend(newer.tunnels.drain());
            std::mem::swap(&mut older.servers, &mut newer.servers);
            std::mem::swap(&mut older.tunnels, &mut newer.tunnels);
            newer.replace_servers = std::mem::take(&mut older.replace_servers);
            newer.replace_tunnels = older.replace_tunnels.take();
        }
        // History keeps its order: the older rows first.
        older.events.append(&mut newer.events);
        older.health.append(&mut newer.health);
        older.episodes.append(&mut newer.episodes);
        newer.events = older.events;
        newer.health = older.health;
        newer.episodes = older.episodes;
        // The newer row of an incident wins.
        older.incidents.extend(newer.incidents.drain());
        newer.incidents = older.incidents;
        older.samples.append(&mut newer.samples);
        newer.samples = older.samples;
        older.moves.append(&mut newer.moves);
        newer.moves = older.moves;
        older.attributions.append(&mut newer.attributions);
        newer.attributions = older.attributions;
        newer.dropped_events += older.dropped_events;
        newer.cap_events(self.max_events);
        // Compacted to half past the bound; what compaction cannot drop
        // (the changes of episodes still open) doubles the bound, so a long
        // outage over a large fleet is not compacted on every hand-over.
        if newer.episodes.len() > self.episode_bound {
            let left = newer.bound_episodes(MAX_PENDING_EPISODES / 2);
            self.episode_bound = MAX_PENDING_EPISODES.max(left.saturating_mul(2));
        }
        newer
    }

    /// Shows what waits for the store (`lifeline_store_pending_rows`).
    pub fn count(&self, stats: &Stats) {
        use crate::stats::PendingRows;
        let p = &self.pending;
        for (k, n) in [
            (PendingRows::History, p.events.len()),
            (PendingRows::Health, p.health.len()),
            (PendingRows::Episodes, p.episodes.len()),
            (PendingRows::State, p.state_rows()),
        ] {
            stats.store_pending[k as usize].store(n as u64, std::sync::atomic::Ordering::Relaxed);
        }
    }

    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty() || self.pending.dropped_events > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{EndReason, Kind, Server};
    use crate::domain::{EpisodeChange, HistoryEntry};

    const T0: Ts = Ts(1_000_000);

    fn outbox() -> Outbox {
        Outbox::new(Fence::Sole, 10, T0)
    }

    fn proxy(name: &str, expires: i64) -> Server {
        crate::domain::test_server(Kind::Proxy, name, Ts(expires))
    }

    fn close(id: i64) -> EpisodeChange {
        EpisodeChange::close(id, Ts(0), EndReason::Recovered)
    }

    fn state(s: &Server) -> Record {
        let mut b = Record::default();
        b.put_server(s);
        b
    }

    fn episodes(ops: Vec<EpisodeChange>) -> Record {
        Record {
            episodes: ops,
            ..Record::default()
        }
    }

    fn after(d: Duration) -> Ts {
        T0.saturating_add(d)
    }

    /// Guards the store-busy path: a batch the writer had no room for goes
    /// back in front of newer writes; newer current state wins.
    #[test]
    fn restored_batch_keeps_history_order_and_newer_state_wins() {
        let mut o = outbox();
        o.absorb(state(&proxy("p1", 1)));
        o.absorb(episodes(vec![close(1)]));
        let older = o.take_pending(T0);
        o.absorb(state(&proxy("p1", 2)));
        o.absorb(episodes(vec![close(2)]));
        o.restore(older);
        let ids: Vec<i64> = o
            .pending
            .episodes
            .iter()
            .map(|e| match e {
                EpisodeChange::Close { id, .. } => *id,
                _ => 0,
            })
            .collect();
        assert_eq!(ids, vec![1, 2]);
        let p1 = &o.pending.servers[&(Kind::Proxy, "p1".to_string())];
        assert_eq!(p1.server().map(|s| s.expires), Some(Ts(2)));
    }

    /// Guards the history bound across steps: what one step produced and
    /// what waits together keep at most the bound, the rest counted.
    #[test]
    fn gathered_history_keeps_its_bound() {
        let mut o = outbox();
        for i in 0..3 {
            let mut b = Record::default();
            for j in 0..6 {
                b.event(
                    HistoryEntry {
                        at: Ts(i * 10 + j),
                        kind: crate::domain::Subject::Proxy,
                        name: "p1".into(),
                        event: crate::domain::HistoryEvent::Heartbeat,
                        expires: None,
                        ttl_us: None,
                        detail: String::new(),
                    },
                    10,
                );
            }
            o.absorb(b);
        }
        let b = o.take_due(T0);
        assert_eq!(b.events.len(), 10);
        assert_eq!(b.dropped_events, 8);
        assert_eq!(b.events[9].at, Ts(13), "the oldest are kept");
    }

    /// Guards the episode bound on the hand-over path: batches the store
    /// had no room for, put back again and again through an outage, keep
    /// their waiting episode changes compacted past the bound.
    #[test]
    fn a_long_outage_keeps_waiting_episode_changes_bounded() {
        let mut o = outbox();
        let mut id = 0;
        let per_round = 5_000;
        for _ in 0..40 {
            let mut ops = Vec::new();
            for _ in 0..per_round {
                id += 1;
                ops.push(EpisodeChange::Open {
                    id,
                    agent: "a1".into(),
                    state: crate::domain::AgentState::Stranded,
                    reasons: String::new(),
                    cause: None,
                    started: Ts(id),
                    incident: None,
                });
                ops.push(close(id));
            }
            o.absorb(episodes(ops));
            let refused = o.take_pending(T0);
            o.restore(refused);
            let waiting = o.pending.episodes.len();
            assert!(waiting <= MAX_PENDING_EPISODES, "{waiting}");
        }
        assert!(
            o.pending.dropped_events >= (2 * 40 * per_round - MAX_PENDING_EPISODES) as u64 / 2,
            "{}",
            o.pending.dropped_events
        );
    }

    /// Guards the snapshot throttle: history is due at once, current state
    /// only after STATE_WRITE_EVERY.
    #[test]
    fn current_state_is_written_at_most_every_period() {
        let mut o = outbox();
        o.take_pending(T0);
        o.absorb(state(&proxy("p1", 5)));
        o.absorb(episodes(vec![close(1)]));
        let first = o.take_due(T0);
        assert_eq!(first.episodes.len(), 1);
        assert!(!first.has_state(), "state waits for its period");
        assert!(o.has_pending() && !o.has_due(T0));
        let later = after(STATE_WRITE_EVERY);
        assert!(o.has_due(later));
        assert!(o.take_due(later).has_state());
    }

    /// Guards the snapshot budget: after a snapshot of many rows the next
    /// waits in proportion, so a storm over a large fleet leaves the writer
    /// to the history.
    #[test]
    fn a_large_snapshot_spaces_the_next_in_proportion() {
        let mut o = outbox();
        let rows = 3 * STATE_ROWS_PER_SECOND;
        let mut b = Record::default();
        for i in 0..rows {
            b.put_server(&proxy(&format!("p{i}"), 5));
        }
        o.absorb(b);
        let t1 = after(STATE_WRITE_EVERY);
        assert_eq!(o.take_due(t1).state_rows() as u64, rows);
        o.absorb(state(&proxy("p0", 6)));
        assert!(
            !o.has_due(t1.saturating_add(STATE_WRITE_EVERY)),
            "three seconds' worth of rows: not yet"
        );
        let t2 = t1.saturating_add(3 * STATE_WRITE_EVERY);
        assert!(o.has_due(t2));
        assert_eq!(o.take_due(t2).state_rows(), 1);
        o.absorb(state(&proxy("p0", 7)));
        assert!(
            o.has_due(t2.saturating_add(STATE_WRITE_EVERY)),
            "a small snapshot: back to the period"
        );
    }

    /// A follower's rows are the leader's to write: none is kept, and what
    /// it hands over says who made it. A new leader's batches carry its
    /// fence, and nothing from before.
    #[test]
    fn a_follower_keeps_nothing_and_a_leader_stamps_its_fence() {
        let mut o = outbox();
        o.follow();
        o.absorb(episodes(vec![close(1)]));
        assert!(!o.has_pending());
        let b = o.take_pending(T0);
        assert!(b.is_empty());
        assert_eq!(b.fence, Fence::Follower);
        let fence = Fence::Leader {
            replica: "r2".into(),
            term: 7,
        };
        o.lead(fence.clone());
        o.absorb(episodes(vec![close(2)]));
        let b = o.take_pending(T0);
        assert_eq!(b.fence, fence);
        assert_eq!(b.episodes.len(), 1);
        // A batch made under the follower's fence is not put back.
        o.restore(WriteBatch::new(episodes(vec![close(3)]), Fence::Follower));
        assert!(!o.has_pending());
    }
}
