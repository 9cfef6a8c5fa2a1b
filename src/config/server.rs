//! `[server]` and `[probes]`: Lifeline's own listeners and the HTTP edge's
//! limits.

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

use super::{host_port, invalid, positive, ConfigError};

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// HTTP (API, dashboard, probes). Env: `LIFELINE_LISTEN`.
    pub listen: SocketAddr,
    /// gRPC (agent signals, Lifeline's own health). Env: `LIFELINE_GRPC_LISTEN`.
    pub grpc_listen: SocketAddr,
    /// Largest accepted HTTP request body, bytes.
    pub max_body_bytes: usize,
    /// Most dashboards following the live overview at once (each holds
    /// one Server-Sent Events stream; beyond it, a 503 that says so).
    pub max_live_streams: usize,
    /// Of those, most from one client IP (beyond it, a 429).
    pub max_live_streams_per_ip: usize,
    /// While Lifeline is not ready, every HTTP response carries
    /// `Connection: close` (RFD 0226), so clients behind a load balancer
    /// reconnect elsewhere. Env: `LIFELINE_HTTP_CLOSE_UNHEALTHY`.
    pub http_close_unhealthy: bool,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            grpc_listen: SocketAddr::from(([127, 0, 0, 1], 9090)),
            max_body_bytes: 64 * 1024,
            max_live_streams: 256,
            max_live_streams_per_ip: 8,
            http_close_unhealthy: false,
        }
    }
}

/// Virtual probes (`/probes/grpc/{host:port}`, `/probes/tcp/{host:port}`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ProbesConfig {
    /// `host:port` targets allowed beyond the cluster's own known auth
    /// server and proxy addresses (which are always allowed).
    pub allow: Vec<String>,
    /// Largest `X-Probe-Timeout` accepted.
    #[serde(with = "humantime_serde")]
    pub max_timeout: Duration,
}

impl Default for ProbesConfig {
    fn default() -> Self {
        ProbesConfig {
            allow: Vec::new(),
            max_timeout: Duration::from_secs(10),
        }
    }
}

impl ServerConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.max_live_streams == 0 {
            return Err(invalid("server.max_live_streams", "must be at least 1"));
        }
        if self.max_live_streams_per_ip == 0 {
            return Err(invalid(
                "server.max_live_streams_per_ip",
                "must be at least 1",
            ));
        }
        if self.max_body_bytes < 1024 {
            return Err(invalid("server.max_body_bytes", "must be at least 1024"));
        }
        Ok(())
    }
}

impl ProbesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (i, a) in self.allow.iter().enumerate() {
            host_port(&format!("probes.allow[{i}]"), a)?;
        }
        positive("probes.max_timeout", self.max_timeout)
    }
}
