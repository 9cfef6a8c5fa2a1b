//! Running a subcommand: configuration and telemetry first, then the
//! server, the demo or a client of a running Lifeline; the exit codes a
//! supervisor reads.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;

use super::args::{Cli, Cmd, TokenOp};
use super::remote;
use super::stop::run_until_stopped;
use lifeline::app::Tuning;
use lifeline::config::{Config, TelemetryConfig};
use lifeline::telemetry::{self, OtlpSettings, Pipeline, SpanCounters};
use lifeline::{Clock, Lifeline};

/// sysexits' EX_CONFIG: the configuration is at fault.
const EXIT_CONFIG: u8 = 78;
/// sysexits' EX_USAGE: the command line is at fault.
const EXIT_USAGE: u8 = 64;
/// Each SIGHUP has the TLS certificate and the cluster identity read again
/// now (systemd's `ExecReload`); never returns.
async fn reread_on_hangup(ll: &Lifeline) {
    #[cfg(unix)]
    if let Ok(mut hup) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP: reading the TLS certificate and the cluster identity again");
            ll.reread_files();
        }
    }
    std::future::pending::<()>().await
}

fn load_config(path: Option<&PathBuf>) -> Result<Config, lifeline::config::ConfigError> {
    Config::load(path.map(|p| p.as_path()), |k| std::env::var(k).ok())
}

/// An error and its causes, each said once: a cause whose words its
/// error already says (a message that ends with `: {source}`) is not
/// repeated.
fn causes(e: &anyhow::Error) -> String {
    let mut said = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if said.is_empty() {
            said = text;
        } else if !said.contains(&text) {
            said.push_str(": ");
            said.push_str(&text);
        }
    }
    said
}

/// Writes `text` to stdout. A reader that went away (`| head`) ends the
/// command quietly, as it does any Unix filter; another failure says so.
fn emit(text: &str) -> ExitCode {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lifeline: writing to stdout: {e}");
            ExitCode::FAILURE
        }
    }
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

/// What `lifeline` does with its arguments: sets up logging and trace
/// export, runs the subcommand, flushes what is still queued, and says how
/// it ended in the exit code.
pub async fn main(cli: Cli) -> ExitCode {
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
    let settings = telemetry_cfg
        .map(|t| OtlpSettings::resolve(&t, |k| std::env::var(k).ok()))
        .transpose()
        .map(Option::flatten);
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
    telemetry::init(cli.log_format, telemetry::DEFAULT_FILTER, pipeline.as_ref());
    if let Some(p) = &pipeline {
        tracing::info!(endpoint = %p.endpoint, "exporting traces over OTLP/gRPC");
    }
    let spans = pipeline
        .as_ref()
        .map(Pipeline::counters)
        .unwrap_or_default();
    let code = match run(cli.cmd, serve_cfg, spans).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("lifeline: {}", causes(&e));
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
                    let e = anyhow::Error::new(e);
                    eprintln!("lifeline: start-up failed: {}", causes(&e));
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
            let code = tokio::select! {
                code = run_until_stopped(ll.failed()) => code,
                () = reread_on_hangup(&ll) => ExitCode::SUCCESS,
            };
            ll.shutdown().await;
            Ok(code)
        }
        Cmd::AlertRules {
            config,
            external_url,
            stranded_for,
            kubernetes,
        } => {
            let Some(url) = external_url_of(config.as_ref(), external_url) else {
                return Ok(ExitCode::from(EXIT_CONFIG));
            };
            let s = lifeline::telemetry::alerts::AlertSettings {
                external_url: url,
                stranded_for: stranded_for.into(),
            };
            let out = if kubernetes {
                lifeline::telemetry::alerts::prometheus_rule_yaml(&s)
            } else {
                lifeline::telemetry::alerts::rules_yaml(&s)
            };
            Ok(emit(&out))
        }
        Cmd::GrafanaDashboard {
            config,
            external_url,
            kubernetes,
        } => {
            let Some(url) = external_url_of(config.as_ref(), external_url) else {
                return Ok(ExitCode::from(EXIT_CONFIG));
            };
            let out = if kubernetes {
                lifeline::telemetry::grafana::configmap_yaml(&url)
            } else {
                let d = lifeline::telemetry::grafana::dashboard(&url);
                format!("{}\n", serde_json::to_string_pretty(&d)?)
            };
            Ok(emit(&out))
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
                    let shown = c.to_toml().context("showing the configuration as TOML")?;
                    let mut head = String::from(
                        "# config OK: the effective configuration, defaults included, secrets redacted\n",
                    );
                    for cluster in c.clusters() {
                        let source = toml::Value::try_from(cluster.source)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default();
                        head.push_str(&format!(
                            "# watches cluster {:?}: {source} at {}\n",
                            cluster.name, cluster.addr
                        ));
                    }
                    Ok(emit(&format!("{head}{shown}")))
                }
                Err(e) => {
                    eprintln!("lifeline: {e}");
                    Ok(ExitCode::from(EXIT_CONFIG))
                }
            }
        }
        Cmd::Demo(args) => super::demo::run(args, spans).await,
        Cmd::Man { subcommand } => match super::args::man_page(subcommand.as_deref()) {
            Some(page) => Ok(emit(&page)),
            None => {
                eprintln!(
                    "lifeline: no manual page for {:?}; the subcommands are: {}",
                    subcommand.unwrap_or_default(),
                    super::args::man_subcommands().join(", ")
                );
                Ok(ExitCode::from(EXIT_USAGE))
            }
        },
        Cmd::Completions { shell } => Ok(emit(&super::args::completions(shell))),
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
            let client = super::client::Client::new(&server, token, ca_file.as_deref())?;
            remote::reconnect(&client, agent, stranded, proxy, reason, wait).await
        }
        Cmd::Settings {
            op,
            server,
            token,
            ca_file,
        } => {
            let client = super::client::Client::new(&server, token, ca_file.as_deref())?;
            remote::settings(&client, op).await
        }
        Cmd::Maintenance {
            op,
            server,
            token,
            ca_file,
        } => {
            let client = super::client::Client::new(&server, token, ca_file.as_deref())?;
            remote::maintenance(&client, op).await
        }
        Cmd::Token { op } => {
            let TokenOp::New { name, roles, join } = op;
            remote::token_new(&name, &roles, join)
        }
    }
}
