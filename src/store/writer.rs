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

use sqlx::{Database, Encode, Postgres, QueryBuilder, Sqlite, Transaction, Type};
use tokio::sync::{mpsc, oneshot};
use tracing::{debug_span, error, warn, Instrument};

use super::batch::WriteBatch;
use super::bulk::{dialect, values_pieces};
use super::lease::Fence;
use super::{is_permanent, on_pool, Db, StoreError};
use crate::clock::Ts;
use crate::domain::{text, HistoryEvent, Server, Subject, Tunnel, MAX_NAME_LEN};
use crate::domain::{EpisodeChange, HistoryEntry, IncidentRecord, ResourceChange};
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
    health: &Arc<super::health::StoreHealth>,
    depth: usize,
    rt: &mut crate::supervise::Runtime,
) -> WriterHandle {
    let opts = WriterOptions {
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
        #[allow(clippy::disallowed_methods)] // commit duration histogram
        let started = std::time::Instant::now();
        let e = match commit_batch(pool, &batch, isolate, opts.clock.now())
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

/// What became of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Committed {
    Written,
    /// Made under a lease this replica no longer holds: the new leader
    /// writes history now, and this batch is not committed.
    Fenced,
}

/// Checks a batch's [`Fence`] inside the transaction that writes it.
pub(super) trait CheckFence {
    async fn holds(&mut self, fence: &Fence) -> Result<bool, sqlx::Error>;
}

impl CheckFence for Transaction<'static, Sqlite> {
    async fn holds(&mut self, fence: &Fence) -> Result<bool, sqlx::Error> {
        // One process per SQLite file: only `Sole` is ever made for it.
        Ok(*fence == Fence::Sole)
    }
}

impl CheckFence for Transaction<'static, Postgres> {
    async fn holds(&mut self, fence: &Fence) -> Result<bool, sqlx::Error> {
        match fence {
            Fence::Sole => Ok(true),
            Fence::Follower => Ok(false),
            Fence::Leader { replica, term } => {
                super::lease::still_leads(self, replica, *term).await
            }
        }
    }
}

/// Commits one batch in one transaction, if its fence still holds.
pub async fn commit(db: &Db, b: &WriteBatch) -> Result<Committed, sqlx::Error> {
    // Not isolating: nothing is refused row by row, so no time is needed
    // for refusals.
    commit_batch(db, b, false, Ts::ZERO).await.map(|(c, _)| c)
}

/// A row the database refused for what it holds: recorded as rejected
/// (a history row of its own) while the rest of its batch commits.
#[derive(Clone, Debug)]
pub struct Refused {
    pub subject: Subject,
    pub name: String,
    pub table: &'static str,
    pub error: String,
}

impl Refused {
    fn new(subject: Subject, name: &str, table: &'static str, e: &sqlx::Error) -> Refused {
        Refused {
            subject,
            name: text::bounded(name, MAX_NAME_LEN),
            table,
            error: text::excerpt(&e.to_string()),
        }
    }
}

/// Runs one statement on the transaction. Isolating (`$refused` is
/// `Some`), it runs in a savepoint of its own: a statement the database
/// refuses for what it holds ([`is_permanent`]) is rolled back alone and
/// recorded; any other error fails the transaction as usual.
macro_rules! exec {
    ($tx:ident, $refused:ident, ($subject:expr, $name:expr, $table:literal), $q:expr) => {
        match $refused.as_mut() {
            None => {
                $q.execute(&mut *$tx).await?;
            }
            Some(refused) => {
                let mut sp = sqlx::Connection::begin(&mut *$tx).await?;
                match $q.execute(&mut *sp).await {
                    Ok(_) => sp.commit().await?,
                    Err(e) if is_permanent(&e) => {
                        sp.rollback().await?;
                        refused.push(Refused::new($subject, $name, $table, &e));
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    };
}

/// Commits one batch in one transaction, if its fence still holds. With
/// `isolate`, row by row, each in a savepoint: what the database refuses
/// is returned (and recorded as rejected history in the same transaction,
/// at the batch's last history row or, with none, at `now`) and
/// everything else is written.
pub async fn commit_batch(
    db: &Db,
    b: &WriteBatch,
    isolate: bool,
    now: Ts,
) -> Result<(Committed, Vec<Refused>), sqlx::Error> {
    let mut refused: Option<Vec<Refused>> = isolate.then(Vec::new);
    on_pool!(db, pool => {
    let sql = dialect(pool);
    // Whether the fence holds is decided last, just before COMMIT, where
    // a leader's check share-locks the lease row: held from the first
    // statement, that lock would keep the lease from being renewed for as
    // long as a large batch takes (and the leader would step down for it).
    if matches!(b.fence, Fence::Follower) {
        return Ok((Committed::Fenced, Vec::new()));
    }
    let mut tx = pool.begin().await?;
    for (kind, rows) in &b.replace_servers {
        sqlx::query("DELETE FROM resources WHERE kind = $1")
            .bind(kind.as_str())
            .execute(&mut *tx)
            .await?;
        for chunk in sql.pieces(rows, isolate) {
            exec!(tx, refused, (Subject::from(*kind), &chunk[0].name, "resources"),
                sql.upsert_servers(chunk).build());
        }
    }
    let (mut puts, mut expiries, mut dels): (Vec<&Server>, Vec<&Server>, Vec<_>) =
        (Vec::new(), Vec::new(), Vec::new());
    for (key, row) in &b.servers {
        match row {
            ResourceChange::Put(s) => puts.push(s),
            // Row by row, each written whole.
            ResourceChange::Expiry(s) if isolate => puts.push(s),
            ResourceChange::Expiry(s) => expiries.push(s),
            ResourceChange::Delete => dels.push(key),
        }
    }
    for chunk in sql.pieces(&puts, isolate) {
        exec!(tx, refused, (Subject::from(chunk[0].kind), &chunk[0].name, "resources"),
            sql.upsert_servers(chunk).build());
    }
    sql.write_expiries(&mut tx, &expiries).await?;
    for (kind, name) in dels {
        exec!(tx, refused, (Subject::from(*kind), name, "resources"),
            sqlx::query("DELETE FROM resources WHERE kind = $1 AND name = $2")
                .bind(kind.as_str())
                .bind(name.as_str()));
    }
    if let Some(rows) = &b.replace_tunnels {
        sqlx::query("DELETE FROM tunnels").execute(&mut *tx).await?;
        for chunk in sql.pieces(rows, isolate) {
            exec!(tx, refused, (Subject::TunnelConnection, &chunk[0].name, "tunnels"),
                sql.upsert_tunnels(chunk).build());
        }
    }
    let (puts, dels): (Vec<_>, Vec<_>) = b.tunnels.iter().partition(|(_, v)| v.is_some());
    let puts: Vec<&Tunnel> = puts.into_iter().filter_map(|(_, v)| v.as_ref()).collect();
    for chunk in sql.pieces(&puts, isolate) {
        exec!(tx, refused, (Subject::TunnelConnection, &chunk[0].name, "tunnels"),
            sql.upsert_tunnels(chunk).build());
    }
    for (name, _) in dels {
        exec!(tx, refused, (Subject::TunnelConnection, name, "tunnels"),
            sqlx::query("DELETE FROM tunnels WHERE name = $1").bind(name.as_str()));
    }
    if isolate {
        for chunk in sql.pieces(&b.events, true) {
            exec!(tx, refused, (chunk[0].kind, &chunk[0].name, "events"),
                sql.insert_events(chunk).build());
        }
    } else {
        sql.write_events(&mut tx, &b.events).await?;
    }
    for chunk in values_pieces(&b.health, isolate) {
        let mut q = QueryBuilder::new(
            "INSERT INTO health_transitions (auth_server, addr, at_us, from_status, to_status, mode, detail) ",
        );
        q.push_values(chunk, |mut r, h| {
            r.push_bind(h.auth_server.as_str())
                .push_bind(h.addr.as_str())
                .push_bind(h.at.as_micros())
                .push_bind(h.from)
                .push_bind(h.to)
                .push_bind(h.mode)
                .push_bind(h.detail.as_str());
        });
        exec!(tx, refused, (Subject::AuthServer, &chunk[0].auth_server, "health_transitions"),
            q.build());
    }
    for op in &b.episodes {
        match op {
            EpisodeChange::Open {
                id,
                agent,
                state,
                reasons,
                cause,
                started,
                incident,
            } => {
                exec!(tx, refused, (Subject::Agent, agent, "episodes"),
                sqlx::query(
                    "INSERT INTO episodes (id, agent, state, reasons, cause, cause_resource, started_us, incident_id) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                )
                .bind(id)
                .bind(agent.as_str())
                .bind(*state)
                .bind(reasons.as_str())
                .bind(cause.as_ref().map_or("", |c| c.kind.as_str()))
                .bind(cause.as_ref().map_or("", |c| c.resource.as_str()))
                .bind(started.as_micros())
                .bind(*incident));
            }
            EpisodeChange::Update {
                id,
                reasons,
                cause,
                incident,
            } => {
                exec!(tx, refused, (Subject::Agent, &format!("episode {id}"), "episodes"),
                sqlx::query(
                    "UPDATE episodes SET reasons = $1, cause = $2, cause_resource = $3, incident_id = $4 WHERE id = $5",
                )
                .bind(reasons.as_str())
                .bind(cause.as_ref().map_or("", |c| c.kind.as_str()))
                .bind(cause.as_ref().map_or("", |c| c.resource.as_str()))
                .bind(*incident)
                .bind(id));
            }
            EpisodeChange::Close {
                id,
                ended,
                ended_by_signal,
                end_reason,
            } => {
                exec!(tx, refused, (Subject::Agent, &format!("episode {id}"), "episodes"),
                sqlx::query(
                    "UPDATE episodes SET ended_us = $1, ended_by_signal = $2, end_reason = $3 WHERE id = $4",
                )
                .bind(ended.as_micros())
                .bind(*ended_by_signal)
                .bind(*end_reason)
                .bind(id));
            }
        }
    }
    for chunk in values_pieces(&b.samples, isolate) {
        let mut q = QueryBuilder::new("INSERT INTO samples (at_us, agents, stranded, degraded) ");
        q.push_values(chunk, |mut r, s| {
            r.push_bind(s.at.as_micros())
                .push_bind(i64::from(s.agents))
                .push_bind(i64::from(s.stranded))
                .push_bind(i64::from(s.degraded));
        });
        q.push(
            " ON CONFLICT (at_us) DO UPDATE SET agents = excluded.agents, \
             stranded = excluded.stranded, degraded = excluded.degraded",
        );
        exec!(tx, refused, (Subject::Store, "samples", "samples"), q.build());
    }
    let incidents: Vec<&IncidentRecord> = b.incidents.values().collect();
    for chunk in values_pieces(&incidents, isolate) {
        exec!(tx, refused, (Subject::Store, &format!("incident {}", chunk[0].id), "incidents"),
            upsert_incidents(chunk).build());
    }
    let refused = refused.unwrap_or_default();
    if !refused.is_empty() {
        // What was refused becomes history of its own, in words the
        // database takes (names and errors cleaned and bounded).
        let at = b.events.last().map_or(now, |e| e.at);
        let rows: Vec<HistoryEntry> = refused.iter().map(|r| r.history_row(at)).collect();
        sql.write_events(&mut tx, &rows).await?;
    }
    if !tx.holds(&b.fence).await? {
        return Ok((Committed::Fenced, Vec::new()));
    }
    tx.commit().await?;
    Ok((Committed::Written, refused))
    })
}

impl Refused {
    /// The history row that records this refusal.
    fn history_row(&self, at: Ts) -> HistoryEntry {
        HistoryEntry {
            at,
            kind: self.subject,
            name: self.name.clone(),
            event: HistoryEvent::Rejected,
            expires: None,
            ttl_us: None,
            detail: format!(
                "the database refused this {} row: {}",
                self.table, self.error
            ),
        }
    }
}

fn upsert_incidents<DB: Database>(rows: &[&IncidentRecord]) -> QueryBuilder<DB>
where
    DB::Arguments: Default,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
{
    let mut q = QueryBuilder::new(
        "INSERT INTO incidents (id, cause, resource, started_us, ended_us, peak_stranded, peak_degraded, \
         agents, signals, stranded_us, recover_p50_us, recover_max_us) ",
    );
    q.push_values(rows, |mut r, i| {
        r.push_bind(i.id)
            .push_bind(i.cause.as_str())
            .push_bind(i.resource.as_str())
            .push_bind(i.started.as_micros())
            .push_bind(i.ended.map(Ts::as_micros))
            .push_bind(i64::from(i.peak_stranded))
            .push_bind(i64::from(i.peak_degraded))
            .push_bind(i64::from(i.agents))
            .push_bind(i64::from(i.signals))
            .push_bind(i.stranded_us)
            .push_bind(i.recover_p50_us)
            .push_bind(i.recover_max_us);
    });
    q.push(
        " ON CONFLICT (id) DO UPDATE SET cause = excluded.cause, resource = excluded.resource, \
         started_us = excluded.started_us, ended_us = excluded.ended_us, \
         peak_stranded = excluded.peak_stranded, peak_degraded = excluded.peak_degraded, \
         agents = excluded.agents, signals = excluded.signals, stranded_us = excluded.stranded_us, \
         recover_p50_us = excluded.recover_p50_us, recover_max_us = excluded.recover_max_us",
    );
    q
}
