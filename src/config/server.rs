//! `[server]` and `[probes]`: Lifeline's own listeners and the HTTP edge's
//! limits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{host_port, invalid, positive, ConfigError};

#[derive(Clone, Debug, Deserialize, Serialize)]
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
    /// The certificate chain (PEM, leaf first) both listeners serve over
    /// TLS; with `tls_key`. Unset: plaintext. Re-read when it changes on
    /// disk. Env: `LIFELINE_TLS_CERT`.
    pub tls_cert: Option<PathBuf>,
    /// Its private key (PEM: PKCS#8, PKCS#1 or SEC1). Env: `LIFELINE_TLS_KEY`.
    pub tls_key: Option<PathBuf>,
    /// CA certificates (PEM): agents must present a client certificate
    /// signed by one of them on `AgentSignals.Connect`, as well as the
    /// join token. Needs `tls_cert`. Env: `LIFELINE_AGENT_CLIENT_CA`.
    pub agent_client_ca: Option<PathBuf>,
    /// How often the certificate files are looked at for a change.
    #[serde(with = "humantime_serde")]
    pub tls_reload_interval: Duration,
    /// How often the gRPC listener pings an idle HTTP/2 connection; one
    /// that does not answer within 10 s is closed, and with it the agent
    /// streams it carried (so a new stream may take their names). Unset
    /// in code only (tests on a paused clock).
    #[serde(with = "humantime_serde")]
    pub grpc_keepalive: Option<Duration>,
    /// Most gRPC connections open at once (each agent holds one); one
    /// past it is closed as soon as it is accepted, and counted in
    /// `lifeline_grpc_connections_refused_total`. 1 to 1 000 000.
    pub grpc_max_connections: usize,
    /// Most HTTP connections (API, dashboard, probes, metrics) held at
    /// once. Past it, the oldest connection that has not yet sent a whole
    /// request is closed to make room, or, with none, the new one is; both
    /// are counted in `lifeline_http_connections_refused_total`.
    pub max_http_connections: usize,
    /// How long a client may take to send a request's headers, and to
    /// start its next request on a kept-alive connection (HTTP/1).
    #[serde(with = "humantime_serde")]
    pub http_header_timeout: Duration,
    /// An HTTP connection that moves no bytes for this long is closed
    /// (a live dashboard's stream sends a keep-alive more often).
    #[serde(with = "humantime_serde")]
    pub http_idle_timeout: Duration,
    /// The most a whole request, headers and body, may take to arrive,
    /// from its first byte. 1 s to 1 h, and at least
    /// `http_header_timeout`.
    #[serde(with = "humantime_serde")]
    pub http_request_timeout: Duration,
    /// The least rate, in bytes a second, a request must keep past
    /// `http_header_timeout`: each `http_min_rate` bytes it sends buys it
    /// one more second (up to `http_request_timeout`), so a client that
    /// sends one byte every few seconds is closed in seconds. 0: no floor.
    pub http_min_rate: u32,
    /// A listener of its own for `/healthz`, `/readyz` and `/metrics`
    /// (they stay on `listen` too), with its own small cap: kubelet and
    /// Prometheus are answered whatever holds the main port. Served as
    /// `listen` is (TLS with `tls_cert`). Unset: none. Env:
    /// `LIFELINE_ADMIN_LISTEN`.
    pub admin_listen: Option<SocketAddr>,
    /// Most connections the admin listener holds at once (1 to 1024).
    pub admin_max_connections: usize,
}

/// Room for a large fleet's agents on one replica, each connection's
/// buffers included (tens of KiB each).
pub const DEFAULT_GRPC_MAX_CONNECTIONS: usize = 50_000;

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
            tls_cert: None,
            tls_key: None,
            agent_client_ca: None,
            tls_reload_interval: Duration::from_secs(10),
            grpc_keepalive: Some(Duration::from_secs(20)),
            grpc_max_connections: DEFAULT_GRPC_MAX_CONNECTIONS,
            max_http_connections: 1024,
            http_header_timeout: Duration::from_secs(10),
            http_idle_timeout: Duration::from_secs(60),
            http_request_timeout: Duration::from_secs(30),
            http_min_rate: 500,
            admin_listen: None,
            admin_max_connections: 64,
        }
    }
}

/// Virtual probes (`/probes/grpc/{host:port}`, `/probes/tcp/{host:port}`).
#[derive(Clone, Debug, Deserialize, Serialize)]
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
            check_external_url(u).map_err(|why| invalid("server.external_url", why.to_string()))?;
        }
        match (&self.tls_cert, &self.tls_key) {
            (Some(_), None) => {
                return Err(invalid(
                    "server.tls_key",
                    "server.tls_cert is set, so its private key is needed too",
                ))
            }
            (None, Some(_)) => {
                return Err(invalid(
                    "server.tls_cert",
                    "server.tls_key is set, so the certificate is needed too",
                ))
            }
            _ => {}
        }
        if self.agent_client_ca.is_some() && self.tls_cert.is_none() {
            return Err(invalid(
                "server.agent_client_ca",
                "client certificates need TLS: set server.tls_cert and server.tls_key",
            ));
        }
        positive("server.tls_reload_interval", self.tls_reload_interval)?;
        if !(1..=1_000_000).contains(&self.grpc_max_connections) {
            return Err(invalid(
                "server.grpc_max_connections",
                "must be between 1 and 1000000",
            ));
        }
        if !(1..=100_000).contains(&self.max_http_connections) {
            return Err(invalid(
                "server.max_http_connections",
                "must be between 1 and 100000",
            ));
        }
        for (field, d) in [
            ("server.http_header_timeout", self.http_header_timeout),
            ("server.http_idle_timeout", self.http_idle_timeout),
        ] {
            if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&d) {
                return Err(invalid(field, "must be between 100ms and 1h"));
            }
        }
        if !(Duration::from_secs(1)..=Duration::from_secs(3600))
            .contains(&self.http_request_timeout)
        {
            return Err(invalid(
                "server.http_request_timeout",
                "must be between 1s and 1h",
            ));
        }
        if self.http_request_timeout < self.http_header_timeout {
            return Err(invalid(
                "server.http_request_timeout",
                "must be at least server.http_header_timeout (a whole request includes its headers)",
            ));
        }
        if self.http_min_rate > 1_000_000_000 {
            return Err(invalid(
                "server.http_min_rate",
                "must be at most 1000000000 bytes a second (0: no floor)",
            ));
        }
        if !(1..=1024).contains(&self.admin_max_connections) {
            return Err(invalid(
                "server.admin_max_connections",
                "must be between 1 and 1024",
            ));
        }
        if let Some(a) = self.admin_listen {
            for (field, other) in [
                ("server.listen", self.listen),
                ("server.grpc_listen", self.grpc_listen),
            ] {
                if a.port() != 0 && a == other {
                    return Err(invalid(
                        "server.admin_listen",
                        format!("{a} is {field} already: the admin listener needs an address of its own"),
                    ));
                }
            }
        }
        if let Some(k) = self.grpc_keepalive {
            if !(Duration::from_secs(1)..=Duration::from_secs(3600)).contains(&k) {
                return Err(invalid(
                    "server.grpc_keepalive",
                    "must be between 1s and 1h",
                ));
            }
        }
        Ok(())
    }

    /// True when both listeners serve TLS.
    pub fn tls(&self) -> bool {
        self.tls_cert.is_some()
    }

    /// `external_url`, or `http(s)://` and `listen`; no trailing slash.
    pub fn external_url(&self) -> String {
        match &self.external_url {
            Some(u) => u.trim_end_matches('/').to_string(),
            None if self.tls() => format!("https://{}", self.listen),
            None => format!("http://{}", self.listen),
        }
    }
}

/// Why a URL cannot be the dashboard's external URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadExternalUrl {
    #[error("{url:?} is not a URL: {source}")]
    NotAUrl {
        url: String,
        #[source]
        source: url::ParseError,
    },
    #[error("{url:?} must be an http:// or https:// URL with a host")]
    NotHttp { url: String },
    #[error("{url:?} must not carry a query or a fragment")]
    QueryOrFragment { url: String },
}

/// An external URL is absolute `http(s)://`, with no query or fragment
/// (paths are appended to it).
pub fn check_external_url(u: &str) -> Result<(), BadExternalUrl> {
    let url = || u.to_string();
    let parsed =
        url::Url::parse(u).map_err(|source| BadExternalUrl::NotAUrl { url: url(), source })?;
    if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
        return Err(BadExternalUrl::NotHttp { url: url() });
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(BadExternalUrl::QueryOrFragment { url: url() });
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
