//! Static configuration: one loader (figment) layers the built-in
//! defaults, a TOML file (`--config`) and `LIFELINE_*` environment
//! variables, then each section validates itself once at start. Every error
//! names the field (or variable) at fault, so a broken config stops start-up
//! with a message an operator can act on, and the loader remembers where
//! each value came from (`Config::source`), which the dynamic settings'
//! origins reuse. Plain data: no handles, no I/O beyond reading the file.
//!
//! Each section is typed for the part of Lifeline that reads it
//! (addresses as `SocketAddr`, durations, ratios as [`Ratio`]) and lives in
//! its own file. The sections stay here rather than in their rooms so that
//! the dynamic settings can read them without importing the rooms that
//! read the settings.

mod access;
mod cluster;
mod env;
mod notify;
mod redact;
mod server;
mod signals;
mod storage;
mod telemetry;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Format, Toml};
use figment::{Figment, Provider};
use serde::{Deserialize, Serialize};

pub use access::{
    valid_token_name, AccessConfig, AgentIdentity, AgentNames, JoinToken, Role,
    TeleportAccessConfig, TokenConfig, TraitGrant, TOKEN_NAME_RULE,
};
pub use cluster::{
    valid_cluster_name, AlpnUpgrade, ClusterConfig, FleetConfig, HealthConfig, SourceKind,
    StaticAuthServer, CLUSTER_NAME_RULE, DEFAULT_CLUSTER_NAME,
};
pub use env::cluster_var;
pub use notify::{
    AlertmanagerConfig, NotifyConfig, SilenceConfig, WebhookConfig, WebhookFormat,
    MAX_ALERTMANAGERS, MAX_WEBHOOKS,
};
pub use server::{check_external_url, BadExternalUrl, ProbesConfig, ServerConfig};
pub use signals::{RestartLimit, SignalsConfig, MAX_RECONNECT_INTERVAL};
pub use storage::{
    DbUrl, Engine, StorageConfig, MAX_AUDIT_RETENTION, MAX_REPLICA_NAME, MAX_RETENTION,
    MIN_AUDIT_RETENTION, MIN_RETENTION,
};
pub use telemetry::TelemetryConfig;

/// Everything Lifeline needs to start. Defaults make `lifeline demo` need none.
#[derive(Clone, Debug, Default, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub server: ServerConfig,
    /// The one cluster Lifeline watches, in the short form; see
    /// `[[clusters]]` for the named form.
    pub cluster: ClusterConfig,
    /// The clusters Lifeline watches, each named (`[[clusters]]`, with
    /// every key `[cluster]` takes), instead of `[cluster]`; the two are
    /// not set together. A variable sets a key of one by its name:
    /// `LIFELINE_CLUSTERS_<NAME>_ADDR` (also `_SOURCE`, `_ALPN_UPGRADE`,
    /// `_IDENTITY_FILE`), NAME upper-cased with `_` for every other
    /// character. This build watches one cluster per process.
    pub clusters: Vec<ClusterConfig>,
    /// Auth servers to watch in addition to those the cluster announces.
    pub auth_servers: Vec<StaticAuthServer>,
    pub health: HealthConfig,
    pub storage: StorageConfig,
    pub fleet: FleetConfig,
    pub signals: SignalsConfig,
    pub telemetry: TelemetryConfig,
    pub access: AccessConfig,
    pub probes: ProbesConfig,
    /// Whom incidents are told to: Alertmanagers and webhooks.
    pub notify: NotifyConfig,
    /// `section.key` paths the file or a `LIFELINE_*` variable set, and
    /// where each came from (`TOML file /etc/lifeline.toml`, `environment
    /// variable LIFELINE_DB`), so the dynamic settings can tell "written in
    /// the file" from "defaulted" (RFD 0016: the file wins only where it
    /// speaks).
    #[serde(skip)]
    pub explicit: BTreeMap<String, String>,
}

/// A share between 0 and 1 inclusive, refused at parse time otherwise.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd, Deserialize, Serialize)]
#[serde(try_from = "f64", into = "f64")]
pub struct Ratio(f64);

impl Ratio {
    pub const ONE: Ratio = Ratio(1.0);
    pub const HALF: Ratio = Ratio(0.5);
    /// One in twenty.
    pub const TWENTIETH: Ratio = Ratio(0.05);

    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Ratio {
    type Error = String;
    fn try_from(v: f64) -> Result<Self, Self::Error> {
        if (0.0..=1.0).contains(&v) {
            Ok(Ratio(v))
        } else {
            Err(format!("must be between 0 and 1, got {v}"))
        }
    }
}

impl From<Ratio> for f64 {
    fn from(r: Ratio) -> f64 {
        r.0
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
    Env { var: String, message: String },
    #[error("config field `{field}`: {message}")]
    Invalid { field: String, message: String },
}

pub(crate) fn invalid(field: impl Into<String>, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

/// The sections `lifeline demo --config` reads (see [`Config::load_demo`]).
pub const DEMO_SECTIONS: [&str; 2] = ["notify", "access"];

/// Where the TOML layer comes from.
enum TomlSource<'a> {
    File(&'a Path),
    Text(&'a str),
}

impl Config {
    /// The effective configuration as TOML (`lifeline check-config`):
    /// every key with its value, defaults included; what may be a secret
    /// (a database password, a webhook's path) redacted.
    pub fn to_toml(&self) -> Result<String, toml::ser::Error> {
        if self.clusters.is_empty() {
            return toml::to_string_pretty(self);
        }
        // The named form alone: `[cluster]` beside it would not load.
        let mut table = toml::Table::try_from(self)?;
        table.remove("cluster");
        toml::to_string_pretty(&table)
    }

    /// Reads `path` (when given), applies `LIFELINE_*` overrides from `env`,
    /// and validates.
    pub fn load(
        path: Option<&Path>,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        if let Some(p) = path {
            // figment reads a missing file as empty; an operator who names
            // a file means it.
            std::fs::metadata(p).map_err(|source| ConfigError::Read {
                path: p.to_path_buf(),
                source,
            })?;
        }
        let cfg = Config::layered(path.map(TomlSource::File), &env)?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// A file for `lifeline demo --config`: its `[notify]` and `[access]`
    /// sections ([`DEMO_SECTIONS`]), each checked as `serve` checks it. The
    /// demo makes its own cluster, database and listeners, so any other
    /// section is refused by name rather than silently ignored.
    pub fn load_demo(path: &Path) -> Result<Config, ConfigError> {
        let at = || path.to_path_buf();
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: at(), source })?;
        let table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| ConfigError::Parse {
                path: at(),
                message: e.to_string(),
            })?;
        if let Some(other) = table.keys().find(|k| !DEMO_SECTIONS.contains(&k.as_str())) {
            return Err(ConfigError::Parse {
                path: at(),
                message: format!(
                    "[{other}] makes no sense in a demo (it runs its own simulated cluster, \
                     database and listeners); the demo reads only [notify] and [access]"
                ),
            });
        }
        let cfg = Config::layered(Some(TomlSource::File(path)), &|_: &str| None)?;
        cfg.notify.validate()?;
        cfg.access.validate()?;
        Ok(cfg)
    }

    /// Parses TOML text alone (no environment, not validated); the error
    /// text names the offending key.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        Config::layered(Some(TomlSource::Text(text)), &|_: &str| None)
    }

    fn layered(
        toml: Option<TomlSource<'_>>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let mut fig = Figment::new();
        let file = match toml {
            Some(TomlSource::File(p)) => {
                fig = fig.merge(Toml::file_exact(p));
                Some(p.to_path_buf())
            }
            Some(TomlSource::Text(t)) => {
                fig = fig.merge(Toml::string(t));
                None
            }
            None => None,
        };
        let overrides = env::overrides(env)?;
        for o in &overrides {
            fig = fig.merge(o);
        }
        let mut cfg: Config = fig.extract().map_err(|e| {
            // One profile only: its name in the key path says nothing.
            let message = e.to_string().replace("key \"default.", "key \"");
            match overrides.iter().find(|o| o.named_in(&e)) {
                Some(o) => ConfigError::Env {
                    var: o.var.to_string(),
                    message,
                },
                None => ConfigError::Parse {
                    path: file.clone().unwrap_or_else(|| PathBuf::from("(text)")),
                    message,
                },
            }
        })?;
        cfg.explicit = sources(&fig);
        for (key, from) in env::apply_cluster_overrides(env, &mut cfg.clusters)? {
            cfg.explicit.insert(key, from);
        }
        cfg.resolve_clusters()?;
        Ok(cfg)
    }

    /// Names the one-cluster form (its `name`, else its `cluster_name`,
    /// else `default`); refuses `[cluster]` beside `[[clusters]]`; and
    /// makes a lone `[[clusters]]` entry the cluster Lifeline runs.
    fn resolve_clusters(&mut self) -> Result<(), ConfigError> {
        if self.clusters.is_empty() {
            // A Teleport cluster name the rule refuses leaves the default:
            // a file that loaded before still loads.
            let from_teleport = self.cluster.cluster_name.trim();
            if !self.is_explicit("cluster.name") && valid_cluster_name(from_teleport) {
                self.cluster.name = from_teleport.to_string();
            }
            return Ok(());
        }
        if let Some((key, from)) = self
            .explicit
            .iter()
            .find(|(k, _)| k.starts_with("cluster."))
        {
            return Err(invalid(
                "cluster",
                format!(
                    "{key} (from {from}) sets the one-cluster form beside [[clusters]]: \
                     use [[clusters]] alone, one entry per cluster"
                ),
            ));
        }
        if let [one] = self.clusters.as_slice() {
            self.cluster = one.clone();
        }
        Ok(())
    }

    /// Every cluster Lifeline is configured to watch, named: the entries
    /// of `[[clusters]]`, or the one of `[cluster]`.
    pub fn clusters(&self) -> Vec<&ClusterConfig> {
        if self.clusters.is_empty() {
            vec![&self.cluster]
        } else {
            self.clusters.iter().collect()
        }
    }

    /// True when the file or a variable set `section.key`.
    pub fn is_explicit(&self, key: &str) -> bool {
        self.explicit.contains_key(key)
    }

    /// Where `section.key` came from, when not from the defaults.
    pub fn source(&self, key: &str) -> Option<&str> {
        self.explicit.get(key).map(String::as_str)
    }

    /// Each section's own rules; the first broken one is reported.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.telemetry.validate()?;
        self.server.validate()?;
        self.access.validate()?;
        if self.access.agent_identity == AgentIdentity::Certificate
            && self.server.agent_client_ca.is_none()
        {
            return Err(invalid(
                "access.agent_identity",
                "\"certificate\" needs agents' client certificates: set server.agent_client_ca",
            ));
        }
        self.probes.validate()?;
        if self.clusters.is_empty() {
            self.cluster.validate("cluster")?;
        } else {
            cluster::validate_clusters(&self.clusters)?;
        }
        cluster::validate_auth_servers(&self.auth_servers)?;
        self.check_token_clusters()?;
        self.health.validate()?;
        self.storage.validate()?;
        self.fleet.validate()?;
        self.notify.validate()?;
        self.signals.validate()
    }

    /// Each join token's `clusters` names clusters configured here.
    fn check_token_clusters(&self) -> Result<(), ConfigError> {
        let configured: Vec<&str> = self.clusters().iter().map(|c| c.name.as_str()).collect();
        for (i, j) in self.access.join_tokens.iter().enumerate() {
            for name in j.clusters().unwrap_or_default() {
                if !configured.contains(&name.as_str()) {
                    return Err(invalid(
                        format!("access.join_tokens[{i}].clusters"),
                        format!(
                            "names {:?}, which is no configured cluster's name (configured: {})",
                            crate::domain::text::bounded(&name, 80),
                            configured.join(", ")
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The parsed `signals.grpc_client_lb_policy`.
    pub fn lb_policy(&self) -> Result<crate::domain::LbPolicy, ConfigError> {
        self.signals.lb_policy()
    }

    /// The statically configured auth servers: (name, health address).
    pub fn static_auth(&self) -> Vec<(String, String)> {
        self.auth_servers
            .iter()
            .map(|a| (a.name.clone(), a.addr.clone()))
            .collect()
    }

    /// The cluster address as a URI tonic can dial.
    pub fn cluster_uri(&self) -> Result<String, ConfigError> {
        self.cluster.uri()
    }
}

/// Every `section.key` the layers set (and `auth_servers`), with the name
/// of the layer that set it last.
fn sources(fig: &Figment) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let Ok(data) = fig.data() else {
        return out;
    };
    for dict in data.values() {
        for (section, v) in dict {
            let keys: Vec<String> = match v.as_dict() {
                Some(d) => d.keys().map(|k| format!("{section}.{k}")).collect(),
                None => vec![section.clone()],
            };
            for key in keys {
                if let Some(md) = fig.find_metadata(&key) {
                    let name = match &md.source {
                        Some(figment::Source::File(p)) => format!("{} {}", md.name, p.display()),
                        _ => md.name.to_string(),
                    };
                    out.insert(key, name);
                }
            }
        }
    }
    out
}

fn positive(field: &str, d: Duration) -> Result<(), ConfigError> {
    if d.is_zero() {
        Err(invalid(field, "must be greater than zero"))
    } else {
        Ok(())
    }
}

/// `{prefix}_base` positive and `{prefix}_cap` not below it.
fn backoff_range(prefix: &str, base: Duration, cap: Duration) -> Result<(), ConfigError> {
    positive(&format!("{prefix}_base"), base)?;
    if cap < base {
        return Err(invalid(
            format!("{prefix}_cap"),
            format!("must not be smaller than {prefix}_base"),
        ));
    }
    Ok(())
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
        let err = Config::from_toml("[storage]\nretension = \"1h\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("retension"), "{err}");
    }

    #[test]
    fn bad_duration_names_the_field() {
        let err = Config::from_toml("[health]\nunknown_grace = \"soon\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown_grace"), "{err}");
    }

    #[test]
    fn invalid_values_name_the_field() {
        let e = Config::from_toml("[server]\nlisten = \"localhost\"\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("server.listen"), "{e}");
        let e = Config::from_toml("[telemetry]\nsample_ratio = 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("telemetry.sample_ratio") && e.contains("between 0 and 1"),
            "{e}"
        );
        for bad in [
            "ftp://x.example",
            "lifeline.example.com",
            "https://x.example/?a=1",
        ] {
            let e = Config::from_toml(&format!("[server]\nexternal_url = \"{bad}\"\n"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains("server.external_url"), "{e}");
        }
        let c =
            Config::from_toml("[server]\nexternal_url = \"https://ll.example.com/\"\n").unwrap();
        assert_eq!(c.server.external_url(), "https://ll.example.com");
        assert_eq!(
            Config::default().server.external_url(),
            "http://127.0.0.1:8080"
        );

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
    fn join_tokens_may_name_their_agents_and_identity_may_be_the_certificate() {
        let h = "a".repeat(64);
        let c = Config::from_toml(&format!(
            "[access]\njoin_tokens = [\"{h}\", {{ sha256 = \"{h}\", agents = \"web-*\" }}, {{ sha256 = \"{h}\", agents = [\"a\", \"b-*\"] }}]\n"
        ))
        .unwrap();
        c.validate().unwrap();
        let names: Vec<Option<Vec<String>>> =
            c.access.join_tokens.iter().map(JoinToken::agents).collect();
        assert_eq!(
            names,
            [
                None,
                Some(vec!["web-*".to_string()]),
                Some(vec!["a".to_string(), "b-*".to_string()])
            ]
        );
        for (toml, field) in [
            (
                format!("[access]\njoin_tokens = [{{ sha256 = \"{h}\", agents = [] }}]\n"),
                "access.join_tokens[0].agents",
            ),
            (
                format!(
                    "[access]\njoin_tokens = [{{ sha256 = \"{h}\", agents = \"a\\u0000\" }}]\n"
                ),
                "access.join_tokens[0].agents",
            ),
            (
                "[access]\nagent_identity = \"certificate\"\n".to_string(),
                "access.agent_identity",
            ),
            (
                "[server]\ngrpc_keepalive = \"2h\"\n".to_string(),
                "server.grpc_keepalive",
            ),
            (
                "[server]\ngrpc_max_connections = 0\n".to_string(),
                "server.grpc_max_connections",
            ),
        ] {
            let e = Config::from_toml(&toml)
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.contains(field), "{toml}: {e}");
        }
    }

    #[test]
    fn a_join_token_binds_to_the_clusters_it_names_and_only_configured_ones() {
        let h = "a".repeat(64);
        let c = Config::from_toml(&format!(
            "[cluster]\nname = \"prod-eu\"\n[access]\njoin_tokens = [{{ sha256 = \"{h}\", clusters = \"prod-eu\" }}, {{ sha256 = \"{h}\", agents = \"web-*\", clusters = [\"prod-eu\"] }}]\n"
        ))
        .unwrap();
        c.validate().unwrap();
        type Names = Option<Vec<String>>;
        let bound: Vec<(Names, Names)> = c
            .access
            .join_tokens
            .iter()
            .map(|j| (j.agents(), j.clusters()))
            .collect();
        let prod = Some(vec!["prod-eu".to_string()]);
        assert_eq!(
            bound,
            [
                (None, prod.clone()),
                (Some(vec!["web-*".to_string()]), prod)
            ]
        );
        for (toml, want) in [
            (
                format!("[access]\njoin_tokens = [{{ sha256 = \"{h}\", clusters = \"prod-us\" }}]\n"),
                "access.join_tokens[0].clusters`: names \"prod-us\", which is no configured cluster's name (configured: default)",
            ),
            (
                format!("[access]\njoin_tokens = [{{ sha256 = \"{h}\", clusters = [] }}]\n"),
                "access.join_tokens[0].clusters",
            ),
        ] {
            let e = Config::from_toml(&toml).unwrap().validate().unwrap_err().to_string();
            assert!(e.contains(want), "{toml}: {e}");
        }
        // A key it does not know is refused, not read as "any cluster".
        let typo =
            format!("[access]\njoin_tokens = [{{ sha256 = \"{h}\", cluster = \"prod-eu\" }}]\n");
        assert!(Config::from_toml(&typo).is_err(), "{typo}");
    }

    #[test]
    fn env_overrides_win_and_bad_env_names_the_variable() {
        let env = |k: &str| match k {
            "LIFELINE_LISTEN" => Some("127.0.0.1:18080".to_string()),
            "LIFELINE_AUTH_SERVERS" => Some("a=127.0.0.1:1, b=127.0.0.1:2".to_string()),
            _ => None,
        };
        let cfg = Config::load(None, env).unwrap();
        assert_eq!(cfg.server.listen, ([127, 0, 0, 1], 18080).into());
        assert_eq!(cfg.auth_servers.len(), 2);
        assert_eq!(cfg.auth_servers[1].name, "b");

        let env = |k: &str| (k == "LIFELINE_RETENTION").then(|| "forever".to_string());
        let err = Config::load(None, env).unwrap_err().to_string();
        assert!(err.contains("LIFELINE_RETENTION"), "{err}");
        Config::load(None, no_env).unwrap();
    }

    #[test]
    fn signal_settings_are_validated_and_overridable() {
        let e = Config::from_toml("[signals]\nstorm_share = 1.5\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("signals.storm_share"), "{e}");
        let c = Config::from_toml("[signals]\nstorm_share = 0.0\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("signals.storm_share"), "{e}");
        let c = Config::from_toml("[signals]\nreconnect_interval = \"off\"\n").unwrap();
        assert_eq!(
            c.signals.reconnect_interval, None,
            "the file says off as the variable does"
        );
        let c = Config::from_toml("[signals]\nreconnect_interval = \"100ms\"\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("signals.reconnect_interval"), "{e}");
        let c = Config::load(None, |k| match k {
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
        let e = Config::load(None, |k| {
            (k == "LIFELINE_AUTO_RECONNECT").then(|| "maybe".into())
        })
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
        assert_eq!(
            c.lb_policy().unwrap().mode,
            crate::domain::LbMode::Reconnect
        );
        let c = Config::from_toml("[signals]\ngrpc_client_lb_policy = '{nope'\n").unwrap();
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("signals.grpc_client_lb_policy"), "{e}");
        let env = |k: &str| (k == "LIFELINE_GRPC_CLIENT_LB_POLICY").then(|| "[]".to_string());
        let e = Config::load(None, env).unwrap_err().to_string();
        assert!(e.contains("LIFELINE_GRPC_CLIENT_LB_POLICY"), "{e}");
    }

    /// Guards provenance: each value set by the file or a variable knows
    /// which; a variable wins over the file; defaults have no source.
    #[test]
    fn each_value_knows_where_it_came_from() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lifeline.toml");
        std::fs::write(
            &path,
            "[storage]\nretention = \"2h\"\n[signals]\nauto_reconnect = false\n",
        )
        .unwrap();
        let env = |k: &str| match k {
            "LIFELINE_AUTO_RECONNECT" => Some("yes".to_string()),
            "LIFELINE_RECONNECT_INTERVAL" => Some("off".to_string()),
            "LIFELINE_LISTEN" => Some("127.0.0.1:1".to_string()),
            _ => None,
        };
        let c = Config::load(Some(&path), env).unwrap();
        assert!(c.signals.auto_reconnect, "the variable wins");
        assert_eq!(c.storage.retention, Duration::from_secs(7200));
        let file = format!("TOML file {}", path.display());
        let cases = [
            ("storage.retention", Some(file.as_str())),
            (
                "signals.auto_reconnect",
                Some("environment variable LIFELINE_AUTO_RECONNECT"),
            ),
            (
                "signals.reconnect_interval",
                Some("environment variable LIFELINE_RECONNECT_INTERVAL"),
            ),
            (
                "server.listen",
                Some("environment variable LIFELINE_LISTEN"),
            ),
            ("storage.audit_retention", None),
        ];
        for (key, want) in cases {
            assert_eq!(c.source(key), want, "{key}");
        }
        let e = Config::load(Some(&dir.path().join("missing.toml")), no_env).unwrap_err();
        assert!(matches!(e, ConfigError::Read { .. }), "{e}");
        let e = Config::load(None, |k| (k == "LIFELINE_LISTEN").then(|| "nope".into()))
            .unwrap_err()
            .to_string();
        assert!(e.contains("LIFELINE_LISTEN"), "{e}");
    }

    #[test]
    fn the_alpn_upgrade_settings_need_tls_routing() {
        let teleport = |extra: &str| {
            Config::from_toml(&format!(
                "[cluster]\nsource = \"teleport\"\naddr = \"proxy.example.com:443\"\nidentity_file = \"/x/identity\"\n{extra}"
            ))
            .map_err(|e| e.to_string())?
            .validate()
            .map_err(|e| e.to_string())
        };
        let e = teleport("alpn_upgrade = \"always\"\n").unwrap_err();
        assert!(e.contains("cluster.alpn_upgrade"), "{e}");
        let e = teleport("proxy_ca_file = \"/x/ca.pem\"\n").unwrap_err();
        assert!(e.contains("cluster.proxy_ca_file"), "{e}");
        let e = teleport("alpn_upgrade = \"sometimes\"\n").unwrap_err();
        assert!(
            e.contains("cluster.alpn_upgrade"),
            "an unknown mode is named: {e}"
        );
        teleport("alpn_upgrade = \"never\"\n").unwrap();
        teleport(
            "tls_routing = true\ncluster_name = \"example.com\"\nalpn_upgrade = \"always\"\nproxy_ca_file = \"/x/ca.pem\"\n",
        )
        .unwrap();
        let env = |k: &str| (k == "LIFELINE_CLUSTER_ALPN_UPGRADE").then(|| "never".to_string());
        let cfg = Config::load(None, env).unwrap();
        assert_eq!(cfg.cluster.alpn_upgrade, AlpnUpgrade::Never);
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
