//! Retention: the loop that keeps history and the audit within their
//! retentions, run by the leading replica only. What the retentions are
//! is the settings' to say (read each round through a function); the
//! deleting is the writer's.

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::{writer, Db, Leadership};
use crate::clock::Clock;

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
        match writer::prune(&db, before).await {
            Ok(0) => {}
            Ok(n) => debug!(rows = n, "pruned history past retention"),
            Err(e) => warn!(error = %e, "pruning history failed; will retry"),
        }
        let before = clock.now().saturating_sub(keep.audit);
        match writer::prune_audit(&db, before).await {
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
