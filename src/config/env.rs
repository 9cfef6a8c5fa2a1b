//! `LIFELINE_*` environment variables: one table names each variable, the
//! key it overrides and how its text is read. Each set variable becomes its
//! own figment layer named after it, so an error or a value's source names
//! the variable.

use figment::value::{Dict, Map, Value};
use figment::{Metadata, Profile, Provider};

use super::ConfigError;
use crate::domain::LbPolicy;

/// How a variable's text is read.
#[derive(Clone, Copy, Debug)]
enum Form {
    Text,
    /// `true`/`false`, `1`/`0`, `on`/`off`, `yes`/`no`.
    Flag,
    /// A humantime duration (`90s`, `1h 30m`).
    Duration,
    /// A duration, or `off` for none (read by the key's own deserializer).
    DurationOrOff,
    /// RFD 0226's JSON form of the load-balancing policy.
    LbPolicy,
    /// `name=host:port,name=host:port`.
    AuthServers,
}

/// (variable, the key it overrides, how it is read).
const TABLE: &[(&str, &str, Form)] = &[
    ("LIFELINE_LISTEN", "server.listen", Form::Text),
    ("LIFELINE_GRPC_LISTEN", "server.grpc_listen", Form::Text),
    ("LIFELINE_ADMIN_LISTEN", "server.admin_listen", Form::Text),
    (
        "LIFELINE_HTTP_CLOSE_UNHEALTHY",
        "server.http_close_unhealthy",
        Form::Flag,
    ),
    ("LIFELINE_TLS_CERT", "server.tls_cert", Form::Text),
    ("LIFELINE_TLS_KEY", "server.tls_key", Form::Text),
    (
        "LIFELINE_AGENT_CLIENT_CA",
        "server.agent_client_ca",
        Form::Text,
    ),
    (
        "LIFELINE_AGENT_IDENTITY",
        "access.agent_identity",
        Form::Text,
    ),
    ("LIFELINE_CLUSTER_ADDR", "cluster.addr", Form::Text),
    ("LIFELINE_CLUSTER_SOURCE", "cluster.source", Form::Text),
    (
        "LIFELINE_CLUSTER_ALPN_UPGRADE",
        "cluster.alpn_upgrade",
        Form::Text,
    ),
    (
        "LIFELINE_CLUSTER_IDENTITY_FILE",
        "cluster.identity_file",
        Form::Text,
    ),
    ("LIFELINE_DB", "storage.path", Form::Text),
    ("LIFELINE_DB_URL", "storage.url", Form::Text),
    ("LIFELINE_REPLICA", "storage.replica", Form::Text),
    (
        "LIFELINE_LEADER_LEASE",
        "storage.leader_lease",
        Form::Duration,
    ),
    ("LIFELINE_RETENTION", "storage.retention", Form::Duration),
    (
        "LIFELINE_AUDIT_RETENTION",
        "storage.audit_retention",
        Form::Duration,
    ),
    (
        "LIFELINE_AUTH_UNKNOWN_GRACE",
        "health.unknown_grace",
        Form::Duration,
    ),
    (
        "LIFELINE_GRPC_CLIENT_LB_POLICY",
        "signals.grpc_client_lb_policy",
        Form::LbPolicy,
    ),
    (
        "LIFELINE_FULL_DISCOVERY",
        "signals.full_discovery",
        Form::Flag,
    ),
    (
        "LIFELINE_AUTO_RECONNECT",
        "signals.auto_reconnect",
        Form::Flag,
    ),
    (
        "LIFELINE_RECONNECT_INTERVAL",
        "signals.reconnect_interval",
        Form::DurationOrOff,
    ),
    (
        "LIFELINE_GRACEFUL_TUNNEL_CLOSING",
        "signals.graceful_tunnel_closing",
        Form::Flag,
    ),
    ("LIFELINE_AUTH_SERVERS", "auth_servers", Form::AuthServers),
];

/// One set variable, as a figment layer.
pub(super) struct Override {
    pub var: &'static str,
    key: &'static str,
    value: Value,
}

impl Override {
    fn name(&self) -> String {
        format!("environment variable {}", self.var)
    }

    /// True when `e` arose from this layer's value.
    pub fn named_in(&self, e: &figment::Error) -> bool {
        e.metadata.as_ref().is_some_and(|m| m.name == self.name())
    }
}

impl Provider for Override {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let nested = figment::util::nest(self.key, self.value.clone());
        Ok(Profile::Default.collect(nested.into_dict().unwrap_or_default()))
    }
}

/// The layers for every set variable, in table order.
pub(super) fn overrides(
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Vec<Override>, ConfigError> {
    let mut out = Vec::new();
    for &(var, key, form) in TABLE {
        let Some(text) = env(var) else {
            continue;
        };
        let bad = |message: String| ConfigError::Env {
            var: var.to_string(),
            message,
        };
        let value = match form {
            Form::Text => Value::from(text),
            Form::Flag => Value::from(match text.trim() {
                "1" | "true" | "on" | "yes" => true,
                "0" | "false" | "off" | "no" => false,
                _ => return Err(bad(format!("{text:?} is not a boolean (true/false)"))),
            }),
            Form::Duration => {
                humantime::parse_duration(text.trim())
                    .map_err(|e| bad(format!("invalid duration {text:?}: {e}")))?;
                Value::from(text.trim().to_string())
            }
            Form::DurationOrOff => {
                super::signals::parse_duration_or_off(&text).map_err(bad)?;
                Value::from(text)
            }
            Form::LbPolicy => {
                LbPolicy::parse(&text).map_err(|e| bad(e.to_string()))?;
                Value::from(text)
            }
            Form::AuthServers => {
                let mut list = Vec::new();
                for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    let (name, addr) = item
                        .split_once('=')
                        .ok_or_else(|| bad(format!("{item:?} is not name=host:port")))?;
                    let mut d = Dict::new();
                    d.insert("name".into(), Value::from(name.trim().to_string()));
                    d.insert("addr".into(), Value::from(addr.trim().to_string()));
                    list.push(Value::from(d));
                }
                Value::from(list)
            }
        };
        out.push(Override { var, key, value });
    }
    Ok(out)
}

/// The keys a variable sets on one of `[[clusters]]`, by its name:
/// `LIFELINE_CLUSTERS_<NAME>_<KEY>` ([`cluster_var`]), the same keys the
/// one-cluster form's `LIFELINE_CLUSTER_*` set.
pub const CLUSTER_KEYS: [(&str, &str); 4] = [
    ("ADDR", "addr"),
    ("SOURCE", "source"),
    ("ALPN_UPGRADE", "alpn_upgrade"),
    ("IDENTITY_FILE", "identity_file"),
];

/// A cluster's name as it reads in a variable: upper case, every
/// character but a letter or digit as `_` (`eu-west.example.com` →
/// `EU_WEST_EXAMPLE_COM`).
pub fn env_token(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// The variable that sets `suffix` (one of [`CLUSTER_KEYS`]) of the
/// cluster named `name`.
pub fn cluster_var(name: &str, suffix: &str) -> String {
    format!("LIFELINE_CLUSTERS_{}_{suffix}", env_token(name))
}

/// Applies each set `LIFELINE_CLUSTERS_<NAME>_<KEY>` to the cluster of
/// that name; returns each key it set (`clusters[NAME].addr`) with the
/// variable that set it.
pub(super) fn apply_cluster_overrides(
    env: &dyn Fn(&str) -> Option<String>,
    clusters: &mut [super::ClusterConfig],
) -> Result<Vec<(String, String)>, ConfigError> {
    let mut set = Vec::new();
    for c in clusters.iter_mut() {
        for (suffix, key) in CLUSTER_KEYS {
            let var = cluster_var(&c.name, suffix);
            let Some(text) = env(&var) else {
                continue;
            };
            let bad = |message: String| ConfigError::Env {
                var: var.clone(),
                message,
            };
            let mut table = toml::Table::try_from(&*c).map_err(|e| bad(e.to_string()))?;
            table.insert(key.to_string(), toml::Value::String(text));
            *c = table
                .try_into()
                .map_err(|e: toml::de::Error| bad(e.to_string()))?;
            set.push((
                format!("clusters[{}].{key}", c.name),
                format!("environment variable {var}"),
            ));
        }
    }
    Ok(set)
}
