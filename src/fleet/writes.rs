//! Write coalescing: what the fleet owes the store. History rows are due at
//! once; current-state rows at most every `STATE_WRITE_EVERY`, and no more
//! than `STATE_ROWS_PER_SECOND` on average, coalesced per resource; a batch
//! the writer had no room for goes back in front.

use std::time::Duration;

use super::state::{Fleet, STATE_ROWS_PER_SECOND, STATE_WRITE_EVERY};
use crate::clock::Ts;
use crate::model::HistoryEvent;
use crate::model::Subject;
use crate::store::{EventRow, Fence, WriteBatch, MAX_PENDING_EPISODES};

impl Fleet {
    pub(super) fn history(&mut self, row: EventRow) {
        // A follower's history is the leader's to write: the rows of every
        // heartbeat are not even kept (see `stamped` for the rest).
        if self.fence == Fence::Follower {
            return;
        }
        self.pending.event(row, self.rules.max_pending_events);
    }

    pub(super) fn note(&mut self, kind: Subject, name: &str, event: HistoryEvent, detail: String) {
        let now = self.now();
        self.history(EventRow {
            at: now,
            kind,
            name: name.to_string(),
            event,
            expires: None,
            ttl_us: None,
            detail,
        });
    }

    /// Takes everything that must be written; the actor hands it over.
    pub fn take_pending(&mut self) -> WriteBatch {
        self.state_written = self.now();
        let rows = self.pending.state_rows() as u64;
        let budget = Duration::from_millis(rows.saturating_mul(1000) / STATE_ROWS_PER_SECOND);
        self.state_gap = budget.max(STATE_WRITE_EVERY);
        let batch = std::mem::take(&mut self.pending);
        self.stamped(batch)
    }

    /// Takes what is due: history at once; the current-state snapshot (what
    /// a restart loads) once its gap has passed, coalesced per resource, so
    /// a heartbeat storm costs one row per resource per gap.
    pub fn take_due(&mut self) -> WriteBatch {
        let now = self.now();
        if self.pending.has_state() && now.since(self.state_written) >= self.state_gap {
            return self.take_pending();
        }
        let batch = self.pending.take_history();
        self.stamped(batch)
    }

    /// Marks a batch with who may write it. A follower's rows are the
    /// leader's to write: they are let go here, and the batch is empty.
    fn stamped(&self, mut batch: WriteBatch) -> WriteBatch {
        if self.fence == Fence::Follower {
            return WriteBatch {
                fence: Fence::Follower,
                ..WriteBatch::default()
            };
        }
        batch.fence = self.fence.clone();
        batch
    }

    /// True when something is due for the store now.
    pub fn has_due(&self) -> bool {
        let p = &self.pending;
        !p.events.is_empty()
            || !p.health.is_empty()
            || !p.episodes.is_empty()
            || p.dropped_events > 0
            || (p.has_state() && self.now().since(self.state_written) >= self.state_gap)
    }

    /// When the held current-state rows fall due, if any are held.
    pub fn state_due_at(&self) -> Option<Ts> {
        self.pending
            .has_state()
            .then(|| self.state_written.saturating_add(self.state_gap))
    }

    /// Puts back a batch the store had no room for; newer rows win. One
    /// made under another lease is not ours to write any more.
    pub fn restore_pending(&mut self, mut older: WriteBatch) {
        if older.fence != self.fence {
            return;
        }
        let mut newer = std::mem::take(&mut self.pending);
        if older.has_state() {
            for (k, rows) in newer.replace_servers.drain(..) {
                older.replace_kind(k, rows);
            }
            older.servers.extend(newer.servers.drain());
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
        newer.dropped_events += older.dropped_events;
        let cap = self.rules.max_pending_events;
        if newer.events.len() > cap {
            newer.dropped_events += (newer.events.len() - cap) as u64;
            newer.events.truncate(cap);
        }
        // Compacted to half past the bound; what compaction cannot drop
        // (the changes of episodes still open) doubles the bound, so a long
        // outage over a large fleet is not compacted on every hand-over.
        if newer.episodes.len() > self.episode_bound {
            let left = newer.bound_episodes(MAX_PENDING_EPISODES / 2);
            self.episode_bound = MAX_PENDING_EPISODES.max(left.saturating_mul(2));
        }
        self.pending = newer;
    }

    /// Shows what waits for the store (`lifeline_store_pending_rows`).
    pub fn count_pending(&self) {
        use crate::stats::PendingRows;
        let (p, stats) = (&self.pending, &self.stats);
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
    use crate::model::{Kind, Server};
    use crate::store::EpisodeOp;

    fn fleet() -> Fleet {
        super::super::state::test_fleet(Ts(1_000_000))
    }

    fn proxy(name: &str, expires: i64) -> Server {
        crate::model::test_server(Kind::Proxy, name, Ts(expires))
    }

    fn close(id: i64) -> EpisodeOp {
        EpisodeOp::close(id, Ts(0), crate::model::EndReason::Recovered)
    }

    /// Guards the store-busy path: a batch the writer had no room for goes
    /// back in front of newer writes; newer current state wins.
    #[test]
    fn restored_batch_keeps_history_order_and_newer_state_wins() {
        let mut f = fleet();
        f.pending.put_server(&proxy("p1", 1));
        f.pending.episodes.push(close(1));
        let older = f.take_pending();
        f.pending.put_server(&proxy("p1", 2));
        f.pending.episodes.push(close(2));
        f.restore_pending(older);
        let ids: Vec<i64> = f
            .pending
            .episodes
            .iter()
            .map(|e| match e {
                EpisodeOp::Close { id, .. } => *id,
                _ => 0,
            })
            .collect();
        assert_eq!(ids, vec![1, 2]);
        let p1 = &f.pending.servers[&(Kind::Proxy, "p1".to_string())];
        assert_eq!(p1.as_ref().map(|s| s.expires), Some(Ts(2)));
    }

    /// Guards the episode bound on the hand-over path: batches the store
    /// had no room for, put back again and again through an outage, keep
    /// their waiting episode changes compacted past the bound.
    #[test]
    fn a_long_outage_keeps_waiting_episode_changes_bounded() {
        let mut f = fleet();
        let mut id = 0;
        let per_round = 5_000;
        for _ in 0..40 {
            for _ in 0..per_round {
                id += 1;
                f.pending.episodes.push(EpisodeOp::Open {
                    id,
                    agent: "a1".into(),
                    state: crate::model::AgentState::Stranded,
                    reasons: String::new(),
                    cause: None,
                    started: Ts(id),
                });
                f.pending.episodes.push(close(id));
            }
            let refused = f.take_pending();
            f.restore_pending(refused);
            let waiting = f.pending.episodes.len();
            assert!(waiting <= MAX_PENDING_EPISODES, "{waiting}");
        }
        assert!(
            f.pending.dropped_events >= (2 * 40 * per_round - MAX_PENDING_EPISODES) as u64 / 2,
            "{}",
            f.pending.dropped_events
        );
    }

    /// Guards the snapshot throttle: history is due at once, current state
    /// only after STATE_WRITE_EVERY.
    #[tokio::test(start_paused = true)]
    async fn current_state_is_written_at_most_every_period() {
        let mut f = fleet();
        f.take_pending();
        f.pending.put_server(&proxy("p1", 5));
        f.note(Subject::Proxy, "p1", HistoryEvent::Update, String::new());
        let first = f.take_due();
        assert_eq!(first.events.len(), 1);
        assert!(!first.has_state(), "state waits for its period");
        assert!(f.has_pending() && !f.has_due());
        tokio::time::advance(STATE_WRITE_EVERY).await;
        assert!(f.has_due());
        assert!(f.take_due().has_state());
    }

    /// Guards the snapshot budget: after a snapshot of many rows the next
    /// waits in proportion, so a storm over a large fleet leaves the writer
    /// to the history.
    #[tokio::test(start_paused = true)]
    async fn a_large_snapshot_spaces_the_next_in_proportion() {
        let mut f = fleet();
        let rows = 3 * STATE_ROWS_PER_SECOND;
        for i in 0..rows {
            f.pending.put_server(&proxy(&format!("p{i}"), 5));
        }
        tokio::time::advance(STATE_WRITE_EVERY).await;
        assert_eq!(f.take_due().state_rows() as u64, rows);
        f.pending.put_server(&proxy("p0", 6));
        tokio::time::advance(STATE_WRITE_EVERY).await;
        assert!(!f.has_due(), "three seconds' worth of rows: not yet");
        tokio::time::advance(2 * STATE_WRITE_EVERY).await;
        assert!(f.has_due());
        assert_eq!(f.take_due().state_rows(), 1);
        tokio::time::advance(STATE_WRITE_EVERY).await;
        f.pending.put_server(&proxy("p0", 7));
        assert!(f.has_due(), "a small snapshot: back to the period");
    }
}
