//! The sidecar's one clock: tokio's monotonic clock (which tests may
//! pause) for cooldowns and deadlines, and the wall clock only for the
//! time of a restart it reports.

use std::time::SystemTime;

use tokio::time::Instant;

#[allow(clippy::disallowed_methods)] // The one place the sidecar reads the time.
pub fn instant() -> Instant {
    Instant::now()
}

/// Time on [`instant`]'s clock since `t`.
pub fn since(t: Instant) -> std::time::Duration {
    instant().saturating_duration_since(t)
}

#[allow(clippy::disallowed_methods)] // The one place the sidecar reads the wall clock.
pub fn wall() -> SystemTime {
    SystemTime::now()
}

/// Full-jitter exponential backoff: a random wait up to base × 2^attempt,
/// at most `cap`.
pub fn backoff(
    base: std::time::Duration,
    cap: std::time::Duration,
    attempt: u32,
) -> std::time::Duration {
    use rand::Rng;
    let ceiling = base
        .saturating_mul(1u32.checked_shl(attempt.min(16)).unwrap_or(u32::MAX))
        .min(cap);
    let ms = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
    std::time::Duration::from_millis(rand::rng().random_range(0..=ms.max(1)))
}
