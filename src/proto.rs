//! Lifeline's wire: the generated code of `lifeline.v1` and of Teleport's
//! API subset (the `lifeline-proto` crate, from `proto/`), the standard
//! health protocol re-exported from tonic-health, and the conversions
//! between wire times and Lifeline's clock.

pub use lifeline_proto::{codec, std_duration, teleport, to_duration, v1};
pub use tonic_health::pb as health;

/// A wire timestamp as Lifeline time; `None` when its nanoseconds are
/// out of range or it lies outside 1970–9999 ([`Ts::in_range`]).
///
/// [`Ts::in_range`]: crate::clock::Ts::in_range
pub fn timestamp(ts: &prost_types::Timestamp) -> Option<crate::clock::Ts> {
    if !(0..1_000_000_000).contains(&ts.nanos) {
        return None;
    }
    ts.seconds
        .checked_mul(1_000_000)
        .and_then(|us| us.checked_add(i64::from(ts.nanos / 1000)))
        .map(crate::clock::Ts)
        .filter(|t| t.in_range())
}

pub fn to_timestamp(t: crate::clock::Ts) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.0.div_euclid(1_000_000),
        nanos: (t.0.rem_euclid(1_000_000) * 1000) as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::{timestamp, to_timestamp};
    use crate::clock::{spread, Ts};

    /// Only times in 1970–9999 come back from the wire; those round-trip
    /// exactly. Any seconds with any nanoseconds is refused or in range.
    #[test]
    fn wire_timestamps_over_the_whole_range() {
        for us in spread() {
            let t = Ts(us);
            let back = timestamp(&to_timestamp(t));
            assert_eq!(back, t.in_range().then_some(t), "{us}");
            for secs in [us, us / 1_000_000] {
                for nanos in [0, 999_999_999, -1, 1_000_000_000, i32::MIN, i32::MAX] {
                    let raw = prost_types::Timestamp {
                        seconds: secs,
                        nanos,
                    };
                    if let Some(t) = timestamp(&raw) {
                        assert!(t.in_range(), "{secs}/{nanos}");
                    }
                }
            }
        }
    }
}
