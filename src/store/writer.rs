//! The writer: takes `WriteBatch`es from a bounded channel and commits each
//! in one transaction with multi-row statements; on PostgreSQL, a batch's
//! current state and its history go in two transactions at once, on two
//! connections (see [`split`]). A failed commit is
//! retried with backoff (capped, full jitter) until the database takes it:
//! current state, episodes and health transitions are never dropped. After a
//! few failures the batch sheds its heartbeat history (counted), the only
//! rows that may be lost. Meanwhile the channel fills, the fleet coalesces
//! what follows, and [`StoreHealth`](super::health::StoreHealth) tells
//! `/readyz` and `/metrics` that the store is failing.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tracing::{debug_span, error, warn, Instrument};

use super::batch::WriteBatch;
pub use super::commit::{commit, commit_batch, Committed, Refused};
use super::{is_permanent, Db, StoreError};
use crate::clock::Ts;
use crate::domain::{ClusterName, HistoryEntry};
use crate::domain::{HistoryEvent, Subject};
use crate::stats::Stats;

/// Failed attempts after which a batch sheds its heartbeat history.
const SHED_HISTORY_AFTER: u32 = 5;

pub enum WriterMsg {
    Batch(Box<WriteBatch>),
    /// Answers once everything sent before it is committed.
    Flush(oneshot::Sender<()>),
}

/// The sending side of the writer's bounded channel.
#[derive(Clone)]
pub struct WriterHandle {
    tx: mpsc::Sender<WriterMsg>,
}

impl WriterHandle {
    /// Hands a batch over if the writer has room; gives it back otherwise.
    pub fn try_send(&self, batch: Box<WriteBatch>) -> Result<(), Box<WriteBatch>> {
        match self.tx.try_send(WriterMsg::Batch(batch)) {
            Ok(()) => Ok(()),
            Err(mpsc::error::TrySendError::Full(WriterMsg::Batch(b)))
            | Err(mpsc::error::TrySendError::Closed(WriterMsg::Batch(b))) => Err(b),
            Err(_) => Err(Box::default()),
        }
    }

    /// Waits until the writer has room for one batch.
    pub async fn reserve(&self) -> Result<mpsc::Permit<'_, WriterMsg>, StoreError> {
        self.tx.reserve().await.map_err(|_| StoreError::WriterGone)
    }

    /// True when a batch would be taken right now.
    pub fn has_room(&self) -> bool {
        self.tx.capacity() > 0
    }

    /// Sends a batch, waiting for room.
    pub async fn send(&self, batch: WriteBatch) -> Result<(), StoreError> {
        self.tx
            .send(WriterMsg::Batch(Box::new(batch)))
            .await
            .map_err(|_| StoreError::WriterGone)
    }

    /// Waits until everything sent so far is committed.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let (tx, rx) = oneshot::channel();
        self.tx
            .send(WriterMsg::Flush(tx))
            .await
            .map_err(|_| StoreError::WriterGone)?;
        rx.await.map_err(|_| StoreError::WriterGone)
    }
}

/// What the writer needs besides its channel.
pub struct WriterOptions {
    /// Whose rows this writer commits: every row it writes names it.
    pub cluster: ClusterName,
    pub stats: Arc<Stats>,
    pub health: Arc<super::health::StoreHealth>,
    pub clock: crate::clock::Clock,
    /// Bounds the batches waiting in the channel.
    pub depth: usize,
    /// Retries stop at shutdown (what is still refused is logged as lost).
    pub stop: tokio_util::sync::CancellationToken,
}

/// Starts the writer on `rt` (a critical task): its handle.
pub fn start(
    db: &Db,
    cluster: &ClusterName,
    health: &Arc<super::health::StoreHealth>,
    depth: usize,
    rt: &mut crate::supervise::Runtime,
) -> WriterHandle {
    let opts = WriterOptions {
        cluster: cluster.clone(),
        stats: rt.stats.clone(),
        health: health.clone(),
        clock: rt.clock,
        depth,
        stop: rt.shutdown.clone(),
    };
    let (handle, run) = writer(db.clone(), opts);
    rt.spawn_critical(
        "store writer",
        run.instrument(tracing::info_span!("store.writer")),
    );
    handle
}

/// The writer: its handle and the future to run (the caller spawns it).
pub fn writer(
    pool: Db,
    opts: WriterOptions,
) -> (WriterHandle, impl std::future::Future<Output = ()> + Send) {
    let (tx, rx) = mpsc::channel::<WriterMsg>(opts.depth.max(1));
    let run = async move {
        match &pool {
            // One writer at a time per SQLite file: both parts in one
            // transaction.
            Db::Sqlite(_) => serial(rx, &pool, &opts).await,
            Db::Postgres(_) => split(rx, &pool, &opts).await,
        }
    };
    (WriterHandle { tx }, run)
}

/// Each batch whole, in one transaction, in order.
async fn serial(rx: mpsc::Receiver<WriterMsg>, pool: &Db, opts: &WriterOptions) {
    in_order(rx, pool, opts, None).await
}

/// Each batch in order; with `halves_from`, one of current state alone
/// with at least that many rows as two transactions at once, on two
/// connections (see [`WriteBatch::split_half`]), the next batch after
/// both.
async fn in_order(
    mut rx: mpsc::Receiver<WriterMsg>,
    pool: &Db,
    opts: &WriterOptions,
    halves_from: Option<usize>,
) {
    while let Some(msg) = rx.recv().await {
        match msg {
            WriterMsg::Batch(mut batch) => {
                match halves_from.and_then(|from| batch.split_half(from)) {
                    Some(other) => {
                        futures::join!(
                            commit_with_retry(pool, opts, *batch),
                            commit_with_retry(pool, opts, other)
                        );
                    }
                    None => commit_with_retry(pool, opts, *batch).await,
                }
            }
            WriterMsg::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

/// Batches waiting on each side of a split writer: one, so that the
/// fleet keeps coalescing while both are busy.
const SIDE_DEPTH: usize = 1;

/// Current-state rows from which a split writer commits a snapshot as two
/// halves at once. A large fleet's snapshot (~7 µs a row on the server,
/// one backend's work) otherwise ends a heartbeat storm with one core
/// busy and the other idle; a small one is not worth a second
/// transaction.
pub const STATE_HALVES_FROM: usize = 20_000;

/// Two transactions at once, on two connections: each batch's current
/// state (resources and tunnels) is written by a side of its own (a large
/// snapshot as two halves at once), so that
/// a snapshot of a large fleet is written while history goes on, and the
/// other way round, on a server with cores for both. Each side keeps its
/// batches' order and checks the fence in its own transaction; the tables
/// they write are disjoint. A flush answers once both sides have committed
/// what came before it.
async fn split(mut rx: mpsc::Receiver<WriterMsg>, pool: &Db, opts: &WriterOptions) {
    let (history_tx, history_rx) = mpsc::channel::<WriterMsg>(SIDE_DEPTH);
    let (state_tx, state_rx) = mpsc::channel::<WriterMsg>(SIDE_DEPTH);
    let dispatch = async move {
        while let Some(msg) = rx.recv().await {
            let sent = match msg {
                WriterMsg::Batch(mut batch) => {
                    let state = batch.take_state();
                    let state_sent = match state {
                        Some(s) => state_tx.send(WriterMsg::Batch(Box::new(s))).await.is_ok(),
                        None => true,
                    };
                    let history_sent = batch.is_empty() && batch.dropped_events == 0
                        || history_tx.send(WriterMsg::Batch(batch)).await.is_ok();
                    state_sent && history_sent
                }
                WriterMsg::Flush(done) => {
                    let (h, h_done) = oneshot::channel();
                    let (s, s_done) = oneshot::channel();
                    let sent = history_tx.send(WriterMsg::Flush(h)).await.is_ok()
                        && state_tx.send(WriterMsg::Flush(s)).await.is_ok();
                    if sent && h_done.await.is_ok() && s_done.await.is_ok() {
                        let _ = done.send(());
                    }
                    sent
                }
            };
            if !sent {
                return;
            }
        }
    };
    let state = in_order(state_rx, pool, opts, Some(STATE_HALVES_FROM))
        .instrument(tracing::info_span!("store.state"));
    futures::join!(dispatch, serial(history_rx, pool, opts), state);
}

async fn commit_with_retry(pool: &Db, opts: &WriterOptions, mut batch: WriteBatch) {
    let stats = &*opts.stats;
    if batch.dropped_events > 0 {
        Stats::add(&stats.store_events_dropped, batch.dropped_events);
        warn!(
            dropped = batch.dropped_events,
            "the database fell behind: history rows dropped (current state is kept)"
        );
        let gap = gap(opts.clock.now(), batch.dropped_events);
        batch.events.push(gap);
    }
    if batch.is_empty() {
        return;
    }
    let mut events = batch.events.len() as u64;
    // DEBUG: tens per second under load; the histograms cover commits.
    let span = debug_span!("store.commit", events, servers = batch.servers.len());
    let mut retry = opts.health.retry(opts.clock, "write batch");
    // Row by row once the database has refused a row for what it holds.
    let mut isolate = false;
    loop {
        // The commit duration histogram.
        let started = crate::clock::Stopwatch::start();
        let e = match commit_batch(pool, &opts.cluster, &batch, isolate, opts.clock.now())
            .instrument(span.clone())
            .await
        {
            Ok((Committed::Fenced, _)) => {
                // The database answered: it takes writes again, only not
                // this replica's history (its term has passed). Without
                // saying so, a leader cut off mid-write stayed "refusing
                // writes" as a follower, with nothing left to write.
                retry.succeeded();
                Stats::inc(&stats.store_batches_fenced);
                warn!(
                    events,
                    episodes = batch.episodes.len(),
                    "this replica no longer leads: a batch made under its lease is left to the new leader"
                );
                return;
            }
            Ok((Committed::Written, refused)) => {
                if !refused.is_empty() {
                    Stats::add(&stats.store_rows_refused, refused.len() as u64);
                    for r in &refused {
                        error!(
                            table = r.table,
                            subject = r.subject.as_str(),
                            name = %r.name,
                            error = %r.error,
                            "the database refused a row for what it holds: recorded as rejected, the rest of its batch committed"
                        );
                    }
                }
                tracing::debug!(
                    events,
                    servers = batch.servers.len(),
                    episodes = batch.episodes.len(),
                    ms = started.elapsed().as_millis() as u64,
                    "committed"
                );
                Stats::inc(&stats.store_batches);
                Stats::add(&stats.store_events_committed, events);
                stats
                    .hist
                    .store_commit
                    .record(started.elapsed().as_secs_f64());
                stats.hist.store_batch_rows.record(
                    (batch.events.len() + batch.servers.len() + batch.episodes.len()) as f64,
                );
                retry.succeeded();
                return;
            }
            Err(e) if is_permanent(&e) && !isolate => {
                // Not worth a wait: the same rows would be refused again.
                warn!(error = %e, "the database refused a row of this batch; writing it row by row to set that row aside");
                Stats::inc(&stats.store_errors);
                isolate = true;
                continue;
            }
            Err(e) => e,
        };
        Stats::inc(&stats.store_errors);
        if retry.attempts() + 1 == SHED_HISTORY_AFTER && !batch.events.is_empty() {
            error!(
                error = %e,
                shed = events,
                "the database keeps refusing writes: heartbeat history of this batch shed; current state, episodes and health transitions stay pending"
            );
            Stats::add(&stats.store_events_dropped, events);
            batch.events.clear();
            batch.events.push(gap(opts.clock.now(), events));
            events = 1;
        }
        if !retry.failed(&e, &opts.stop).await {
            error!(
                error = %e,
                servers = batch.servers.len(),
                tunnels = batch.tunnels.len(),
                episodes = batch.episodes.len(),
                health = batch.health.len(),
                "shutting down while the database refuses writes: these rows are lost"
            );
            return;
        }
    }
}

/// The history row that marks a gap: `dropped` rows are missing before it.
fn gap(at: Ts, dropped: u64) -> HistoryEntry {
    HistoryEntry {
        at,
        kind: Subject::Store,
        name: "history".into(),
        event: HistoryEvent::Gap,
        expires: None,
        ttl_us: None,
        detail: format!("{dropped} history rows were dropped while the database refused writes"),
    }
}
