//! `GET /metrics`: Prometheus text exposition of Lifeline's counters,
//! histograms and current-state gauges. Counters come from `stats` (one
//! atomic read each), gauges from the read model the fleet publishes; nothing here is labelled
//! with a name from the network, so cardinality is fixed.
//!
//! Each metric is declared once, below: its name, help and label names sit
//! together in one `family` call next to the values it takes. (Histograms
//! are declared where they are recorded, in `stats::Histograms`.)

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics::{describe_counter, describe_gauge, Label};
use std::sync::atomic::{AtomicU64, Ordering};

use super::error::ApiError;
use super::AppState;
use crate::fleet::view::Summary;
use crate::fleet::WatchState;
use crate::model::{Health, Kind, Op, RejectCode};
use crate::stats::{SignalKind, SignalOutcome, Stats};
use crate::telemetry::SpanCounters;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(s): State<AppState>) -> Result<Response, ApiError> {
    let published = s.fleet.recent().await?;
    let text = s.stats.hist.with_recorder(|| {
        state_gauges(&s, &published.summary);
        counters(&s.stats, &s.spans);
        s.stats.hist.render()
    });
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

/// One metric family, described as it is declared.
struct Family(&'static str);

fn gauge(name: &'static str, help: &'static str) -> Family {
    describe_gauge!(name, help);
    Family(name)
}

fn counter(name: &'static str, help: &'static str) -> Family {
    describe_counter!(name, help);
    Family(name)
}

fn labels(l: &[(&'static str, &'static str)]) -> Vec<Label> {
    l.iter().map(|(k, v)| Label::new(*k, *v)).collect()
}

impl Family {
    fn set(&self, l: &[(&'static str, &'static str)], v: f64) {
        metrics::gauge!(self.0, labels(l)).set(v);
    }

    fn total(&self, l: &[(&'static str, &'static str)], v: &AtomicU64) {
        metrics::counter!(self.0, labels(l)).absolute(v.load(Ordering::Relaxed));
    }
}

fn flag(on: bool) -> f64 {
    f64::from(u8::from(on))
}

fn state_gauges(s: &AppState, g: &Summary) {
    let f = gauge(
        "lifeline_agents",
        "Agents by state (healthy, degraded, stranded).",
    );
    for (state, n) in [
        ("healthy", g.agents.healthy),
        ("degraded", g.agents.degraded),
        ("stranded", g.agents.stranded),
    ] {
        f.set(&[("state", state)], n as f64);
    }
    gauge(
        "lifeline_agents_waiting_for_live_proxy",
        "Degraded or stranded agents with no live proxy to move to (not signalled until one turns live).",
    )
    .set(&[], g.agents.waiting_for_live_proxy as f64);
    let f = gauge("lifeline_proxies", "Proxies by status: live or expired.");
    f.set(&[("status", "live")], g.proxies.live as f64);
    f.set(&[("status", "expired")], g.proxies.expired as f64);
    let f = gauge("lifeline_auth_servers", "Auth servers by gRPC health.");
    for &h in Health::ALL {
        let n = g.auth_servers.get(h.as_str()).copied().unwrap_or(0);
        f.set(&[("health", h.as_str())], n as f64);
    }
    let state = gauge(
        "lifeline_watcher_state",
        "1 for each watched kind's current watcher state.",
    );
    let generation = gauge(
        "lifeline_watcher_generation",
        "Watch stream generation each kind was last listed in.",
    );
    for (kind, status) in &g.watcher.kinds {
        for &st in WatchState::ALL {
            state.set(
                &[("kind", *kind), ("state", st.as_str())],
                flag(status.state == st),
            );
        }
        generation.set(&[("kind", *kind)], status.generation as f64);
    }
    // The hub owns "connected": the fleet's links follow its streams.
    gauge(
        "lifeline_agent_streams",
        "Agents connected to AgentSignals.Connect.",
    )
    .set(&[], s.hub.connected() as f64);
    gauge(
        "lifeline_signals_in_flight",
        "Signals sent and awaiting an ack.",
    )
    .set(&[], s.hub.in_flight() as f64);
    let guard = s.guard.borrow().clone();
    gauge(
        "lifeline_storm_guard_paused",
        "1 while the storm guard pauses automatic reconnects.",
    )
    .set(&[], flag(guard.paused));
    gauge(
        "lifeline_storm_guard_stranded_in_window",
        "Agents that turned stranded within the storm window.",
    )
    .set(&[], guard.stranded_in_window as f64);
    gauge(
        "lifeline_agents_retrying",
        "Agents waiting for their next automatic reconnect.",
    )
    .set(&[], guard.agents_retrying as f64);
    gauge(
        "lifeline_store_failing",
        "1 while the database refuses writes (state and episodes are kept pending and retried).",
    )
    .set(&[], flag(s.store_health.is_failing()));
    gauge(
        "lifeline_task_failed",
        "1 once a critical task stopped (the process is exiting).",
    )
    .set(&[], flag(s.failure.get().is_some()));
    gauge(
        "lifeline_trace_spans_queued",
        "Finished spans waiting for the OTLP exporter.",
    )
    .set(&[], s.spans.queued.load(Ordering::Relaxed) as f64);
}

fn counters(st: &Stats, spans: &SpanCounters) {
    let f = counter(
        "lifeline_events_ingested_total",
        "Watcher events applied, by kind and type.",
    );
    for kind in Kind::ALL {
        for &op in Op::ALL {
            f.total(
                &[("kind", kind.as_str()), ("type", op.as_str())],
                &st.ingested[kind.index()][op as usize],
            );
        }
    }
    let f = counter(
        "lifeline_events_rejected_total",
        "Inputs refused, by reason.",
    );
    for &code in RejectCode::ALL {
        f.total(&[("reason", code.as_str())], &st.rejected[code as usize]);
    }
    for (name, help, c) in [
        (
            "lifeline_heartbeats_total",
            "PUTs that moved a resource's expiry.",
            &st.heartbeats,
        ),
        (
            "lifeline_watch_streams_opened_total",
            "Watch streams opened (each a new generation).",
            &st.watch_generations,
        ),
        (
            "lifeline_watch_stream_failures_total",
            "Watch streams lost.",
            &st.watch_failures,
        ),
        (
            "lifeline_health_stream_failures_total",
            "Auth server health streams lost.",
            &st.health_failures,
        ),
        (
            "lifeline_timers_fired_total",
            "Expiry and grace timers fired.",
            &st.timers_fired,
        ),
        (
            "lifeline_agent_state_changes_total",
            "Agent state changes.",
            &st.state_changes,
        ),
        (
            "lifeline_signal_audit_updates_dropped_total",
            "Signal audit updates lost because SQLite fell behind.",
            &st.signal_updates_dropped,
        ),
        (
            "lifeline_agent_messages_rejected_total",
            "Agent messages refused (bad Hello, report or ack).",
            &st.agent_messages_rejected,
        ),
        (
            "lifeline_agent_join_refused_total",
            "Agent signal streams refused for a missing or wrong join token.",
            &st.agent_join_refused,
        ),
        (
            "lifeline_probes_refused_total",
            "Virtual probes refused (target not allowed or a bad request).",
            &st.probes_refused,
        ),
        (
            "lifeline_store_batches_total",
            "SQLite write transactions committed.",
            &st.store_batches,
        ),
        (
            "lifeline_store_errors_total",
            "SQLite write transactions that failed.",
            &st.store_errors,
        ),
        (
            "lifeline_trace_spans_exported_total",
            "Spans the OTLP collector accepted.",
            &spans.exported,
        ),
    ] {
        counter(name, help).total(&[], c);
    }
    let f = counter(
        "lifeline_signals_total",
        "Audited signals by kind and outcome (sent counts queued ones; the rest are final).",
    );
    for &kind in SignalKind::ALL {
        for outcome in SignalOutcome::ALL {
            f.total(
                &[("kind", kind.as_str()), ("outcome", outcome.as_str())],
                &st.signals[kind as usize][outcome as usize],
            );
        }
    }
    let messages = counter(
        "lifeline_discovery_messages_total",
        "Discovery messages sent, by mode.",
    );
    let bytes = counter(
        "lifeline_discovery_bytes_total",
        "Encoded bytes of Discovery messages sent, by mode.",
    );
    messages.total(&[("mode", "full")], &st.discovery_full);
    messages.total(&[("mode", "delta")], &st.discovery_delta);
    bytes.total(&[("mode", "full")], &st.discovery_bytes_full);
    bytes.total(&[("mode", "delta")], &st.discovery_bytes_delta);
    let f = counter(
        "lifeline_http_refused_total",
        "HTTP requests refused: no or invalid token, a missing role, a manual reconnect too soon.",
    );
    f.total(&[("reason", "unauthenticated")], &st.http_unauthorized);
    f.total(&[("reason", "forbidden")], &st.http_forbidden);
    f.total(&[("reason", "rate_limited")], &st.http_rate_limited);
    let f = counter(
        "lifeline_probes_total",
        "Virtual probes answered, by kind and result.",
    );
    for (k, kind) in ["grpc", "tcp"].into_iter().enumerate() {
        for (r, result) in ["healthy", "unhealthy", "unknown"].into_iter().enumerate() {
            f.total(&[("kind", kind), ("result", result)], &st.probes[k][r]);
        }
    }
    let f = counter(
        "lifeline_store_history_rows_total",
        "History rows committed to SQLite or dropped.",
    );
    f.total(&[("outcome", "committed")], &st.store_events_committed);
    f.total(&[("outcome", "dropped")], &st.store_events_dropped);
    let f = counter(
        "lifeline_trace_spans_dropped_total",
        "Spans lost: queue full, or the export failed.",
    );
    f.total(&[("reason", "queue_full")], &spans.dropped_queue_full);
    f.total(&[("reason", "export_failed")], &spans.export_failed);
}
