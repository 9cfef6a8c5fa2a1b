//! `[cluster]`, `[health]`, `[[auth_servers]]` and `[fleet]`: where the
//! cluster's events come from, how auth servers' health is watched, and
//! the bounds put on what the watcher accepts.

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::domain::AgentService;

use super::{backoff_range, host_port, invalid, positive, ConfigError};

/// Which protocol the cluster speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// Lifeline's open `ClusterEvents` protocol (plaintext, or `https://`).
    #[default]
    Lifeline,
    /// Teleport's own Auth API over mutual TLS with an identity file.
    Teleport,
}

/// How a proxy's TLS routing is reached when a layer-7 load balancer in
/// front of the proxy strips ALPN: Teleport's ALPN connection upgrade.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum AlpnUpgrade {
    /// Probe the proxy as Teleport's clients do and upgrade when needed.
    #[default]
    Auto,
    /// Always upgrade.
    Always,
    /// Never: connect straight.
    Never,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// `lifeline` or `teleport`. Env: `LIFELINE_CLUSTER_SOURCE`.
    pub source: SourceKind,
    /// `lifeline`: where `ClusterEvents` is served (`http://host:port`,
    /// `https://host:port` or `host:port`). `teleport`: an Auth server
    /// (`auth.example.com:3025`), or a proxy's web address with
    /// `tls_routing`. Env: `LIFELINE_CLUSTER_ADDR`.
    pub addr: String,
    /// `teleport`: the identity file `tctl auth sign --format=file` wrote.
    /// `lifeline` over `https://`: an optional client certificate in the
    /// same layout (key, then certificate). Env:
    /// `LIFELINE_CLUSTER_IDENTITY_FILE`.
    pub identity_file: Option<PathBuf>,
    /// `lifeline` over `https://`: the CA certificates (PEM) that sign the
    /// source's certificate; defaults to the identity file's CAs.
    pub ca_file: Option<PathBuf>,
    /// The TLS server name to send and verify.
    pub server_name: String,
    /// `teleport`: the agent services to watch.
    pub agent_kinds: Vec<AgentService>,
    /// `teleport`: how often to read `GetInstances` (each host's Auth).
    #[serde(with = "humantime_serde")]
    pub instances_poll: Duration,
    /// `teleport`: `addr` is a proxy's web address that routes to Auth by
    /// ALPN (`teleport-auth@<hex(cluster_name)>.teleport.cluster.local`).
    pub tls_routing: bool,
    /// `teleport` with `tls_routing`: the cluster's name.
    pub cluster_name: String,
    /// `teleport` with `tls_routing`: `auto`, `always` or `never` use
    /// Teleport's ALPN connection upgrade, for a proxy behind a layer-7
    /// load balancer. Env: `LIFELINE_CLUSTER_ALPN_UPGRADE`.
    pub alpn_upgrade: AlpnUpgrade,
    /// `teleport` with `tls_routing`: CA certificates (PEM) of the proxy's
    /// or its balancer's web certificate, when not a public CA's.
    pub proxy_ca_file: Option<PathBuf>,
    /// Name Lifeline gives itself in `WatchRequest.watcher_name`.
    pub watcher_name: String,
    /// `ListResources` page size during a resync.
    pub page_size: u32,
    /// Largest gRPC message accepted from the cluster, bytes.
    pub max_message_bytes: usize,
    /// Timeout for connecting to the cluster.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// First reconnect wait ceiling (full jitter, doubling).
    #[serde(with = "humantime_serde")]
    pub backoff_base: Duration,
    /// Largest reconnect wait.
    #[serde(with = "humantime_serde")]
    pub backoff_cap: Duration,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct StaticAuthServer {
    /// The auth server's name, as the cluster's heartbeats name it.
    pub name: String,
    /// `host:port` serving grpc.health.v1.
    pub addr: String,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HealthConfig {
    /// grpc.health.v1 service name to watch ("" is the whole server).
    pub service: String,
    /// How long UNKNOWN may last before the auth server's agents count as
    /// `auth_unhealthy`. Env: `LIFELINE_AUTH_UNKNOWN_GRACE`.
    #[serde(with = "humantime_serde")]
    pub unknown_grace: Duration,
    /// `Check` interval for servers whose `Watch` is UNIMPLEMENTED.
    #[serde(with = "humantime_serde")]
    pub poll_interval: Duration,
    /// Timeout for connecting and for each `Check`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// The first wait before a broken health stream is opened again
    /// (doubling, full jitter).
    #[serde(with = "humantime_serde")]
    pub backoff_base: Duration,
    /// The longest wait between tries of a health stream.
    #[serde(with = "humantime_serde")]
    pub backoff_cap: Duration,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            source: SourceKind::Lifeline,
            addr: "http://127.0.0.1:3025".into(),
            identity_file: None,
            ca_file: None,
            server_name: crate::domain::TELEPORT_SERVER_NAME.into(),
            agent_kinds: AgentService::ALL.to_vec(),
            instances_poll: Duration::from_secs(30),
            tls_routing: false,
            cluster_name: String::new(),
            alpn_upgrade: AlpnUpgrade::Auto,
            proxy_ca_file: None,
            watcher_name: "lifeline".into(),
            page_size: 500,
            max_message_bytes: 16 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            backoff_base: Duration::from_millis(250),
            backoff_cap: Duration::from_secs(30),
        }
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            service: String::new(),
            unknown_grace: Duration::from_secs(30),
            poll_interval: Duration::from_secs(5),
            timeout: Duration::from_secs(2),
            backoff_base: Duration::from_millis(250),
            backoff_cap: Duration::from_secs(16),
        }
    }
}

#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FleetConfig {
    /// TTL assumed for a server that announces none (Teleport's 10 min).
    #[serde(with = "humantime_serde")]
    pub default_ttl: Duration,
    /// An `expires` older than this is rejected as bad input rather than
    /// taken as an instantly expired heartbeat.
    #[serde(with = "humantime_serde")]
    pub max_expired_age: Duration,
    /// An `expires` further ahead than this is rejected.
    #[serde(with = "humantime_serde")]
    pub max_ttl: Duration,
    /// Bound of the fleet's command channel.
    pub command_queue: usize,
}

impl Default for FleetConfig {
    fn default() -> Self {
        FleetConfig {
            default_ttl: Duration::from_secs(600),
            max_expired_age: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(7 * 24 * 3600),
            command_queue: 1024,
        }
    }
}

impl ClusterConfig {
    /// The cluster address as a URI tonic can dial.
    pub fn uri(&self) -> Result<String, ConfigError> {
        let v = &self.addr;
        let uri = if v.starts_with("http://") || v.starts_with("https://") {
            v.to_string()
        } else {
            format!("http://{v}")
        };
        let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
        host_port("cluster.addr", rest.trim_end_matches('/'))?;
        Ok(uri)
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        match self.source {
            SourceKind::Lifeline => {
                let uri = self.uri()?;
                if uri.starts_with("https://")
                    && self.ca_file.is_none()
                    && self.identity_file.is_none()
                {
                    return Err(invalid(
                        "cluster.ca_file",
                        "an https:// source needs the CA that signs its certificate (ca_file, or an identity_file with CAs)",
                    ));
                }
            }
            SourceKind::Teleport => {
                host_port("cluster.addr", self.addr.trim_start_matches("https://"))?;
                if self.identity_file.is_none() {
                    return Err(invalid(
                        "cluster.identity_file",
                        "the teleport source needs an identity file (tctl auth sign --format=file)",
                    ));
                }
                if self.agent_kinds.is_empty() {
                    return Err(invalid(
                        "cluster.agent_kinds",
                        "must name at least one agent service",
                    ));
                }
                if self.tls_routing && self.cluster_name.trim().is_empty() {
                    return Err(invalid(
                        "cluster.cluster_name",
                        "tls_routing needs the cluster's name (it is part of the ALPN protocol)",
                    ));
                }
                // Both concern a proxy's TLS routing only: set without it,
                // they would be silently ignored.
                if !self.tls_routing && self.alpn_upgrade == AlpnUpgrade::Always {
                    return Err(invalid(
                        "cluster.alpn_upgrade",
                        "\"always\" needs tls_routing (the upgrade reaches Auth through a proxy)",
                    ));
                }
                if !self.tls_routing && self.proxy_ca_file.is_some() {
                    return Err(invalid(
                        "cluster.proxy_ca_file",
                        "needs tls_routing (it is the CA of the proxy's web address)",
                    ));
                }
                positive("cluster.instances_poll", self.instances_poll)?;
            }
        }
        if self.server_name.trim().is_empty() {
            return Err(invalid("cluster.server_name", "must not be empty"));
        }
        if !(1..=10_000).contains(&self.page_size) {
            return Err(invalid("cluster.page_size", "must be between 1 and 10000"));
        }
        if self.max_message_bytes < 64 * 1024 {
            return Err(invalid(
                "cluster.max_message_bytes",
                "must be at least 65536",
            ));
        }
        positive("cluster.connect_timeout", self.connect_timeout)?;
        backoff_range("cluster.backoff", self.backoff_base, self.backoff_cap)
    }
}

/// Checks the statically listed auth servers: named once each, `host:port`.
pub(super) fn validate_auth_servers(list: &[StaticAuthServer]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    for (i, a) in list.iter().enumerate() {
        if a.name.trim().is_empty() {
            return Err(invalid(
                format!("auth_servers[{i}].name"),
                "must not be empty",
            ));
        }
        if !names.insert(a.name.as_str()) {
            return Err(invalid(
                format!("auth_servers[{i}].name"),
                format!("{:?} is listed twice", a.name),
            ));
        }
        host_port(&format!("auth_servers[{i}].addr"), &a.addr)?;
    }
    Ok(())
}

impl HealthConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("health.unknown_grace", self.unknown_grace)?;
        positive("health.poll_interval", self.poll_interval)?;
        positive("health.timeout", self.timeout)?;
        backoff_range("health.backoff", self.backoff_base, self.backoff_cap)
    }
}

impl FleetConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        positive("fleet.default_ttl", self.default_ttl)?;
        positive("fleet.max_expired_age", self.max_expired_age)?;
        if self.max_ttl < self.default_ttl {
            return Err(invalid(
                "fleet.max_ttl",
                "must not be smaller than fleet.default_ttl",
            ));
        }
        if self.command_queue == 0 {
            return Err(invalid("fleet.command_queue", "must be at least 1"));
        }
        Ok(())
    }
}
