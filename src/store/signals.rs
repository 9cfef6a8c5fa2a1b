//! The signal audit. Unlike history, these rows are written
//! directly (not through the batch writer): a signal's row must be committed
//! before the API answers for it.
//! Delivery and ack updates arrive in batches from the signals room.

use serde::Serialize;
use std::sync::atomic::{AtomicI64, Ordering};

use sqlx::QueryBuilder;

use super::lease::{CheckFence, Fence};
use super::{on_pool, Db};

use crate::clock::Ts;
use crate::domain::{ClusterName, Outcome, SignalKind};

/// Rows per multi-row statement.
const CHUNK: usize = 400;

/// One audited signal, as stored and as the API shows it.
#[derive(Clone, Debug, Serialize, PartialEq, utoipa::ToSchema)]
pub struct SignalRecord {
    pub id: i64,
    /// The cluster of the agent it was sent to.
    #[schema(value_type = String, example = "default")]
    pub cluster: ClusterName,
    pub kind: SignalKind,
    pub agent: String,
    pub proxy: String,
    pub reason: String,
    pub requested_by: String,
    pub created: Ts,
    pub delivered: Option<Ts>,
    pub acked: Option<Ts>,
    pub outcome: Outcome,
    pub detail: String,
    /// Created → acked, in milliseconds.
    pub latency_ms: Option<f64>,
    /// It asks the agent's sidecar to restart the agent (the peer holding
    /// the agent's stream is restart-only).
    pub restart: bool,
    /// Until when its ack is awaited: `signals.restart_ack_timeout` after
    /// it was made for a restart, `signals.ack_timeout` otherwise.
    pub deadline: Option<Ts>,
}

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    cluster: String,
    kind: SignalKind,
    agent: String,
    proxy: String,
    reason: String,
    requested_by: String,
    created_us: i64,
    delivered_us: Option<i64>,
    acked_us: Option<i64>,
    outcome: Outcome,
    detail: String,
    latency_us: Option<i64>,
    restart: i64,
    deadline_us: Option<i64>,
}

impl From<Row> for SignalRecord {
    fn from(r: Row) -> Self {
        SignalRecord {
            id: r.id,
            cluster: ClusterName::new(&r.cluster),
            kind: r.kind,
            agent: r.agent,
            proxy: r.proxy,
            reason: r.reason,
            requested_by: r.requested_by,
            created: Ts(r.created_us),
            delivered: r.delivered_us.map(Ts),
            acked: r.acked_us.map(Ts),
            outcome: r.outcome,
            detail: r.detail,
            latency_ms: r.latency_us.map(|us| us as f64 / 1000.0),
            restart: r.restart != 0,
            deadline: r.deadline_us.map(Ts),
        }
    }
}

/// A change to an audited signal after it was created.
#[derive(Clone, Debug)]
pub enum SignalUpdate {
    Delivered {
        id: i64,
        at: Ts,
    },
    /// Final: acked (ok or failed), undeliverable or timed out.
    Outcome {
        id: i64,
        at: Ts,
        outcome: Outcome,
        detail: String,
        /// Set when the agent acked.
        acked: bool,
        latency_us: Option<i64>,
    },
}

impl SignalUpdate {
    /// The signal it updates.
    pub fn id(&self) -> i64 {
        match self {
            SignalUpdate::Delivered { id, .. } | SignalUpdate::Outcome { id, .. } => *id,
        }
    }
}

/// Where new signal ids come from. On SQLite one process owns the file:
/// a counter after the highest stored id. On PostgreSQL several replicas
/// insert signals: the table's own sequence hands each a distinct id.
#[derive(Debug)]
pub struct SignalIds {
    next: AtomicI64,
}

impl SignalIds {
    pub async fn start(db: &Db) -> Result<SignalIds, sqlx::Error> {
        let next = match db {
            Db::Sqlite(pool) => {
                let (max,): (Option<i64>,) = sqlx::query_as("SELECT max(id) FROM signals")
                    .fetch_one(pool)
                    .await?;
                max.unwrap_or(0) + 1
            }
            Db::Postgres(_) => 0,
        };
        Ok(SignalIds {
            next: AtomicI64::new(next),
        })
    }

    /// `n` new ids, in increasing order.
    pub async fn take(&self, db: &Db, n: usize) -> Result<Vec<i64>, sqlx::Error> {
        match db {
            Db::Sqlite(_) => {
                let first = self.next.fetch_add(n as i64, Ordering::Relaxed);
                Ok((first..first + n as i64).collect())
            }
            Db::Postgres(pg) => {
                let mut ids: Vec<i64> = pg
                    .bounded(
                        sqlx::query_scalar(
                            "SELECT nextval(pg_get_serial_sequence('signals', 'id')) FROM generate_series(1, $1)",
                        )
                        .bind(n as i64)
                        .fetch_all(&pg.pool),
                    )
                    .await?;
                ids.sort_unstable();
                Ok(ids)
            }
        }
    }
}

/// Commits new signal rows in one transaction.
pub async fn insert(db: &Db, rows: &[SignalRecord]) -> Result<(), sqlx::Error> {
    insert_fenced(db, rows, &Fence::Sole).await.map(|_| ())
}

/// What restarts a batch may add, decided inside the transaction that
/// records them (never from a count read before it). Counted within the
/// batch's cluster: a storm of restarts in one cluster neither fills
/// another's cap nor pauses it.
#[derive(Clone, Copy, Debug)]
pub struct Admission {
    /// Most restarts pending or delivered at once in the cluster, across
    /// replicas.
    pub limit: usize,
    /// Automatic: none is admitted while the last `pause_after` answered
    /// restarts all failed or timed out.
    pub pause_after: Option<usize>,
}

/// Why restart rows were left out of a batch.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeftOut {
    /// Past the cap.
    pub at_cap: Vec<i64>,
    /// Automatic restarts, paused after failures.
    pub paused: Vec<i64>,
}

/// Inserts rows in statements of [`CHUNK`] rows, on either engine's
/// transaction.
macro_rules! insert_rows_impl {
    ($tx:expr, $rows:expr) => {{
        let rows: Vec<&SignalRecord> = $rows.collect();
        for chunk in rows.chunks(CHUNK) {
            let mut q = QueryBuilder::new(
                "INSERT INTO signals (id, cluster, kind, agent, proxy, reason, requested_by, created_us, delivered_us, acked_us, outcome, detail, latency_us, restart, deadline_us) ",
            );
            q.push_values(chunk, |mut b, r| {
                b.push_bind(r.id)
                    .push_bind(r.cluster.as_str())
                    .push_bind(r.kind)
                    .push_bind(r.agent.clone())
                    .push_bind(r.proxy.clone())
                    .push_bind(r.reason.clone())
                    .push_bind(r.requested_by.clone())
                    .push_bind(r.created.as_micros())
                    .push_bind(r.delivered.map(|t| t.as_micros()))
                    .push_bind(r.acked.map(|t| t.as_micros()))
                    .push_bind(r.outcome)
                    .push_bind(r.detail.clone())
                    .push_bind(r.latency_ms.map(|ms| (ms * 1000.0) as i64))
                    .push_bind(i64::from(r.restart))
                    .push_bind(r.deadline.map(|t| t.as_micros()));
            });
            q.build().execute(&mut **$tx).await?;
        }
        Ok::<(), sqlx::Error>(())
    }};
}

/// The key of the PostgreSQL advisory lock that makes admitting restarts
/// and recording them one step across replicas ("LLrestrt").
const RESTART_ADMISSION_LOCK: i64 = 0x4c4c_7265_7374_7274;

/// [`insert_fenced`], admitting restart rows (`restart`) under `admit`
/// in the same transaction: on PostgreSQL under an advisory lock every
/// replica takes, so two sends at once on two replicas cannot both pass
/// the cap; on SQLite the caller holds the one process's admission lock
/// and SQLite's single writer does the rest. The rows left out are not
/// written. `None`: fenced, nothing written.
pub async fn insert_admitting(
    db: &Db,
    rows: &[SignalRecord],
    fence: &Fence,
    admit: Admission,
) -> Result<Option<LeftOut>, sqlx::Error> {
    write(db, rows, fence, Some(admit)).await
}

/// Inserts `rows` in one transaction, those `admit` lets in when given,
/// and commits if `fence` still holds. `None`: fenced, nothing written.
async fn write(
    db: &Db,
    rows: &[SignalRecord],
    fence: &Fence,
    admit: Option<Admission>,
) -> Result<Option<LeftOut>, sqlx::Error> {
    if matches!(fence, Fence::Follower) {
        return Ok(None);
    }
    // SQLite, admitting: the write lock from the start, so the count below
    // cannot be overtaken by another writer before the insert (a deferred
    // transaction would fail its upgrade with `database is locked`).
    let begin = match (db, admit) {
        (Db::Sqlite(_), Some(_)) => "BEGIN IMMEDIATE",
        _ => "BEGIN",
    };
    on_pool!(db, pool => {
    let mut tx = pool.begin_with(begin).await?;
    let Some(admit) = admit else {
        insert_rows_impl!(&mut tx, rows.iter())?;
        if !tx.holds(fence).await? {
            return Ok(None);
        }
        tx.commit().await?;
        return Ok(Some(LeftOut::default()));
    };
    if matches!(db, Db::Postgres(_)) {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(RESTART_ADMISSION_LOCK)
            .execute(&mut *tx)
            .await?;
    }
    // One send's rows are one fleet's, so one cluster's.
    let cluster = rows.first().map_or("", |r| r.cluster.as_str()).to_string();
    let (in_flight,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM signals WHERE restart = 1 AND outcome IN ('pending', 'delivered') AND cluster = $1",
    )
    .bind(cluster.clone())
    .fetch_one(&mut *tx)
    .await?;
    let paused = match admit.pause_after {
        Some(n) if n > 0 => {
            let ended: Vec<Outcome> = sqlx::query_scalar(
                "SELECT outcome FROM signals WHERE restart = 1 AND outcome IN ('acked', 'failed', 'timeout') \
                 AND cluster = $1 ORDER BY id DESC LIMIT $2",
            )
            .bind(cluster.clone())
            .bind(i64::try_from(n).unwrap_or(i64::MAX))
            .fetch_all(&mut *tx)
            .await?;
            ended.len() == n && ended.iter().all(|o| *o != Outcome::Acked)
        }
        _ => false,
    };
    let mut room = admit.limit.saturating_sub(usize::try_from(in_flight).unwrap_or(usize::MAX));
    let mut left = LeftOut::default();
    let mut kept = Vec::with_capacity(rows.len());
    for r in rows {
        if r.restart && paused {
            left.paused.push(r.id);
        } else if r.restart && room == 0 {
            left.at_cap.push(r.id);
        } else {
            if r.restart {
                room -= 1;
            }
            kept.push(r);
        }
    }
    insert_rows_impl!(&mut tx, kept.into_iter())?;
    if !tx.holds(fence).await? {
        return Ok(None);
    }
    tx.commit().await?;
    Ok(Some(left))
    })
}

/// Commits new signal rows in one transaction if `fence` still holds at
/// its end (the leader's automatic, periodic and graceful signals are
/// fenced like history: a leader whose term has passed records and sends
/// none). False: fenced, nothing written.
pub async fn insert_fenced(
    db: &Db,
    rows: &[SignalRecord],
    fence: &Fence,
) -> Result<bool, sqlx::Error> {
    if rows.is_empty() {
        return Ok(!matches!(fence, Fence::Follower));
    }
    Ok(write(db, rows, fence, None).await?.is_some())
}

/// Applies delivery and outcome updates in one transaction. An outcome never
/// goes back to `delivered`, and a final outcome is never replaced (with
/// several replicas, the one that saw the ack and the one whose deadline
/// passed may both answer for one signal: the first answer stands).
pub async fn update(db: &Db, updates: &[SignalUpdate]) -> Result<(), sqlx::Error> {
    on_pool!(db, pool => {
    if updates.is_empty() {
        return Ok(());
    }
    // Row locks in ascending id order, the order the batch writer takes
    // them in (`Dialect::lock_signals`): in another order the two
    // deadlock. A stable sort keeps one signal's updates in their order.
    let mut sorted: Vec<&SignalUpdate> = updates.iter().collect();
    sorted.sort_by_key(|u| u.id());
    let mut tx = pool.begin().await?;
    for u in sorted {
        match u {
            SignalUpdate::Delivered { id, at } => {
                sqlx::query(
                    "UPDATE signals SET delivered_us = coalesce(delivered_us, $1), outcome = CASE WHEN outcome = 'pending' THEN 'delivered' ELSE outcome END WHERE id = $2",
                )
                .bind(at.as_micros())
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
            SignalUpdate::Outcome {
                id,
                at,
                outcome,
                detail,
                acked,
                latency_us,
            } => {
                sqlx::query(
                    "UPDATE signals SET outcome = $1, detail = $2, acked_us = $3, latency_us = $4 \
                     WHERE id = $5 AND outcome IN ('pending', 'delivered')",
                )
                .bind(*outcome)
                .bind(detail.as_str())
                .bind(acked.then(|| at.as_micros()))
                .bind(latency_us)
                .bind(id)
                .execute(&mut *tx)
                .await?;
            }
        }
    }
    tx.commit().await
    })
}

/// Restarts asked of sidecars, as every replica recorded them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Restarts {
    /// Not answered yet (pending or delivered).
    pub in_flight: usize,
    /// How the last answered ones ended, newest first (true: acked, the
    /// agent came back; false: failed or timed out), at most the number
    /// asked for.
    pub last: Vec<bool>,
}

/// `cluster`'s restarts in flight across replicas and how its last `last`
/// answered ones ended (see [`Restarts`]); both read through the partial
/// index of restart signals, which stays as small as restarts are rare.
pub async fn restarts(
    db: &Db,
    cluster: &ClusterName,
    last: usize,
) -> Result<Restarts, sqlx::Error> {
    on_pool!(db, pool => {
    let (in_flight,): (i64,) = sqlx::query_as(
        "SELECT count(*) FROM signals WHERE restart = 1 AND outcome IN ('pending', 'delivered') AND cluster = $1",
    )
    .bind(cluster.as_str())
    .fetch_one(pool)
    .await?;
    let ended: Vec<Outcome> = sqlx::query_scalar(
        "SELECT outcome FROM signals WHERE restart = 1 AND outcome IN ('acked', 'failed', 'timeout') \
         AND cluster = $1 ORDER BY id DESC LIMIT $2",
    )
    .bind(cluster.as_str())
    .bind(i64::try_from(last).unwrap_or(i64::MAX))
    .fetch_all(pool)
    .await?;
    Ok(Restarts {
        in_flight: usize::try_from(in_flight).unwrap_or(0),
        last: ended.into_iter().map(|o| o == Outcome::Acked).collect(),
    })
    })
}

/// Claims the still-pending signals among `ids` for delivery by marking
/// them `delivered` at `at`, in one statement; returns the ids claimed.
/// Whoever re-reads a row later (a late notification, the make-up after a
/// lost `LISTEN`, another replica) finds it claimed: a signal is delivered
/// once.
pub async fn claim(db: &Db, ids: &[i64], at: Ts) -> Result<Vec<i64>, sqlx::Error> {
    on_pool!(db, pool => {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = QueryBuilder::new("UPDATE signals SET outcome = 'delivered', delivered_us = ");
    q.push_bind(at.as_micros());
    q.push(" WHERE outcome = 'pending' AND id IN (");
    let mut sep = q.separated(", ");
    for id in ids.iter().take(CHUNK) {
        sep.push_bind(*id);
    }
    q.push(") RETURNING id");
    q.build_query_scalar().fetch_all(pool).await
    })
}

/// [`update`], one update per transaction, for a batch the database
/// refused: an update refused for what it holds ([`is_permanent`]) is
/// written again with its detail replaced by the refusal, so the outcome
/// is still recorded; one refused even so is set aside. Returns how many
/// were refused. Updates are idempotent, so a transient error that cuts
/// this short is retried whole.
///
/// [`is_permanent`]: super::is_permanent
pub async fn update_isolating(db: &Db, updates: &[SignalUpdate]) -> Result<u64, sqlx::Error> {
    let mut refused = 0;
    for u in updates {
        let e = match update(db, std::slice::from_ref(u)).await {
            Ok(()) => continue,
            Err(e) if super::is_permanent(&e) => e,
            Err(e) => return Err(e),
        };
        refused += 1;
        tracing::error!(error = %e, "the database refused a signal audit update; recording its outcome without the agent's detail");
        let SignalUpdate::Outcome {
            id,
            at,
            outcome,
            acked,
            latency_us,
            ..
        } = u
        else {
            continue;
        };
        let plain = SignalUpdate::Outcome {
            id: *id,
            at: *at,
            outcome: *outcome,
            detail: crate::domain::text::excerpt(&format!("the database refused this detail: {e}")),
            acked: *acked,
            latency_us: *latency_us,
        };
        match update(db, &[plain]).await {
            Ok(()) => {}
            Err(e) if super::is_permanent(&e) => {
                tracing::error!(id, error = %e, "the database refused a signal's outcome: set aside");
            }
            Err(e) => return Err(e),
        }
    }
    Ok(refused)
}

#[derive(Clone, Debug, Default)]
pub struct SignalFilter {
    /// Only this cluster's.
    pub cluster: Option<ClusterName>,
    pub agent: Option<String>,
    pub outcome: Option<Outcome>,
    pub kind: Option<SignalKind>,
    pub requested_by: Option<String>,
    /// Newest first, ids below this.
    pub before_id: Option<i64>,
    /// Those counted toward this incident (sent to an agent it held).
    pub incident: Option<i64>,
    pub limit: u32,
}

const COLUMNS: &str = "SELECT id, cluster, kind, agent, proxy, reason, requested_by, created_us, delivered_us, acked_us, outcome, detail, latency_us, restart, deadline_us FROM signals";

pub async fn list(db: &Db, f: &SignalFilter) -> Result<Vec<SignalRecord>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE 1=1");
    if let Some(c) = &f.cluster {
        q.push(" AND cluster = ").push_bind(c.as_str().to_string());
    }
    if let Some(a) = &f.agent {
        q.push(" AND agent = ").push_bind(a.clone());
    }
    if let Some(o) = &f.outcome {
        q.push(" AND outcome = ").push_bind(*o);
    }
    if let Some(k) = &f.kind {
        q.push(" AND kind = ").push_bind(*k);
    }
    if let Some(r) = &f.requested_by {
        // `ui` matches `ui` and `ui:<who>` (manual signals name the token).
        let prefix = format!("{r}:");
        q.push(" AND (requested_by = ")
            .push_bind(r.clone())
            .push(" OR substr(requested_by, 1, length(")
            .push_bind(prefix.clone())
            .push(")) = ")
            .push_bind(prefix)
            .push(")");
    }
    if let Some(b) = f.before_id {
        q.push(" AND id < ").push_bind(b);
    }
    if let Some(incident) = f.incident {
        q.push(" AND incident_id = ").push_bind(incident);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(f.limit as i64);
    let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
    })
}

pub async fn get(db: &Db, id: i64) -> Result<Option<SignalRecord>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE id = ").push_bind(id);
    let row: Option<Row> = q.build_query_as().fetch_optional(pool).await?;
    Ok(row.map(Into::into))
    })
}

/// Among replicas: signals still `pending` (nobody delivered them) made
/// since `since` for agents whose streams `replica` has recorded as its
/// own, oldest first, at most `limit`. What it was woken for while it
/// could not hear.
pub async fn pending_for_streams_of(
    pool: &sqlx::PgPool,
    replica: &str,
    since: Ts,
    limit: i64,
) -> Result<Vec<SignalRecord>, sqlx::Error> {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE outcome = 'pending' AND created_us >= ")
        .push_bind(since.as_micros())
        .push(" AND agent IN (SELECT agent FROM agent_streams WHERE replica = ")
        .push_bind(replica)
        .push(") ORDER BY id LIMIT ")
        .push_bind(limit);
    let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
}

/// Most ids [`by_ids`] looks up at once.
pub const LOOKUP_CHUNK: usize = CHUNK;

/// The rows with these ids (at most [`CHUNK`] are looked up; the dashboard
/// asks for one page of agents' last signals at a time).
pub async fn by_ids(db: &Db, ids: &[i64]) -> Result<Vec<SignalRecord>, sqlx::Error> {
    on_pool!(db, pool => {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE id IN (");
    let mut sep = q.separated(", ");
    for id in ids.iter().take(CHUNK) {
        sep.push_bind(*id);
    }
    q.push(")");
    let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
    Ok(rows.into_iter().map(Into::into).collect())
    })
}
