//! Small, pure formatting for the dashboard: ages, clock times, icons.
//! Every state has an icon *and* a word, so colour is never the only cue.

use std::time::Duration;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};

use crate::clock::Ts;
use crate::domain::{AgentState, Health, Outcome};

/// Characters kept as they are in a path segment or query value; the rest
/// are percent-encoded (names come from the network).
const KEEP: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.');

/// A name as one URL path segment or query value.
pub fn enc(s: &str) -> String {
    utf8_percent_encode(s, KEEP).to_string()
}

/// `/agents/{name}`.
pub fn agent_href(name: &str) -> String {
    format!("/agents/{}", enc(name))
}

/// A duration in the largest two units: "41 s", "3 min 2 s", "2 h 5 min".
pub fn compact(d: Duration) -> String {
    let s = d.as_secs();
    if s < 60 {
        if d < Duration::from_secs(1) && !d.is_zero() {
            return format!("{} ms", d.as_millis());
        }
        return format!("{s} s");
    }
    let (m, s) = (s / 60, s % 60);
    if m < 60 {
        return if s == 0 {
            format!("{m} min")
        } else {
            format!("{m} min {s} s")
        };
    }
    let (h, m) = (m / 60, m % 60);
    if h < 48 {
        return if m == 0 {
            format!("{h} h")
        } else {
            format!("{h} h {m} min")
        };
    }
    format!("{} d {} h", h / 24, h % 24)
}

/// How long before `now` `t` was ("41 s ago"); "in 5 s" for the future.
pub fn ago(now: Ts, t: Ts) -> String {
    let us = now.as_micros().saturating_sub(t.as_micros());
    let d = Duration::from_micros(us.unsigned_abs());
    if us >= 0 {
        format!("{} ago", compact(d))
    } else {
        format!("in {}", compact(d))
    }
}

/// Milliseconds, compactly ("30 s").
pub fn ms(ms: i64) -> String {
    compact(Duration::from_millis(ms.max(0) as u64))
}

/// Time left until `t` ("12 s left", "expired 41 s ago").
pub fn left(now: Ts, t: Ts) -> String {
    let us = t.as_micros().saturating_sub(now.as_micros());
    let d = compact(Duration::from_micros(us.unsigned_abs()));
    if us >= 0 {
        format!("{d} left")
    } else {
        format!("expired {d} ago")
    }
}

/// The UTC time of day, "14:02:10".
pub fn hms(t: Ts) -> String {
    let secs = t.as_micros().div_euclid(1_000_000).rem_euclid(86_400);
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600,
        (secs / 60) % 60,
        secs % 60
    )
}

pub fn state_icon(s: AgentState) -> &'static str {
    match s {
        AgentState::Healthy => "✓",
        AgentState::Degraded => "◐",
        AgentState::Stranded => "✕",
    }
}

pub fn health_icon(h: Health) -> &'static str {
    match h {
        Health::Serving => "✓",
        Health::NotServing => "✕",
        Health::Unknown | Health::ServiceUnknown => "?",
        Health::NotServed | Health::NeverReached => "·",
    }
}

/// A CSS class for a health: ok / bad / unknown.
pub fn health_class(h: Health) -> &'static str {
    match h {
        Health::Serving => "ok",
        Health::NotServing => "bad",
        Health::Unknown | Health::ServiceUnknown => "warn",
        Health::NotServed | Health::NeverReached => "quiet",
    }
}

pub fn state_class(s: AgentState) -> &'static str {
    match s {
        AgentState::Healthy => "ok",
        AgentState::Degraded => "warn",
        AgentState::Stranded => "bad",
    }
}

/// Icon and class of a signal outcome.
pub fn outcome(o: Outcome) -> (&'static str, &'static str) {
    match o {
        Outcome::Acked => ("✓", "ok"),
        Outcome::Pending | Outcome::Delivered => ("…", "warn"),
        // Not tried, by the peer's own choice: not a failure.
        Outcome::Refused => ("⊘", "warn"),
        Outcome::Failed | Outcome::Undeliverable | Outcome::Timeout => ("✕", "bad"),
    }
}

/// A tunnel's proxy state: icon and class.
pub fn proxy_state(s: &str) -> (&'static str, &'static str) {
    match s {
        "live" => ("✓", "ok"),
        _ => ("✕", "bad"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(compact(Duration::from_secs(41)), "41 s");
        assert_eq!(compact(Duration::from_millis(250)), "250 ms");
        assert_eq!(compact(Duration::ZERO), "0 s");
        assert_eq!(compact(Duration::from_secs(182)), "3 min 2 s");
        assert_eq!(compact(Duration::from_secs(7500)), "2 h 5 min");
        assert_eq!(compact(Duration::from_secs(3 * 86400 + 3600)), "3 d 1 h");
        let now = Ts(100_000_000);
        assert_eq!(ago(now, Ts(59_000_000)), "41 s ago");
        assert_eq!(ago(now, Ts(105_000_000)), "in 5 s");
        assert_eq!(left(now, Ts(112_000_000)), "12 s left");
        assert_eq!(left(now, Ts(59_000_000)), "expired 41 s ago");
        assert_eq!(
            hms(Ts((14 * 3600 + 2 * 60 + 10) * 1_000_000 + 999)),
            "14:02:10"
        );
    }

    /// Formatting a time never panics, whatever the two times are.
    #[test]
    fn relative_times_format_over_the_whole_range() {
        let edges = [i64::MIN, -1, 0, 1, Ts::MAX_VALID.0, i64::MAX];
        for a in edges {
            for b in edges {
                let (now, t) = (Ts(a), Ts(b));
                assert!(!ago(now, t).is_empty());
                assert!(!left(now, t).is_empty());
                assert_eq!(hms(t).len(), 8);
            }
        }
    }

    #[test]
    fn names_are_encoded_as_one_segment() {
        assert_eq!(agent_href("a/b c"), "/agents/a%2Fb%20c");
        assert_eq!(
            enc("<script>alert(1)</script>"),
            "%3Cscript%3Ealert%281%29%3C%2Fscript%3E"
        );
        assert_eq!(enc("node-1.eu_west"), "node-1.eu_west");
    }
}
