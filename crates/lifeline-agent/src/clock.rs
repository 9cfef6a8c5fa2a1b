//! The sidecar's one clock: tokio's monotonic clock (which tests may
//! pause) for cooldowns and deadlines, and the wall clock only for the
//! time of a restart it reports.

use std::time::SystemTime;

use tokio::time::Instant;

#[allow(clippy::disallowed_methods)] // The one place the sidecar reads the time.
pub fn instant() -> Instant {
    Instant::now()
}

#[allow(clippy::disallowed_methods)] // The one place the sidecar reads the wall clock.
pub fn wall() -> SystemTime {
    SystemTime::now()
}
