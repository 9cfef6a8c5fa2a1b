//! Static configuration: a TOML file (`--config`), overridden by `LIFELINE_*`
//! environment variables, validated once at start. Every error names the field
//! (or variable) at fault, so a broken config stops start-up with a message an
//! operator can act on. Plain data: no handles, no I/O beyond reading the file.

use std::collections::{BTreeSet, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::model::LbPolicy;

/// Everything Lifeline needs to start. Defaults make `lifeline demo` need none.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    pub cluster: ClusterConfig,
    /// Auth servers to watch in addition to those the cluster announces.
    pub auth_servers: Vec<StaticAuthServer>,
    pub health: HealthConfig,
    pub storage: StorageConfig,
    pub fleet: FleetConfig,
    pub signals: SignalsConfig,
    pub telemetry: TelemetryConfig,
    pub access: AccessConfig,
    pub probes: ProbesConfig,
    /// `section.key` paths the file or a `LIFELINE_*` variable set, so the
    /// dynamic settings can tell "written in the file" from "defaulted"
    /// (RFD 0016: the file wins only where it speaks).
    #[serde(skip)]
    pub explicit: BTreeSet<String>,
}

/// A role an API token carries, named after RFD 0016's verbs.
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Deserialize,
    serde::Serialize,
    clap::ValueEnum,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// GET anything (when reads need a token at all).
    Read,
    /// PUT and DELETE settings, manual reconnects.
    Update,
    /// In addition to `update`: overwrite a setting the config file manages.
    Create,
}

impl Role {
    pub const ALL: [Role; 3] = [Role::Read, Role::Update, Role::Create];
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Update => "update",
            Role::Create => "create",
        }
    }
}

/// One API token. Only its SHA-256 is kept (`lifeline token new` prints
/// both); the token itself never touches the disk on Lifeline's side.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Shown in the audit and the dashboard ("signed in as").
    pub name: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
    pub roles: Vec<Role>,
}

/// Who may do what: API tokens, agents' join tokens, rate limits.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    pub tokens: Vec<TokenConfig>,
    /// Hex SHA-256 of each join token agents may present on
    /// `AgentSignals.Connect` (`authorization: Bearer <token>` metadata).
    /// Empty: no agent can connect.
    pub join_tokens: Vec<String>,
    /// Reads (GET: API, dashboard, /metrics, probes) need a token with the
    /// `read` role. `/healthz`, `/readyz` and sign-in stay open.
    pub read_requires_token: bool,
    /// Least time between two manual reconnects of one agent.
    #[serde(with = "humantime_serde")]
    pub manual_reconnect_interval: Duration,
    /// How long a dashboard sign-in lasts.
    #[serde(with = "humantime_serde")]
    pub session_ttl: Duration,
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            tokens: Vec::new(),
            join_tokens: Vec::new(),
            read_requires_token: false,
            manual_reconnect_interval: Duration::from_secs(10),
            session_ttl: Duration::from_secs(12 * 3600),
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

/// Trace export and self-observation. The standard `OTEL_*` variables win
/// over this section (see `telemetry::OtlpSettings::resolve`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/gRPC collector, e.g. `http://127.0.0.1:4317`; empty: no export.
    /// Env: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: String,
    /// Env: `OTEL_SERVICE_NAME`.
    pub service_name: String,
    /// Share of failure traces (and other roots) kept, 0..=1; children
    /// follow their root. Env: `OTEL_TRACES_SAMPLER` (+ `_ARG`).
    pub sample_ratio: f64,
    /// One `ingest.event` span per this many watcher events (0: none).
    pub ingest_span_every: u64,
    /// Finished spans waiting for the collector; beyond, dropped and counted.
    pub max_queued_spans: usize,
    /// One export call's limit.
    #[serde(with = "humantime_serde")]
    pub export_timeout: Duration,
    /// How long spans wait to fill a batch.
    #[serde(with = "humantime_serde")]
    pub batch_delay: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            otlp_endpoint: String::new(),
            service_name: "lifeline".into(),
            sample_ratio: 1.0,
            ingest_span_every: 1000,
            max_queued_spans: 8192,
            export_timeout: Duration::from_secs(5),
            batch_delay: Duration::from_secs(2),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalsConfig {
    /// The client load-balancing policy served by `GetServiceConfig`, in
    /// RFD 0226's JSON form; empty means pick_first.
    /// Env: `LIFELINE_GRPC_CLIENT_LB_POLICY`.
    pub grpc_client_lb_policy: String,
    /// Send every agent the full proxy list on every change and every
    /// `full_discovery_interval` (Teleport before RFD 0226), instead of deltas.
    /// Env: `LIFELINE_FULL_DISCOVERY`.
    pub full_discovery: bool,
    #[serde(with = "humantime_serde")]
    pub full_discovery_interval: Duration,
    /// Proxy changes remembered for deltas; a stream further behind gets one
    /// full Discovery instead.
    pub discovery_backlog: usize,
    /// A delta naming more proxies than this is sent as one full Discovery.
    pub max_delta_proxies: usize,
    /// Reconnect agents stranded with `no_live_tunnel` or holding a tunnel to
    /// an expired proxy. Env: `LIFELINE_AUTO_RECONNECT`.
    pub auto_reconnect: bool,
    #[serde(with = "humantime_serde")]
    pub reconnect_backoff_base: Duration,
    #[serde(with = "humantime_serde")]
    pub reconnect_backoff_cap: Duration,
    /// Automatic reconnects pause when more than this share of agents turn
    /// stranded within `storm_window`.
    pub storm_share: f64,
    #[serde(with = "humantime_serde")]
    pub storm_window: Duration,
    /// Send every agent a Reconnect at this interval plus jitter; off when
    /// unset. Env: `LIFELINE_RECONNECT_INTERVAL` (`off` to disable).
    #[serde(with = "humantime_serde::option")]
    pub reconnect_interval: Option<Duration>,
    /// At most this many periodic reconnects per second.
    pub periodic_max_per_second: u32,
    /// Close tunnels beyond an agent's `desired_tunnels` once the proxy
    /// topology has been still for `graceful_threshold` (randomised up to
    /// twice that). Env: `LIFELINE_GRACEFUL_TUNNEL_CLOSING`.
    pub graceful_tunnel_closing: bool,
    #[serde(with = "humantime_serde")]
    pub graceful_threshold: Duration,
    /// Signals queued per agent stream; a full queue makes a signal
    /// `undeliverable` rather than growing memory.
    pub signal_queue: usize,
    /// A signal not acked within this is recorded as `timeout`.
    #[serde(with = "humantime_serde")]
    pub ack_timeout: Duration,
    /// How long an agent may take to send `Hello`.
    #[serde(with = "humantime_serde")]
    pub hello_timeout: Duration,
    /// Largest gRPC message accepted from or sent to an agent.
    pub max_message_bytes: usize,
}

impl Default for SignalsConfig {
    fn default() -> Self {
        SignalsConfig {
            grpc_client_lb_policy: String::new(),
            full_discovery: false,
            full_discovery_interval: Duration::from_secs(120),
            discovery_backlog: 4096,
            max_delta_proxies: 512,
            auto_reconnect: true,
            reconnect_backoff_base: Duration::from_secs(1),
            reconnect_backoff_cap: Duration::from_secs(16),
            storm_share: 0.5,
            storm_window: Duration::from_secs(10),
            reconnect_interval: None,
            periodic_max_per_second: 50,
            graceful_tunnel_closing: false,
            graceful_threshold: Duration::from_secs(30 * 60),
            signal_queue: 64,
            ack_timeout: Duration::from_secs(30),
            hello_timeout: Duration::from_secs(10),
            max_message_bytes: 4 * 1024 * 1024,
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// HTTP (API, dashboard, probes). Env: `LIFELINE_LISTEN`.
    pub listen: String,
    /// gRPC (agent signals, Lifeline's own health). Env: `LIFELINE_GRPC_LISTEN`.
    pub grpc_listen: String,
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

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClusterConfig {
    /// Where `ClusterEvents` is served (`http://host:port` or `host:port`).
    /// Env: `LIFELINE_CLUSTER_ADDR`.
    pub addr: String,
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

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticAuthServer {
    pub name: String,
    /// `host:port` serving grpc.health.v1.
    pub addr: String,
}

#[derive(Clone, Debug, Deserialize)]
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
    #[serde(with = "humantime_serde")]
    pub backoff_base: Duration,
    #[serde(with = "humantime_serde")]
    pub backoff_cap: Duration,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StorageConfig {
    /// SQLite file; created when missing. Env: `LIFELINE_DB`.
    pub path: PathBuf,
    /// How long event history (heartbeats, health transitions) is kept.
    /// Env: `LIFELINE_RETENTION`.
    #[serde(with = "humantime_serde")]
    pub retention: Duration,
    /// How long the signal audit and closed stranded episodes are kept.
    /// Pending signals and open episodes are never pruned.
    /// Env: `LIFELINE_AUDIT_RETENTION`.
    #[serde(with = "humantime_serde")]
    pub audit_retention: Duration,
    /// How often old history is pruned.
    #[serde(with = "humantime_serde")]
    pub prune_interval: Duration,
    /// Writes held in memory while SQLite is slow; history past this is
    /// dropped (and counted), current state never is.
    pub max_pending_events: usize,
}

#[derive(Clone, Debug, Deserialize)]
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

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:8080".into(),
            grpc_listen: "127.0.0.1:9090".into(),
            max_body_bytes: 64 * 1024,
            max_live_streams: 256,
            max_live_streams_per_ip: 8,
            http_close_unhealthy: false,
        }
    }
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            addr: "http://127.0.0.1:3025".into(),
            watcher_name: "lifeline".into(),
            page_size: 500,
            max_message_bytes: 4 * 1024 * 1024,
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

/// The shortest history retention (config and dynamic setting alike).
pub const MIN_RETENTION: Duration = Duration::from_secs(60);
/// The shortest audit retention.
pub const MIN_AUDIT_RETENTION: Duration = Duration::from_secs(3600);

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            path: PathBuf::from("lifeline.db"),
            retention: Duration::from_secs(24 * 3600),
            audit_retention: Duration::from_secs(90 * 24 * 3600),
            prune_interval: Duration::from_secs(60),
            max_pending_events: 1_000_000,
        }
    }
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

/// A configuration that cannot be used; the message names the field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: &'static str, message: String },
    #[error("config field `{field}`: {message}")]
    Invalid { field: String, message: String },
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

impl Config {
    /// Reads `path` (when given), applies `LIFELINE_*` overrides from `env`,
    /// and validates.
    pub fn load(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut cfg = match path {
            Some(p) => Config::from_file(p)?,
            None => Config::default(),
        };
        cfg.apply_env(env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    pub fn from_file(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::from_toml(&text).map_err(|message| ConfigError::Parse {
            path: path.to_path_buf(),
            message,
        })
    }

    /// Parses TOML; the error text names the offending key and line.
    pub fn from_toml(text: &str) -> Result<Config, String> {
        let mut cfg: Config =
            toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        // It parsed as a Config, so it parses as a table.
        if let Ok(table) = text.parse::<toml::Table>() {
            for (section, v) in &table {
                if let Some(t) = v.as_table() {
                    cfg.explicit
                        .extend(t.keys().map(|k| format!("{section}.{k}")));
                }
            }
        }
        Ok(cfg)
    }

    /// True when the file or a variable set `section.key`.
    pub fn is_explicit(&self, key: &str) -> bool {
        self.explicit.contains(key)
    }

    /// The environment overrides, in one table so the README can list them.
    pub const ENV_VARS: &'static [(&'static str, &'static str)] = &[
        ("LIFELINE_LISTEN", "server.listen"),
        ("LIFELINE_GRPC_LISTEN", "server.grpc_listen"),
        (
            "LIFELINE_HTTP_CLOSE_UNHEALTHY",
            "server.http_close_unhealthy",
        ),
        ("LIFELINE_CLUSTER_ADDR", "cluster.addr"),
        ("LIFELINE_DB", "storage.path"),
        ("LIFELINE_RETENTION", "storage.retention"),
        ("LIFELINE_AUDIT_RETENTION", "storage.audit_retention"),
        ("LIFELINE_AUTH_UNKNOWN_GRACE", "health.unknown_grace"),
        (
            "LIFELINE_GRPC_CLIENT_LB_POLICY",
            "signals.grpc_client_lb_policy",
        ),
        ("LIFELINE_FULL_DISCOVERY", "signals.full_discovery"),
        ("LIFELINE_AUTO_RECONNECT", "signals.auto_reconnect"),
        ("LIFELINE_RECONNECT_INTERVAL", "signals.reconnect_interval"),
        (
            "LIFELINE_GRACEFUL_TUNNEL_CLOSING",
            "signals.graceful_tunnel_closing",
        ),
        (
            "LIFELINE_AUTH_SERVERS",
            "auth_servers (name=host:port,name=host:port)",
        ),
    ];

    pub fn apply_env(&mut self, env: impl Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
        let dur = |var: &'static str, v: &str| {
            humantime::parse_duration(v).map_err(|e| ConfigError::Env {
                var,
                message: format!("invalid duration {v:?}: {e}"),
            })
        };
        for (var, field) in Self::ENV_VARS {
            if env(var).is_some() {
                self.explicit.insert(field.to_string());
            }
        }
        if let Some(v) = env("LIFELINE_LISTEN") {
            self.server.listen = v;
        }
        if let Some(v) = env("LIFELINE_GRPC_LISTEN") {
            self.server.grpc_listen = v;
        }
        if let Some(v) = env("LIFELINE_CLUSTER_ADDR") {
            self.cluster.addr = v;
        }
        if let Some(v) = env("LIFELINE_DB") {
            self.storage.path = PathBuf::from(v);
        }
        if let Some(v) = env("LIFELINE_RETENTION") {
            self.storage.retention = dur("LIFELINE_RETENTION", &v)?;
        }
        if let Some(v) = env("LIFELINE_AUDIT_RETENTION") {
            self.storage.audit_retention = dur("LIFELINE_AUDIT_RETENTION", &v)?;
        }
        if let Some(v) = env("LIFELINE_AUTH_UNKNOWN_GRACE") {
            self.health.unknown_grace = dur("LIFELINE_AUTH_UNKNOWN_GRACE", &v)?;
        }
        if let Some(v) = env("LIFELINE_GRPC_CLIENT_LB_POLICY") {
            LbPolicy::parse(&v).map_err(|e| ConfigError::Env {
                var: "LIFELINE_GRPC_CLIENT_LB_POLICY",
                message: e.to_string(),
            })?;
            self.signals.grpc_client_lb_policy = v;
        }
        let flag = |var: &'static str, v: &str| match v.trim() {
            "1" | "true" | "on" | "yes" => Ok(true),
            "0" | "false" | "off" | "no" => Ok(false),
            _ => Err(ConfigError::Env {
                var,
                message: format!("{v:?} is not a boolean (true/false)"),
            }),
        };
        if let Some(v) = env("LIFELINE_FULL_DISCOVERY") {
            self.signals.full_discovery = flag("LIFELINE_FULL_DISCOVERY", &v)?;
        }
        if let Some(v) = env("LIFELINE_AUTO_RECONNECT") {
            self.signals.auto_reconnect = flag("LIFELINE_AUTO_RECONNECT", &v)?;
        }
        if let Some(v) = env("LIFELINE_HTTP_CLOSE_UNHEALTHY") {
            self.server.http_close_unhealthy = flag("LIFELINE_HTTP_CLOSE_UNHEALTHY", &v)?;
        }
        if let Some(v) = env("LIFELINE_GRACEFUL_TUNNEL_CLOSING") {
            self.signals.graceful_tunnel_closing = flag("LIFELINE_GRACEFUL_TUNNEL_CLOSING", &v)?;
        }
        if let Some(v) = env("LIFELINE_RECONNECT_INTERVAL") {
            self.signals.reconnect_interval = match v.trim() {
                "" | "off" => None,
                v => Some(dur("LIFELINE_RECONNECT_INTERVAL", v)?),
            };
        }
        if let Some(v) = env("LIFELINE_AUTH_SERVERS") {
            let mut list = Vec::new();
            for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                let (name, addr) = item.split_once('=').ok_or_else(|| ConfigError::Env {
                    var: "LIFELINE_AUTH_SERVERS",
                    message: format!("{item:?} is not name=host:port"),
                })?;
                list.push(StaticAuthServer {
                    name: name.trim().to_string(),
                    addr: addr.trim().to_string(),
                });
            }
            self.auth_servers = list;
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if !(0.0..=1.0).contains(&self.telemetry.sample_ratio) {
            return Err(invalid("telemetry.sample_ratio", "must be between 0 and 1"));
        }
        if self.telemetry.service_name.trim().is_empty() {
            return Err(invalid("telemetry.service_name", "must not be empty"));
        }
        if self.telemetry.max_queued_spans == 0 {
            return Err(invalid("telemetry.max_queued_spans", "must be at least 1"));
        }
        positive("telemetry.export_timeout", self.telemetry.export_timeout)?;
        positive("telemetry.batch_delay", self.telemetry.batch_delay)?;
        let ep = self.telemetry.otlp_endpoint.trim();
        if !ep.is_empty() {
            match url::Url::parse(ep) {
                Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
                _ => {
                    return Err(invalid(
                        "telemetry.otlp_endpoint",
                        format!("{ep:?} is not an http(s)://host:port address"),
                    ))
                }
            }
        }
        parse_socket("server.listen", &self.server.listen)?;
        parse_socket("server.grpc_listen", &self.server.grpc_listen)?;
        if self.server.max_live_streams == 0 {
            return Err(invalid("server.max_live_streams", "must be at least 1"));
        }
        if self.server.max_live_streams_per_ip == 0 {
            return Err(invalid(
                "server.max_live_streams_per_ip",
                "must be at least 1",
            ));
        }
        self.validate_access()?;
        for (i, a) in self.probes.allow.iter().enumerate() {
            host_port(&format!("probes.allow[{i}]"), a)?;
        }
        positive("probes.max_timeout", self.probes.max_timeout)?;
        if self.server.max_body_bytes < 1024 {
            return Err(invalid("server.max_body_bytes", "must be at least 1024"));
        }
        cluster_uri(&self.cluster.addr)?;
        if !(1..=10_000).contains(&self.cluster.page_size) {
            return Err(invalid("cluster.page_size", "must be between 1 and 10000"));
        }
        if self.cluster.max_message_bytes < 64 * 1024 {
            return Err(invalid(
                "cluster.max_message_bytes",
                "must be at least 65536",
            ));
        }
        positive("cluster.connect_timeout", self.cluster.connect_timeout)?;
        positive("cluster.backoff_base", self.cluster.backoff_base)?;
        if self.cluster.backoff_cap < self.cluster.backoff_base {
            return Err(invalid(
                "cluster.backoff_cap",
                "must not be smaller than cluster.backoff_base",
            ));
        }
        let mut names = HashSet::new();
        for (i, a) in self.auth_servers.iter().enumerate() {
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
        positive("health.unknown_grace", self.health.unknown_grace)?;
        positive("health.poll_interval", self.health.poll_interval)?;
        positive("health.timeout", self.health.timeout)?;
        positive("health.backoff_base", self.health.backoff_base)?;
        if self.health.backoff_cap < self.health.backoff_base {
            return Err(invalid(
                "health.backoff_cap",
                "must not be smaller than health.backoff_base",
            ));
        }
        if self.storage.path.as_os_str().is_empty() {
            return Err(invalid("storage.path", "must not be empty"));
        }
        for (field, d, min) in [
            ("storage.retention", self.storage.retention, MIN_RETENTION),
            (
                "storage.audit_retention",
                self.storage.audit_retention,
                MIN_AUDIT_RETENTION,
            ),
        ] {
            if d < min {
                let min = humantime::format_duration(min);
                return Err(invalid(field, format!("must be at least {min}")));
            }
        }
        positive("storage.prune_interval", self.storage.prune_interval)?;
        if self.storage.max_pending_events < 1000 {
            return Err(invalid(
                "storage.max_pending_events",
                "must be at least 1000",
            ));
        }
        positive("fleet.default_ttl", self.fleet.default_ttl)?;
        positive("fleet.max_expired_age", self.fleet.max_expired_age)?;
        if self.fleet.max_ttl < self.fleet.default_ttl {
            return Err(invalid(
                "fleet.max_ttl",
                "must not be smaller than fleet.default_ttl",
            ));
        }
        if self.fleet.command_queue == 0 {
            return Err(invalid("fleet.command_queue", "must be at least 1"));
        }
        self.lb_policy()?;
        let sg = &self.signals;
        positive(
            "signals.full_discovery_interval",
            sg.full_discovery_interval,
        )?;
        if sg.discovery_backlog < 16 {
            return Err(invalid("signals.discovery_backlog", "must be at least 16"));
        }
        if sg.max_delta_proxies == 0 {
            return Err(invalid("signals.max_delta_proxies", "must be at least 1"));
        }
        positive("signals.reconnect_backoff_base", sg.reconnect_backoff_base)?;
        if sg.reconnect_backoff_cap < sg.reconnect_backoff_base {
            return Err(invalid(
                "signals.reconnect_backoff_cap",
                "must not be smaller than signals.reconnect_backoff_base",
            ));
        }
        if !(sg.storm_share > 0.0 && sg.storm_share <= 1.0) {
            return Err(invalid(
                "signals.storm_share",
                format!("must be in (0, 1], got {}", sg.storm_share),
            ));
        }
        positive("signals.storm_window", sg.storm_window)?;
        if let Some(i) = sg.reconnect_interval {
            if i < Duration::from_secs(1) {
                return Err(invalid("signals.reconnect_interval", "must be at least 1s"));
            }
        }
        if sg.periodic_max_per_second == 0 {
            return Err(invalid(
                "signals.periodic_max_per_second",
                "must be at least 1",
            ));
        }
        positive("signals.graceful_threshold", sg.graceful_threshold)?;
        if sg.signal_queue == 0 {
            return Err(invalid("signals.signal_queue", "must be at least 1"));
        }
        positive("signals.ack_timeout", sg.ack_timeout)?;
        positive("signals.hello_timeout", sg.hello_timeout)?;
        if sg.max_message_bytes < 64 * 1024 {
            return Err(invalid(
                "signals.max_message_bytes",
                "must be at least 65536",
            ));
        }
        Ok(())
    }

    fn validate_access(&self) -> Result<(), ConfigError> {
        let hex64 = |v: &str| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit());
        let mut names = HashSet::new();
        for (i, t) in self.access.tokens.iter().enumerate() {
            if !valid_token_name(&t.name) {
                return Err(invalid(format!("access.tokens[{i}].name"), TOKEN_NAME_RULE));
            }
            if !names.insert(t.name.as_str()) {
                return Err(invalid(
                    format!("access.tokens[{i}].name"),
                    format!("{:?} is listed twice", t.name),
                ));
            }
            if !hex64(&t.sha256) {
                return Err(invalid(
                    format!("access.tokens[{i}].sha256"),
                    "must be the token's SHA-256 as 64 hex digits (see `lifeline token new`); never the token itself",
                ));
            }
            if t.roles.is_empty() {
                return Err(invalid(
                    format!("access.tokens[{i}].roles"),
                    "must name at least one of read, update, create",
                ));
            }
        }
        for (i, j) in self.access.join_tokens.iter().enumerate() {
            if !hex64(j) {
                return Err(invalid(
                    format!("access.join_tokens[{i}]"),
                    "must be a join token's SHA-256 as 64 hex digits (see `lifeline token new`)",
                ));
            }
        }
        positive(
            "access.manual_reconnect_interval",
            self.access.manual_reconnect_interval,
        )?;
        positive("access.session_ttl", self.access.session_ttl)?;
        Ok(())
    }

    /// The parsed `signals.grpc_client_lb_policy`.
    pub fn lb_policy(&self) -> Result<LbPolicy, ConfigError> {
        LbPolicy::parse(&self.signals.grpc_client_lb_policy)
            .map_err(|e| invalid("signals.grpc_client_lb_policy", e.to_string()))
    }

    pub fn listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        parse_socket("server.listen", &self.server.listen)
    }

    pub fn grpc_listen_addr(&self) -> Result<SocketAddr, ConfigError> {
        parse_socket("server.grpc_listen", &self.server.grpc_listen)
    }

    /// The cluster address as a URI tonic can dial.
    pub fn cluster_uri(&self) -> Result<String, ConfigError> {
        cluster_uri(&self.cluster.addr)
    }
}

/// What a token's name may be (it appears in cookies and the audit).
pub const TOKEN_NAME_RULE: &str = "must be 1 to 64 letters, digits, '-' or '_'";

pub fn valid_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn positive(field: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(invalid(field, "must be greater than zero"))
    } else {
        Ok(())
    }
}

fn parse_socket(field: &str, v: &str) -> Result<SocketAddr, ConfigError> {
    v.parse()
        .map_err(|_| invalid(field, format!("{v:?} is not an ip:port address")))
}

/// `host:port` with a non-empty host and a numeric port.
pub fn host_port(field: &str, v: &str) -> Result<(), ConfigError> {
    let ok = v
        .rsplit_once(':')
        .is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(invalid(field, format!("{v:?} is not host:port")))
    }
}

fn cluster_uri(v: &str) -> Result<String, ConfigError> {
    let uri = if v.starts_with("http://") || v.starts_with("https://") {
        v.to_string()
    } else {
        format!("http://{v}")
    };
    let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
    host_port("cluster.addr", rest.trim_end_matches('/'))?;
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn defaults_are_valid() {
        Config::default().validate().unwrap();
    }

    #[test]
    fn example_config_parses_and_validates() {
        let text = include_str!("../lifeline.example.toml");
        let cfg = Config::from_toml(text).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.auth_servers.len(), 2);
    }

    #[test]
    fn unknown_key_names_the_key() {
        let err = Config::from_toml("[storage]\nretension = \"1h\"\n").unwrap_err();
        assert!(err.contains("retension"), "{err}");
    }

    #[test]
    fn bad_duration_names_the_field() {
        let err = Config::from_toml("[health]\nunknown_grace = \"soon\"\n").unwrap_err();
        assert!(err.contains("unknown_grace"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_field() {
        let mut c = Config::default();
        c.server.listen = "localhost".into();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("server.listen"));

        let mut c = Config::default();
        c.cluster.page_size = 0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("cluster.page_size"));

        let c = Config {
            auth_servers: vec![StaticAuthServer {
                name: "a".into(),
                addr: "nope".into(),
            }],
            ..Config::default()
        };
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("auth_servers[0].addr"));
    }

    #[test]
    fn env_overrides_win_and_bad_env_names_the_variable() {
        let env = |k: &str| match k {
            "LIFELINE_LISTEN" => Some("127.0.0.1:18080".to_string()),
            "LIFELINE_AUTH_SERVERS" => Some("a=127.0.0.1:1, b=127.0.0.1:2".to_string()),
            _ => None,
        };
        let cfg = Config::load(None, env).unwrap();
        assert_eq!(cfg.server.listen, "127.0.0.1:18080");
        assert_eq!(cfg.auth_servers.len(), 2);
        assert_eq!(cfg.auth_servers[1].name, "b");

        let env = |k: &str| (k == "LIFELINE_RETENTION").then(|| "forever".to_string());
        let err = Config::load(None, env).unwrap_err().to_string();
        assert!(err.contains("LIFELINE_RETENTION"), "{err}");
        Config::load(None, no_env).unwrap();
    }

    #[test]
    fn signal_settings_are_validated_and_overridable() {
        let c = Config::from_toml("[signals]\nstorm_share = 1.5\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("signals.storm_share"), "{e}");
        let c = Config::from_toml("[signals]\nreconnect_interval = \"100ms\"\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("signals.reconnect_interval"), "{e}");
        let mut c = Config::default();
        c.apply_env(|k| match k {
            "LIFELINE_AUTO_RECONNECT" => Some("off".into()),
            "LIFELINE_RECONNECT_INTERVAL" => Some("6h".into()),
            "LIFELINE_FULL_DISCOVERY" => Some("true".into()),
            _ => None,
        })
        .unwrap();
        assert!(!c.signals.auto_reconnect && c.signals.full_discovery);
        assert_eq!(
            c.signals.reconnect_interval,
            Some(Duration::from_secs(6 * 3600))
        );
        let e = Config::default()
            .apply_env(|k| (k == "LIFELINE_AUTO_RECONNECT").then(|| "maybe".into()))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("LIFELINE_AUTO_RECONNECT") && e.contains("maybe"),
            "{e}"
        );
    }

    #[test]
    fn lb_policy_json_is_validated_at_start() {
        let c = Config::from_toml(
            "[signals]\ngrpc_client_lb_policy = '{\"loadBalancingConfig\":[{\"teleport_pick_healthy\":{\"mode\":\"reconnect\"}}]}'\n",
        )
        .unwrap();
        assert_eq!(c.lb_policy().unwrap().mode, crate::model::LbMode::Reconnect);
        let c = Config::from_toml("[signals]\ngrpc_client_lb_policy = '{nope'\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("signals.grpc_client_lb_policy"), "{e}");
        let env = |k: &str| (k == "LIFELINE_GRPC_CLIENT_LB_POLICY").then(|| "[]".to_string());
        let e = Config::load(None, env).unwrap_err().to_string();
        assert!(e.contains("LIFELINE_GRPC_CLIENT_LB_POLICY"), "{e}");
    }

    #[test]
    fn cluster_addr_accepts_bare_host_port() {
        let mut c = Config::default();
        c.cluster.addr = "127.0.0.1:3025".into();
        assert_eq!(c.cluster_uri().unwrap(), "http://127.0.0.1:3025");
        c.cluster.addr = "http://".into();
        assert!(c.cluster_uri().is_err());
    }
}
