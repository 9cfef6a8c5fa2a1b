//! Lifeline's view of itself: logs (`tracing` with an env filter, text or
//! JSON lines carrying trace ids), OpenTelemetry trace export over OTLP/gRPC
//! (`otlp`), W3C trace context carried across signals (`propagate`), and a
//! small OTLP receiver the benchmark and tests export to (`sink`); and
//! what operators load beside it: Prometheus alert rules (`alerts`) and a
//! Grafana dashboard (`grafana`), built from the metric names `/metrics`
//! serves.
//!
//! Owns the process-wide subscriber and the export pipeline. Must not touch
//! fleet state, SQLite or agent streams: the rooms create their own spans;
//! this room only decides where they go. Prometheus metrics are rendered by
//! `http::metrics` from `stats`.

pub mod alerts;
pub mod grafana;
pub mod json;
pub mod otlp;
pub mod propagate;
pub mod sink;

use std::io::IsTerminal;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{fmt, EnvFilter, Layer};

pub use otlp::{exporting, OtlpSettings, Pipeline, SpanCounters};

pub const DEFAULT_FILTER: &str = "info,sqlx=warn,h2=warn,tower=warn,hyper=warn,tonic=warn";

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// The log filter: `LIFELINE_LOG`, then `RUST_LOG`, then `default_filter`.
fn log_filter(default_filter: &str) -> EnvFilter {
    std::env::var("LIFELINE_LOG")
        .ok()
        .or_else(|| std::env::var("RUST_LOG").ok())
        .and_then(|f| EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| EnvFilter::new(default_filter))
}

/// Installs the global subscriber: logs on stderr, and spans to `otel` when
/// export is configured. The log filter does not limit what is exported (and
/// the reverse): each layer has its own. Safe to call once per process.
pub fn init(format: LogFormat, default_filter: &str, otel: Option<&Pipeline>) {
    let logs = match format {
        LogFormat::Text => fmt::layer()
            .with_ansi(std::io::stderr().is_terminal())
            .with_writer(std::io::stderr)
            .with_filter(log_filter(default_filter))
            .boxed(),
        LogFormat::Json => fmt::layer()
            .fmt_fields(fmt::format::JsonFields::new())
            .event_format(json::JsonWithTrace::new())
            .with_writer(std::io::stderr)
            .with_filter(log_filter(default_filter))
            .boxed(),
    };
    let _ = tracing_subscriber::registry()
        .with(otel.map(|p| p.layer()))
        .with(logs)
        .try_init();
}
