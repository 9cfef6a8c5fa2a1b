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
    /// Eviction of each pod of a StatefulSet (Teleport's kube agents).
    Kubernetes,
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
    /// When not given: systemd's credential `host_uuid`
    /// (`$CREDENTIALS_DIRECTORY/host_uuid`, `LoadCredential=` in the unit),
    /// else `<teleport_data_dir>/host_uuid`.
    pub host_id: Option<String>,
    /// The cluster this host's agent is of, by Lifeline's name for it
    /// (its `[[clusters]]` `name`, as `/api/v1/clusters` lists it). Unset:
    /// the one cluster Lifeline watches. Lifeline refuses a stream naming
    /// a cluster it does not watch, or one the join token is not for.
    pub cluster: Option<String>,
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
    /// `restart = "kubernetes"`: the agents' StatefulSet (the
    /// `teleport-kube-agent` chart's release name).
    pub statefulset: String,
    /// Its namespace; unset: this pod's own.
    pub namespace: Option<String>,
    /// The API server; unset: this pod's service account (or KUBECONFIG).
    pub kube_api: Option<String>,
    /// The Teleport container in each pod.
    pub container: String,
    /// Teleport's diagnostic port in each pod (`/readyz`); 0: only the
    /// pod's Ready condition.
    pub diag_port: u16,
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
            cluster: None,
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
            statefulset: String::new(),
            namespace: None,
            kube_api: None,
            container: "teleport".into(),
            diag_port: 3000,
        }
    }
}

/// The files the sidecar proves itself with. tbot and cert-manager rotate
/// them in place, so they are read again at every dial, never kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Credentials {
    pub ca_file: Option<PathBuf>,
    /// Certificate and key.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    pub token_file: Option<PathBuf>,
}

/// What [`Credentials`] held when last read.
#[derive(Clone, Debug, Default)]
pub struct Loaded {
    pub ca_pem: Option<Vec<u8>>,
    /// Certificate and key, PEM.
    pub client_identity: Option<(Vec<u8>, Vec<u8>)>,
    pub token: Option<String>,
}

/// Largest certificate, key or CA file read.
const MAX_PEM: u64 = 1 << 20;

fn read_bounded(field: &'static str, p: &Path, max: u64) -> Result<Vec<u8>, ConfigError> {
    use std::io::Read;
    let f = std::fs::File::open(p)
        .map_err(|e| invalid(field, format!("cannot read {}: {e}", p.display())))?;
    let mut buf = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut buf)
        .map_err(|e| invalid(field, format!("cannot read {}: {e}", p.display())))?;
    if buf.len() as u64 > max {
        return Err(invalid(
            field,
            format!("{} is larger than {max} bytes", p.display()),
        ));
    }
    Ok(buf)
}

impl Credentials {
    /// Reads every file now.
    pub fn load(&self) -> Result<Loaded, ConfigError> {
        let ca_pem = self
            .ca_file
            .as_deref()
            .map(|p| read_bounded("ca_file", p, MAX_PEM))
            .transpose()?;
        let client_identity = match &self.client_identity {
            Some((c, k)) => Some((
                read_bounded("client_cert", c, MAX_PEM)?,
                read_bounded("client_key", k, MAX_PEM)?,
            )),
            None => None,
        };
        let token = match &self.token_file {
            Some(p) => {
                let raw = read_bounded("token_file", p, MAX_TOKEN as u64 + 2)?;
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
        Ok(Loaded {
            ca_pem,
            client_identity,
            token,
        })
    }
}

/// Bounds of each duration: a value outside them is refused at start
/// rather than overflowing a deadline later.
pub const READY_TIMEOUT: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3600));
pub const COOLDOWN: (Duration, Duration) = (Duration::ZERO, Duration::from_secs(7 * 24 * 3600));
pub const REPORT_INTERVAL: (Duration, Duration) =
    (Duration::from_millis(100), Duration::from_secs(3600));

fn bounded(
    field: &'static str,
    d: Duration,
    (lo, hi): (Duration, Duration),
) -> Result<Duration, ConfigError> {
    if d < lo || d > hi {
        return Err(invalid(
            field,
            format!(
                "{} is out of bounds: {} to {}",
                humantime::format_duration(d),
                humantime::format_duration(lo),
                humantime::format_duration(hi)
            ),
        ));
    }
    Ok(d)
}

/// Whether `host` (a URI's) is this machine: `localhost` or a loopback IP.
fn loopback(host: &str) -> bool {
    let h = host.trim_start_matches('[').trim_end_matches(']');
    h.eq_ignore_ascii_case("localhost")
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// The configuration, checked: what the sidecar runs with.
#[derive(Clone, Debug)]
pub struct AgentConfig {
    pub lifeline: Vec<String>,
    pub credentials: Credentials,
    pub host_id: String,
    /// Empty: the one cluster Lifeline watches.
    pub cluster: String,
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
    Kubernetes(KubeTarget),
}

/// The StatefulSet whose pods `restart = "kubernetes"` evicts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KubeTarget {
    pub statefulset: String,
    pub namespace: Option<String>,
    pub api: Option<String>,
    pub container: String,
    pub diag_port: u16,
}

/// Whether `s` is a Kubernetes object name (RFC 1123 subdomain: lowercase
/// letters, digits, `-` and `.`, neither first nor last, at most 253): the
/// config's names and the API's own, before either reaches an API path.
pub fn is_object_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && !s.starts_with(['-', '.'])
        && !s.ends_with(['-', '.'])
}

/// Whether `s` follows Lifeline's rule for a cluster's name.
pub fn is_cluster_name(s: &str) -> bool {
    s.len() <= 63
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Longest host ID (a DNS name's length).
pub const MAX_HOST_ID: usize = 253;

/// Whether `s` may be a Teleport host ID: 1..=253 bytes, no control
/// characters (the config's `host_id`, a `host_uuid` file, a pod's Secret).
/// Most bytes read of a `host_uuid` file.
const MAX_HOST_ID_FILE: u64 = 4096;

/// The host ID when the config gives none: systemd's credential
/// (`LoadCredential=host_uuid:/var/lib/teleport/host_uuid`, read by the
/// service manager as root and handed to this unprivileged service under
/// `$CREDENTIALS_DIRECTORY`), else Teleport's own file, which Teleport
/// writes 0400 as root.
pub fn host_id_from_files(
    credentials: Option<&std::path::Path>,
    data_dir: &std::path::Path,
) -> Result<String, ConfigError> {
    let read = |p: &std::path::Path| -> std::io::Result<String> {
        use std::io::Read;
        let mut text = String::new();
        std::fs::File::open(p)?
            .take(MAX_HOST_ID_FILE)
            .read_to_string(&mut text)?;
        Ok(text.trim().to_string())
    };
    if let Some(dir) = credentials {
        let p = dir.join("host_uuid");
        match read(&p) {
            Ok(id) => return Ok(id),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(invalid(
                    "host_id",
                    format!(
                        "not given, and systemd's credential {} cannot be read: {e}",
                        p.display()
                    ),
                ))
            }
        }
    }
    let p = data_dir.join("host_uuid");
    read(&p).map_err(|e| {
        let hint = if e.kind() == std::io::ErrorKind::PermissionDenied {
            " (Teleport writes it 0400 as root: give it to this service with LoadCredential=host_uuid:"
                .to_string()
                + &p.display().to_string()
                + " in its unit, as the package's does, or set host_id)"
        } else {
            String::new()
        };
        invalid(
            "host_id",
            format!("not given, and cannot read Teleport's {}: {e}{hint}", p.display()),
        )
    })
}

pub fn is_host_id(s: &str) -> bool {
    !s.is_empty() && s.len() <= MAX_HOST_ID && !s.chars().any(char::is_control)
}

/// `s` as an `http(s)://host` URL for `field`; plain `http://` only to
/// this machine (`why_https` says what needs the TLS elsewhere).
fn check_url(field: &'static str, s: &str, why_https: &str) -> Result<(), ConfigError> {
    let uri: tonic::transport::Uri = s
        .parse()
        .map_err(|e| invalid(field, format!("{s:?} is not an address: {e}")))?;
    if !matches!(uri.scheme_str(), Some("https" | "http")) || uri.host().is_none() {
        return Err(invalid(
            field,
            format!("{s:?} must be https://host:port (http:// only on loopback)"),
        ));
    }
    if uri.scheme_str() == Some("http") && !uri.host().is_some_and(loopback) {
        return Err(invalid(
            field,
            format!("{s:?}: http:// only to this machine (localhost, 127.0.0.1, ::1); {why_https}"),
        ));
    }
    Ok(())
}

/// A Kubernetes object name (RFC 1123 label or subdomain: lowercase
/// letters, digits, `-` and `.`, at most 253).
fn object_name(field: &'static str, s: &str) -> Result<(), ConfigError> {
    if is_object_name(s) {
        Ok(())
    } else {
        Err(invalid(
            field,
            format!(
                "{s:?} is not a Kubernetes name (lowercase letters, digits, '-', '.'; at most 253)"
            ),
        ))
    }
}

impl std::fmt::Display for Restart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Restart::Systemd { unit, .. } => write!(f, "systemd reload {unit}"),
            Restart::Pidfile => write!(f, "SIGHUP to the PID in its PID file"),
            Restart::Exec { argv } => write!(f, "exec {}", argv.join(" ")),
            Restart::Kubernetes(k) => write!(f, "eviction of StatefulSet {}'s pods", k.statefulset),
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
            check_url(
                "lifeline",
                a,
                "across a network the join token needs https://",
            )?;
        }
        if self.ca_file.is_none() && lifeline.iter().any(|a| a.starts_with("https://")) {
            return Err(invalid(
                "ca_file",
                "name the CA that signed Lifeline's certificate (server.tls_cert)",
            ));
        }
        let client_identity = match (self.client_cert, self.client_key) {
            (Some(c), Some(k)) => Some((c, k)),
            (None, None) => None,
            (Some(_), None) => return Err(invalid("client_key", "client_cert needs client_key")),
            (None, Some(_)) => return Err(invalid("client_cert", "client_key needs client_cert")),
        };
        let credentials = Credentials {
            ca_file: self.ca_file,
            client_identity,
            token_file: self.token_file,
        };
        // Read once now, so a fault is named at start; read again at
        // every dial.
        credentials.load()?;
        let kube = self.restart == Method::Kubernetes;
        let host_id = match self.host_id.filter(|h| !h.trim().is_empty()) {
            Some(_) if kube => {
                return Err(invalid(
                    "host_id",
                    "restart = \"kubernetes\" reads each pod's host ID from its state Secret: leave host_id out",
                ))
            }
            Some(h) => h.trim().to_string(),
            // Each pod's, read when its stream opens.
            None if kube => String::from("-"),
            None => host_id_from_files(
                std::env::var_os("CREDENTIALS_DIRECTORY").map(PathBuf::from).as_deref(),
                &self.teleport_data_dir,
            )?,
        };
        if !is_host_id(&host_id) {
            return Err(invalid(
                "host_id",
                format!("must be 1..={MAX_HOST_ID} printable characters"),
            ));
        }
        let cluster = self.cluster.unwrap_or_default().trim().to_string();
        if !cluster.is_empty() && !is_cluster_name(&cluster) {
            return Err(invalid(
                "cluster",
                "must be a cluster's name in Lifeline: 1 to 63 letters, digits, '-', '_' and '.', starting with a letter or digit",
            ));
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
            Method::Kubernetes if !cfg!(feature = "kubernetes") => {
                return Err(invalid(
                    "restart",
                    "\"kubernetes\" needs a lifeline-agent built with its kubernetes feature (the kube agents' image is; the Debian package is not)",
                ))
            }
            Method::Kubernetes => {
                object_name("statefulset", &self.statefulset)?;
                if let Some(ns) = &self.namespace {
                    object_name("namespace", ns)?;
                }
                if let Some(api) = &self.kube_api {
                    check_url("kube_api", api, "use https://, or kubectl proxy here")?;
                }
                if self.container.trim().is_empty()
                    || self.container.chars().any(|c| c.is_control())
                {
                    return Err(invalid("container", "name the Teleport container"));
                }
                Restart::Kubernetes(KubeTarget {
                    statefulset: self.statefulset,
                    namespace: self.namespace,
                    api: self.kube_api,
                    container: self.container,
                    diag_port: self.diag_port,
                })
            }
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
        // A restart is done only when a new PID turns ready: something
        // must name the PID.
        if !kube && self.diag_addr.is_none() && self.pid_file.as_os_str().is_empty() {
            return Err(invalid(
                "pid_file",
                "without diag_addr, the PID file is the only way to tell the restarted process from the old one: name it (or set diag_addr)",
            ));
        }
        if self.restart == Method::Pidfile && self.pid_file.as_os_str().is_empty() {
            return Err(invalid(
                "pid_file",
                "restart = \"pidfile\" needs the PID file",
            ));
        }
        if self.teleport_bin.as_os_str().is_empty() {
            return Err(invalid("teleport_bin", "name the teleport binary"));
        }
        Ok(AgentConfig {
            lifeline,
            credentials,
            host_id,
            cluster,
            restart,
            pid_file: self.pid_file,
            diag_addr: self.diag_addr,
            teleport_bin: self.teleport_bin,
            ready_timeout: bounded("ready_timeout", self.ready_timeout, READY_TIMEOUT)?,
            cooldown: bounded("cooldown", self.cooldown, COOLDOWN)?,
            report_interval: bounded("report_interval", self.report_interval, REPORT_INTERVAL)?,
            dry_run: self.dry_run,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> FileConfig {
        FileConfig {
            lifeline: List::One("http://127.0.0.1:9090".into()),
            host_id: Some("host-1".into()),
            ..FileConfig::default()
        }
    }

    /// systemd's credential comes first; without one, Teleport's own file;
    /// a file this user may not read names the way out.
    #[test]
    fn the_host_id_comes_from_systemds_credential_before_teleports_file() {
        use std::os::unix::fs::PermissionsExt;
        let data = tempfile::tempdir().expect("dir");
        let creds = tempfile::tempdir().expect("dir");
        std::fs::write(data.path().join("host_uuid"), "from-teleport\n").expect("write");
        std::fs::write(creds.path().join("host_uuid"), "from-credential\n").expect("write");
        assert_eq!(
            host_id_from_files(Some(creds.path()), data.path()).expect("id"),
            "from-credential"
        );
        // A credentials directory without it (another unit's credentials).
        let empty = tempfile::tempdir().expect("dir");
        assert_eq!(
            host_id_from_files(Some(empty.path()), data.path()).expect("id"),
            "from-teleport"
        );
        assert_eq!(
            host_id_from_files(None, data.path()).expect("id"),
            "from-teleport"
        );
        // Neither: the message says where it looked.
        let none = tempfile::tempdir().expect("dir");
        let e = host_id_from_files(None, none.path()).expect_err("nothing to read");
        assert!(e.to_string().contains("host_uuid"), "{e}");
        // A huge file is read only so far (and is then no host ID).
        std::fs::write(none.path().join("host_uuid"), "x".repeat(1 << 20)).expect("write");
        let id = host_id_from_files(None, none.path()).expect("read");
        assert_eq!(id.len(), MAX_HOST_ID_FILE as usize);
        assert!(!is_host_id(&id));
        // Unreadable (root reads anything, so only where not root).
        let locked = data.path().join("host_uuid");
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o000)).expect("chmod");
        if std::fs::read(&locked).is_err() {
            let e = host_id_from_files(None, data.path()).expect_err("unreadable");
            assert!(e.to_string().contains("LoadCredential=host_uuid:"), "{e}");
        }
    }

    fn field_of(e: ConfigError) -> &'static str {
        match e {
            ConfigError::Invalid { field, .. } => field,
            ConfigError::Load(m) => panic!("not a field's fault: {m}"),
        }
    }

    #[test]
    fn the_cluster_is_named_by_lifelines_rule_or_left_out() {
        let with = |c: Option<&str>| {
            FileConfig {
                cluster: c.map(String::from),
                ..base()
            }
            .check()
        };
        assert_eq!(with(None).expect("none").cluster, "");
        assert_eq!(with(Some(" prod-eu ")).expect("named").cluster, "prod-eu");
        for bad in ["-x", "a/b", "a\0b", &"a".repeat(64)] {
            assert_eq!(
                field_of(with(Some(bad)).expect_err(bad)),
                "cluster",
                "{bad:?}"
            );
        }
    }

    #[test]
    fn every_duration_has_bounds_and_a_fault_names_its_field() {
        let huge = Duration::from_secs(u64::MAX / 2);
        for (field, set) in [
            (
                "ready_timeout",
                (|f: &mut FileConfig, d| f.ready_timeout = d) as fn(&mut FileConfig, Duration),
            ),
            ("report_interval", |f, d| f.report_interval = d),
            ("cooldown", |f, d| f.cooldown = d),
        ] {
            let mut f = base();
            set(&mut f, huge);
            let e = f.check().expect_err("out of bounds");
            assert!(e.to_string().contains("out of bounds"), "{e}");
            assert_eq!(field_of(e), field);
        }
        for (field, set) in [
            (
                "ready_timeout",
                (|f: &mut FileConfig| f.ready_timeout = Duration::ZERO) as fn(&mut FileConfig),
            ),
            ("report_interval", |f| f.report_interval = Duration::ZERO),
        ] {
            let mut f = base();
            set(&mut f);
            assert_eq!(field_of(f.check().expect_err("zero")), field);
        }
        assert!(base().check().is_ok());
    }

    #[test]
    fn plain_http_only_to_this_machine() {
        for ok in [
            "http://127.0.0.1:1",
            "http://localhost:1",
            "http://[::1]:1",
            "http://127.9.9.9:1",
        ] {
            let f = FileConfig {
                lifeline: List::One(ok.into()),
                ..base()
            };
            assert!(f.check().is_ok(), "{ok}");
        }
        for bad in [
            "http://10.0.0.5:50051",
            "http://lifeline.example.com:50051",
            "http://[2001:db8::1]:1",
        ] {
            let f = FileConfig {
                lifeline: List::One(bad.into()),
                ..base()
            };
            let e = f.check().expect_err(bad).to_string();
            assert!(e.starts_with("lifeline:") && e.contains("https://"), "{e}");
        }
    }

    #[test]
    fn a_configuration_that_cannot_tell_a_new_process_is_refused() {
        let f = FileConfig {
            pid_file: PathBuf::new(),
            diag_addr: None,
            ..base()
        };
        assert_eq!(field_of(f.check().expect_err("no PID source")), "pid_file");
        let f = FileConfig {
            pid_file: PathBuf::new(),
            diag_addr: Some("127.0.0.1:3000".into()),
            ..base()
        };
        assert!(f.check().is_ok(), "/readyz names the PID");
    }

    #[test]
    fn credentials_are_read_again_at_every_load() {
        let d = tempfile::tempdir().unwrap();
        let token = d.path().join("token");
        let (cert, key) = (d.path().join("cert.pem"), d.path().join("key.pem"));
        std::fs::write(&token, "first\n").unwrap();
        std::fs::write(&cert, "cert-1").unwrap();
        std::fs::write(&key, "key-1").unwrap();
        let cfg = FileConfig {
            token_file: Some(token.clone()),
            client_cert: Some(cert.clone()),
            client_key: Some(key.clone()),
            ..base()
        }
        .check()
        .unwrap();
        let first = cfg.credentials.load().unwrap();
        assert_eq!(first.token.as_deref(), Some("first"));
        std::fs::write(&token, "second\n").unwrap();
        std::fs::write(&cert, "cert-2").unwrap();
        std::fs::write(&key, "key-2").unwrap();
        let second = cfg.credentials.load().unwrap();
        assert_eq!(second.token.as_deref(), Some("second"));
        assert_eq!(
            second.client_identity,
            Some((b"cert-2".to_vec(), b"key-2".to_vec()))
        );
        std::fs::write(&token, vec![b'x'; MAX_TOKEN + 10]).unwrap();
        assert_eq!(field_of(cfg.credentials.load().unwrap_err()), "token_file");
    }
}
