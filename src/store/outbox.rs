//! The notification outbox: events written in the same transaction as the
//! change that caused them (`commit.rs` writes an incident's), each
//! webhook's place in them, and its delivery log. The `notify` room reads
//! and advances them; what an event says and where it goes is its own.

use std::collections::HashMap;

use serde::Serialize;
use sqlx::{Database, Encode, QueryBuilder, Type};

use super::{on_pool, Db};
use crate::clock::Ts;
use crate::domain::{
    About, ClusterName, Incident, IncidentMark, IncidentRecord, Notice, NoticeError, NoticeKind,
    PauseNotice,
};

/// The key of the PostgreSQL advisory lock every transaction that writes
/// the outbox takes before its first event ("LLoutbox"). Held to its
/// commit, it makes event ids commit in order: a transaction takes its ids
/// only after the one before it committed, so once a reader has seen id
/// n, every id below n that will ever exist is already visible, and a
/// cursor `id > last` skips nothing. (Without it, a lower id committing
/// after a higher one was read would never be delivered.) SQLite's one
/// writer gives the same order.
pub const OUTBOX_LOCK: i64 = 0x4c4c_6f75_7462_6f78;

/// The statement that takes [`OUTBOX_LOCK`] (PostgreSQL), the one text
/// both [`lock_outbox`] and the batch writer's `Dialect::lock_outbox` run.
pub(super) const LOCK_OUTBOX: &str = "SELECT pg_advisory_xact_lock($1)";

/// Takes [`OUTBOX_LOCK`] in transaction `$tx` of `$db` (PostgreSQL only).
macro_rules! lock_outbox {
    ($db:expr, $tx:expr) => {
        if matches!($db, $crate::store::Db::Postgres(_)) {
            sqlx::query($crate::store::outbox::LOCK_OUTBOX)
                .bind($crate::store::outbox::OUTBOX_LOCK)
                .execute(&mut *$tx)
                .await?;
        }
    };
}
pub(super) use lock_outbox;

/// Events read per page by a webhook's loop.
pub const PAGE: i64 = 100;
/// Delivery-log rows shown at most.
pub const MAX_LOG: u32 = 1000;

/// One event as written: the body is the JSON of what it is about (see
/// [`About::stored`]); [`Event::notice`] types it again.
#[derive(Clone, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Event {
    pub id: i64,
    pub at_us: i64,
    pub kind: String,
    pub incident_id: Option<i64>,
    pub body: String,
}

impl Event {
    /// The notice it stores, typed (an error says why a row cannot be).
    pub fn notice(&self) -> Result<Notice, NoticeError> {
        Notice::read(self.id, Ts(self.at_us), &self.kind, &self.body)
    }
}

/// An event about to be written.
#[derive(Clone, Debug)]
pub(super) struct NewEvent {
    pub at: Ts,
    pub kind: NoticeKind,
    pub incident: Option<i64>,
    pub body: String,
}

/// What the incidents of a batch tell, from their rows before (`marks`,
/// read in the same transaction) and as written now. `at` is the batch's
/// last history row's time, for an update (an opening and an end carry
/// their own).
pub(super) fn incident_events(
    cluster: &ClusterName,
    before: &HashMap<i64, IncidentMark>,
    rows: &[&IncidentRecord],
    at: Option<Ts>,
) -> Vec<NewEvent> {
    let mut out = Vec::new();
    let mut rows = rows.to_vec();
    rows.sort_by_key(|r| r.id);
    for r in rows {
        // An operator's window: shown, never told. An agent still
        // stranded when it ends opens an unplanned incident, which is. A
        // rollout's is told, and says so.
        if !crate::domain::Plan::handling(r.planned).told {
            continue;
        }
        let after = mark(r);
        let kinds = NoticeKind::of_incident(before.get(&r.id).copied(), after);
        if kinds.is_empty() {
            continue;
        }
        let about = About::Incident(Incident::of(cluster.clone(), r.clone()));
        for kind in kinds {
            let body = match about.stored(kind) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(incident = r.id, error = %e, "an incident event could not be written; not told");
                    continue;
                }
            };
            let when = match kind {
                NoticeKind::IncidentOpened => r.started,
                NoticeKind::IncidentResolved => r.ended.unwrap_or(r.started),
                _ => at.unwrap_or(r.started).max(r.started),
            };
            out.push(NewEvent {
                at: when,
                kind,
                incident: Some(r.id),
                body,
            });
        }
    }
    out
}

pub(super) fn mark(r: &IncidentRecord) -> IncidentMark {
    IncidentMark {
        agents: r.agents,
        peak_stranded: r.peak_stranded,
        ended: r.ended.is_some(),
    }
}

/// The statement that reads what decides the incidents' events, before
/// they are written.
pub(super) fn marks_query<DB: Database>(ids: &[i64]) -> QueryBuilder<DB>
where
    DB::Arguments: Default,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let mut q = QueryBuilder::new(
        "SELECT id, agents, peak_stranded, ended_us IS NOT NULL AS ended FROM incidents WHERE id IN (",
    );
    let mut sep = q.separated(", ");
    for id in ids {
        sep.push_bind(*id);
    }
    q.push(")");
    q
}

/// A row of [`marks_query`].
#[derive(sqlx::FromRow)]
pub(super) struct MarkRow {
    id: i64,
    agents: i64,
    peak_stranded: i64,
    ended: bool,
}

impl MarkRow {
    pub(super) fn into_mark(self) -> (i64, IncidentMark) {
        let n = |v: i64| u32::try_from(v.max(0)).unwrap_or(u32::MAX);
        (
            self.id,
            IncidentMark {
                agents: n(self.agents),
                peak_stranded: n(self.peak_stranded),
                ended: self.ended,
            },
        )
    }
}

pub(super) fn insert_events<DB: Database>(rows: &[NewEvent]) -> QueryBuilder<DB>
where
    DB::Arguments: Default,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
    for<'t> Option<i64>: Encode<'t, DB> + Type<DB>,
{
    let mut q = QueryBuilder::new("INSERT INTO notify_events (at_us, kind, incident_id, body) ");
    q.push_values(rows, |mut r, e| {
        r.push_bind(e.at.as_micros())
            .push_bind(e.kind.as_str())
            .push_bind(e.incident)
            .push_bind(e.body.as_str());
    });
    q
}

/// An event that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum AppendError {
    #[error(transparent)]
    Notice(#[from] NoticeError),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
}

/// Writes one pause event on its own (a change that is not a batch's: the
/// storm guard pausing restarts).
pub async fn append(
    db: &Db,
    at: Ts,
    kind: NoticeKind,
    pause: &PauseNotice,
) -> Result<i64, AppendError> {
    let body = About::Pause(pause.clone()).stored(kind)?;
    on_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        lock_outbox!(db, tx);
        let (id,): (i64,) = sqlx::query_as(
            "INSERT INTO notify_events (at_us, kind, incident_id, body) VALUES ($1, $2, NULL, $3) RETURNING id",
        )
        .bind(at.as_micros())
        .bind(kind.as_str())
        .bind(body.as_str())
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(id)
    })
}

/// Up to `limit` events after `after`, oldest first.
pub async fn after(db: &Db, after: i64, limit: i64) -> Result<Vec<Event>, sqlx::Error> {
    on_pool!(db, pool => {
        sqlx::query_as(
            "SELECT id, at_us, kind, incident_id, body FROM notify_events WHERE id > $1 ORDER BY id LIMIT $2",
        )
        .bind(after)
        .bind(limit.clamp(1, 1000))
        .fetch_all(pool)
        .await
    })
}

/// The newest event's id (0 with none).
pub async fn newest(db: &Db) -> Result<i64, sqlx::Error> {
    on_pool!(db, pool => {
        let (n,): (Option<i64>,) = sqlx::query_as("SELECT max(id) FROM notify_events")
            .fetch_one(pool)
            .await?;
        Ok(n.unwrap_or(0))
    })
}

/// `webhook`'s place in the events: the last one it was given. A webhook
/// seen for the first time starts after `start`.
pub async fn cursor(db: &Db, webhook: &str, start: i64) -> Result<i64, sqlx::Error> {
    on_pool!(db, pool => {
        // One round trip: a new webhook's row is made, an existing one's
        // left as it is, and either way its place comes back.
        let (n,): (i64,) = sqlx::query_as(
            "INSERT INTO webhook_cursors (webhook, last_event) VALUES ($1, $2) \
             ON CONFLICT (webhook) DO UPDATE SET last_event = webhook_cursors.last_event \
             RETURNING last_event",
        )
        .bind(webhook)
        .bind(start)
        .fetch_one(pool)
        .await?;
        Ok(n)
    })
}

/// Where one delivery stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryOutcome {
    Delivered,
    /// Failed so far; tried again after a backoff.
    Retrying,
    /// Failed for longer than the webhook's `max_age`: given up on.
    Dropped,
}

impl DeliveryOutcome {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryOutcome::Delivered => "delivered",
            DeliveryOutcome::Retrying => "retrying",
            DeliveryOutcome::Dropped => "dropped",
        }
    }

    fn parse(s: &str) -> DeliveryOutcome {
        match s {
            "delivered" => DeliveryOutcome::Delivered,
            "dropped" => DeliveryOutcome::Dropped,
            _ => DeliveryOutcome::Retrying,
        }
    }

    /// Final: the webhook goes on to its next event.
    pub fn is_final(self) -> bool {
        !matches!(self, DeliveryOutcome::Retrying)
    }
}

/// One webhook's delivery of one event, as the log shows it.
#[derive(Clone, Debug, PartialEq, Serialize, utoipa::ToSchema)]
pub struct Delivery {
    pub webhook: String,
    pub event_id: i64,
    pub kind: String,
    /// The last attempt.
    pub at: Ts,
    pub outcome: DeliveryOutcome,
    /// The receiver's HTTP status, if it answered.
    pub status: Option<u16>,
    pub latency_ms: Option<f64>,
    pub attempts: u32,
    /// Why the last attempt failed (no secret, no URL).
    pub error: Option<String>,
}

/// Records an attempt; a final one also moves the webhook's cursor past
/// the event, in the same transaction.
pub async fn record(db: &Db, d: &Delivery) -> Result<(), sqlx::Error> {
    on_pool!(db, pool => {
        let mut tx = pool.begin().await?;
        sqlx::query(
            "INSERT INTO webhook_deliveries (webhook, event_id, kind, at_us, outcome, status, latency_us, attempts, error) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (webhook, event_id) DO UPDATE SET at_us = excluded.at_us, outcome = excluded.outcome, \
             status = excluded.status, latency_us = excluded.latency_us, attempts = excluded.attempts, error = excluded.error",
        )
        .bind(d.webhook.as_str())
        .bind(d.event_id)
        .bind(d.kind.as_str())
        .bind(d.at.as_micros())
        .bind(d.outcome.as_str())
        .bind(d.status.map(i64::from))
        .bind(d.latency_ms.map(|ms| (ms * 1000.0) as i64))
        .bind(i64::from(d.attempts))
        .bind(d.error.as_deref())
        .execute(&mut *tx)
        .await?;
        if d.outcome.is_final() {
            sqlx::query("UPDATE webhook_cursors SET last_event = $1 WHERE webhook = $2 AND last_event < $1")
                .bind(d.event_id)
                .bind(d.webhook.as_str())
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await
    })
}

#[derive(sqlx::FromRow)]
struct DeliveryRow {
    webhook: String,
    event_id: i64,
    kind: String,
    at_us: i64,
    outcome: String,
    status: Option<i64>,
    latency_us: Option<i64>,
    attempts: i64,
    error: Option<String>,
}

/// `webhook`'s deliveries of events before `before` (all: `None`),
/// newest event first.
pub async fn deliveries(
    db: &Db,
    webhook: &str,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<Delivery>, sqlx::Error> {
    on_pool!(db, pool => {
        let rows: Vec<DeliveryRow> = sqlx::query_as(
            "SELECT webhook, event_id, kind, at_us, outcome, status, latency_us, attempts, error \
             FROM webhook_deliveries WHERE webhook = $1 AND event_id < $2 ORDER BY event_id DESC LIMIT $3",
        )
        .bind(webhook)
        .bind(before.unwrap_or(i64::MAX))
        .bind(i64::from(limit.min(MAX_LOG)))
        .fetch_all(pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|r| Delivery {
                webhook: r.webhook,
                event_id: r.event_id,
                kind: r.kind,
                at: Ts(r.at_us),
                outcome: DeliveryOutcome::parse(&r.outcome),
                status: r.status.and_then(|s| u16::try_from(s).ok()),
                latency_ms: r.latency_us.map(|us| us as f64 / 1000.0),
                attempts: u32::try_from(r.attempts.max(0)).unwrap_or(u32::MAX),
                error: r.error,
            })
            .collect())
    })
}

/// Moves `webhook`'s place to `last` (events it is not sent).
pub async fn skip(db: &Db, webhook: &str, last: i64) -> Result<(), sqlx::Error> {
    on_pool!(db, pool => {
        sqlx::query("UPDATE webhook_cursors SET last_event = $1 WHERE webhook = $2 AND last_event < $1")
            .bind(last)
            .bind(webhook)
            .execute(pool)
            .await?;
        Ok(())
    })
}
