//! The `lifeline` command line. Parses arguments and calls into the library;
//! nothing else lives here.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use lifeline::app::Tuning;
use lifeline::bench::Export;
use lifeline::config::SourceKind;
use lifeline::config::{Config, Role, TelemetryConfig};
use lifeline::demo::{Demo, DemoOptions};
use lifeline::telemetry::sink::Sink;
use lifeline::telemetry::{self, LogFormat, OtlpSettings, Pipeline, SpanCounters};
use lifeline::{Clock, Lifeline};

/// jemalloc: every stage allocates a few small strings per event, most
/// freed on another thread (the store's rows on SQLite's); glibc's arenas
/// spend much of the ingest path on that, and fragment under it.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Lifeline: finds agents stranded by unhealthy auth servers or proxies.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
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
    Demo {
        /// HTTP address (dashboard, API).
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        /// gRPC address (agent signals, Lifeline's health).
        #[arg(long, default_value = "127.0.0.1:9090")]
        grpc_listen: SocketAddr,
        #[arg(long, default_value_t = 200)]
        agents: usize,
        #[arg(long, default_value_t = 3)]
        proxies: usize,
        #[arg(long, default_value_t = 2)]
        auth_servers: usize,
        /// Announce TTL of proxies, auth servers and agents (e.g. 30s, 1m).
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        ttl: Duration,
        /// Time between chaos steps; 0 turns chaos off.
        #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
        chaos_period: Duration,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// SQLite file for the demo.
        #[arg(long, default_value = "lifeline-demo.db")]
        db: PathBuf,
        /// The protocol the simulated cluster speaks: Lifeline's
        /// ClusterEvents, or Teleport's Auth API over mutual TLS.
        #[arg(long, value_enum, default_value = "lifeline")]
        source: SourceKind,
        /// Share of simulated agents that ignore discovery TTLs (they stay
        /// on a dead proxy until Lifeline signals them).
        #[arg(long, default_value_t = 0.2)]
        legacy_share: f64,
        /// Leave stranded agents for you to reconnect from the dashboard
        /// (automatic reconnects are on by default).
        #[arg(long)]
        no_auto_reconnect: bool,
        /// The API token to sign in with (all roles); a random one is made
        /// and printed when not given.
        #[arg(long, env = "LIFELINE_DEMO_TOKEN", hide_env_values = true)]
        token: Option<String>,
        /// Serve the dashboard, API and gRPC over TLS, with a throwaway CA
        /// made for this run (written next to --db; printed at start).
        #[arg(long)]
        tls: bool,
        /// With --source teleport: the Teleport major version the
        /// simulated Auth plays. Before 18 it serves no grpc.health.v1
        /// (Lifeline falls back to each Auth's heartbeat), its INIT carries
        /// no WatchStatus, and a kind its role cannot read refuses the
        /// whole watch.
        #[arg(long, default_value_t = 18)]
        teleport_version: u32,
    },
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
    },
    /// Print a Grafana dashboard (JSON, for import) over Lifeline's metrics.
    GrafanaDashboard {
        /// Config file, for `server.external_url`.
        #[arg(long, env = "LIFELINE_CONFIG")]
        config: Option<PathBuf>,
        /// Where the dashboard is reached (overrides server.external_url).
        #[arg(long)]
        external_url: Option<String>,
    },
    /// Make API and join tokens.
    Token {
        #[command(subcommand)]
        op: TokenOp,
    },
    /// Run a benchmark and print JSON (use a release build).
    Bench {
        #[command(subcommand)]
        scenario: lifeline::bench::Scenario,
    },
}

#[derive(Subcommand)]
enum SettingsOp {
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
enum TokenOp {
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

/// sysexits' EX_CONFIG: the configuration is at fault.
const EXIT_CONFIG: u8 = 78;
/// A critical task stopped (sysexits' EX_SOFTWARE): restart me.
const EXIT_TASK_FAILED: u8 = 70;

/// Runs until Ctrl-C / SIGTERM (exit 0) or until a critical task stops
/// (exit 70, so that a process supervisor restarts Lifeline).
async fn run_until_stopped(failed: lifeline::supervise::FailureWatch) -> ExitCode {
    tokio::select! {
        _ = wait_for_signal() => ExitCode::SUCCESS,
        f = failed.wait() => {
            eprintln!("lifeline: task {} stopped: {}; exiting", f.task, f.why);
            ExitCode::from(EXIT_TASK_FAILED)
        }
    }
}

fn load_config(path: Option<&PathBuf>) -> Result<Config, lifeline::config::ConfigError> {
    Config::load(path.map(|p| p.as_path()), |k| std::env::var(k).ok())
}

/// The dashboard's external URL: the flag, else the config's; `None`
/// (said on stderr) when either is wrong.
fn external_url_of(config: Option<&PathBuf>, flag: Option<String>) -> Option<String> {
    if let Some(u) = flag {
        return match lifeline::config::check_external_url(&u) {
            Ok(()) => Some(u.trim_end_matches('/').to_string()),
            Err(why) => {
                eprintln!("lifeline: --external-url: {why}");
                None
            }
        };
    }
    match load_config(config) {
        Ok(c) => Some(c.server.external_url()),
        Err(e) => {
            eprintln!("lifeline: {e}");
            None
        }
    }
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let quiet = matches!(cli.cmd, Cmd::Bench { .. });
    // `bench ingest` exports to a local receiver, with export switched off
    // until the legs that measure it.
    let bench_sink = match &cli.cmd {
        Cmd::Bench { scenario } if scenario.wants_export() => match Sink::start(0) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("lifeline: cannot start the local OTLP receiver: {e}");
                return ExitCode::FAILURE;
            }
        },
        _ => None,
    };
    // `serve` reads its config before logging starts: it configures export.
    let (telemetry_cfg, serve_cfg) = match &cli.cmd {
        Cmd::Serve { config } => match load_config(config.as_ref()) {
            Ok(c) => (Some(c.telemetry.clone()), Some(c)),
            Err(e) => {
                eprintln!("lifeline: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
        },
        Cmd::Demo { .. } => (Some(TelemetryConfig::default()), None),
        _ => (None, None),
    };
    let settings = match &bench_sink {
        Some(sink) => {
            telemetry::otlp::set_enabled(false);
            Ok(Some(OtlpSettings::to(sink.endpoint())))
        }
        None => telemetry_cfg
            .map(|t| OtlpSettings::resolve(&t, |k| std::env::var(k).ok()))
            .transpose()
            .map(Option::flatten),
    };
    let pipeline = match settings {
        Ok(Some(s)) => match Pipeline::start(&s) {
            Ok(p) => Some(p),
            Err(e @ telemetry::otlp::TelemetryError::CaFile { .. }) => {
                eprintln!("lifeline: {e}");
                return ExitCode::from(EXIT_CONFIG);
            }
            Err(e) => {
                eprintln!("lifeline: {e}");
                return ExitCode::FAILURE;
            }
        },
        Ok(None) => None,
        Err(e) => {
            eprintln!("lifeline: {e}");
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    telemetry::init(
        cli.log_format,
        if quiet {
            "warn"
        } else {
            telemetry::DEFAULT_FILTER
        },
        pipeline.as_ref(),
    );
    if let (Some(p), None) = (&pipeline, &bench_sink) {
        tracing::info!(endpoint = %p.endpoint, "exporting traces over OTLP/gRPC");
    }
    let spans = pipeline
        .as_ref()
        .map(Pipeline::counters)
        .unwrap_or_default();
    let code = match run(cli.cmd, serve_cfg, bench_sink.as_ref(), spans).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lifeline: {e:#}");
            ExitCode::FAILURE
        }
    };
    if let Some(p) = pipeline {
        // Flushes what is still queued; bounded by the export timeout.
        let _ = tokio::task::spawn_blocking(move || p.shutdown()).await;
    }
    code
}

async fn run(
    cmd: Cmd,
    serve_cfg: Option<Config>,
    bench_sink: Option<&Sink>,
    spans: Arc<SpanCounters>,
) -> anyhow::Result<ExitCode> {
    match cmd {
        Cmd::Serve { .. } => {
            let cfg = serve_cfg.context("config not loaded")?;
            let tuning = Tuning {
                spans,
                ..Tuning::default()
            };
            let ll = match Lifeline::start_tuned(&cfg, Clock::system(), tuning).await {
                Ok(ll) => ll,
                Err(e) if e.is_config() => {
                    eprintln!("lifeline: start-up failed: {e}");
                    return Ok(ExitCode::from(EXIT_CONFIG));
                }
                Err(e) => return Err(anyhow::Error::new(e).context("start-up failed")),
            };
            let base = ll.base_url();
            let grpc = if ll.tls { "gRPC over TLS" } else { "gRPC" };
            println!(
                "Lifeline: API {base}/api/v1/summary, dashboard {base}/, {grpc} {}",
                ll.grpc_addr
            );
            let code = run_until_stopped(ll.failed()).await;
            ll.shutdown().await;
            Ok(code)
        }
        Cmd::AlertRules {
            config,
            external_url,
            stranded_for,
        } => {
            let Some(url) = external_url_of(config.as_ref(), external_url) else {
                return Ok(ExitCode::from(EXIT_CONFIG));
            };
            let s = lifeline::telemetry::alerts::AlertSettings {
                external_url: url,
                stranded_for: stranded_for.into(),
            };
            print!("{}", lifeline::telemetry::alerts::rules_yaml(&s));
            Ok(ExitCode::SUCCESS)
        }
        Cmd::GrafanaDashboard {
            config,
            external_url,
        } => {
            let Some(url) = external_url_of(config.as_ref(), external_url) else {
                return Ok(ExitCode::from(EXIT_CONFIG));
            };
            let d = lifeline::telemetry::grafana::dashboard(&url);
            println!("{}", serde_json::to_string_pretty(&d)?);
            Ok(ExitCode::SUCCESS)
        }
        Cmd::CheckConfig { config } => {
            // The files it names are read as `serve` would: a certificate
            // that cannot serve is caught before a restart finds it.
            let checked = load_config(config.as_ref()).and_then(|c| {
                lifeline::tls::ServerTls::load(&c.server, Clock::system().now(), Arc::default())
                    .map(|_| c)
            });
            match checked {
                Ok(c) => {
                    println!("config OK: {c:#?}");
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("lifeline: {e}");
                    Ok(ExitCode::from(EXIT_CONFIG))
                }
            }
        }
        Cmd::Demo {
            listen,
            grpc_listen,
            agents,
            proxies,
            auth_servers,
            ttl,
            chaos_period,
            seed,
            db,
            source,
            legacy_share,
            no_auto_reconnect,
            token,
            tls,
            teleport_version,
        } => {
            let token = token.unwrap_or_else(lifeline::access::generate);
            anyhow::ensure!(!ttl.is_zero(), "--ttl must be greater than zero");
            anyhow::ensure!(
                (0.0..=1.0).contains(&legacy_share),
                "--legacy-share must be between 0 and 1"
            );
            let opts = DemoOptions {
                listen,
                grpc_listen,
                agents,
                proxies,
                auth_servers,
                ttl,
                chaos_period: (!chaos_period.is_zero()).then_some(chaos_period),
                seed,
                db,
                legacy_share,
                auto_reconnect: !no_auto_reconnect,
                token: token.clone(),
                spans,
                source,
                tls,
                teleport_version,
            };
            let demo = Demo::start(&opts, Clock::system())
                .await
                .context("demo start-up failed")?;
            let base = demo.lifeline.base_url();
            println!("Lifeline demo is running ({agents} agents, {proxies} proxies, {auth_servers} auth servers, TTL {}).", humantime::format_duration(ttl));
            println!("  dashboard  {base}/");
            println!("  API        {base}/api/v1/summary");
            println!("             {base}/api/v1/agents?state=stranded");
            println!(
                "  gRPC       {}{}",
                demo.lifeline.grpc_addr,
                if tls {
                    " (TLS; agents present client certificates)"
                } else {
                    ""
                }
            );
            println!("  cluster    {} (simulated)", demo.sim.uri());
            println!("  database   {}", opts.db.display());
            println!("  sign in    {base}/signin with token {token}");
            println!("             (CLI: export LIFELINE_TOKEN={token})");
            if let Some(ca) = &demo.ca_file {
                let ca = ca.display();
                println!("  TLS        a throwaway CA made for this run signed Lifeline's certificate; trust it:");
                println!("             curl --cacert {ca} {base}/api/v1/summary");
                println!(
                    "             lifeline reconnect --server {base} --ca-file {ca} --stranded"
                );
                println!("             browsers: import {ca} as an authority, or accept the warning once");
            }
            match opts.chaos_period {
                Some(p) => println!("Chaos every {}: a proxy stops heartbeating, an auth server turns NOT_SERVING, both heal.", humantime::format_duration(p)),
                None => println!("Chaos is off."),
            }
            println!("Press Ctrl-C to stop.");
            let code = run_until_stopped(demo.lifeline.failed()).await;
            demo.shutdown().await;
            Ok(code)
        }
        Cmd::Reconnect {
            agent,
            stranded,
            proxy,
            reason,
            server,
            wait,
            token,
            ca_file,
        } => {
            let client = lifeline::client::Client::new(&server, token, ca_file.as_deref())?;
            reconnect(&client, agent, stranded, proxy, reason, wait).await
        }
        Cmd::Settings {
            op,
            server,
            token,
            ca_file,
        } => {
            let client = lifeline::client::Client::new(&server, token, ca_file.as_deref())?;
            settings(&client, op).await
        }
        Cmd::Token { op } => {
            let TokenOp::New { name, roles, join } = op;
            token_new(&name, &roles, join)
        }
        Cmd::Bench { scenario } => {
            let export = bench_sink.map(|sink| Export {
                sink,
                spans: &spans,
            });
            let report = lifeline::bench::run(scenario, export).await?;
            println!("{}", serde_json::to_string_pretty(&report)?);
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn describe(s: &lifeline::client::SignalRecordIn) -> String {
    let mut line = format!("signal {} to {}: {}", s.id, s.agent, s.outcome);
    if let Some(ms) = s.latency_ms {
        line.push_str(&format!(" in {ms:.1} ms"));
    }
    if !s.detail.is_empty() {
        line.push_str(&format!(" ({})", s.detail));
    }
    line
}

async fn reconnect(
    client: &lifeline::client::Client,
    agent: Option<String>,
    stranded: bool,
    proxy: Option<String>,
    reason: Option<String>,
    wait: Duration,
) -> anyhow::Result<ExitCode> {
    let sent = if stranded {
        let r = client.reconnect_stranded(reason.as_deref()).await?;
        println!(
            "{} stranded agents; {} signalled, {} skipped",
            r.matched,
            r.signals.len(),
            r.skipped.len()
        );
        for s in &r.skipped {
            println!("skipped {}: {}", s.agent, s.reason);
        }
        r.signals
    } else {
        let agent = agent.context("name an agent or use --stranded")?;
        vec![
            client
                .reconnect(&agent, proxy.as_deref(), reason.as_deref())
                .await?,
        ]
    };
    let mut all_acked = true;
    for s in sent {
        let s = client.wait_final(s, wait).await?;
        println!("{}", describe(&s));
        all_acked &= s.outcome == "acked";
    }
    Ok(if all_acked {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

async fn settings(client: &lifeline::client::Client, op: SettingsOp) -> anyhow::Result<ExitCode> {
    let out = match op {
        SettingsOp::Get { name } => client.settings_get(name.as_deref()).await?,
        SettingsOp::Set {
            name,
            value,
            force,
            confirm,
        } => {
            let v = serde_json::from_str(&value).unwrap_or(serde_json::Value::String(value));
            client.settings_set(&name, v, force, confirm).await?
        }
        SettingsOp::Rm { name } => client.settings_rm(&name).await?,
    };
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(ExitCode::SUCCESS)
}

fn token_new(name: &str, roles: &[Role], join: bool) -> anyhow::Result<ExitCode> {
    let token = lifeline::access::generate();
    let hash = lifeline::access::hash_hex(&token);
    if join {
        println!("join token (give it to agents; it is shown only now):\n  {token}\n");
        println!("config lines:\n[access]\njoin_tokens = [\"{hash}\"]");
        return Ok(ExitCode::SUCCESS);
    }
    anyhow::ensure!(
        lifeline::config::valid_token_name(name),
        "--name {name:?}: {}",
        lifeline::config::TOKEN_NAME_RULE
    );
    let list: Vec<String> = roles.iter().map(|r| format!("{:?}", r.as_str())).collect();
    println!(
        "API token (send as `Authorization: Bearer <token>`; it is shown only now):\n  {token}\n"
    );
    println!(
        "config lines:\n[[access.tokens]]\nname = {name:?}\nsha256 = \"{hash}\"\nroles = [{}]",
        list.join(", ")
    );
    Ok(ExitCode::SUCCESS)
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}
