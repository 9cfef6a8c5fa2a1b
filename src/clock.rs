//! The one clock. Every TTL, expiry and "since" in Lifeline is read from here.
//!
//! In production ([`Clock::system`]) "now" is the system's wall clock, read
//! each time, so a Lifeline started before the host's clock was synchronised,
//! or running across a VM suspend or a clock step, judges the cluster's
//! `expires` against the right time. Sleeps and timers stay on tokio's
//! monotonic clock: [`Clock::instant_at`] never arms a timer more than a
//! second ahead, so a timer is re-armed against the wall at least once a
//! second and a step is honoured within a second. [`watch_steps`] logs steps
//! larger than a second.
//!
//! Tests use [`Clock::manual`]: wall time derived from tokio's (pausable)
//! monotonic clock plus a fixed base, so `tokio::time::advance` moves it and
//! expiry timers line up exactly with the timestamps the rules compare.
//!
//! Outside this module, only timing sites (durations measured for metrics,
//! benchmarks, real-time bounds) read the system's clocks; `.clippy.toml`
//! refuses `SystemTime::now` and `Instant::now` everywhere else.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

/// Microseconds since the Unix epoch. Signed so that differences are easy and
/// far-past inputs are representable (and then rejected by validation).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Ts(pub i64);

impl Ts {
    pub const ZERO: Ts = Ts(0);
    /// The last microsecond of year 9999: the latest time any input may
    /// carry, and the latest RFC 3339 can write with four-digit years.
    pub const MAX_VALID: Ts = Ts(253_402_300_799_999_999);

    /// True from the Unix epoch to the end of year 9999: the range every
    /// time from the wire, the API or a database must lie in.
    pub fn in_range(self) -> bool {
        (0..=Self::MAX_VALID.0).contains(&self.0)
    }

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

    /// The start of the `step`-long interval (counted from the epoch) that
    /// holds `self`; `self` for a zero step.
    pub fn floor_to(self, step: Duration) -> Ts {
        match dur_micros(step) {
            0 => self,
            s => Ts(self.0 - self.0.rem_euclid(s)),
        }
    }

    /// `self - earlier`, zero when `earlier` is later.
    pub fn since(self, earlier: Ts) -> Duration {
        Duration::from_micros(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// RFC 3339 with milliseconds, UTC (what the API prints). Never
    /// panics: a time before 1970 prints as the epoch, one past year 9999
    /// as its last millisecond (validation refuses both at the edge; this
    /// is for what arithmetic on valid times can reach, `saturating_add`).
    pub fn rfc3339(self) -> String {
        let t = Ts(self.0.clamp(0, Self::MAX_VALID.0));
        humantime::format_rfc3339_millis(t.to_system()).to_string()
    }

    /// Any RFC 3339 time: `Z` or `z`, or an offset (`+02:00`), taken to
    /// UTC; also the weaker forms people type (a space for the `T`, no
    /// zone: UTC). The one parser of times from the wire.
    pub fn parse_rfc3339(s: &str) -> Option<Ts> {
        use time::format_description::well_known::Rfc3339;
        if let Ok(t) = time::OffsetDateTime::parse(s, &Rfc3339) {
            return i64::try_from(t.unix_timestamp_nanos() / 1000).ok().map(Ts);
        }
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

/// Read back from what [`Ts`]'s `Serialize` wrote (a stored notice's
/// body): an RFC 3339 time, or a clear error naming what it got.
impl<'de> serde::Deserialize<'de> for Ts {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Ts, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Ts::parse_rfc3339(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not an RFC 3339 time: {s:?}")))
    }
}

/// On the wire: an RFC 3339 time in UTC, milliseconds.
impl utoipa::PartialSchema for Ts {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, SchemaFormat, Type};
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime)))
            .examples(["2026-11-24T07:12:41.718Z"])
            .into()
    }
}

impl utoipa::ToSchema for Ts {}

/// The injectable clock. Cheap to copy.
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    source: Source,
}

#[derive(Clone, Copy, Debug)]
enum Source {
    /// The system's wall clock.
    Wall,
    /// A wall-clock base fixed at creation plus tokio's (pausable)
    /// monotonic time since then.
    Manual { wall_base: Ts, mono_base: Instant },
}

/// "Never", for a deadline: thirty years.
const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);

/// How far ahead a timer is armed on the wall clock before it is re-armed.
pub const REARM: Duration = Duration::from_secs(1);

#[allow(clippy::disallowed_methods)] // the one place the system's clocks are read for rules
fn system_now() -> Ts {
    Ts::from_system(SystemTime::now())
}

#[allow(clippy::disallowed_methods)] // tokio's monotonic clock: timers and the manual clock
fn mono_now() -> Instant {
    Instant::now()
}

/// Real time spent, for what something costs (a log line's duration, a
/// histogram, the `Server-Timing` header, when to publish next): std's
/// monotonic clock, which paused test time does not stop. Never for a
/// rule: rules read [`Clock`]. The one place Lifeline starts a timer.
#[derive(Clone, Copy, Debug)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    #[allow(clippy::disallowed_methods)] // the one timer of costs
    pub fn start() -> Stopwatch {
        Stopwatch(std::time::Instant::now())
    }

    #[allow(clippy::disallowed_methods)] // the one timer of costs
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
    }
}

/// tokio's monotonic time now (which paused test time moves): for
/// bookkeeping that follows the rules' time, such as a connection's
/// idleness.
pub fn monotonic() -> Instant {
    mono_now()
}

/// tokio's monotonic time since `t`.
pub fn since(t: Instant) -> Duration {
    mono_now().saturating_duration_since(t)
}

impl Clock {
    /// The system's wall clock, read on every call (production).
    pub fn system() -> Self {
        Clock {
            source: Source::Wall,
        }
    }

    /// A clock that starts at the system's wall time and then moves with
    /// tokio's monotonic clock only (tests, with paused time).
    pub fn manual() -> Self {
        Self::starting_at(system_now())
    }

    /// A manual clock whose "now" is `wall` at the moment of creation.
    pub fn starting_at(wall: Ts) -> Self {
        Clock {
            source: Source::Manual {
                wall_base: wall,
                mono_base: mono_now(),
            },
        }
    }

    /// True on the system's wall clock (production); false on a manual
    /// clock, whose time is the test's.
    pub fn is_wall(&self) -> bool {
        matches!(self.source, Source::Wall)
    }

    pub fn now(&self) -> Ts {
        match self.source {
            Source::Wall => system_now(),
            Source::Manual {
                wall_base,
                mono_base,
            } => wall_base.saturating_add(mono_now().saturating_duration_since(mono_base)),
        }
    }

    /// The tokio instant at which to look again for wall time `t` (now, if
    /// already past). On the wall clock at most [`REARM`] ahead: the caller
    /// re-checks `now()` when it fires and re-arms.
    pub fn instant_at(&self, t: Ts) -> Instant {
        let now = mono_now();
        let cur = self.now();
        if t <= cur {
            return now;
        }
        let wait = t.since(cur);
        match self.source {
            Source::Wall => now + wait.min(REARM),
            Source::Manual { .. } => now + wait,
        }
    }

    /// The monotonic clock's now: for validity and elapsed time, which
    /// a step of the wall clock must not move.
    pub fn instant(&self) -> Instant {
        mono_now()
    }

    /// A tokio instant `d` from now: deadlines for retries and windows
    /// that are about elapsed time, not the wall.
    pub fn deadline_in(&self, d: Duration) -> Instant {
        let now = mono_now();
        // A duration too long for the monotonic clock is as good as never.
        now.checked_add(d).unwrap_or_else(|| now + FAR)
    }
}

/// Logs every step of the wall clock larger than a second (against tokio's
/// monotonic clock), until `stop`. Only meaningful on [`Clock::system`].
pub async fn watch_steps(clock: Clock, stop: tokio_util::sync::CancellationToken) {
    if !matches!(clock.source, Source::Wall) {
        return;
    }
    let (mut wall, mut mono) = (clock.now(), mono_now());
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(REARM) => {}
        }
        let (w, m) = (clock.now(), mono_now());
        let step = (w.as_micros() - wall.as_micros()) - dur_micros(m.duration_since(mono));
        if step.unsigned_abs() > 1_000_000 {
            tracing::warn!(
                step_ms = step / 1000,
                now = %w,
                "the system clock stepped; expiries are judged against the new time"
            );
        }
        (wall, mono) = (w, m);
    }
}

/// Microseconds to probe a time conversion with: both ends of `i64`, both
/// ends of the valid range and their neighbours, and a deterministic
/// spread (splitmix64) over the whole range and over the valid one.
/// Tokio's paused clock, for a benchmark that simulates hours: only in a
/// build with the `virtual-time` feature (tokio's test utilities), never
/// in the production one.
pub mod virtual_time {
    use std::time::Duration;

    /// A current-thread runtime whose clock starts paused; `None` in a
    /// build without the `virtual-time` feature.
    pub fn paused_runtime() -> Option<std::io::Result<tokio::runtime::Runtime>> {
        #[cfg(feature = "virtual-time")]
        {
            Some(
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .start_paused(true)
                    .build(),
            )
        }
        #[cfg(not(feature = "virtual-time"))]
        {
            None
        }
    }

    /// Moves a paused clock `d` forward (a no-op in a build without the
    /// feature, where no clock is ever paused).
    pub async fn advance(d: Duration) {
        #[cfg(feature = "virtual-time")]
        tokio::time::advance(d).await;
        #[cfg(not(feature = "virtual-time"))]
        let _ = d;
    }
}

#[cfg(test)]
pub(crate) fn spread() -> Vec<i64> {
    let mut probes = vec![
        i64::MIN,
        i64::MIN + 1,
        -1,
        0,
        1,
        Ts::MAX_VALID.0,
        Ts::MAX_VALID.0 + 1,
        i64::MAX - 1,
        i64::MAX,
    ];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        let z = z ^ (z >> 31);
        probes.push(z as i64);
        probes.push(((z >> 1) % (Ts::MAX_VALID.0 as u64 + 1)) as i64);
    }
    probes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_system_clock_reads_the_wall_and_rearms_within_a_second() {
        let c = Clock::system();
        let wall = system_now();
        assert!(c.now().since(wall) < Duration::from_secs(5));
        // Paused tokio time does not move the wall.
        let before = c.now();
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(c.now().since(before) < Duration::from_secs(5));
        // A deadline an hour away is looked at again within a second.
        let far = c.now().saturating_add(Duration::from_secs(3600));
        let at = c.instant_at(far);
        assert!(at <= mono_now() + REARM);
    }

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

    /// Every `i64` formats (the two ends, their neighbours and a spread
    /// between), and the valid range round-trips through text.
    #[test]
    fn every_i64_formats_and_only_1970_to_9999_is_valid() {
        for us in spread() {
            let t = Ts(us);
            let text = t.rfc3339();
            assert_eq!(text.len(), 24, "{us}: {text}");
            let _ = format!("{t} {t:?}");
            assert_eq!(t.in_range(), (0..=Ts::MAX_VALID.0).contains(&us));
            if t.in_range() {
                assert_eq!(
                    Ts::parse_rfc3339(&text),
                    Some(Ts(us - us.rem_euclid(1000))),
                    "{us}: {text}"
                );
            }
        }
        assert_eq!(Ts(i64::MAX).rfc3339(), "9999-12-31T23:59:59.999Z");
        assert_eq!(Ts(i64::MIN).rfc3339(), "1970-01-01T00:00:00.000Z");
    }

    #[test]
    fn rfc3339_round_trips() {
        let t = Ts(1_700_000_000_123_000);
        let s = t.rfc3339();
        assert_eq!(s, "2023-11-14T22:13:20.123Z");
        assert_eq!(Ts::parse_rfc3339(&s), Some(t));
        assert_eq!(Ts::parse_rfc3339("yesterday"), None);
        // Offsets and a lowercase z are RFC 3339 too; all land in UTC.
        for same in [
            "2023-11-15T00:13:20.123+02:00",
            "2023-11-14T22:13:20.123z",
            "2023-11-14t22:13:20.123Z",
            "2023-11-14T17:13:20.123-05:00",
        ] {
            assert_eq!(Ts::parse_rfc3339(same), Some(t), "{same}");
        }
    }
}
