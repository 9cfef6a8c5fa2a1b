//! The sidecar's configuration: a TOML file layered under
//! `LIFELINE_AGENT_*` variables (figment), checked field by field so that
//! every fault names its field. Owns nothing at run time.

use std::path::{Path, PathBuf};
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

/// Where Teleport keeps its state, and its host ID in it.
pub const TELEPORT_DATA_DIR: &str = "/var/lib/teleport";
/// The shipped systemd unit.
pub const TELEPORT_UNIT: &str = "teleport.service";
/// The PID file the shipped unit names.
pub const TELEPORT_PID_FILE: &str = "/run/teleport.pid";
/// Longest join token read from its file.
const MAX_TOKEN: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the configuration: {0}")]
    Load(String),
    #[error("{field}: {message}")]
    Invalid {
        field: &'static str,
        message: String,
    },
}

fn invalid(field: &'static str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        field,
        message: message.into(),
    }
}

/// How the sidecar restarts the agent beside it.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Method {
    /// `systemctl reload <unit>`: the shipped unit's `ExecReload` sends
    /// SIGHUP to the PID in its PID file.
    #[default]
    Systemd,
    /// SIGHUP to the PID in `pid_file`.
    Pidfile,
    /// A command of the operator's (`exec`).
    Exec,
}

/// One list or one comma-separated string (how an environment variable
/// says a list).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum List {
    One(String),
    Many(Vec<String>),
}

impl Default for List {
    fn default() -> Self {
        List::Many(Vec::new())
    }
}

impl List {
    fn items(&self) -> Vec<String> {
        match self {
            List::One(s) => s
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            List::Many(v) => v.clone(),
        }
    }
}

/// The file's shape (and each field's variable, `LIFELINE_AGENT_<FIELD>`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct FileConfig {
    /// Lifeline's gRPC addresses, one per replica (`https://host:port`).
    pub lifeline: List,
    /// The CA that signed Lifeline's certificate.
    pub ca_file: Option<PathBuf>,
    /// This host's client certificate and key, when Lifeline asks for one.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// The file holding the join token Lifeline gave this host.
    pub token_file: Option<PathBuf>,
    /// The name this sidecar speaks for: the Teleport host ID. Read from
    /// `<teleport_data_dir>/host_uuid` when not given.
    pub host_id: Option<String>,
    pub teleport_data_dir: PathBuf,
    pub restart: Method,
    /// The unit `systemctl reload` names (`restart = "systemd"`).
    pub unit: String,
    /// The `systemctl` binary.
    pub systemctl: PathBuf,
    /// The PID file (`restart = "pidfile"`, and to tell a new process).
    pub pid_file: PathBuf,
    /// The command that restarts the agent (`restart = "exec"`).
    pub exec: List,
    /// Teleport's diagnostic address (`--diag-addr`), whose `/readyz`
    /// says when the restarted process is ready. Without it,
    /// `teleport debug readyz` asks.
    pub diag_addr: Option<String>,
    /// The `teleport` binary, for `teleport debug readyz`.
    pub teleport_bin: PathBuf,
    /// How long the restarted process may take to report ready.
    #[serde(with = "humantime_serde")]
    pub ready_timeout: Duration,
    /// No second restart within this of the last.
    #[serde(with = "humantime_serde")]
    pub cooldown: Duration,
    /// How often the sidecar tells Lifeline what it reads of its agent.
    #[serde(with = "humantime_serde")]
    pub report_interval: Duration,
    /// Only say what a restart would do.
    pub dry_run: bool,
}

impl Default for FileConfig {
    fn default() -> Self {
        FileConfig {
            lifeline: List::default(),
            ca_file: None,
            client_cert: None,
            client_key: None,
            token_file: None,
            host_id: None,
            teleport_data_dir: PathBuf::from(TELEPORT_DATA_DIR),
            restart: Method::Systemd,
            unit: TELEPORT_UNIT.into(),
            systemctl: PathBuf::from("systemctl"),
            pid_file: PathBuf::from(TELEPORT_PID_FILE),
            exec: List::default(),
            diag_addr: None,
            teleport_bin: PathBuf::from("teleport"),
            ready_timeout: Duration::from_secs(120),
            cooldown: Duration::from_secs(600),
            report_interval: Duration::from_secs(30),
            dry_run: false,
        }
    }
}

/// The configuration, checked: what the sidecar runs with.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub lifeline: Vec<String>,
    pub ca_pem: Option<Vec<u8>>,
    /// Certificate and key, PEM.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    pub token: Option<String>,
    pub host_id: String,
    pub restart: Restart,
    pub pid_file: PathBuf,
    pub diag_addr: Option<String>,
    pub teleport_bin: PathBuf,
    pub ready_timeout: Duration,
    pub cooldown: Duration,
    pub report_interval: Duration,
    pub dry_run: bool,
}

/// The restart, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Restart {
    Systemd { unit: String, systemctl: PathBuf },
    Pidfile,
    Exec { argv: Vec<String> },
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Restart::Systemd { unit, .. } => write!(f, "systemd reload {unit}"),
            Restart::Pidfile => write!(f, "SIGHUP to the PID in its PID file"),
            Restart::Exec { argv } => write!(f, "exec {}", argv.join(" ")),
        }
    }
}

impl FileConfig {
    /// The file (if any) under `LIFELINE_AGENT_*` variables.
    pub fn load(path: Option<&Path>) -> Result<FileConfig, ConfigError> {
        let mut fig = Figment::from(Serialized::defaults(FileConfig::default()));
        if let Some(p) = path {
            if !p.exists() {
                return Err(ConfigError::Load(format!("{} does not exist", p.display())));
            }
            fig = fig.merge(Toml::file(p));
        }
        fig.merge(Env::prefixed("LIFELINE_AGENT_").ignore(&["config", "log"]))
            .extract()
            .map_err(|e| ConfigError::Load(e.to_string()))
    }

    /// Checks every field and reads the files it names.
    pub fn check(self) -> Result<AgentConfig, ConfigError> {
        let lifeline = self.lifeline.items();
        if lifeline.is_empty() {
            return Err(invalid(
                "lifeline",
                "name at least one Lifeline gRPC address (https://host:port)",
            ));
        }
        for a in &lifeline {
            let uri: tonic::transport::Uri = a
                .parse()
                .map_err(|e| invalid("lifeline", format!("{a:?} is not an address: {e}")))?;
            if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
                return Err(invalid(
                    "lifeline",
                    format!("{a:?} must be https://host:port (http:// only on loopback tests)"),
                ));
            }
        }
        if self.ca_file.is_none() && lifeline.iter().any(|a| a.starts_with("https://")) {
            return Err(invalid(
                "ca_file",
                "name the CA that signed Lifeline's certificate (server.tls_cert)",
            ));
        }
        let read = |field: &'static str, p: &Path| {
            std::fs::read(p)
                .map_err(|e| invalid(field, format!("cannot read {}: {e}", p.display())))
        };
        let ca_pem = self
            .ca_file
            .as_deref()
            .map(|p| read("ca_file", p))
            .transpose()?;
        let client_identity = match (&self.client_cert, &self.client_key) {
            (Some(c), Some(k)) => Some((read("client_cert", c)?, read("client_key", k)?)),
            (None, None) => None,
            (Some(_), None) => return Err(invalid("client_key", "client_cert needs client_key")),
            (None, Some(_)) => return Err(invalid("client_cert", "client_key needs client_cert")),
        };
        let token = match &self.token_file {
            Some(p) => {
                let raw = read("token_file", p)?;
                let t = String::from_utf8(raw)
                    .map_err(|_| invalid("token_file", "the token is not UTF-8 text"))?
                    .trim()
                    .to_string();
                if t.is_empty() || t.len() > MAX_TOKEN || t.chars().any(|c| c.is_control()) {
                    return Err(invalid(
                        "token_file",
                        format!("the token must be 1..={MAX_TOKEN} printable characters"),
                    ));
                }
                Some(t)
            }
            None => None,
        };
        let host_id = match self.host_id.filter(|h| !h.trim().is_empty()) {
            Some(h) => h.trim().to_string(),
            None => {
                let p = self.teleport_data_dir.join("host_uuid");
                let raw = std::fs::read_to_string(&p).map_err(|e| {
                    invalid(
                        "host_id",
                        format!("not given, and cannot read Teleport's {}: {e}", p.display()),
                    )
                })?;
                raw.trim().to_string()
            }
        };
        if host_id.is_empty() || host_id.len() > 253 || host_id.chars().any(|c| c.is_control()) {
            return Err(invalid("host_id", "must be 1..=253 printable characters"));
        }
        let restart = match self.restart {
            Method::Systemd => {
                if self.unit.trim().is_empty() || self.unit.chars().any(|c| c.is_control()) {
                    return Err(invalid("unit", "must name a systemd unit"));
                }
                Restart::Systemd {
                    unit: self.unit,
                    systemctl: self.systemctl,
                }
            }
            Method::Pidfile => Restart::Pidfile,
            Method::Exec => {
                let argv = self.exec.items();
                if argv.is_empty() {
                    return Err(invalid(
                        "exec",
                        "restart = \"exec\" needs the command, e.g. exec = [\"/usr/local/bin/restart-teleport\"]",
                    ));
                }
                Restart::Exec { argv }
            }
        };
        if let Some(d) = &self.diag_addr {
            d.parse::<std::net::SocketAddr>().map_err(|e| {
                invalid("diag_addr", format!("{d:?} is not host:port (an IP): {e}"))
            })?;
        }
        let positive = |field: &'static str, d: Duration| {
            if d.is_zero() {
                Err(invalid(field, "must be more than 0"))
            } else {
                Ok(d)
            }
        };
        Ok(AgentConfig {
            lifeline,
            ca_pem,
            client_identity,
            token,
            host_id,
            restart,
            pid_file: self.pid_file,
            diag_addr: self.diag_addr,
            teleport_bin: self.teleport_bin,
            ready_timeout: positive("ready_timeout", self.ready_timeout)?,
            cooldown: self.cooldown,
            report_interval: positive("report_interval", self.report_interval)?,
            dry_run: self.dry_run,
        })
    }
}
