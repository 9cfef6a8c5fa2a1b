//! `[telemetry]`: trace export and self-observation.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid, positive, ConfigError, Ratio};

/// Trace export and self-observation. The standard `OTEL_*` variables win
/// over this section (see `telemetry::OtlpSettings::resolve`).
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// OTLP/gRPC collector, e.g. `http://127.0.0.1:4317`; empty: no export.
    /// Env: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub otlp_endpoint: String,
    /// CA certificates (PEM) to trust for an `https://` collector, besides
    /// the system's. Env: `OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE`,
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`.
    pub otlp_ca_file: Option<PathBuf>,
    /// Env: `OTEL_SERVICE_NAME`.
    pub service_name: String,
    /// Share of failure traces (and other roots) kept, 0..=1; children
    /// follow their root. Env: `OTEL_TRACES_SAMPLER` (+ `_ARG`).
    pub sample_ratio: Ratio,
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
            otlp_ca_file: None,
            service_name: "lifeline".into(),
            sample_ratio: Ratio::ONE,
            ingest_span_every: 1000,
            max_queued_spans: 8192,
            export_timeout: Duration::from_secs(5),
            batch_delay: Duration::from_secs(2),
        }
    }
}

impl TelemetryConfig {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.service_name.trim().is_empty() {
            return Err(invalid("telemetry.service_name", "must not be empty"));
        }
        if self.max_queued_spans == 0 {
            return Err(invalid("telemetry.max_queued_spans", "must be at least 1"));
        }
        positive("telemetry.export_timeout", self.export_timeout)?;
        positive("telemetry.batch_delay", self.batch_delay)?;
        let ep = self.otlp_endpoint.trim();
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
        Ok(())
    }
}
