//! `GET /metrics`: Prometheus text exposition of Lifeline's counters,
//! histograms and current-state gauges. Counters come from `stats` (one
//! atomic read each), gauges from one fleet read; nothing here is labelled
//! with a name from the network, so cardinality is fixed.

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use metrics::{counter, describe_counter, describe_gauge, gauge};
use std::sync::atomic::Ordering;

use super::error::ApiError;
use super::AppState;
use crate::fleet::view::Gauges;
use crate::fleet::WatchState;
use crate::model::Health;
use crate::model::RejectCode;
use crate::stats::{SignalKind, SignalOutcome, Stats};
use crate::telemetry::SPANS;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(s): State<AppState>) -> Result<Response, ApiError> {
    let g = s.fleet.gauges().await?;
    let guard = s.guard.borrow().clone();
    let (streams, in_flight) = (s.hub.connected(), s.hub.in_flight());
    s.stats.hist.describe_once(describe);
    let text = s.stats.hist.with_recorder(|| {
        current_state(&g);
        gauge!("lifeline_agent_streams").set(streams as f64);
        gauge!("lifeline_signals_in_flight").set(in_flight as f64);
        gauge!("lifeline_storm_guard_paused").set(if guard.paused { 1.0 } else { 0.0 });
        gauge!("lifeline_storm_guard_stranded_in_window").set(guard.stranded_in_window as f64);
        gauge!("lifeline_agents_retrying").set(guard.agents_retrying as f64);
        gauge!("lifeline_store_failing").set(f64::from(u8::from(s.store_health.is_failing())));
        gauge!("lifeline_task_failed").set(f64::from(u8::from(s.failure.get().is_some())));
        counters(&s.stats);
        s.stats.hist.render()
    });
    Ok(([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response())
}

fn current_state(g: &Gauges) {
    for (state, n) in [
        ("healthy", g.agents.healthy),
        ("degraded", g.agents.degraded),
        ("stranded", g.agents.stranded),
    ] {
        gauge!("lifeline_agents", "state" => state).set(n as f64);
    }
    gauge!("lifeline_agents_waiting_for_live_proxy").set(g.agents.waiting_for_live_proxy as f64);
    gauge!("lifeline_proxies", "status" => "live").set(g.proxies.live as f64);
    gauge!("lifeline_proxies", "status" => "expired").set(g.proxies.expired as f64);
    for h in Health::ALL {
        let n = g.auth_servers.get(h.as_str()).copied().unwrap_or(0);
        gauge!("lifeline_auth_servers", "health" => h.as_str()).set(n as f64);
    }
    for (kind, status) in &g.kinds {
        for st in WatchState::ALL {
            let on = if status.state == st { 1.0 } else { 0.0 };
            gauge!("lifeline_watcher_state", "kind" => kind.as_str(), "state" => st.as_str())
                .set(on);
        }
        gauge!("lifeline_watcher_generation", "kind" => kind.as_str())
            .set(status.generation as f64);
    }
    gauge!("lifeline_agents_linked").set(g.links as f64);
}

fn counters(st: &Stats) {
    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    for kind in crate::model::Kind::ALL {
        for op in crate::model::Op::ALL {
            counter!("lifeline_events_ingested_total", "kind" => kind.as_str(), "type" => op.as_str())
                .absolute(get(&st.ingested[kind.index()][op as usize]));
        }
    }
    for code in RejectCode::ALL {
        counter!("lifeline_events_rejected_total", "reason" => code.as_str())
            .absolute(get(&st.rejected[code as usize]));
    }
    counter!("lifeline_heartbeats_total").absolute(get(&st.heartbeats));
    counter!("lifeline_watch_streams_opened_total").absolute(get(&st.watch_generations));
    counter!("lifeline_watch_stream_failures_total").absolute(get(&st.watch_failures));
    counter!("lifeline_health_stream_failures_total").absolute(get(&st.health_failures));
    counter!("lifeline_timers_fired_total").absolute(get(&st.timers_fired));
    counter!("lifeline_agent_state_changes_total").absolute(get(&st.state_changes));
    for kind in SignalKind::ALL {
        for outcome in SignalOutcome::ALL {
            counter!("lifeline_signals_total", "kind" => kind.as_str(), "outcome" => outcome.as_str())
                .absolute(get(&st.signals[kind as usize][outcome as usize]));
        }
    }
    counter!("lifeline_discovery_messages_total", "mode" => "full")
        .absolute(get(&st.discovery_full));
    counter!("lifeline_discovery_messages_total", "mode" => "delta")
        .absolute(get(&st.discovery_delta));
    counter!("lifeline_discovery_bytes_total", "mode" => "full")
        .absolute(get(&st.discovery_bytes_full));
    counter!("lifeline_discovery_bytes_total", "mode" => "delta")
        .absolute(get(&st.discovery_bytes_delta));
    counter!("lifeline_signal_audit_updates_dropped_total")
        .absolute(get(&st.signal_updates_dropped));
    counter!("lifeline_agent_messages_rejected_total").absolute(get(&st.agent_messages_rejected));
    for (reason, c) in [
        ("unauthenticated", &st.http_unauthorized),
        ("forbidden", &st.http_forbidden),
        ("rate_limited", &st.http_rate_limited),
    ] {
        counter!("lifeline_http_refused_total", "reason" => reason).absolute(get(c));
    }
    counter!("lifeline_agent_join_refused_total").absolute(get(&st.agent_join_refused));
    for (k, kind) in ["grpc", "tcp"].into_iter().enumerate() {
        for (r, result) in ["healthy", "unhealthy", "unknown"].into_iter().enumerate() {
            counter!("lifeline_probes_total", "kind" => kind, "result" => result)
                .absolute(get(&st.probes[k][r]));
        }
    }
    counter!("lifeline_probes_refused_total").absolute(get(&st.probes_refused));
    counter!("lifeline_store_history_rows_total", "outcome" => "committed")
        .absolute(get(&st.store_events_committed));
    counter!("lifeline_store_history_rows_total", "outcome" => "dropped")
        .absolute(get(&st.store_events_dropped));
    counter!("lifeline_store_batches_total").absolute(get(&st.store_batches));
    counter!("lifeline_store_errors_total").absolute(get(&st.store_errors));
    counter!("lifeline_trace_spans_exported_total").absolute(get(&SPANS.exported));
    counter!("lifeline_trace_spans_dropped_total", "reason" => "queue_full")
        .absolute(get(&SPANS.dropped_queue_full));
    counter!("lifeline_trace_spans_dropped_total", "reason" => "export_failed")
        .absolute(get(&SPANS.export_failed));
    gauge!("lifeline_trace_spans_queued").set(get(&SPANS.queued) as f64);
}

fn describe() {
    for (name, help) in [
        (
            "lifeline_agents",
            "Agents by state (healthy, degraded, stranded).",
        ),
        ("lifeline_proxies", "Proxies by status: live or expired."),
        ("lifeline_auth_servers", "Auth servers by gRPC health."),
        (
            "lifeline_watcher_state",
            "1 for each watched kind's current watcher state.",
        ),
        (
            "lifeline_watcher_generation",
            "Watch stream generation each kind was last listed in.",
        ),
        (
            "lifeline_agent_streams",
            "Agents connected to AgentSignals.Connect.",
        ),
        (
            "lifeline_agents_linked",
            "Agents the fleet counts as linked to a signal stream.",
        ),
        (
            "lifeline_signals_in_flight",
            "Signals sent and awaiting an ack.",
        ),
        (
            "lifeline_storm_guard_paused",
            "1 while the storm guard pauses automatic reconnects.",
        ),
        (
            "lifeline_storm_guard_stranded_in_window",
            "Agents that turned stranded within the storm window.",
        ),
        (
            "lifeline_agents_retrying",
            "Agents waiting for their next automatic reconnect.",
        ),
        (
            "lifeline_store_failing",
            "1 while the database refuses writes (state and episodes are kept pending and retried).",
        ),
        (
            "lifeline_task_failed",
            "1 once a critical task stopped (the process is exiting).",
        ),
        (
            "lifeline_agents_waiting_for_live_proxy",
            "Degraded or stranded agents with no live proxy to move to (not signalled until one turns live).",
        ),
        (
            "lifeline_trace_spans_queued",
            "Finished spans waiting for the OTLP exporter.",
        ),
    ] {
        describe_gauge!(name, help);
    }
    for (name, help) in [
        (
            "lifeline_events_ingested_total",
            "Watcher events applied, by kind and type.",
        ),
        (
            "lifeline_events_rejected_total",
            "Inputs refused, by reason.",
        ),
        (
            "lifeline_heartbeats_total",
            "PUTs that moved a resource's expiry.",
        ),
        (
            "lifeline_watch_streams_opened_total",
            "Watch streams opened (each a new generation).",
        ),
        (
            "lifeline_watch_stream_failures_total",
            "Watch streams lost.",
        ),
        (
            "lifeline_health_stream_failures_total",
            "Auth server health streams lost.",
        ),
        (
            "lifeline_timers_fired_total",
            "Expiry and grace timers fired.",
        ),
        ("lifeline_agent_state_changes_total", "Agent state changes."),
        (
            "lifeline_signals_total",
            "Audited signals by kind and outcome (sent counts queued ones; the rest are final).",
        ),
        (
            "lifeline_discovery_messages_total",
            "Discovery messages sent, by mode.",
        ),
        (
            "lifeline_discovery_bytes_total",
            "Encoded bytes of Discovery messages sent, by mode.",
        ),
        (
            "lifeline_signal_audit_updates_dropped_total",
            "Signal audit updates lost because SQLite fell behind.",
        ),
        (
            "lifeline_agent_messages_rejected_total",
            "Agent messages refused (bad Hello, report or ack).",
        ),
        (
            "lifeline_http_refused_total",
            "HTTP requests refused: no or invalid token, a missing role, a manual reconnect too soon.",
        ),
        (
            "lifeline_agent_join_refused_total",
            "Agent signal streams refused for a missing or wrong join token.",
        ),
        (
            "lifeline_probes_total",
            "Virtual probes answered, by kind and result.",
        ),
        (
            "lifeline_probes_refused_total",
            "Virtual probes refused (target not allowed or a bad request).",
        ),
        (
            "lifeline_store_history_rows_total",
            "History rows committed to SQLite or dropped.",
        ),
        (
            "lifeline_store_batches_total",
            "SQLite write transactions committed.",
        ),
        (
            "lifeline_store_errors_total",
            "SQLite write transactions that failed.",
        ),
        (
            "lifeline_trace_spans_exported_total",
            "Spans the OTLP collector accepted.",
        ),
        (
            "lifeline_trace_spans_dropped_total",
            "Spans lost: queue full, or the export failed.",
        ),
    ] {
        describe_counter!(name, help);
    }
}
