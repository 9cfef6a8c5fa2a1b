//! OTLP/gRPC trace export, off unless configured.
//!
//! Two tracer providers share one exporter thread: Lifeline's own (its
//! service name) feeds the `tracing` layer; the simulated agents' one
//! (`lifeline-sim-agent`) is the global OpenTelemetry provider, which the
//! simulator uses directly. The exporter's network I/O runs on its own
//! single-threaded runtime on a dedicated thread, and batches leave from the
//! SDK's batch thread: a slow or dead collector never holds a Lifeline task.
//! Finished spans wait in a bounded queue; beyond it they are dropped and
//! counted in the pipeline's own [`SpanCounters`], as are spans whose export
//! failed.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Context;
use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SdkTracer, SdkTracerProvider, Span, SpanData,
    SpanExporter, SpanProcessor,
};
use opentelemetry_sdk::Resource;
use tonic::transport::{Certificate, ClientTlsConfig};
use tracing::Level;
use tracing_subscriber::filter::{FilterExt, Targets};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::config::TelemetryConfig;

/// Service name of the simulated agents' spans (the demo's and the
/// benches' agents export through the second provider).
pub const SIM_SERVICE: &str = "lifeline-sim-agent";

/// What became of one pipeline's finished spans (rendered by `/metrics`).
#[derive(Debug, Default)]
pub struct SpanCounters {
    /// Spans the collector accepted.
    pub exported: AtomicU64,
    /// Spans in batches the collector refused or never answered.
    pub export_failed: AtomicU64,
    /// Spans dropped because the queue to the exporter was full.
    pub dropped_queue_full: AtomicU64,
    /// Spans waiting for the exporter now.
    pub queued: AtomicU64,
}

/// A pipeline was started in this process.
static STARTED: AtomicBool = AtomicBool::new(false);
/// Export switched on (the benchmark switches it off and on in one run).
static ENABLED: AtomicBool = AtomicBool::new(true);

/// True while spans are being exported: rooms skip building trace-only
/// spans (failure traces, signal spans) when nobody would receive them.
pub fn exporting() -> bool {
    STARTED.load(Ordering::Relaxed) && ENABLED.load(Ordering::Relaxed)
}

/// Switches export on or off without touching the pipeline (for `bench`).
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error("{var}: {message}")]
    Env { var: &'static str, message: String },
    #[error("cannot start the OTLP exporter for {endpoint}: {message}")]
    Exporter { endpoint: String, message: String },
    #[error("OTLP CA file {path}: {message}")]
    CaFile { path: String, message: String },
}

/// Where and how to export, resolved from the config file and the standard
/// `OTEL_*` variables (which win, so an operator can redirect or silence
/// export without editing the file).
#[derive(Clone, Debug)]
pub struct OtlpSettings {
    pub endpoint: String,
    /// CA certificates (PEM) trusted for an `https://` endpoint, besides
    /// the system's.
    pub ca_file: Option<std::path::PathBuf>,
    pub service_name: String,
    /// Root sampling ratio, unless `OTEL_TRACES_SAMPLER` is set (then the
    /// SDK reads it and its `_ARG`).
    pub sample_ratio: Option<f64>,
    pub max_queued_spans: usize,
    pub export_timeout: Duration,
    pub batch_delay: Duration,
}

impl OtlpSettings {
    /// `None` when export is off: no endpoint anywhere, `OTEL_SDK_DISABLED`
    /// is true, or `OTEL_TRACES_EXPORTER` is `none`.
    pub fn resolve(
        cfg: &TelemetryConfig,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<OtlpSettings>, TelemetryError> {
        let var = |k: &str| {
            env(k)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        if var("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        match var("OTEL_TRACES_EXPORTER").as_deref() {
            None | Some("otlp") => {}
            Some("none") => return Ok(None),
            Some(other) => {
                return Err(TelemetryError::Env {
                    var: "OTEL_TRACES_EXPORTER",
                    message: format!("{other:?} is not supported (otlp or none)"),
                })
            }
        }
        if let Some(p) =
            var("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
        {
            if p != "grpc" {
                return Err(TelemetryError::Env {
                    var: "OTEL_EXPORTER_OTLP_PROTOCOL",
                    message: format!("{p:?} is not supported: Lifeline exports OTLP over grpc"),
                });
            }
        }
        let endpoint = var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .or_else(|| var("OTEL_EXPORTER_OTLP_ENDPOINT"))
            .unwrap_or_else(|| cfg.otlp_endpoint.trim().to_string());
        if endpoint.is_empty() {
            return Ok(None);
        }
        match url::Url::parse(&endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(TelemetryError::Env {
                    var: "OTEL_EXPORTER_OTLP_ENDPOINT",
                    message: format!("{endpoint:?} is not an http(s)://host:port address"),
                })
            }
        }
        let ca_file = var("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE")
            .or_else(|| var("OTEL_EXPORTER_OTLP_CERTIFICATE"))
            .map(std::path::PathBuf::from)
            .or_else(|| cfg.otlp_ca_file.clone());
        let service_name = var("OTEL_SERVICE_NAME").unwrap_or_else(|| cfg.service_name.clone());
        let sample_ratio = match var("OTEL_TRACES_SAMPLER") {
            Some(_) => None,
            None => Some(cfg.sample_ratio.get()),
        };
        Ok(Some(OtlpSettings {
            endpoint,
            ca_file,
            service_name,
            sample_ratio,
            max_queued_spans: cfg.max_queued_spans,
            export_timeout: cfg.export_timeout,
            batch_delay: cfg.batch_delay,
        }))
    }

    /// Settings for a collector at `endpoint` (tests and benchmarks).
    pub fn to(endpoint: impl Into<String>) -> OtlpSettings {
        let d = TelemetryConfig::default();
        OtlpSettings {
            endpoint: endpoint.into(),
            ca_file: None,
            service_name: d.service_name,
            sample_ratio: Some(1.0),
            max_queued_spans: d.max_queued_spans,
            export_timeout: d.export_timeout,
            batch_delay: d.batch_delay,
        }
    }
}

/// TLS for an `https://` endpoint: the system's roots and `ca_file`'s.
fn tls_config(s: &OtlpSettings) -> Result<Option<ClientTlsConfig>, TelemetryError> {
    if !s.endpoint.starts_with("https://") {
        return Ok(None);
    }
    let mut tls = ClientTlsConfig::new().with_enabled_roots();
    if let Some(p) = &s.ca_file {
        let pem = std::fs::read(p).map_err(|e| TelemetryError::CaFile {
            path: p.display().to_string(),
            message: format!("cannot read it: {e}"),
        })?;
        if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
            return Err(TelemetryError::CaFile {
                path: p.display().to_string(),
                message: "holds no CERTIFICATE section".into(),
            });
        }
        tls = tls.ca_certificate(Certificate::from_pem(pem));
    }
    Ok(Some(tls))
}

/// A running export pipeline. Dropping it without [`Pipeline::shutdown`]
/// loses the spans still queued.
pub struct Pipeline {
    provider: SdkTracerProvider,
    sim_provider: SdkTracerProvider,
    tracer: SdkTracer,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
    counters: Arc<SpanCounters>,
    pub endpoint: String,
}

impl std::fmt::Debug for Pipeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pipeline")
            .field("endpoint", &self.endpoint)
            .finish()
    }
}

impl Pipeline {
    /// Starts the exporter thread and both providers, and makes the
    /// simulated agents' provider the global one.
    pub fn start(s: &OtlpSettings) -> Result<Pipeline, TelemetryError> {
        let tls = tls_config(s)?;
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let settings = s.clone();
        let thread = std::thread::Builder::new()
            .name("otlp-export".into())
            .spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let built = rt.block_on(async {
                    let build = || {
                        let b = opentelemetry_otlp::SpanExporter::builder()
                            .with_tonic()
                            .with_endpoint(settings.endpoint.clone())
                            .with_timeout(settings.export_timeout);
                        match &tls {
                            Some(t) => b.with_tls_config(t.clone()).build(),
                            None => b.build(),
                        }
                    };
                    Ok::<_, opentelemetry_otlp::ExporterBuildError>((build()?, build()?))
                });
                let _ = ready_tx.send(built.map_err(|e| e.to_string()));
                // Drives the exporters' connections until shutdown.
                rt.block_on(async {
                    let _ = stop_rx.await;
                });
            })
            .map_err(|e| TelemetryError::Exporter {
                endpoint: s.endpoint.clone(),
                message: e.to_string(),
            })?;
        let (own, sim) = ready_rx
            .recv()
            .map_err(|e| e.to_string())
            .and_then(|r| r)
            .map_err(|message| TelemetryError::Exporter {
                endpoint: s.endpoint.clone(),
                message,
            })?;
        let counters = Arc::new(SpanCounters::default());
        let provider = provider_named(s, &s.service_name, own, &counters);
        let sim_provider = provider_named(s, SIM_SERVICE, sim, &counters);
        let tracer = provider.tracer("lifeline");
        opentelemetry::global::set_tracer_provider(sim_provider.clone());
        STARTED.store(true, Ordering::Relaxed);
        Ok(Pipeline {
            provider,
            sim_provider,
            tracer,
            stop: Some(stop),
            thread: Some(thread),
            counters,
            endpoint: s.endpoint.clone(),
        })
    }

    /// The `tracing` layer that turns Lifeline's INFO spans (and tower-http's
    /// request spans) into exported spans.
    pub fn layer<S>(&self) -> impl Layer<S> + Send + Sync + use<S>
    where
        S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
    {
        let targets = Targets::new()
            .with_target("lifeline", Level::INFO)
            .with_target("tower_http", Level::INFO);
        tracing_opentelemetry::layer()
            .with_tracer(self.tracer.clone())
            .with_threads(false)
            .with_filter(targets.and(tracing_subscriber::filter::filter_fn(|_| {
                ENABLED.load(Ordering::Relaxed)
            })))
    }

    /// What became of this pipeline's spans.
    pub fn counters(&self) -> Arc<SpanCounters> {
        self.counters.clone()
    }

    /// Exports everything finished so far; blocks until the collector
    /// answered or the export timed out.
    pub fn flush(&self) {
        let _ = self.provider.force_flush();
        let _ = self.sim_provider.force_flush();
    }

    /// Flushes and stops. Blocks for at most about the export timeout.
    pub fn shutdown(mut self) {
        self.stop_now();
    }

    fn stop_now(&mut self) {
        if self.stop.is_none() {
            return;
        }
        let _ = self.provider.shutdown_with_timeout(Duration::from_secs(5));
        let _ = self
            .sim_provider
            .shutdown_with_timeout(Duration::from_secs(5));
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        STARTED.store(false, Ordering::Relaxed);
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        self.stop_now();
    }
}

fn provider_named<E: SpanExporter + 'static>(
    s: &OtlpSettings,
    name: &str,
    exporter: E,
    counters: &Arc<SpanCounters>,
) -> SdkTracerProvider {
    let cap = s.max_queued_spans.max(1);
    let batch = BatchSpanProcessor::builder(Counting {
        inner: exporter,
        counters: counters.clone(),
    })
    .with_batch_config(
        BatchConfigBuilder::default()
            // Ours bounds the queue; the SDK's never fills first.
            .with_max_queue_size(cap * 2)
            .with_max_export_batch_size(512.min(cap))
            .with_scheduled_delay(s.batch_delay)
            .build(),
    )
    .build();
    let mut b = SdkTracerProvider::builder()
        .with_span_processor(Bounded {
            inner: batch,
            cap: cap as u64,
            counters: counters.clone(),
        })
        .with_resource(
            Resource::builder()
                .with_service_name(name.to_string())
                .build(),
        );
    if let Some(r) = s.sample_ratio {
        b = b.with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            r.clamp(0.0, 1.0),
        ))));
    }
    b.build()
}

/// Counts what the exporter did with each batch.
#[derive(Debug)]
struct Counting<E> {
    inner: E,
    counters: Arc<SpanCounters>,
}

impl<E: SpanExporter> SpanExporter for Counting<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let r = self.inner.export(batch).await;
        let c = &self.counters;
        let _ = c
            .queued
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |q| {
                Some(q.saturating_sub(n))
            });
        match &r {
            Ok(()) => c.exported.fetch_add(n, Ordering::Relaxed),
            Err(_) => c.export_failed.fetch_add(n, Ordering::Relaxed),
        };
        r
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// Refuses spans beyond `cap` waiting for the exporter, and counts them.
#[derive(Debug)]
struct Bounded {
    inner: BatchSpanProcessor,
    cap: u64,
    counters: Arc<SpanCounters>,
}

impl SpanProcessor for Bounded {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        let c = &self.counters;
        if c.queued.fetch_add(1, Ordering::Relaxed) >= self.cap {
            c.queued.fetch_sub(1, Ordering::Relaxed);
            c.dropped_queue_full.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn resolve(file: &str, env: &[(&str, &str)]) -> Result<Option<OtlpSettings>, TelemetryError> {
        let cfg = TelemetryConfig {
            otlp_endpoint: file.into(),
            ..TelemetryConfig::default()
        };
        let env: HashMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        OtlpSettings::resolve(&cfg, |k| env.get(k).cloned())
    }

    #[test]
    fn off_unless_an_endpoint_is_set() {
        assert!(resolve("", &[]).unwrap().is_none());
        let s = resolve("http://collector:4317", &[]).unwrap().unwrap();
        assert_eq!(s.endpoint, "http://collector:4317");
        assert_eq!(s.service_name, "lifeline");
        assert_eq!(s.sample_ratio, Some(1.0));
    }

    #[test]
    fn the_standard_variables_win_over_the_file() {
        let s = resolve(
            "http://file:4317",
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
                ("OTEL_SERVICE_NAME", "lifeline-eu1"),
                ("OTEL_TRACES_SAMPLER", "traceidratio"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://env:4317");
        assert_eq!(s.service_name, "lifeline-eu1");
        assert_eq!(s.sample_ratio, None, "the SDK reads the sampler itself");
        let s = resolve(
            "",
            &[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4317"),
                ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317"),
            ],
        )
        .unwrap()
        .unwrap();
        assert_eq!(s.endpoint, "http://traces:4317");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert!(
                resolve("http://file:4317", &[off]).unwrap().is_none(),
                "{off:?}"
            );
        }
    }

    #[test]
    fn bad_settings_name_the_variable() {
        for (env, var) in [
            (
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4317"),
                "OTEL_EXPORTER_OTLP_ENDPOINT",
            ),
            (("OTEL_TRACES_EXPORTER", "zipkin"), "OTEL_TRACES_EXPORTER"),
            (
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
                "OTEL_EXPORTER_OTLP_PROTOCOL",
            ),
        ] {
            let e = resolve("http://file:4317", &[env]).unwrap_err().to_string();
            assert!(e.starts_with(var), "{e}");
        }
    }
}
