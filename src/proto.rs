//! Generated protobuf and gRPC code for `lifeline.v1` (see `proto/`), plus the
//! standard health protocol re-exported from tonic-health.

#![allow(clippy::all, missing_docs)]

pub mod v1 {
    tonic::include_proto!("lifeline.v1");
}

pub use tonic_health::pb as health;

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
