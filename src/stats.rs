//! Lifeline's own counters: lock-free atomics shared by every room, read by
//! `/api/v1/summary` and `/metrics`. Counting never blocks a hot path.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::ingest::validate::RejectCode;

#[derive(Default, Debug)]
pub struct Stats {
    /// Upstream events applied (PUT/DELETE, after validation).
    pub events_applied: AtomicU64,
    /// Stream events (after INIT) handed to the fleet, valid or not.
    pub stream_events: AtomicU64,
    /// The same, for the current watch session only.
    pub session_events: AtomicU64,
    /// PUTs whose `expires` moved.
    pub heartbeats: AtomicU64,
    /// Rejected inputs, by code (indexed by `RejectCode as usize`).
    pub rejected: [AtomicU64; RejectCode::COUNT],
    /// Watch streams opened (each a new generation).
    pub watch_generations: AtomicU64,
    /// Watch streams lost (error or end).
    pub watch_failures: AtomicU64,
    /// Health stream failures (any auth server).
    pub health_failures: AtomicU64,
    /// History rows committed to SQLite.
    pub store_events_committed: AtomicU64,
    /// History rows dropped because SQLite fell too far behind.
    pub store_events_dropped: AtomicU64,
    /// Write transactions committed.
    pub store_batches: AtomicU64,
    /// Write transactions that failed (and were retried or dropped).
    pub store_errors: AtomicU64,
    /// Expiry timers that fired.
    pub timers_fired: AtomicU64,
    /// Agent state changes.
    pub state_changes: AtomicU64,
    /// Discovery messages sent, full and delta, and their encoded bytes.
    pub discovery_full: AtomicU64,
    pub discovery_delta: AtomicU64,
    pub discovery_bytes: AtomicU64,
    /// Audited signals by what became of them.
    pub signals_sent: AtomicU64,
    pub signals_acked: AtomicU64,
    pub signals_failed: AtomicU64,
    pub signals_undeliverable: AtomicU64,
    pub signals_timeout: AtomicU64,
    /// Signal audit updates dropped because SQLite fell behind.
    pub signal_updates_dropped: AtomicU64,
    /// Agent messages refused (bad Hello, bad report, unknown ack).
    pub agent_messages_rejected: AtomicU64,
}

impl Stats {
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub fn reject(&self, code: RejectCode) {
        Stats::inc(&self.rejected[code as usize]);
    }

    pub fn snapshot(&self) -> StatsSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        StatsSnapshot {
            events_applied: get(&self.events_applied),
            heartbeats: get(&self.heartbeats),
            rejected: RejectCode::ALL
                .iter()
                .map(|c| (c.as_str(), get(&self.rejected[*c as usize])))
                .filter(|(_, n)| *n > 0)
                .collect(),
            watch_generations: get(&self.watch_generations),
            watch_failures: get(&self.watch_failures),
            health_failures: get(&self.health_failures),
            store_events_committed: get(&self.store_events_committed),
            store_events_dropped: get(&self.store_events_dropped),
            store_batches: get(&self.store_batches),
            store_errors: get(&self.store_errors),
            timers_fired: get(&self.timers_fired),
            state_changes: get(&self.state_changes),
            signals: SignalStatsSnapshot {
                discovery_full: get(&self.discovery_full),
                discovery_delta: get(&self.discovery_delta),
                discovery_bytes: get(&self.discovery_bytes),
                sent: get(&self.signals_sent),
                acked: get(&self.signals_acked),
                failed: get(&self.signals_failed),
                undeliverable: get(&self.signals_undeliverable),
                timeout: get(&self.signals_timeout),
                audit_updates_dropped: get(&self.signal_updates_dropped),
                agent_messages_rejected: get(&self.agent_messages_rejected),
            },
        }
    }
}

#[derive(Debug, Serialize, Clone)]
pub struct StatsSnapshot {
    pub events_applied: u64,
    pub heartbeats: u64,
    pub rejected: std::collections::BTreeMap<&'static str, u64>,
    pub watch_generations: u64,
    pub watch_failures: u64,
    pub health_failures: u64,
    pub store_events_committed: u64,
    pub store_events_dropped: u64,
    pub store_batches: u64,
    pub store_errors: u64,
    pub timers_fired: u64,
    pub state_changes: u64,
    pub signals: SignalStatsSnapshot,
}

#[derive(Debug, Serialize, Clone)]
pub struct SignalStatsSnapshot {
    pub discovery_full: u64,
    pub discovery_delta: u64,
    pub discovery_bytes: u64,
    pub sent: u64,
    pub acked: u64,
    pub failed: u64,
    pub undeliverable: u64,
    pub timeout: u64,
    pub audit_updates_dropped: u64,
    pub agent_messages_rejected: u64,
}
