//! Lifeline's wire, generated: `lifeline.v1` (`ClusterEvents`,
//! `AgentSignals`, `ServiceConfigDiscoveryService`) and the subset of
//! Teleport's Auth API Lifeline speaks, from the workspace's `proto/`.
//! Shared by the server, the simulator and any other client of
//! `lifeline.v1`; conversions to a program's own types stay with it.

#![allow(clippy::all, missing_docs)]
// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod codec;

pub mod v1 {
    tonic::include_proto!("lifeline.v1");
}

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
                capabilities: None,
                cluster: String::new(),
            })),
        }
    }

    /// The Hello of a restart-only peer (a sidecar beside an agent that
    /// speaks none of this protocol).
    /// `restart_wait`: the longest its restart may take before its ack.
    pub fn hello_restart_only(
        agent: &str,
        version: &str,
        method: &str,
        dry_run: bool,
        restart_wait: std::time::Duration,
    ) -> Self {
        v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Hello(v1::Hello {
                agent: agent.to_string(),
                version: version.to_string(),
                desired_tunnels: 0,
                capabilities: Some(v1::Capabilities {
                    restart_only: true,
                    restart_method: method.to_string(),
                    dry_run,
                    restart_wait_seconds: u32::try_from(restart_wait.as_secs()).unwrap_or(u32::MAX),
                }),
                cluster: String::new(),
            })),
        }
    }

    /// A Hello that names the agent's cluster; any other message as it is.
    pub fn in_cluster(mut self, cluster: &str) -> Self {
        if let Some(v1::agent_message::Msg::Hello(h)) = &mut self.msg {
            h.cluster = cluster.to_string();
        }
        self
    }

    pub fn report(report: v1::AgentReport) -> Self {
        v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Report(report)),
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
                refused: false,
            })),
        }
    }

    /// The peer did not try what the signal asked, and says why.
    pub fn refused(signal_id: u64, detail: String) -> Self {
        v1::AgentMessage {
            msg: Some(v1::agent_message::Msg::Ack(v1::SignalAck {
                signal_id,
                ok: false,
                detail,
                refused: true,
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

pub fn to_duration(d: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration {
        seconds: d.as_secs() as i64,
        nanos: d.subsec_nanos() as i32,
    }
}
