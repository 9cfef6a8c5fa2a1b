//! The one clock. Every TTL, expiry and "since" in Lifeline is read from here.
//!
//! Wall time is derived from tokio's monotonic clock plus a fixed base, so that
//! tests which pause tokio time (`tokio::time::pause()` / `advance()`) move the
//! wall clock too, and expiry timers (`sleep_until`) line up exactly with the
//! timestamps the rules compare.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Microseconds since the Unix epoch. Signed so that differences are easy and
/// far-past inputs are representable (and then rejected by validation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ts(pub i64);

impl Ts {
    pub const ZERO: Ts = Ts(0);

    pub fn from_micros(us: i64) -> Self {
        Ts(us)
    }

    pub fn as_micros(self) -> i64 {
        self.0
    }

    pub fn as_millis(self) -> i64 {
        self.0.div_euclid(1000)
    }

    pub fn from_system(t: SystemTime) -> Self {
        match t.duration_since(UNIX_EPOCH) {
            Ok(d) => Ts(i64::try_from(d.as_micros()).unwrap_or(i64::MAX)),
            Err(e) => Ts(-i64::try_from(e.duration().as_micros()).unwrap_or(i64::MAX)),
        }
    }

    pub fn to_system(self) -> SystemTime {
        if self.0 >= 0 {
            UNIX_EPOCH + Duration::from_micros(self.0 as u64)
        } else {
            UNIX_EPOCH - Duration::from_micros(self.0.unsigned_abs())
        }
    }

    pub fn saturating_add(self, d: Duration) -> Ts {
        Ts(self.0.saturating_add(dur_micros(d)))
    }

    pub fn saturating_sub(self, d: Duration) -> Ts {
        Ts(self.0.saturating_sub(dur_micros(d)))
    }

    /// `self - earlier`, zero when `earlier` is later.
    pub fn since(self, earlier: Ts) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// RFC 3339 with milliseconds, UTC (what the API prints).
    pub fn rfc3339(self) -> String {
        if self.0 < 0 {
            return "1970-01-01T00:00:00.000Z".to_string();
        }
        humantime::format_rfc3339_millis(self.to_system()).to_string()
    }

    pub fn parse_rfc3339(s: &str) -> Option<Ts> {
        humantime::parse_rfc3339_weak(s).ok().map(Ts::from_system)
    }
}

pub fn dur_micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl fmt::Debug for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.rfc3339())
    }
}

impl fmt::Display for Ts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.rfc3339())
    }
}

impl serde::Serialize for Ts {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.rfc3339())
    }
}

/// The injectable clock: a wall-clock base fixed at creation plus tokio's
/// (pausable) monotonic time since then. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    wall_base: Ts,
    mono_base: Instant,
}

impl Clock {
    /// A clock that reads the system's wall time at creation.
    pub fn system() -> Self {
        Self::starting_at(Ts::from_system(SystemTime::now()))
    }

    /// A clock whose "now" is `wall` at the moment of creation.
    pub fn starting_at(wall: Ts) -> Self {
        Clock {
            wall_base: wall,
            mono_base: Instant::now(),
        }
    }

    pub fn now(&self) -> Ts {
        self.wall_base
            .saturating_add(Instant::now().saturating_duration_since(self.mono_base))
    }

    /// The tokio instant at which wall time `t` arrives (now, if already past).
    pub fn instant_at(&self, t: Ts) -> Instant {
        let now = Instant::now();
        let cur = self.now();
        if t <= cur {
            now
        } else {
            now + t.since(cur)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn wall_time_follows_paused_tokio_time() {
        let clock = Clock::starting_at(Ts(1_000_000));
        assert_eq!(clock.now(), Ts(1_000_000));
        tokio::time::advance(Duration::from_millis(1500)).await;
        assert_eq!(clock.now(), Ts(2_500_000));
        let at = clock.instant_at(Ts(3_500_000));
        tokio::time::sleep_until(at).await;
        assert_eq!(clock.now(), Ts(3_500_000));
    }

    #[test]
    fn rfc3339_round_trips() {
        let t = Ts(1_700_000_000_123_000);
        let s = t.rfc3339();
        assert_eq!(s, "2023-11-14T22:13:20.123Z");
        assert_eq!(Ts::parse_rfc3339(&s), Some(t));
        assert_eq!(Ts::parse_rfc3339("yesterday"), None);
    }
}
