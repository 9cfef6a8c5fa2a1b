//! Whether the database takes writes, and the one way a write that must not
//! be lost is retried: until the database takes it, with backoff (50 ms up
//! to [`MAX_RETRY_WAIT`], full jitter), the failure recorded for `/readyz`
//! and `/metrics` while it lasts, logged once when it starts and once when
//! it ends. The batch writer and the signal audit writer both go through
//! [`Retry`].

use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::backoff::Backoff;
use crate::clock::{Clock, Ts};

/// Whether the store is taking writes.
#[derive(Debug, Default)]
pub struct StoreHealth {
    failing: Mutex<Option<StoreFailure>>,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct StoreFailure {
    /// When the current run of failures began (wall time).
    pub since: Ts,
    pub attempts: u32,
    pub error: String,
}

impl StoreHealth {
    pub fn failure(&self) -> Option<StoreFailure> {
        self.lock().clone()
    }

    pub fn is_failing(&self) -> bool {
        self.lock().is_some()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<StoreFailure>> {
        self.failing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Starts retrying one write (`what` names it in the log).
    pub fn retry(&self, clock: Clock, what: &'static str) -> Retry<'_> {
        Retry {
            health: self,
            clock,
            what,
            attempts: 0,
        }
    }
}

/// The longest wait between two attempts at one write: a database that
/// returns is written to again within it, well inside a leader lease as
/// deployed (5 s), so `/readyz` is 200 again within a lease of its return.
/// An attempt against a database that is down costs it one refused
/// connection.
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(2);

const BACKOFF: Backoff = Backoff::new(Duration::from_millis(50), MAX_RETRY_WAIT);

/// One write being retried; see the module docs.
pub struct Retry<'a> {
    health: &'a StoreHealth,
    clock: Clock,
    what: &'static str,
    attempts: u32,
}

impl Retry<'_> {
    /// Failed attempts so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// Records a failed attempt and waits out the backoff. False when
    /// `stop` has fired: the caller gives up and says what is lost.
    pub async fn failed(&mut self, e: &sqlx::Error, stop: &CancellationToken) -> bool {
        self.attempts += 1;
        if self.attempts == 1 {
            warn!(what = self.what, error = %e, "write failed; retrying until the database takes it");
        }
        {
            let mut f = self.health.lock();
            let since = f.as_ref().map_or_else(|| self.clock.now(), |f| f.since);
            *f = Some(StoreFailure {
                since,
                attempts: self.attempts,
                error: e.to_string(),
            });
        }
        if stop.is_cancelled() {
            return false;
        }
        // One more attempt after a stop that arrives while waiting.
        tokio::select! {
            _ = tokio::time::sleep(BACKOFF.delay(self.attempts.min(16))) => {}
            _ = stop.cancelled() => {}
        }
        true
    }

    /// The write went through: the failure, if any, is over.
    pub fn succeeded(self) {
        if self.attempts > 0 {
            info!(
                what = self.what,
                attempts = self.attempts + 1,
                "the database takes writes again"
            );
            *self.health.lock() = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_failing_write_is_reported_until_it_goes_through_or_stop_fires() {
        let health = StoreHealth::default();
        let clock = Clock::starting_at(Ts(5_000_000));
        let stop = CancellationToken::new();
        let e = sqlx::Error::PoolTimedOut;
        let mut r = health.retry(clock, "test write");
        assert!(r.failed(&e, &stop).await, "retries while running");
        assert!(r.failed(&e, &stop).await);
        let f = health.failure().expect("failing");
        assert_eq!((f.attempts, f.since), (2, Ts(5_000_000)), "since the first");
        assert!(f.error.contains("timed out"), "{}", f.error);
        // A second writer failing meanwhile keeps the first moment.
        let mut other = health.retry(clock, "other write");
        assert!(other.failed(&e, &stop).await);
        assert_eq!(health.failure().map(|f| f.since), Some(Ts(5_000_000)));
        r.succeeded();
        assert!(!health.is_failing(), "cleared once a write goes through");
        stop.cancel();
        assert!(!other.failed(&e, &stop).await, "gives up once stopped");
        assert!(health.is_failing(), "and the failure stands");
    }

    #[tokio::test(start_paused = true)]
    async fn a_long_failure_is_retried_well_within_a_lease() {
        let health = StoreHealth::default();
        let stop = CancellationToken::new();
        let clock = Clock::starting_at(Ts(0));
        let mut r = health.retry(clock, "test write");
        let mut longest = Duration::ZERO;
        for _ in 0..64 {
            let t = clock.now();
            assert!(r.failed(&sqlx::Error::PoolTimedOut, &stop).await);
            longest = longest.max(clock.now().since(t));
        }
        assert!(longest <= MAX_RETRY_WAIT, "waited {longest:?}");
        assert!(longest >= MAX_RETRY_WAIT / 4, "backs off: {longest:?}");
        let lease = crate::config::Config::default().storage.leader_lease;
        assert!(
            MAX_RETRY_WAIT * 2 <= lease,
            "{MAX_RETRY_WAIT:?} against {lease:?}"
        );
    }
}
