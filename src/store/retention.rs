//! Retention: the loop that keeps history and the audit within their
//! retentions, run by the leading replica only. What the retentions are
//! is the settings' to say (read each round through a function). The
//! deleting is here too, in small steps, so that neither readers nor the
//! writer wait long behind it.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{on_pool, Db, Leadership};
use crate::clock::{Clock, Ts};

/// How long history and the audit are kept, read each round: both are
/// dynamic settings.
#[derive(Clone, Copy, Debug)]
pub struct Retention {
    pub history: Duration,
    pub audit: Duration,
}

/// Every `every`, while this replica leads: history past its retention
/// pruned, and the signal audit and closed episodes past theirs.
/// Starts the prune loop on `rt`: every `every`, while this replica
/// leads, rows older than `retention()` go.
pub fn start(
    db: &Db,
    leadership: watch::Receiver<Leadership>,
    retention: impl Fn() -> Retention + Send + 'static,
    every: Duration,
    rt: &mut crate::supervise::Runtime,
) {
    let run = run(
        db.clone(),
        rt.clock,
        leadership,
        retention,
        every,
        rt.shutdown.clone(),
    );
    rt.spawn("retention", run);
}

pub async fn run(
    db: Db,
    clock: Clock,
    leadership: watch::Receiver<Leadership>,
    retention: impl Fn() -> Retention,
    every: Duration,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(every) => {}
        }
        // History is the leader's to keep and to prune.
        if !leadership.borrow().leading {
            continue;
        }
        let keep = retention();
        let before = clock.now().saturating_sub(keep.history);
        match prune(&db, before).await {
            Ok(0) => {}
            Ok(n) => debug!(rows = n, "pruned history past retention"),
            Err(e) => warn!(error = %e, "pruning history failed; will retry"),
        }
        let before = clock.now().saturating_sub(keep.audit);
        match prune_audit(&db, before).await {
            Ok((0, 0, 0)) => {}
            Ok((signals, episodes, incidents)) => {
                info!(
                    signals,
                    episodes,
                    incidents,
                    "pruned the audit, closed episodes and ended incidents past audit_retention"
                )
            }
            Err(e) => warn!(error = %e, "pruning the audit failed; will retry"),
        }
    }
}

/// History rows' ids deleted per statement when pruning.
const PRUNE_STEP: i64 = 5000;

/// Deletes history older than `before`, in small steps so readers and the
/// writer are never blocked for long. Returns the rows deleted.
pub async fn prune(db: &Db, before: Ts) -> Result<u64, sqlx::Error> {
    on_pool!(db, pool => {
    let mut total = 0;
    // The old rows' span of ids, then a window of ids at a time: each step
    // a primary-key range, whatever index the engine keeps on `at_us` (on
    // PostgreSQL a BRIN, which finds page ranges but gives no order). The
    // span is found through `at_us`: `id + 0` keeps PostgreSQL from reading
    // the primary key from its newest end instead, past every row kept.
    let (lo, hi): (Option<i64>, Option<i64>) =
        sqlx::query_as("SELECT min(id + 0), max(id + 0) FROM events WHERE at_us < $1")
            .bind(before.as_micros())
            .fetch_one(pool)
            .await?;
    if let (Some(lo), Some(hi)) = (lo, hi) {
        let mut from = lo;
        loop {
            let to = from.saturating_add(PRUNE_STEP - 1).min(hi);
            total += sqlx::query("DELETE FROM events WHERE id BETWEEN $1 AND $2 AND at_us < $3")
                .bind(from)
                .bind(to)
                .bind(before.as_micros())
                .execute(pool)
                .await?
                .rows_affected();
            if to >= hi {
                break;
            }
            from = to + 1;
            tokio::task::yield_now().await;
        }
    }
    let n = sqlx::query("DELETE FROM health_transitions WHERE at_us < $1")
        .bind(before.as_micros())
        .execute(pool)
        .await?
        .rows_affected();
    Ok(total + n)
    })
}

/// Rows the audit pruning deletes per statement.
const AUDIT_PRUNE_STEP: i64 = 1000;

/// Deletes signal audit rows and closed episodes older than `before`, in
/// small steps. Never a pending signal (not yet delivered, acked, failed or
/// timed out) or one a kept incident counts, never an open episode or
/// incident. Returns (signals, episodes, incidents).
pub async fn prune_audit(pool: &Db, before: Ts) -> Result<(u64, u64, u64), sqlx::Error> {
    let episodes = prune_in_steps(
        pool,
        "DELETE FROM episodes WHERE id IN (SELECT id FROM episodes \
         WHERE ended_us IS NOT NULL AND ended_us < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    let incidents = prune_in_steps(
        pool,
        "DELETE FROM incidents WHERE id IN (SELECT id FROM incidents \
         WHERE ended_us IS NOT NULL AND ended_us < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    // After the incidents: a signal is kept as long as the incident it
    // counts toward, so a kept incident's figure is its rows.
    let signals = prune_in_steps(
        pool,
        "DELETE FROM signals WHERE id IN (SELECT id FROM signals \
         WHERE created_us < $1 AND outcome NOT IN ('pending', 'delivered') \
         AND (incident_id IS NULL OR NOT EXISTS \
           (SELECT 1 FROM incidents i WHERE i.id = signals.incident_id)) \
         ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    prune_in_steps(
        pool,
        "DELETE FROM samples WHERE at_us IN (SELECT at_us FROM samples \
         WHERE at_us < $1 ORDER BY at_us LIMIT $2)",
        before,
    )
    .await?;
    // The notification outbox and the webhooks' delivery log.
    prune_in_steps(
        pool,
        "DELETE FROM notify_events WHERE id IN (SELECT id FROM notify_events \
         WHERE at_us < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    prune_in_steps(
        pool,
        "DELETE FROM webhook_deliveries WHERE (webhook, event_id) IN (SELECT webhook, event_id \
         FROM webhook_deliveries WHERE at_us < $1 ORDER BY at_us LIMIT $2)",
        before,
    )
    .await?;
    // Moves between incidents, kept as long as the incidents they join.
    prune_in_steps(
        pool,
        "DELETE FROM incident_moves WHERE id IN (SELECT id FROM incident_moves \
         WHERE at_us < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    // Maintenance windows over before the cutoff, and their audit.
    prune_in_steps(
        pool,
        "DELETE FROM maintenance_windows WHERE id IN (SELECT id FROM maintenance_windows \
         WHERE until_us < $1 OR ended_us < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    prune_in_steps(
        pool,
        "DELETE FROM maintenance_audit WHERE id IN (SELECT id FROM maintenance_audit \
         WHERE at_us < $1 ORDER BY id LIMIT $2)",
        before,
    )
    .await?;
    Ok((signals, episodes, incidents))
}

/// Runs `sql` (binding `before` and the step size) until it deletes less
/// than a step, yielding between steps.
async fn prune_in_steps(db: &Db, sql: &'static str, before: Ts) -> Result<u64, sqlx::Error> {
    on_pool!(db, pool => {
    let mut total = 0;
    loop {
        let n = sqlx::query(sql)
            .bind(before.as_micros())
            .bind(AUDIT_PRUNE_STEP)
            .execute(pool)
            .await?
            .rows_affected();
        total += n;
        if n < AUDIT_PRUNE_STEP as u64 {
            return Ok(total);
        }
        tokio::task::yield_now().await;
    }
    })
}
