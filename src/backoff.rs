//! Exponential backoff, the one implementation every retry loop uses. The
//! step for attempt n is `min(cap, base·2ⁿ)`; the jitter on it is
//! - full (AWS architecture blog's "full jitter"): a uniformly random wait
//!   in `[0, step]`, for loops that talk to the network;
//! - added: `[step, 1.5·step)`, for automatic reconnects, which must give
//!   an agent at least the step to act on a signal before asking again.

use std::time::Duration;

use rand::Rng;

#[derive(Clone, Copy, Debug)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
    pub jitter: Jitter,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    /// `[0, step]`.
    Full,
    /// `[step, 1.5·step)`: never sooner than the step.
    Added,
}

impl Backoff {
    /// Full jitter.
    pub const fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            jitter: Jitter::Full,
        }
    }

    /// Never sooner than the step, up to half of it more.
    pub const fn at_least_step(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            jitter: Jitter::Added,
        }
    }

    /// The upper bound of the wait before retry number `attempt` (0-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The wait before retry number `attempt`, from the thread's RNG.
    pub fn delay(&self, attempt: u32) -> Duration {
        self.delay_with(attempt, &mut rand::rng())
    }

    /// The wait before retry number `attempt`, from `rng`.
    pub fn delay_with(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let step = self.ceiling(attempt);
        match self.jitter {
            Jitter::Full => {
                let us = u64::try_from(step.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(rng.random_range(0..=us))
            }
            Jitter::Added => step.mul_f64(rng.random_range(1.0..1.5)),
        }
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
    fn added_jitter_waits_the_step_and_up_to_half_more() {
        use rand::SeedableRng;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let b = Backoff::at_least_step(Duration::from_secs(1), Duration::from_secs(16));
        for attempt in 0..10 {
            let step = Duration::from_secs(1 << attempt.min(4));
            for _ in 0..50 {
                let d = b.delay_with(attempt, &mut rng);
                assert!(d >= step && d < step.mul_f64(1.5), "{attempt}: {d:?}");
            }
        }
    }

    #[test]
    fn delay_stays_within_ceiling() {
        let b = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
        for attempt in 0..40 {
            assert!(b.delay(attempt) <= b.ceiling(attempt));
        }
    }
}
