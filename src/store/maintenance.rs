//! Maintenance windows' rows and their audit. Written directly, not
//! through the batch writer: a window is committed, with its audit row in
//! the same transaction, before the API answers for it. Telling a window's
//! start and end writes the outbox event and the mark that it was told in
//! one transaction, so each is told once, by whichever replica leads.
//! The rules (what a window explains) live in `domain`; this file only
//! reads and writes rows.

use serde::Serialize;
use sqlx::{Postgres, Sqlite, Transaction};
use tracing::warn;

use super::Db;
use crate::clock::Ts;
pub use crate::domain::maintenance::WindowView;
use crate::domain::{NoticeKind, Target, Window};

/// The PostgreSQL channel a change of windows is announced on.
pub const CHANNEL: &str = "lifeline_maintenance";

/// The most windows not yet over (scheduled or active): one more is
/// refused, so every accepted window is read for the fleet and enforced.
pub const MAX_IN_FORCE: i64 = 1000;

/// The PostgreSQL advisory lock that makes one window's count and insert
/// atomic against another's ("LLwindow"). Only creations take it: a lock
/// of the table would also queue every end, delete and telling of a
/// window behind the creations, and under a burst of them (two replicas'
/// APIs at once) past the connections' `lock_timeout`.
pub const CREATE_LOCK: i64 = 0x4c4c_7769_6e64_6f77;

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    targets: String,
    from_us: i64,
    until_us: i64,
    reason: String,
    created_by: String,
    created_us: i64,
    ended_by: Option<String>,
    ended_us: Option<i64>,
    deleted_us: Option<i64>,
}

const COLUMNS: &str = "SELECT id, targets, from_us, until_us, reason, created_by, created_us, \
     ended_by, ended_us, deleted_us FROM maintenance_windows";

/// A window due to be told, with whether its start was told already.
#[derive(sqlx::FromRow)]
struct Due {
    #[sqlx(flatten)]
    row: Row,
    told_start: i64,
}

impl Row {
    /// `None` for a row whose targets do not parse (written by another
    /// build): left out, and said once here.
    fn into_window(self) -> Option<Window> {
        let texts: Vec<String> = match serde_json::from_str(&self.targets) {
            Ok(t) => t,
            Err(e) => {
                warn!(window = self.id, error = %e, "a maintenance window's targets do not parse; left out");
                return None;
            }
        };
        let mut targets = Vec::with_capacity(texts.len());
        for t in &texts {
            match Target::parse(t) {
                Ok(t) => targets.push(t),
                Err(e) => {
                    warn!(window = self.id, error = %e, "a maintenance window's target does not parse; left out");
                    return None;
                }
            }
        }
        Some(Window {
            id: self.id,
            targets,
            from: Ts(self.from_us),
            until: Ts(self.until_us),
            reason: self.reason,
            created_by: self.created_by,
            created_at: Ts(self.created_us),
            ended_by: self.ended_by,
            ended_at: self.ended_us.map(Ts),
            deleted_at: self.deleted_us.map(Ts),
        })
    }
}

/// A row with whether its start and end were told.
#[derive(sqlx::FromRow)]
struct ToldRow {
    #[sqlx(flatten)]
    row: Row,
    told_start: i64,
    told_end: i64,
}

/// One audited action on a window.
#[derive(Clone, Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct AuditRow {
    pub id: i64,
    pub window_id: i64,
    /// `created`, `ended` or `deleted`.
    pub action: String,
    pub actor: String,
    #[serde(skip)]
    pub at_us: i64,
    /// The window as it was after the action, JSON.
    pub detail: String,
}

/// A window about to be created.
#[derive(Clone, Debug)]
pub struct NewWindow {
    pub targets: Vec<Target>,
    pub from: Ts,
    pub until: Ts,
    pub reason: String,
}

/// Runs `$body` inside a transaction that holds the write lock from its
/// start (SQLite: `BEGIN IMMEDIATE`, so a read-then-write never fails its
/// upgrade; PostgreSQL: row locks where it reads to write), committed
/// when `$body` returns `Ok`.
macro_rules! in_tx {
    ($db:expr, $tx:ident => $body:expr) => {
        match $db {
            Db::Sqlite(pool) => {
                let mut $tx: Transaction<'static, Sqlite> =
                    pool.begin_with("BEGIN IMMEDIATE").await?;
                let out = $body;
                $tx.commit().await?;
                out
            }
            Db::Postgres(pg) => {
                pg.bounded(async {
                    let mut $tx: Transaction<'static, Postgres> = pg.pool.begin().await?;
                    let out = $body;
                    $tx.commit().await?;
                    Ok::<_, sqlx::Error>(out)
                })
                .await?
            }
        }
    };
}

/// The audit row of `action` on `w`, in transaction `tx`.
macro_rules! audit {
    ($tx:ident, $w:expr, $action:expr, $actor:expr, $now:expr) => {{
        let detail = serde_json::to_string(&WindowView::of($w, $now)).unwrap_or_default();
        sqlx::query(
            "INSERT INTO maintenance_audit (window_id, action, actor, at_us, detail) VALUES ($1, $2, $3, $4, $5)",
        )
        .bind($w.id)
        .bind($action)
        .bind($actor)
        .bind($now.as_micros())
        .bind(detail)
        .execute(&mut *$tx)
        .await?;
    }};
}

/// The outbox event telling `kind` of `w`, in transaction `tx` of `db`
/// (under the outbox's lock, see `outbox::OUTBOX_LOCK`).
macro_rules! event {
    ($db:expr, $tx:ident, $w:expr, $kind:expr, $at:expr) => {{
        super::outbox::lock_outbox!($db, $tx);
        let body = crate::domain::About::Window(WindowView::of($w, $at))
            .stored($kind)
            .map_err(|e| sqlx::Error::Encode(Box::new(e)))?;
        sqlx::query(
            "INSERT INTO notify_events (at_us, kind, incident_id, body) VALUES ($1, $2, NULL, $3)",
        )
        .bind($at.as_micros())
        .bind(NoticeKind::as_str($kind))
        .bind(body)
        .execute(&mut *$tx)
        .await?;
    }};
}

/// Tells the other replicas (PostgreSQL) that the windows changed: heard
/// at commit.
macro_rules! announce {
    ($db:expr, $tx:ident, $id:expr) => {{
        if matches!($db, Db::Postgres(_)) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(CHANNEL)
                .bind($id.to_string())
                .execute(&mut *$tx)
                .await?;
        }
    }};
}

/// Creates a window and its audit row; returns it as stored.
/// Stores a new window with its audit row, or `None` when [`MAX_IN_FORCE`]
/// windows are already not over (every accepted window is enforced, so
/// no more are accepted). The count and the insert are one transaction
/// (on PostgreSQL under [`CREATE_LOCK`], so two replicas cannot both take
/// the last place).
pub async fn create(
    db: &Db,
    new: &NewWindow,
    actor: &str,
    now: Ts,
) -> Result<Option<Window>, sqlx::Error> {
    let texts: Vec<&str> = new.targets.iter().map(Target::as_str).collect();
    let targets = serde_json::Value::from(texts).to_string();
    let window = in_tx!(db, tx => {
        if matches!(db, Db::Postgres(_)) {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(CREATE_LOCK)
                .execute(&mut *tx)
                .await?;
        }
        let mut q = sqlx::QueryBuilder::new("SELECT COUNT(*) FROM maintenance_windows WHERE 1 = 1");
        push_not_over(&mut q, now);
        let (n,): (i64,) = q.build_query_as().fetch_one(&mut *tx).await?;
        if n >= MAX_IN_FORCE {
            None
        } else {
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO maintenance_windows (targets, from_us, until_us, reason, created_by, created_us) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(&targets)
        .bind(new.from.as_micros())
        .bind(new.until.as_micros())
        .bind(&new.reason)
        .bind(actor)
        .bind(now.as_micros())
        .fetch_one(&mut *tx)
        .await?;
        let w = Window {
            id,
            targets: new.targets.clone(),
            from: new.from,
            until: new.until,
            reason: new.reason.clone(),
            created_by: actor.to_string(),
            created_at: now,
            ended_by: None,
            ended_at: None,
            deleted_at: None,
        };
        audit!(tx, &w, "created", actor, now);
        announce!(db, tx, id);
        Some(w)
        }
    });
    Ok(window)
}

/// What became of a window asked to end or be deleted.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    Done(Window),
    /// No such window.
    Missing,
    /// It was already over (ended, or past its `until`).
    AlreadyOver(Window),
    /// It was already deleted.
    AlreadyDeleted,
}

/// Ends a window early, now (one not yet started ends before it starts).
pub async fn end(db: &Db, id: i64, actor: &str, now: Ts) -> Result<Ended, sqlx::Error> {
    let out = in_tx!(db, tx => {
        let mut q = sqlx::QueryBuilder::new(COLUMNS);
        q.push(" WHERE id = ").push_bind(id);
        if matches!(db, Db::Postgres(_)) {
            q.push(" FOR UPDATE");
        }
        let row: Option<Row> = q.build_query_as().fetch_optional(&mut *tx).await?;
        match row.and_then(Row::into_window) {
            None => Ended::Missing,
            Some(w) if w.end() <= now => Ended::AlreadyOver(w),
            Some(mut w) => {
                sqlx::query("UPDATE maintenance_windows SET ended_by = $1, ended_us = $2 WHERE id = $3")
                    .bind(actor)
                    .bind(now.as_micros())
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                w.ended_by = Some(actor.to_string());
                w.ended_at = Some(now);
                audit!(tx, &w, "ended", actor, now);
                announce!(db, tx, id);
                Ended::Done(w)
            }
        }
    });
    Ok(out)
}

/// Deletes a window: its row stays, ended now by `actor` (unless it was
/// already over) and marked deleted, with its audit. One that had started
/// and was not yet told to have ended is told so now, as deleted.
pub async fn delete(db: &Db, id: i64, actor: &str, now: Ts) -> Result<Ended, sqlx::Error> {
    let out = in_tx!(db, tx => {
        // The outbox's lock before the window's row, in the order the
        // teller takes them: the other order deadlocks with it.
        super::outbox::lock_outbox!(db, tx);
        let mut q = sqlx::QueryBuilder::new(
            "SELECT id, targets, from_us, until_us, reason, created_by, created_us, ended_by, ended_us, \
             deleted_us, told_start, told_end FROM maintenance_windows",
        );
        q.push(" WHERE id = ").push_bind(id);
        if matches!(db, Db::Postgres(_)) {
            q.push(" FOR UPDATE");
        }
        let row: Option<ToldRow> = q.build_query_as().fetch_optional(&mut *tx).await?;
        match row {
            None => Ended::Missing,
            Some(ToldRow { row, .. }) if row.deleted_us.is_some() => Ended::AlreadyDeleted,
            Some(ToldRow { row, told_start, told_end }) => {
                let id = row.id;
                let mut w = row.into_window();
                // It ends now, by whoever deleted it, unless it was over.
                let ends_now = w.as_ref().is_none_or(|w| w.end() > now);
                sqlx::query(
                    "UPDATE maintenance_windows SET deleted_us = $1, \
                     ended_by = CASE WHEN $2 = 1 THEN $3 ELSE ended_by END, \
                     ended_us = CASE WHEN $2 = 1 THEN $1 ELSE ended_us END, \
                     told_start = 1, told_end = 1 WHERE id = $4",
                )
                .bind(now.as_micros())
                .bind(i64::from(ends_now))
                .bind(actor)
                .bind(id)
                .execute(&mut *tx)
                .await?;
                if let Some(w) = &mut w {
                    if ends_now {
                        w.ended_by = Some(actor.to_string());
                        w.ended_at = Some(now);
                    }
                    w.deleted_at = Some(now);
                    audit!(tx, w, "deleted", actor, now);
                    if told_start != 0 && told_end == 0 {
                        event!(db, tx, w, NoticeKind::MaintenanceEnded, w.end());
                    }
                }
                announce!(db, tx, id);
                match w {
                    Some(w) => Ended::Done(w),
                    // A row that no longer parses is deleted all the same.
                    None => Ended::Missing,
                }
            }
        }
    });
    Ok(out)
}

pub async fn get(db: &Db, id: i64) -> Result<Option<Window>, sqlx::Error> {
    super::on_pool!(db, pool => {
        let mut q = sqlx::QueryBuilder::new(COLUMNS);
        q.push(" WHERE id = ").push_bind(id);
        let row: Option<Row> = q.build_query_as().fetch_optional(pool).await?;
        Ok(row.and_then(Row::into_window))
    })
}

/// Windows, newest first, below id `before`; with `over` false, only
/// those not over at `now`.
pub async fn list(
    db: &Db,
    before: Option<i64>,
    over: bool,
    now: Ts,
    limit: u32,
) -> Result<Vec<Window>, sqlx::Error> {
    super::on_pool!(db, pool => {
        let mut q = sqlx::QueryBuilder::new(COLUMNS);
        q.push(" WHERE 1 = 1");
        if let Some(b) = before {
            q.push(" AND id < ").push_bind(b);
        }
        if !over {
            push_not_over(&mut q, now);
        }
        q.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(limit));
        let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
        Ok(rows.into_iter().filter_map(Row::into_window).collect())
    })
}

fn push_not_over<DB: sqlx::Database>(q: &mut sqlx::QueryBuilder<DB>, now: Ts)
where
    for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    q.push(" AND until_us > ")
        .push_bind(now.as_micros())
        .push(" AND (ended_us IS NULL OR ended_us > ")
        .push_bind(now.as_micros())
        .push(")");
}

/// The windows not over at `now` (scheduled or active), oldest first: what
/// the fleet judges strandings against.
pub async fn in_force(db: &Db, now: Ts) -> Result<Vec<Window>, sqlx::Error> {
    super::on_pool!(db, pool => {
        let mut q = sqlx::QueryBuilder::new(COLUMNS);
        q.push(" WHERE 1 = 1");
        push_not_over(&mut q, now);
        q.push(" ORDER BY id LIMIT ").push_bind(MAX_IN_FORCE);
        let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
        Ok(rows.into_iter().filter_map(Row::into_window).collect())
    })
}

/// A window's audit, oldest first (it outlives the window).
pub async fn audit_of(db: &Db, id: i64) -> Result<Vec<AuditRow>, sqlx::Error> {
    super::on_pool!(db, pool => {
        sqlx::query_as(
            "SELECT id, window_id, action, actor, at_us, detail FROM maintenance_audit \
             WHERE window_id = $1 ORDER BY id LIMIT 1000",
        )
        .bind(id)
        .fetch_all(pool)
        .await
    })
}

/// Tells every start and end due by `now` that was not told yet: each as
/// a `maintenance.started` or `maintenance.ended` event, written with the
/// mark that it was told. Returns how many were told.
pub async fn tell_due(db: &Db, now: Ts) -> Result<usize, sqlx::Error> {
    let n = in_tx!(db, tx => {
        // Taken first, before any row: every transaction that writes both
        // the outbox and a window (a delete too) takes them in this order.
        super::outbox::lock_outbox!(db, tx);
        let at = now.as_micros();
        let mut q = sqlx::QueryBuilder::new(
            "SELECT id, targets, from_us, until_us, reason, created_by, created_us, \
             ended_by, ended_us, deleted_us, told_start FROM maintenance_windows",
        );
        q.push(" WHERE (told_start = 0 AND from_us <= ")
            .push_bind(at)
            .push(") OR (told_end = 0 AND (until_us <= ")
            .push_bind(at)
            .push(" OR ended_us <= ")
            .push_bind(at)
            .push(")) ORDER BY id LIMIT 100");
        let rows: Vec<Due> = q.build_query_as().fetch_all(&mut *tx).await?;
        let mut told = 0usize;
        for Due { row, told_start } in rows {
            let id = row.id;
            let Some(w) = row.into_window() else {
                // Never told, never asked again.
                sqlx::query("UPDATE maintenance_windows SET told_start = 1, told_end = 1 WHERE id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                continue;
            };
            // A window that started is told so before it is told over,
            // however late this runs; one ended before it began is told
            // neither.
            let began = w.from < w.end();
            if told_start == 0 && w.from <= now && began {
                event!(db, tx, &w, NoticeKind::MaintenanceStarted, w.from);
                told += 1;
            }
            let over = w.end() <= now;
            if over && began {
                event!(db, tx, &w, NoticeKind::MaintenanceEnded, w.end());
                told += 1;
            }
            sqlx::query(
                "UPDATE maintenance_windows SET \
                 told_start = CASE WHEN from_us <= $1 THEN 1 ELSE told_start END, \
                 told_end = $2 WHERE id = $3",
            )
            .bind(at)
            .bind(i64::from(over))
            .bind(id)
            .execute(&mut *tx)
            .await?;
        }
        told
    });
    Ok(n)
}
