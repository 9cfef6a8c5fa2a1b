//! The command line's arguments: subcommands and their options, as clap
//! reads them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};

use lifeline::config::{Role, SourceKind};
use lifeline::telemetry::LogFormat;

/// Lifeline: finds agents stranded by unhealthy auth servers or proxies.
#[derive(Parser)]
#[command(name = "lifeline", version, about)]
pub struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub cmd: Cmd,
}

/// The manual page (roff) of `lifeline`, or of one of its subcommands
/// (`lifeline-serve(1)`, which the first names), as `lifeline man
/// [SUBCOMMAND]` prints it and the packages install it. `None`: no such
/// subcommand.
pub fn man_page(subcommand: Option<&str>) -> Option<String> {
    let top = Cli::command();
    let cmd = match subcommand {
        None => top,
        Some(name) => {
            let sub = top
                .get_subcommands()
                .find(|c| c.get_name() == name && !c.is_hide_set())?
                .clone();
            let page = format!("lifeline-{name}");
            sub.name(page)
                .bin_name(format!("lifeline {name}"))
                .version(top.get_version().unwrap_or_default().to_string())
        }
    };
    let mut out = Vec::new();
    // Rendering into memory cannot fail on I/O.
    if let Err(e) = clap_mangen::Man::new(cmd).render(&mut out) {
        return Some(format!(
            ".\\\" the manual page could not be rendered: {e}\n"
        ));
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// The subcommands that have a manual page of their own.
pub fn man_subcommands() -> Vec<String> {
    Cli::command()
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| c.get_name().to_string())
        .collect()
}

/// `shell`'s completion script for `lifeline`.
pub fn completions(shell: clap_complete::Shell) -> String {
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "lifeline", &mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[derive(Subcommand)]
pub enum Cmd {
    /// Print the manual page (roff): `lifeline man | man -l -`.
    Man {
        /// A subcommand's own page instead (`lifeline man serve`).
        subcommand: Option<String>,
    },
    /// Print a completion script for a shell (bash, zsh, fish, elvish, powershell).
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Run against a real cluster, configured by a TOML file and LIFELINE_* variables.
    Serve {
        /// Config file (see lifeline.example.toml). Optional: defaults apply.
        #[arg(long, env = "LIFELINE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Validate a config file (with LIFELINE_* overrides) and print the result.
    CheckConfig {
        #[arg(long, env = "LIFELINE_CONFIG")]
        config: Option<PathBuf>,
    },
    /// Run Lifeline with a simulated cluster and chaos; dashboard on localhost.
    Demo(DemoArgs),
    /// Ask agents to reconnect through a running Lifeline's REST API, and
    /// print what became of each signal. Exits non-zero unless every signal
    /// was acked.
    Reconnect {
        /// The agent to move (omit with --stranded).
        #[arg(required_unless_present = "stranded", conflicts_with = "stranded")]
        agent: Option<String>,
        /// Every agent Lifeline currently counts as stranded.
        #[arg(long)]
        stranded: bool,
        /// The proxy whose tunnel the agent should leave (default: its least healthy).
        #[arg(long, conflicts_with = "stranded")]
        proxy: Option<String>,
        /// Why, for the audit log.
        #[arg(long)]
        reason: Option<String>,
        /// Lifeline's HTTP address.
        #[arg(long, env = "LIFELINE_SERVER", default_value = "http://127.0.0.1:8080")]
        server: String,
        /// How long to wait for the agents' acks.
        #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
        wait: Duration,
        /// API token with the update role.
        #[arg(long, env = "LIFELINE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// CA certificates (PEM) to trust for an https:// --server, besides
        /// the system's.
        #[arg(long, env = "LIFELINE_CA_FILE")]
        ca_file: Option<PathBuf>,
    },
    /// Read and change the dynamic settings of a running Lifeline (RFD 0016).
    Settings {
        #[command(subcommand)]
        op: SettingsOp,
        /// Lifeline's HTTP address.
        #[arg(
            long,
            global = true,
            env = "LIFELINE_SERVER",
            default_value = "http://127.0.0.1:8080"
        )]
        server: String,
        /// API token (read to get when reads need one; update to set and
        /// rm; also create with --confirm).
        #[arg(long, global = true, env = "LIFELINE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// CA certificates (PEM) to trust for an https:// --server, besides
        /// the system's.
        #[arg(long, global = true, env = "LIFELINE_CA_FILE")]
        ca_file: Option<PathBuf>,
    },
    /// Declare, end and list maintenance windows of a running Lifeline:
    /// while one is active, the strandings it explains are planned (shown,
    /// not acted on automatically, not notified).
    Maintenance {
        #[command(subcommand)]
        op: MaintenanceOp,
        /// Lifeline's HTTP address.
        #[arg(
            long,
            global = true,
            env = "LIFELINE_SERVER",
            default_value = "http://127.0.0.1:8080"
        )]
        server: String,
        /// API token (update to start and end; read to list when reads
        /// need one).
        #[arg(long, global = true, env = "LIFELINE_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// CA certificates (PEM) to trust for an https:// --server, besides
        /// the system's.
        #[arg(long, global = true, env = "LIFELINE_CA_FILE")]
        ca_file: Option<PathBuf>,
    },
    /// Print Prometheus alerting rules (YAML) over Lifeline's metrics.
    AlertRules {
        /// Config file, for `server.external_url`.
        #[arg(long, env = "LIFELINE_CONFIG")]
        config: Option<PathBuf>,
        /// Where the dashboard is reached (overrides server.external_url).
        #[arg(long)]
        external_url: Option<String>,
        /// How long a root cause may strand agents before it alerts.
        #[arg(long, default_value = "5m")]
        stranded_for: humantime::Duration,
        /// Print a Prometheus Operator PrometheusRule instead of a rules file.
        #[arg(long)]
        kubernetes: bool,
    },
    /// Print a Grafana dashboard (JSON, for import) over Lifeline's metrics.
    GrafanaDashboard {
        /// Config file, for `server.external_url`.
        #[arg(long, env = "LIFELINE_CONFIG")]
        config: Option<PathBuf>,
        /// Where the dashboard is reached (overrides server.external_url).
        #[arg(long)]
        external_url: Option<String>,
        /// Print a ConfigMap for Grafana's dashboard sidecar instead.
        #[arg(long)]
        kubernetes: bool,
    },
    /// Make API and join tokens.
    Token {
        #[command(subcommand)]
        op: TokenOp,
    },
}

#[derive(Subcommand)]
pub enum MaintenanceOp {
    /// Start a window (now, or at --from) for --for or until --until.
    Start {
        /// `proxy/NAME`, `auth_server/NAME` or `agent/NAME`; globs (`*`,
        /// `?`, `[a-z]`) allowed. Repeat for several.
        #[arg(long = "target", required = true)]
        targets: Vec<String>,
        /// How long it lasts from its start (`2h`, `30m`).
        #[arg(long = "for", value_parser = humantime::parse_duration, conflicts_with = "until", required_unless_present = "until")]
        length: Option<Duration>,
        /// When it ends (RFC 3339).
        #[arg(long)]
        until: Option<String>,
        /// When it starts (RFC 3339; default now).
        #[arg(long)]
        from: Option<String>,
        /// Why: shown on the dashboard and audited.
        #[arg(long)]
        reason: String,
        /// The window covers every agent or proxy (`agent/*`): say so.
        #[arg(long)]
        all: bool,
    },
    /// End a window now.
    End { id: i64 },
    /// Delete a window (its audit stays).
    Delete { id: i64 },
    /// List windows, newest first (only those not over, unless --all).
    List {
        #[arg(long)]
        all: bool,
    },
}

#[derive(Subcommand)]
pub enum SettingsOp {
    /// Show every setting, or one with its history.
    Get { name: Option<String> },
    /// Set a setting (origin becomes `dynamic`). The value is JSON when it
    /// parses as JSON (`true`, `0.3`, `{...}`), a string otherwise (`6h`).
    Set {
        name: String,
        value: String,
        /// Overwrite a value that is not the default.
        #[arg(short, long)]
        force: bool,
        /// With --force: overwrite a value the config file manages, until
        /// the next restart (needs the create role).
        #[arg(long, requires = "force")]
        confirm: bool,
    },
    /// Reset a setting to its default (refused for config-file settings).
    Rm { name: String },
}

#[derive(Subcommand)]
pub enum TokenOp {
    /// Print a new random token and the config lines that admit it (only
    /// its SHA-256 goes in the config file).
    New {
        /// The name the audit and the dashboard show.
        #[arg(long, default_value = "operator")]
        name: String,
        /// Roles (comma-separated).
        #[arg(long, value_enum, value_delimiter = ',', default_value = "read,update")]
        roles: Vec<Role>,
        /// Make an agents' join token instead of an API token.
        #[arg(long, conflicts_with_all = ["roles"])]
        join: bool,
    },
}

/// `lifeline demo`'s options.
#[derive(Args)]
pub struct DemoArgs {
    /// HTTP address (dashboard, API).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// gRPC address (agent signals, Lifeline's health).
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub grpc_listen: SocketAddr,
    #[arg(long, default_value_t = 200)]
    pub agents: usize,
    #[arg(long, default_value_t = 3)]
    pub proxies: usize,
    #[arg(long, default_value_t = 2)]
    pub auth_servers: usize,
    /// Announce TTL of proxies, auth servers and agents (e.g. 30s, 1m).
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
    /// Time between chaos steps; 0 turns chaos off.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub chaos_period: Duration,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// SQLite file for the demo.
    #[arg(long, default_value = "lifeline-demo.db")]
    pub db: PathBuf,
    /// The protocol the simulated cluster speaks: Lifeline's
    /// ClusterEvents, or Teleport's Auth API over mutual TLS.
    #[arg(long, value_enum, default_value = "lifeline")]
    pub source: SourceKind,
    /// Share of simulated agents that ignore discovery TTLs (they stay
    /// on a dead proxy until Lifeline signals them).
    #[arg(long, default_value_t = 0.2)]
    pub legacy_share: f64,
    /// Leave stranded agents for you to reconnect from the dashboard
    /// (automatic reconnects are on by default).
    #[arg(long)]
    pub no_auto_reconnect: bool,
    /// The API token to sign in with (all roles); a random one is made
    /// and printed when not given.
    #[arg(long, env = "LIFELINE_DEMO_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Serve the dashboard, API and gRPC over TLS, with a throwaway CA
    /// made for this run (written next to --db; printed at start).
    #[arg(long)]
    pub tls: bool,
    /// With --source teleport: the Teleport major version the
    /// simulated Auth plays. Before 18 it serves no grpc.health.v1
    /// (Lifeline falls back to each Auth's heartbeat), its INIT carries
    /// no WatchStatus, and a kind its role cannot read refuses the
    /// whole watch.
    #[arg(long, default_value_t = 18)]
    pub teleport_version: u32,
    /// A TOML file whose [notify] and [access] sections the demo uses
    /// (whom to tell, more tokens); any other section is refused.
    #[arg(long, env = "LIFELINE_CONFIG")]
    pub config: Option<PathBuf>,
}
