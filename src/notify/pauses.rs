//! `restarts.paused` and `restarts.resumed`: when the storm guard pauses
//! automatic reconnects, or restarts wait because the last ones did not
//! bring their agents back, and when that ends. Written to the outbox by
//! the leader, each as it happens (no batch carries it).

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::clock::Clock;
use crate::domain::{NoticeKind, PauseNotice};
use crate::signals::dispatch::Guard;
use crate::store::{outbox, Db, Leadership};

/// Whether automatic signals are held back now, for a reason worth
/// telling (not the wait for the first listing at start).
fn paused(g: &Guard) -> bool {
    (g.paused && !g.waiting_for_listing) || g.restarts_paused.is_some()
}

/// Appends an event each time the guard pauses or resumes, while this
/// replica leads.
pub async fn run(
    db: Db,
    clock: Clock,
    leadership: watch::Receiver<Leadership>,
    mut guard: watch::Receiver<Guard>,
    stop: CancellationToken,
) {
    // The guard says itself whether a pause is only the start-up wait, so
    // no change has to be seen in between to tell the two apart (a watch
    // keeps only the latest value).
    let mut was = paused(&guard.borrow_and_update());
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            r = guard.changed() => if r.is_err() { return },
        }
        let g = guard.borrow_and_update().clone();
        let now = paused(&g);
        if now == was {
            continue;
        }
        was = now;
        if !leadership.borrow().leading {
            continue;
        }
        let kind = if now {
            NoticeKind::RestartsPaused
        } else {
            NoticeKind::RestartsResumed
        };
        let body = PauseNotice {
            reconnects_paused: g.paused,
            restarts_paused: g.restarts_paused.is_some(),
            reason: g.reason.clone().or(g.restarts_paused.clone()),
            stranded_in_window: g.stranded_in_window as u64,
            agents: g.agents as u64,
        };
        match outbox::append(&db, clock.now(), kind, &body).await {
            Ok(id) => debug!(event = id, kind = %kind, "pause event written"),
            Err(e) => {
                warn!(error = %e, kind = %kind, "recording a pause event failed; it is not told")
            }
        }
    }
}
