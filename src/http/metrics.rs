//! `GET /metrics`: Prometheus text exposition of Lifeline's counters,
//! histograms and current-state gauges. Counters come from `stats` (one
//! atomic read each), gauges from the read model the fleet publishes.
//! Only three families carry a name from the cluster (root causes and
//! auth servers' health), each capped, so cardinality stays bounded. The
//! per-state gauges carry the `cluster` they count, by its configured
//! name: as many series as clusters configured.
//!
//! Each metric's name is a constant in `stats::metric` (the alert rules
//! and the dashboard use the same); its help and label names sit
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
use crate::domain::{Health, Kind, Op, RejectCode};
use crate::fleet::view::{AuthView, Summary};
use crate::fleet::WatchState;
use crate::stats::{metric, Channel, DropReason, NotifyOutcome, SignalKind, SignalOutcome, Stats};
use crate::telemetry::SpanCounters;

pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router() -> Router<AppState> {
    Router::new().route("/metrics", get(metrics))
}

async fn metrics(State(s): State<AppState>) -> Result<Response, ApiError> {
    let published = s.fleet.recent().await?;
    let cluster = s.fleet.cluster().as_str();
    let mut text = s.stats.hist.with_recorder(|| {
        state_gauges(&s, cluster, &published.summary);
        counters(&s.stats, &s.spans);
        s.stats.hist.render()
    });
    named_series(
        &mut text,
        cluster,
        &published.summary,
        &published.auth_servers,
    );
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
    /// A series of `cluster`'s: its name first, then `l`.
    fn set_in(&self, cluster: &str, l: &[(&'static str, &'static str)], v: f64) {
        let mut labels = labels(l);
        labels.insert(0, Label::new("cluster", cluster.to_owned()));
        metrics::gauge!(self.0, labels).set(v);
    }

    fn set(&self, l: &[(&'static str, &'static str)], v: f64) {
        metrics::gauge!(self.0, labels(l)).set(v);
    }

    fn total(&self, l: &[(&'static str, &'static str)], v: &AtomicU64) {
        metrics::counter!(self.0, labels(l)).absolute(v.load(Ordering::Relaxed));
    }
}

/// A listener's connections closed by their deadlines, by reason.
fn closed_by_reason(f: &Family, c: &crate::stats::HeldCounters) {
    f.total(&[("reason", "idle")], &c.idle);
    f.total(&[("reason", "request_deadline")], &c.request_deadline);
    f.total(&[("reason", "too_slow")], &c.too_slow);
}

fn flag(on: bool) -> f64 {
    f64::from(u8::from(on))
}

fn state_gauges(s: &AppState, cluster: &str, g: &Summary) {
    gauge(
        metric::READ_MODEL_GENERATION,
        "The fleet's read model these figures were rendered from: surfaces with the same generation show the same figures.",
    )
    .set(&[], g.generation as f64);
    let f = gauge(
        metric::AGENTS,
        "Agents by standing (healthy, degraded, stranded, planned): each agent in exactly one.",
    );
    for &standing in crate::domain::Standing::ALL {
        f.set_in(
            cluster,
            &[("state", standing.as_str())],
            g.agents.of(standing) as f64,
        );
    }
    gauge(
        metric::AGENTS_WAITING_FOR_LIVE_PROXY,
        "Degraded or stranded agents (planned ones left out) with no live proxy they are not already on (not signalled until one turns live).",
    )
    .set_in(cluster, &[], g.agents.waiting_for_live_proxy as f64);
    let f = gauge(metric::PROXIES, "Proxies by status: live or expired.");
    f.set_in(cluster, &[("status", "live")], g.proxies.live as f64);
    f.set_in(cluster, &[("status", "expired")], g.proxies.expired as f64);
    let f = gauge(metric::AUTH_SERVERS, "Auth servers by gRPC health.");
    for &h in Health::ALL {
        let n = g.auth_servers.get(h.as_str()).copied().unwrap_or(0);
        f.set_in(cluster, &[("health", h.as_str())], n as f64);
    }
    let state = gauge(
        metric::WATCHER_STATE,
        "1 for each watched kind's current watcher state.",
    );
    let generation = gauge(
        metric::WATCHER_GENERATION,
        "Watch stream generation each kind was last listed in.",
    );
    for (kind, status) in &g.watcher.kinds {
        for &st in WatchState::ALL {
            state.set_in(
                cluster,
                &[("kind", *kind), ("state", st.as_str())],
                flag(status.state == st),
            );
        }
        generation.set_in(cluster, &[("kind", *kind)], status.generation as f64);
    }
    // The hub owns "connected": the fleet's links follow its streams.
    gauge(
        metric::AGENT_STREAMS,
        "Agents connected to AgentSignals.Connect.",
    )
    .set(&[], s.hub.connected() as f64);
    gauge(
        metric::SIGNALS_IN_FLIGHT,
        "Signals sent and awaiting an ack.",
    )
    .set(&[], s.hub.in_flight() as f64);
    let guard = s.guard.borrow().clone();
    gauge(
        metric::STORM_GUARD_PAUSED,
        "1 while the storm guard pauses automatic reconnects.",
    )
    .set(&[], flag(guard.paused));
    gauge(
        metric::STORM_GUARD_STRANDED_IN_WINDOW,
        "Agents that turned stranded within the storm window.",
    )
    .set(&[], guard.stranded_in_window as f64);
    gauge(
        metric::AGENTS_RETRYING,
        "Agents waiting for their next automatic reconnect.",
    )
    .set(&[], guard.agents_retrying as f64);
    let lead = s.hub.leadership().borrow().clone();
    gauge(
        metric::LEADER,
        "1 while this replica leads (holds the leader lease, or runs alone on SQLite).",
    )
    .set(&[], flag(lead.leading));
    gauge(
        metric::LEADER_TERM,
        "The leader lease's term as this replica last saw it (0 alone on SQLite).",
    )
    .set(&[], lead.term as f64);
    gauge(
        metric::STORE_FAILING,
        "1 while the database refuses writes (state and episodes are kept pending and retried).",
    )
    .set(&[], flag(s.store_health.is_failing()));
    gauge(
        metric::TASK_FAILED,
        "1 once a critical task stopped (the process is exiting).",
    )
    .set(&[], flag(s.failure.get().is_some()));
    gauge(
        metric::TRACE_SPANS_QUEUED,
        "Finished spans waiting for the OTLP exporter.",
    )
    .set(&[], s.spans.queued.load(Ordering::Relaxed) as f64);
}

/// Root causes rendered as series, the largest first, at most this many.
pub const ROOT_CAUSE_SERIES: usize = 50;
/// Auth servers rendered as series, at most this many.
pub const AUTH_SERVER_SERIES: usize = 64;

/// The series labelled with a resource's name: the stranded agents of each
/// root cause and each auth server's health. Names come from the cluster,
/// so these are capped, and rendered here from the read model at every
/// scrape (the recorder would keep a series that no longer exists).
fn named_series(text: &mut String, cluster: &str, g: &Summary, auths: &[AuthView]) {
    use metrics_exporter_prometheus::formatting::{
        sanitize_label_value as escape, write_help_line, write_type_line,
    };
    use std::fmt::Write;
    // The stranded figure per cause (planned and degraded agents are in
    // no stranded figure): what the stranded alert reads.
    let causes: Vec<_> = g
        .root_causes
        .iter()
        .filter(|rc| rc.stranded > 0)
        .take(ROOT_CAUSE_SERIES)
        .collect();
    let cluster = escape(cluster);
    let cause_labels = |rc: &crate::fleet::view::RootCause| {
        format!(
            "cluster=\"{cluster}\",cause=\"{}\",resource=\"{}\"",
            rc.cause.as_str(),
            escape(&rc.resource)
        )
    };
    let mut family = |name: &str, help: &str, samples: &mut dyn Iterator<Item = (String, f64)>| {
        write_help_line(text, name, None, None, help);
        write_type_line(text, name, None, None, "gauge");
        for (labels, v) in samples {
            let _ = writeln!(text, "{name}{{{labels}}} {v}");
        }
    };
    family(
        metric::ROOT_CAUSE_AGENTS,
        "Stranded agents (planned ones left out) per root cause, by cause and the resource at fault (the largest causes only).",
        &mut causes.iter().map(|rc| (cause_labels(rc), rc.stranded as f64)),
    );
    family(
        metric::ROOT_CAUSE_AGE_SECONDS,
        "Seconds since each root cause began (a proxy's expiry, an auth server's health change).",
        &mut causes.iter().map(|rc| {
            (
                cause_labels(rc),
                g.generated_at.since(rc.since).as_secs_f64(),
            )
        }),
    );
    family(
        metric::AUTH_SERVER_HEALTH,
        "1 for each auth server's current gRPC health.",
        &mut auths.iter().take(AUTH_SERVER_SERIES).map(|a| {
            (
                format!(
                    "cluster=\"{cluster}\",auth_server=\"{}\",health=\"{}\"",
                    escape(&a.name),
                    a.health.as_str()
                ),
                1.0,
            )
        }),
    );
}

fn counters(st: &Stats, spans: &SpanCounters) {
    let f = counter(
        metric::EVENTS_INGESTED_TOTAL,
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
    let f = counter(metric::EVENTS_REJECTED_TOTAL, "Inputs refused, by reason.");
    for &code in RejectCode::ALL {
        f.total(&[("reason", code.as_str())], &st.rejected[code as usize]);
    }
    for (name, help, c) in [
        (
            metric::HEARTBEATS_TOTAL,
            "PUTs that moved a resource's expiry.",
            &st.heartbeats,
        ),
        (
            metric::WATCH_STREAMS_OPENED_TOTAL,
            "Watch streams opened (each a new generation).",
            &st.watch_generations,
        ),
        (
            metric::WATCH_STREAM_FAILURES_TOTAL,
            "Watch streams lost.",
            &st.watch_failures,
        ),
        (
            metric::HEALTH_STREAM_FAILURES_TOTAL,
            "Auth server health streams lost.",
            &st.health_failures,
        ),
        (
            metric::TIMERS_FIRED_TOTAL,
            "Expiry and grace timers fired.",
            &st.timers_fired,
        ),
        (
            metric::AGENT_STATE_CHANGES_TOTAL,
            "Agent state changes.",
            &st.state_changes,
        ),
        (
            metric::SIGNAL_AUDIT_UPDATES_DROPPED_TOTAL,
            "Signal audit updates lost because SQLite fell behind.",
            &st.signal_updates_dropped,
        ),
        (
            metric::AGENT_MESSAGES_REJECTED_TOTAL,
            "Agent messages refused (bad Hello, report or ack).",
            &st.agent_messages_rejected,
        ),
        (
            metric::AGENT_JOIN_REFUSED_TOTAL,
            "Agent signal streams refused for a missing or wrong join token.",
            &st.agent_join_refused,
        ),
        (
            metric::PROBES_REFUSED_TOTAL,
            "Virtual probes refused (target not allowed or a bad request).",
            &st.probes_refused,
        ),
        (
            metric::STORE_BATCHES_TOTAL,
            "Write transactions committed.",
            &st.store_batches,
        ),
        (
            metric::STORE_ERRORS_TOTAL,
            "Write transactions that failed.",
            &st.store_errors,
        ),
        (
            metric::STORE_QUERIES_TIMED_OUT_TOTAL,
            "PostgreSQL queries given up at their client-side deadline (no answer at all).",
            &crate::store::QUERIES_TIMED_OUT,
        ),
        (
            metric::STORE_CONNECTIONS_CLOSED_SILENT_TOTAL,
            "PostgreSQL connections closed instead of reused because they did not answer a ping when taken back.",
            &crate::store::CONNECTIONS_CLOSED_SILENT,
        ),
        (
            metric::STORE_BATCHES_FENCED_TOTAL,
            "Batches left unwritten because another replica took the leader lease.",
            &st.store_batches_fenced,
        ),
        (
            metric::STORE_ROWS_REFUSED_TOTAL,
            "Rows the database refused for what they hold, recorded as rejected; the rest of their batch committed.",
            &st.store_rows_refused,
        ),
        (
            metric::SIGNALS_SWEPT_TOTAL,
            "Signals recorded as timed out by the leader because no replica answered for them.",
            &st.signals_swept,
        ),
        (
            metric::SIGNALS_CAUGHT_UP_TOTAL,
            "Signals this replica found and delivered itself after its notifications were lost.",
            &st.signals_caught_up,
        ),
        (
            metric::LISTEN_PROBES_LOST_TOTAL,
            "Times the listening connection did not hear its own probe and was made again.",
            &st.listen_probes_lost,
        ),
        (
            metric::TRACE_SPANS_EXPORTED_TOTAL,
            "Spans the OTLP collector accepted.",
            &spans.exported,
        ),
    ] {
        counter(name, help).total(&[], c);
    }
    let f = counter(
        metric::SIGNALS_TOTAL,
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
        metric::DISCOVERY_MESSAGES_TOTAL,
        "Discovery messages sent, by mode.",
    );
    let bytes = counter(
        metric::DISCOVERY_BYTES_TOTAL,
        "Encoded bytes of Discovery messages sent, by mode.",
    );
    messages.total(&[("mode", "full")], &st.discovery_full);
    messages.total(&[("mode", "delta")], &st.discovery_delta);
    bytes.total(&[("mode", "full")], &st.discovery_bytes_full);
    bytes.total(&[("mode", "delta")], &st.discovery_bytes_delta);
    let f = counter(
        metric::HTTP_REFUSED_TOTAL,
        "HTTP requests refused: no or invalid token, a missing role, a manual reconnect or a sign-in too soon.",
    );
    f.total(&[("reason", "unauthenticated")], &st.http_unauthorized);
    f.total(&[("reason", "forbidden")], &st.http_forbidden);
    f.total(&[("reason", "rate_limited")], &st.http_rate_limited);
    let f = counter(
        metric::PROBES_TOTAL,
        "Virtual probes answered, by kind and result.",
    );
    for (k, kind) in ["grpc", "tcp"].into_iter().enumerate() {
        for (r, result) in ["healthy", "unhealthy", "unknown"].into_iter().enumerate() {
            f.total(&[("kind", kind), ("result", result)], &st.probes[k][r]);
        }
    }
    let f = counter(
        metric::STORE_HISTORY_ROWS_TOTAL,
        "History rows committed to SQLite or dropped.",
    );
    f.total(&[("outcome", "committed")], &st.store_events_committed);
    f.total(&[("outcome", "dropped")], &st.store_events_dropped);
    let f = counter(
        metric::TRACE_SPANS_DROPPED_TOTAL,
        "Spans lost: queue full, or the export failed.",
    );
    f.total(&[("reason", "queue_full")], &spans.dropped_queue_full);
    f.total(&[("reason", "export_failed")], &spans.export_failed);
    let f = gauge(
        metric::STORE_PENDING_ROWS,
        "Rows waiting in memory for room at the store writer, by kind: what a database outage holds.",
    );
    for &k in crate::stats::PendingRows::ALL {
        f.set(
            &[("rows", k.as_str())],
            st.store_pending[k as usize].load(Ordering::Relaxed) as f64,
        );
    }
    gauge(
        metric::CLUSTER_IDENTITY_EXPIRY,
        "When the client certificate of the cluster identity file expires, Unix seconds (0 without one).",
    )
    .set(
        &[],
        st.cluster_identity_not_after.load(Ordering::Relaxed) as f64,
    );
    counter(
        metric::CLUSTER_IDENTITY_RENEWALS_TOTAL,
        "Times the cluster identity file changed and was taken up without a restart.",
    )
    .total(&[], &st.cluster_identity_renewals);
    gauge(
        metric::CLOCK_OFFSET_SECONDS,
        "The database's clock minus this replica's (among replicas): signal times follow the database's.",
    )
    .set(&[], st.clock_offset_us.load(Ordering::Relaxed) as f64 / 1e6);
    gauge(
        metric::GRPC_CONNECTIONS,
        "gRPC connections (agents' signal streams, GetServiceConfig, health) open now.",
    )
    .set(&[], st.grpc_connections.load(Ordering::Relaxed) as f64);
    counter(
        metric::GRPC_CONNECTIONS_REFUSED_TOTAL,
        "gRPC connections closed as soon as accepted: server.grpc_max_connections were open.",
    )
    .total(&[], &st.grpc_connections_refused);
    let http = &st.http;
    gauge(
        metric::HTTP_CONNECTIONS,
        "HTTP connections (API, dashboard, probes, metrics) held now.",
    )
    .set(&[], http.open.load(Ordering::Relaxed) as f64);
    let refused = counter(
        metric::HTTP_CONNECTIONS_REFUSED_TOTAL,
        "HTTP connections closed for server.max_http_connections, by reason: refused at accept (every held one was serving a whole request), or evicted (the one that had held no whole request for longest: silent, slow or idle between requests).",
    );
    refused.total(&[("reason", "at_limit")], &http.refused);
    refused.total(&[("reason", "evicted")], &http.evicted);
    counter(
        metric::ACCEPT_ERRORS_TOTAL,
        "Accepts that failed on Lifeline's own gRPC listener (out of file descriptors, most often); each is followed by a wait, up to 1 s.",
    )
    .total(&[], &st.accept_errors);
    let closed = counter(
        metric::HTTP_CONNECTIONS_CLOSED_TOTAL,
        "HTTP connections closed by their deadlines, by reason: idle (no byte either way for server.http_idle_timeout), request_deadline (a request not whole by server.http_request_timeout), too_slow (a request arriving slower than server.http_min_rate).",
    );
    closed_by_reason(&closed, http);
    gauge(
        metric::ADMIN_CONNECTIONS,
        "Connections held now on the admin listener (server.admin_listen: probes and metrics).",
    )
    .set(&[], st.admin.open.load(Ordering::Relaxed) as f64);
    let admin = counter(
        metric::ADMIN_CONNECTIONS_CLOSED_TOTAL,
        "Admin listener connections closed early, by reason: at_limit and evicted (its own cap), idle, request_deadline, too_slow (as for the HTTP listener).",
    );
    admin.total(&[("reason", "at_limit")], &st.admin.refused);
    admin.total(&[("reason", "evicted")], &st.admin.evicted);
    closed_by_reason(&admin, &st.admin);
    let f = counter(
        metric::TLS_HANDSHAKE_FAILURES_TOTAL,
        "TLS handshakes on Lifeline's own listeners that failed or timed out, by listener.",
    );
    for w in crate::tls::Which::ALL {
        f.total(
            &[("listener", w.as_str())],
            &st.tls_handshake_failures[w as usize],
        );
    }
    let f = counter(
        metric::TLS_RELOADS_TOTAL,
        "Changed certificate files looked at: loaded, or refused (the previous certificate stays).",
    );
    f.total(&[("outcome", "loaded")], &st.tls_reloads_loaded);
    f.total(&[("outcome", "refused")], &st.tls_reloads_refused);
    let f = counter(
        metric::NOTIFICATIONS_TOTAL,
        "Incidents and events told: by channel (alertmanager, webhook) and outcome (delivered; failed, to be retried; dropped, given up on).",
    );
    for (c, channel) in [Channel::Alertmanager, Channel::Webhook]
        .into_iter()
        .enumerate()
    {
        for (o, outcome) in [
            NotifyOutcome::Delivered,
            NotifyOutcome::Failed,
            NotifyOutcome::Dropped,
        ]
        .into_iter()
        .enumerate()
        {
            f.total(
                &[("channel", channel.into()), ("outcome", outcome.into())],
                &st.notify[c][o],
            );
        }
    }
    let f = counter(
        metric::NOTIFICATIONS_DROPPED_TOTAL,
        "Notifications given up on, by channel and reason (too_old: older than max_age from the event's own time; unreadable: its stored body).",
    );
    for (c, channel) in [Channel::Alertmanager, Channel::Webhook]
        .into_iter()
        .enumerate()
    {
        for (r, reason) in [DropReason::TooOld, DropReason::Unreadable]
            .into_iter()
            .enumerate()
        {
            f.total(
                &[("channel", channel.into()), ("reason", reason.into())],
                &st.notify_dropped[c][r],
            );
        }
    }
    gauge(
        metric::TLS_CERTIFICATE_EXPIRY,
        "When the certificate Lifeline serves expires, Unix seconds (0 without TLS).",
    )
    .set(&[], st.tls_not_after.load(Ordering::Relaxed) as f64);
}
