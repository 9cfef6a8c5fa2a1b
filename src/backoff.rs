//! Exponential backoff with full jitter (AWS architecture blog's "full
//! jitter"): attempt n waits a uniformly random time in `[0, min(cap, base·2ⁿ)]`.
//! Used by every retry loop that talks to the network.

use std::time::Duration;

use rand::Rng;

#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Backoff {
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Backoff { base, cap }
    }

    /// The upper bound of the wait before retry number `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// A random wait in `[0, ceiling(attempt)]`.
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let us = u64::try_from(ceiling.as_micros()).unwrap_or(u64::MAX);
        Duration::from_micros(rand::rng().random_range(0..=us))
    }
}

/// An error with its sources, `outer: inner: root` (tonic's transport errors
/// say only "transport error" at the top; the cause is underneath).
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        cur = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ceiling_doubles_then_caps() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        assert_eq!(b.ceiling(0), Duration::from_millis(100));
        assert_eq!(b.ceiling(1), Duration::from_millis(200));
        assert_eq!(b.ceiling(4), Duration::from_millis(1600));
        assert_eq!(b.ceiling(5), Duration::from_secs(2));
        assert_eq!(b.ceiling(500), Duration::from_secs(2));
    }

    #[test]
    fn delay_stays_within_ceiling() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        for attempt in 0..40 {
            assert!(b.delay(attempt) <= b.ceiling(attempt));
        }
    }
}
