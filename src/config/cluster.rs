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
    /// The cluster's name in Lifeline: what its pages, API and
    /// notifications call it. 1 to 63 letters, digits, `-`, `_` and `.`,
    /// starting with a letter or digit, and not `proxy`, `auth_server` or
    /// `agent` (a maintenance target's kinds); unique among `[[clusters]]`. In
    /// the one-cluster form `[cluster]`, it defaults to `cluster_name`
    /// when that follows the rule, else to `default`.
    pub name: String,
    /// `lifeline` or `teleport`. Env: `LIFELINE_CLUSTER_SOURCE` (an entry of `[[clusters]]`: `LIFELINE_CLUSTERS_<NAME>_SOURCE`).
    pub source: SourceKind,
    /// `lifeline`: where `ClusterEvents` is served (`http://host:port`,
    /// `https://host:port` or `host:port`). `teleport`: an Auth server
    /// (`auth.example.com:3025`), or a proxy's web address with
    /// `tls_routing`. Env: `LIFELINE_CLUSTER_ADDR` (an entry of `[[clusters]]`: `LIFELINE_CLUSTERS_<NAME>_ADDR`).
    pub addr: String,
    /// `teleport`: the identity file `tctl auth sign --format=file` wrote.
    /// `lifeline` over `https://`: an optional client certificate in the
    /// same layout (key, then certificate). Env:
    /// `LIFELINE_CLUSTER_IDENTITY_FILE` (an entry of `[[clusters]]`: `LIFELINE_CLUSTERS_<NAME>_IDENTITY_FILE`).
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
    /// load balancer. Env: `LIFELINE_CLUSTER_ALPN_UPGRADE` (an entry of `[[clusters]]`: `LIFELINE_CLUSTERS_<NAME>_ALPN_UPGRADE`).
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
            name: DEFAULT_CLUSTER_NAME.into(),
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
    /// The name its resources, and everything that happened to them, are
    /// kept under.
    pub fn cluster(&self) -> crate::domain::ClusterName {
        crate::domain::ClusterName::new(&self.name)
    }

    /// The cluster address as a URI tonic can dial.
    pub fn uri(&self) -> Result<String, ConfigError> {
        self.uri_at("cluster.addr")
    }

    fn uri_at(&self, field: &str) -> Result<String, ConfigError> {
        let v = &self.addr;
        let uri = if v.starts_with("http://") || v.starts_with("https://") {
            v.to_string()
        } else {
            format!("http://{v}")
        };
        let rest = uri.split_once("://").map(|(_, r)| r).unwrap_or_default();
        host_port(field, rest.trim_end_matches('/'))?;
        Ok(uri)
    }

    /// Its own rules, each error naming the field under `at` (`cluster`,
    /// or `clusters[NAME]`).
    pub(super) fn validate(&self, at: &str) -> Result<(), ConfigError> {
        let field = |key: &str| format!("{at}.{key}");
        check_name(&self.name, &field("name"))?;
        match self.source {
            SourceKind::Lifeline => {
                let uri = self.uri_at(&field("addr"))?;
                if uri.starts_with("https://")
                    && self.ca_file.is_none()
                    && self.identity_file.is_none()
                {
                    return Err(invalid(
                        field("ca_file"),
                        "an https:// source needs the CA that signs its certificate (ca_file, or an identity_file with CAs)",
                    ));
                }
            }
            SourceKind::Teleport => {
                host_port(&field("addr"), self.addr.trim_start_matches("https://"))?;
                if self.identity_file.is_none() {
                    return Err(invalid(
                        field("identity_file"),
                        "the teleport source needs an identity file (tctl auth sign --format=file)",
                    ));
                }
                if self.agent_kinds.is_empty() {
                    return Err(invalid(
                        field("agent_kinds"),
                        "must name at least one agent service",
                    ));
                }
                if self.tls_routing && self.cluster_name.trim().is_empty() {
                    return Err(invalid(
                        field("cluster_name"),
                        "tls_routing needs the cluster's name (it is part of the ALPN protocol)",
                    ));
                }
                // Both concern a proxy's TLS routing only: set without it,
                // they would be silently ignored.
                if !self.tls_routing && self.alpn_upgrade == AlpnUpgrade::Always {
                    return Err(invalid(
                        field("alpn_upgrade"),
                        "\"always\" needs tls_routing (the upgrade reaches Auth through a proxy)",
                    ));
                }
                if !self.tls_routing && self.proxy_ca_file.is_some() {
                    return Err(invalid(
                        field("proxy_ca_file"),
                        "needs tls_routing (it is the CA of the proxy's web address)",
                    ));
                }
                positive(&field("instances_poll"), self.instances_poll)?;
            }
        }
        if self.server_name.trim().is_empty() {
            return Err(invalid(field("server_name"), "must not be empty"));
        }
        if !(1..=10_000).contains(&self.page_size) {
            return Err(invalid(field("page_size"), "must be between 1 and 10000"));
        }
        if self.max_message_bytes < 64 * 1024 {
            return Err(invalid(
                field("max_message_bytes"),
                "must be at least 65536",
            ));
        }
        positive(&field("connect_timeout"), self.connect_timeout)?;
        backoff_range(&field("backoff"), self.backoff_base, self.backoff_cap)
    }
}

/// The one-cluster form's name when neither `name` nor `cluster_name`
/// gives one.
pub const DEFAULT_CLUSTER_NAME: &str = "default";
/// The longest cluster name (a DNS label's length).
pub const MAX_CLUSTER_NAME: usize = 63;
/// What a cluster name may be, as errors say it.
pub const CLUSTER_NAME_RULE: &str =
    "1 to 63 letters, digits, '-', '_' and '.', starting with a letter or digit, \
     and not proxy, auth_server or agent (a maintenance target's kinds)";

/// True when `name` follows [`CLUSTER_NAME_RULE`].
pub fn valid_cluster_name(name: &str) -> bool {
    name.parse::<crate::domain::TargetKind>().is_err()
        && name.len() <= MAX_CLUSTER_NAME
        && name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// `name` follows [`CLUSTER_NAME_RULE`], or `field` is refused.
fn check_name(name: &str, field: &str) -> Result<(), ConfigError> {
    if valid_cluster_name(name) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!("{name:?} is not a cluster name: {CLUSTER_NAME_RULE}"),
        ))
    }
}

/// Checks `[[clusters]]`: each named by the rule, each name once, no two
/// read as the same name in a variable, each entry by its own rules; and
/// one entry at most, as this build watches one cluster per process.
pub(super) fn validate_clusters(list: &[ClusterConfig]) -> Result<(), ConfigError> {
    let mut names = HashSet::new();
    let mut tokens = std::collections::HashMap::new();
    for (i, c) in list.iter().enumerate() {
        check_name(&c.name, &format!("clusters[{i}].name"))?;
        if !names.insert(c.name.as_str()) {
            return Err(invalid(
                format!("clusters[{i}].name"),
                format!(
                    "{:?} names two clusters (an entry without a name is named {DEFAULT_CLUSTER_NAME:?})",
                    c.name
                ),
            ));
        }
        let token = super::env::env_token(&c.name);
        if let Some(other) = tokens.insert(token.clone(), c.name.as_str()) {
            return Err(invalid(
                format!("clusters[{i}].name"),
                format!(
                    "{:?} and {other:?} read as the same name in a variable (LIFELINE_CLUSTERS_{token}_…)",
                    c.name
                ),
            ));
        }
        c.validate(&format!("clusters[{}]", c.name))?;
    }
    if list.len() > 1 {
        let all: Vec<&str> = list.iter().map(|c| c.name.as_str()).collect();
        return Err(invalid(
            "clusters",
            format!(
                "{} clusters are configured ({}); this build watches one cluster per process: run a Lifeline for each",
                list.len(),
                all.join(", ")
            ),
        ));
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::super::{Config, TomlSource};
    use super::*;

    /// Loads `toml` with `env` as `serve` does, validated; the error as text.
    fn load(toml: &str, env: &[(&str, &str)]) -> Result<Config, String> {
        let env = |k: &str| {
            env.iter()
                .find(|(var, _)| *var == k)
                .map(|(_, v)| v.to_string())
        };
        let cfg = Config::layered(Some(TomlSource::Text(toml)), &env).map_err(|e| e.to_string())?;
        cfg.validate().map_err(|e| e.to_string())?;
        Ok(cfg)
    }

    const ONE: &str = "[[clusters]]\nname = \"eu-west\"\naddr = \"eu.example.com:3025\"\n";

    #[test]
    fn the_one_cluster_form_is_named_default_or_by_its_cluster_name() {
        let c = load("", &[]).unwrap();
        assert_eq!(c.cluster.name, "default");
        assert_eq!(c.clusters().len(), 1);
        let c = load("[cluster]\ncluster_name = \"teleport.example.com\"\n", &[]).unwrap();
        assert_eq!(c.cluster.name, "teleport.example.com");
        let c = load(
            "[cluster]\nname = \"prod\"\ncluster_name = \"teleport.example.com\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.cluster.name, "prod");
        // A Teleport name outside the rule leaves the default: the file
        // loaded before names existed, and still does.
        let c = load("[cluster]\ncluster_name = \"a cluster\"\n", &[]).unwrap();
        assert_eq!(c.cluster.name, "default");
        let e = load("[cluster]\nname = \"a cluster\"\n", &[]).unwrap_err();
        assert!(
            e.contains("cluster.name") && e.contains("letters, digits"),
            "{e}"
        );
    }

    #[test]
    fn a_lone_clusters_entry_is_the_cluster_lifeline_watches() {
        let c = load(ONE, &[]).unwrap();
        assert_eq!(c.cluster.name, "eu-west");
        assert_eq!(c.cluster.addr, "eu.example.com:3025");
        let names: Vec<&str> = c.clusters().iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["eu-west"]);
        // check-config's TOML loads back as the same cluster.
        let shown = c.to_toml().unwrap();
        assert!(!shown.contains("[cluster]\n"), "{shown}");
        let again = load(&shown, &[]).unwrap();
        assert_eq!(again.cluster.name, "eu-west");
        assert_eq!(again.cluster.addr, "eu.example.com:3025");
    }

    #[test]
    fn clusters_entries_are_named_once_each_by_the_rule() {
        for (toml, want) in [
            ("[[clusters]]\nname = \"\"\n", "clusters[0].name"),
            ("[[clusters]]\nname = \"-x\"\n", "clusters[0].name"),
            ("[[clusters]]\nname = \"a/b\"\n", "not a cluster name"),
            // A maintenance target's kind: `proxy/…` must read one way.
            (
                "[[clusters]]\nname = \"proxy\"\n",
                "not proxy, auth_server or agent",
            ),
            (
                &format!("[[clusters]]\nname = \"{}\"\n", "a".repeat(64)),
                "not a cluster name",
            ),
            (
                "[[clusters]]\nname = \"a\"\n[[clusters]]\nname = \"a\"\n",
                "names two clusters",
            ),
            (
                "[[clusters]]\n[[clusters]]\n",
                "an entry without a name is named \"default\"",
            ),
            (
                "[[clusters]]\nname = \"eu-west\"\n[[clusters]]\nname = \"eu_west\"\n",
                "LIFELINE_CLUSTERS_EU_WEST_",
            ),
        ] {
            let e = load(toml, &[]).unwrap_err();
            assert!(e.contains(want), "{toml}: {e}");
        }
    }

    #[test]
    fn errors_name_the_entry_they_are_in() {
        let e = load(
            "[[clusters]]\nname = \"eu-west\"\nsource = \"teleport\"\naddr = \"auth:3025\"\n",
            &[],
        )
        .unwrap_err();
        assert!(e.contains("clusters[eu-west].identity_file"), "{e}");
        let e = load(
            "[[clusters]]\nname = \"eu-west\"\naddr = \"no port\"\n",
            &[],
        )
        .unwrap_err();
        assert!(e.contains("clusters[eu-west].addr"), "{e}");
    }

    #[test]
    fn the_two_forms_are_not_set_together() {
        let e = load(&format!("[cluster]\naddr = \"a:1\"\n{ONE}"), &[]).unwrap_err();
        assert!(
            e.contains("cluster.addr") && e.contains("use [[clusters]] alone"),
            "{e}"
        );
        // The one-cluster form's variable counts as setting it.
        let e = load(ONE, &[("LIFELINE_CLUSTER_ADDR", "b:2")]).unwrap_err();
        assert!(e.contains("LIFELINE_CLUSTER_ADDR"), "{e}");
    }

    #[test]
    fn several_clusters_are_refused_with_their_names() {
        let toml = "[[clusters]]\nname = \"root\"\n[[clusters]]\nname = \"leaf-1\"\n";
        let e = load(toml, &[]).unwrap_err();
        assert!(
            e.contains("2 clusters are configured (root, leaf-1)")
                && e.contains("one cluster per process"),
            "{e}"
        );
    }

    #[test]
    fn a_variable_sets_a_key_of_the_cluster_it_names() {
        let c = load(
            ONE,
            &[
                ("LIFELINE_CLUSTERS_EU_WEST_ADDR", "other.example.com:3025"),
                ("LIFELINE_CLUSTERS_EU_WEST_SOURCE", "teleport"),
                ("LIFELINE_CLUSTERS_EU_WEST_IDENTITY_FILE", "/var/lib/id"),
                // Names no configured cluster: not read.
                ("LIFELINE_CLUSTERS_US_ADDR", "x:1"),
            ],
        )
        .unwrap();
        assert_eq!(c.cluster.addr, "other.example.com:3025");
        assert_eq!(c.cluster.source, SourceKind::Teleport);
        assert_eq!(
            c.source("clusters[eu-west].addr"),
            Some("environment variable LIFELINE_CLUSTERS_EU_WEST_ADDR")
        );
        let e = load(ONE, &[("LIFELINE_CLUSTERS_EU_WEST_SOURCE", "consul")]).unwrap_err();
        assert!(e.contains("LIFELINE_CLUSTERS_EU_WEST_SOURCE"), "{e}");
        assert_eq!(
            crate::config::cluster_var("eu-west.example.com", "ADDR"),
            "LIFELINE_CLUSTERS_EU_WEST_EXAMPLE_COM_ADDR"
        );
    }
}
