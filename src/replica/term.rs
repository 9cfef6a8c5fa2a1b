//! The leader lease's term: take it, renew it, step down before it ends
//! when the database cannot be reached, and publish who leads.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::lease::{self, Attempt};
use super::{Parts, RENEW_SHARE};
use crate::store::read;
use crate::store::Fence;

/// Where the lease loop stands.
struct Lease {
    /// The term this replica leads in, if it does.
    term: Option<i64>,
    /// Monotonic instant past which it must not act as leader without a
    /// renewal: a wall clock step cannot stretch it, and a process paused
    /// (SIGSTOP, a VM freeze) finds it passed when it wakes.
    valid_until: Instant,
    /// Consecutive failures to reach the database (for the log).
    failures: u32,
}

pub(super) async fn lease_loop(p: Arc<Parts>, stop: CancellationToken) {
    let cfg = &p.cfg;
    let renew_every = cfg.lease / RENEW_SHARE;
    let mono = || p.clock.instant();
    let mut st = Lease {
        term: None,
        valid_until: mono(),
        failures: 0,
    };
    loop {
        let started = mono();
        // Validity first: a leader that slept past it (paused, starved)
        // stops acting before anything else, and whatever it takes next
        // is a new tenure.
        if st.term.is_some() && started >= st.valid_until {
            step_down(
                &p,
                &mut st,
                "its validity ran out before it could renew (was it paused?)",
            );
        }
        // A leader waits for an answer no longer than it may still lead.
        let budget = match st.term {
            Some(_) => renew_every
                .min(st.valid_until.saturating_duration_since(started))
                .max(Duration::from_millis(10)),
            None => renew_every,
        };
        let attempt = tokio::time::timeout(
            budget,
            lease::try_lead(&p.pool, &cfg.name, cfg.lease, st.term),
        )
        .await;
        let wait = match attempt {
            Ok(Ok(Attempt::Ours(t))) => {
                st.failures = 0;
                // The database's deadline is `lease` after it ran the
                // statement, which was after `started`: stepping down a
                // renewal early leaves the lease ours until then.
                st.valid_until = started + (cfg.lease - renew_every);
                let valid_until = st.valid_until;
                // Moved without waking anyone: only who leads is news.
                p.leadership.send_if_modified(|l| {
                    l.valid_until = Some(valid_until);
                    false
                });
                if st.term != Some(t.term) {
                    take_lead(&p, &mut st, t.term).await;
                }
                renew_every
            }
            Ok(Ok(Attempt::Theirs(held))) => {
                st.failures = 0;
                step_down(&p, &mut st, "another replica holds the lease");
                set_leader(&p, Some(held.holder.clone()), held.term);
                // Look again just after it would lapse, or at the usual pace.
                let left = Duration::from_micros(
                    held.deadline_us.saturating_sub(held.now_us).max(0) as u64,
                );
                left.saturating_add(Duration::from_millis(20))
                    .min(renew_every)
            }
            Ok(Ok(Attempt::Nobody)) => Duration::from_millis(50),
            Ok(Err(e)) => {
                unreachable(&p, &mut st, &e.to_string());
                renew_every / 2
            }
            Err(_) => {
                unreachable(&p, &mut st, &format!("no answer within {budget:?}"));
                renew_every / 2
            }
        };
        if st.failures > 0 && st.term.is_some() && mono() >= st.valid_until {
            step_down(&p, &mut st, "the lease could not be renewed before it ends");
        }
        // A leader that cannot renew wakes exactly when it must step down.
        let wait = match st.term {
            Some(_) => wait.min(st.valid_until.saturating_duration_since(mono())),
            None => wait,
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    // The lease stays held until the last writes are in: see `Departure`.
}

/// This replica holds the lease in a new term: the fleet goes on from the
/// database's open episodes, then the others may see it lead.
async fn take_lead(p: &Parts, st: &mut Lease, term: i64) {
    let cluster = p.rooms.fleet.cluster();
    let open = match read::open_episodes(&p.rooms.db, cluster).await {
        Ok(episodes) => crate::store::incidents::open(&p.rooms.db, cluster)
            .await
            .map(|incidents| (episodes, incidents)),
        Err(e) => Err(e),
    };
    let ((open, next), incidents) = match open {
        Ok(v) => v,
        Err(e) => {
            // Not leading yet: the next renewal tries again.
            warn!(term, error = %e, "holding the lease but cannot read the open episodes and incidents; not leading yet");
            return;
        }
    };
    let fence = Fence::Leader {
        replica: p.cfg.name.as_str().into(),
        term,
    };
    if p.rooms
        .fleet
        .lead(fence, open, next, incidents)
        .await
        .is_err()
    {
        return;
    }
    st.term = Some(term);
    info!(
        term,
        "this replica leads: it writes history and sends automatic signals"
    );
    let now = p.clock.now();
    let valid_until = st.valid_until;
    p.leadership.send_modify(|l| {
        l.leader = Some(p.cfg.name.clone());
        l.term = term;
        l.leading = true;
        l.valid_until = Some(valid_until);
        l.since = Some(now);
    });
}

fn step_down(p: &Parts, st: &mut Lease, why: &str) {
    let Some(term) = st.term.take() else {
        return;
    };
    warn!(term, why, "this replica no longer leads");
    let fleet = p.rooms.fleet.clone();
    // The fleet stops stamping batches as the leader's; the database's
    // fence already refuses them.
    tokio::spawn(async move {
        let _ = fleet.follow().await;
    });
    let now = p.clock.now();
    p.leadership.send_modify(|l| {
        l.leading = false;
        l.valid_until = None;
        l.since = Some(now);
        if l.leader.as_deref() == Some(p.cfg.name.as_str()) {
            l.leader = None;
        }
    });
}

fn set_leader(p: &Parts, leader: Option<String>, term: i64) {
    p.leadership.send_if_modified(|l| {
        let changed = l.leader != leader || l.term != term;
        l.leader = leader;
        l.term = term;
        changed
    });
}

fn unreachable(p: &Parts, st: &mut Lease, error: &str) {
    st.failures += 1;
    if st.failures == 1 {
        warn!(
            error,
            leading = st.term.is_some(),
            "cannot reach the database for the leader lease"
        );
    } else {
        debug!(
            error,
            failures = st.failures,
            "still cannot reach the database for the lease"
        );
    }
    if st.term.is_none() {
        set_leader(p, None, 0);
    }
}
