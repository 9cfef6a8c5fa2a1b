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
    /// Where operators reach this Lifeline's dashboard from outside (e.g.
    /// `https://lifeline.example.com`): the alert rules and the Grafana
    /// dashboard link there. Unset: `http://` and `listen`.
    pub external_url: Option<String>,
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
            external_url: None,
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
        if let Some(u) = &self.external_url {
            check_external_url(u).map_err(|why| invalid("server.external_url", &why))?;
        }
        Ok(())
    }

    /// `external_url`, or `http://` and `listen`; no trailing slash.
    pub fn external_url(&self) -> String {
        match &self.external_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None => format!("http://{}", self.listen),
        }
    }
}

/// An external URL is absolute `http(s)://`, with no query or fragment
/// (paths are appended to it).
pub fn check_external_url(u: &str) -> Result<(), String> {
    let parsed = url::Url::parse(u).map_err(|e| format!("{u:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(format!(
            "{u:?} must be an http:// or https:// URL with a host"
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!("{u:?} must not carry a query or a fragment"));
    }
    Ok(())
}

impl ProbesConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        for (i, a) in self.allow.iter().enumerate() {
            host_port(&format!("probes.allow[{i}]"), a)?;
        }
        positive("probes.max_timeout", self.max_timeout)
    }
}
