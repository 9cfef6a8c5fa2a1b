//! Generated protobuf and gRPC code for `lifeline.v1` and Teleport's API
//! subset (see `proto/`), plus the standard health protocol re-exported from
//! tonic-health.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("lifeline.v1");
}

pub use tonic_health::pb as health;

/// The subset of Teleport's Auth API Lifeline speaks (see
/// `proto/teleport/`). Nested as Teleport's packages are, because the
/// generated code names other packages by relative path.
pub mod teleport {
    pub mod types {
        tonic::include_proto!("types");
    }
    pub mod proto {
        tonic::include_proto!("proto");
    }
    pub mod teleport {
        pub mod presence {
            pub mod v1 {
                tonic::include_proto!("teleport.presence.v1");
            }
        }
    }
    pub use self::proto as auth;
    pub use self::teleport::presence::v1 as presence;
}

/// The messages an agent sends, built one way everywhere (simulated agents,
/// benchmarks, tests).
impl v1::AgentMessage {
    pub fn hello(agent: &str, version: &str, desired_tunnels: u32) -> Self {
        v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Hello(v1::Hello {
                agent: agent.to_string(),
                version: version.to_string(),
                desired_tunnels,
            })),
        }
    }

    pub fn tunnels(proxies: Vec<String>, auth_server: String) -> Self {
        v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Tunnels(v1::TunnelReport {
                proxies,
                auth_server,
            })),
        }
    }

    pub fn ack(signal_id: u64, ok: bool, detail: String) -> Self {
        v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Ack(v1::SignalAck {
                signal_id,
                ok,
                detail,
            })),
        }
    }
}

/// A wire duration as a std one; negative parts count as zero (for peers
/// whose input is already trusted: validation rejects bad TTLs upstream).
pub fn std_duration(d: &prost_types::Duration) -> std::time::Duration {
    std::time::Duration::new(
        d.seconds.max(0) as u64,
        d.nanos.clamp(0, 999_999_999) as u32,
    )
}

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

pub fn to_duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
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
