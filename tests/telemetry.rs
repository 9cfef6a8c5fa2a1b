//! Lifeline's view of itself, end to end: spans exported over real OTLP/gRPC
//! to a real receiver (a tonic server from `opentelemetry-proto`), one trace
//! per failure from the expiry to the agent's ack; a dead collector that
//! costs ingest nothing (`/metrics` itself is checked in `tests/it/metrics.rs`).
//!
//! Each test installs its own subscriber for its own thread; no other test
//! may run in this binary, since a thread without one would share tracing's
//! process-wide callsite cache and level hint with these.

#[path = "it/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;
use tokio::sync::Mutex;

use lifeline::telemetry::sink::{ReceivedSpan, Sink};
use lifeline::telemetry::{OtlpSettings, Pipeline};
use support::{real_timeout, Cluster, REAL_WAIT, STRANDED as AGENT};
use tracing_subscriber::layer::SubscriberExt;

/// The export pipeline and the global OpenTelemetry provider the simulated
/// agents use are process-wide: tests that export run one at a time.
static EXPORTING: Mutex<()> = Mutex::const_new(());

fn find(spans: &[ReceivedSpan], what: impl Fn(&ReceivedSpan) -> bool) -> Vec<&ReceivedSpan> {
    spans.iter().filter(|s| what(s)).collect()
}

fn dump(spans: &[ReceivedSpan]) -> String {
    spans
        .iter()
        .map(|s| {
            format!(
                "{} {} {} ← {} {:?}",
                s.service, s.name, s.span_id, s.parent_span_id, s.attributes
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Guards the issue's trace: a proxy's expiry strands agent-00001 → the
/// classification → the automatic Reconnect → the simulated agent's own
/// span → the ack → the episode's close, all one trace id, parented in that
/// order, carrying agent, proxy and reason; the W3C context crossed the
/// wire in `Signal.trace_context`. HTTP and gRPC requests have spans too.
// Each test has its own runtime: the lock only orders whole tests.
#[tokio::test(start_paused = true)]
async fn a_failure_is_one_trace_from_expiry_to_ack() {
    let _one = EXPORTING.lock().await;
    let sink = Sink::start(100_000).expect("OTLP receiver starts");
    let pipeline = Pipeline::start(&OtlpSettings::to(sink.endpoint())).expect("pipeline");
    let _sub =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(pipeline.layer()));

    let c = Cluster::six_legacy().start().await;
    c.ready().await;
    c.strand_two().await;
    let acked = format!("/api/v1/signals?agent={AGENT}&requested_by=auto&outcome=acked");
    c.advance_until(
        "an automatic reconnect acked",
        Duration::from_secs(40),
        || async {
            c.ok(&acked).await["items"]
                .as_array()
                .is_some_and(|a| !a.is_empty())
        },
    )
    .await;
    c.advance_until("agent healthy again", Duration::from_secs(40), || async {
        c.state(AGENT).await == "healthy"
    })
    .await;
    c.flush().await;
    c.shutdown().await;
    stop(pipeline).await;
    let spans = sink.spans();

    let sends = find(&spans, |s| {
        s.name == "send reconnect" && s.attr("agent") == Some(AGENT)
    });
    let send = *sends
        .first()
        .unwrap_or_else(|| panic!("no send span for {AGENT}:\n{}", dump(&spans)));
    let trace: Vec<ReceivedSpan> = spans
        .iter()
        .filter(|s| s.trace_id == send.trace_id)
        .cloned()
        .collect();
    let by_id: BTreeMap<&str, &ReceivedSpan> =
        trace.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let parent = |s: &ReceivedSpan| by_id.get(s.parent_span_id.as_str()).copied();

    // The root: the expiry that stranded it.
    let root =
        parent(send).unwrap_or_else(|| panic!("send has its failure as parent:\n{}", dump(&trace)));
    assert!(
        root.parent_span_id.is_empty(),
        "the failure is the root:\n{}",
        dump(&trace)
    );
    assert_eq!(root.attr("cause"), Some("proxy_expired"), "{root:?}");
    let proxy = root.attr("resource").expect("resource").to_string();
    assert!(proxy == "proxy-1" || proxy == "proxy-2", "{root:?}");
    assert_eq!(root.name, format!("proxy_expired {proxy}"));
    assert!(
        root.attr("reasons")
            .is_some_and(|r| r.contains("no_live_tunnel")),
        "{root:?}"
    );

    // The classification, under the root.
    let classify = find(&trace, |s| s.name == "classify");
    assert!(!classify.is_empty(), "classify span:\n{}", dump(&trace));
    assert!(classify.iter().all(|s| s.parent_span_id == root.span_id));
    assert!(classify
        .iter()
        .any(|s| s.attr("stranded").is_some_and(|n| n != "0")));

    // The signal, with agent, proxy and reason.
    assert_eq!(send.attr("requested_by"), Some("auto"));
    assert_eq!(send.attr("proxy"), Some(proxy.as_str()), "{send:?}");
    assert!(
        send.attr("reason")
            .is_some_and(|r| r.contains("no_live_tunnel")),
        "{send:?}"
    );
    assert_eq!(send.attr("outcome"), Some("sent"));

    // The agent continued the trace from Signal.trace_context.
    let agent_spans = find(&trace, |s| {
        s.service == "lifeline-sim-agent"
            && s.name == "agent.reconnect"
            && s.attr("agent") == Some(AGENT)
    });
    assert!(
        !agent_spans.is_empty(),
        "the agent's own span:\n{}",
        dump(&trace)
    );
    assert!(
        agent_spans.iter().any(|s| s.parent_span_id == send.span_id),
        "under the send span:\n{}",
        dump(&trace)
    );
    assert!(
        trace.iter().any(|s| s.service == "lifeline"),
        "Lifeline's own service name"
    );

    // The ack, under the send.
    let acks = find(&trace, |s| {
        s.name == "ack reconnect" && s.attr("agent") == Some(AGENT)
    });
    assert!(
        acks.iter()
            .any(|s| s.parent_span_id == send.span_id && s.attr("outcome") == Some("acked")),
        "acked under the send span:\n{}",
        dump(&trace)
    );

    // The stranded episode's close ends the story, in the same trace.
    let closes = find(&trace, |s| {
        s.name == "episode.close" && s.attr("agent") == Some(AGENT)
    });
    assert!(
        closes
            .iter()
            .any(|s| s.parent_span_id == root.span_id && s.attr("ended_by_signal").is_some()),
        "episode close under the failure:\n{}",
        dump(&trace)
    );

    // Requests have spans: HTTP (tower-http at INFO) and gRPC.
    assert!(
        spans.iter().any(|s| s
            .attr("uri")
            .is_some_and(|u| u.starts_with("/api/v1/agents/"))),
        "an HTTP request span"
    );
    assert!(
        spans.iter().any(|s| s
            .attr("uri")
            .is_some_and(|u| u.contains("AgentSignals/Connect"))),
        "a gRPC request span"
    );
    // Every span of the failure trace came from one failure: one root.
    let roots: HashSet<&str> = trace
        .iter()
        .filter(|s| s.parent_span_id.is_empty())
        .map(|s| s.span_id.as_str())
        .collect();
    assert_eq!(roots.len(), 1, "{}", dump(&trace));
}

/// Flushes and stops a pipeline off the runtime (it blocks), bounded in
/// real time: a hung collector must not hang shutdown.
async fn stop(pipeline: Pipeline) {
    real_timeout(REAL_WAIT, async {
        tokio::task::spawn_blocking(move || pipeline.shutdown()).await
    })
    .await
    .expect("pipeline shutdown is bounded")
    .expect("shutdown task");
}

/// Guards "exporter failure never blocks or slows ingest": with a collector
/// that takes the connection and never answers (each export waits out its
/// timeout), a span for every event and a queue of 16, the fleet still
/// applies every heartbeat on time, the lost spans are counted on
/// `/metrics`, and shutdown does not hang on it.
// Each test has its own runtime: the lock only orders whole tests.
#[tokio::test(start_paused = true)]
async fn a_dead_collector_does_not_stall_ingest() {
    let _one = EXPORTING.lock().await;
    // Listening, never accepting: connections complete in the kernel's
    // backlog and the HTTP/2 handshake never does.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let mut settings = OtlpSettings::to(format!("http://{}", hung.local_addr().expect("addr")));
    settings.max_queued_spans = 16;
    settings.batch_delay = Duration::from_millis(50);
    settings.export_timeout = Duration::from_millis(500);
    let pipeline = Pipeline::start(&settings).expect("pipeline");
    let _sub =
        tracing::subscriber::set_default(tracing_subscriber::registry().with(pipeline.layer()));
    let c = Cluster::new()
        .spans(pipeline.counters())
        .agents(300)
        .proxies(4)
        .ttl(Duration::from_secs(10))
        .config(|cfg| cfg.telemetry.ingest_span_every = 1)
        .start()
        .await;
    c.ready().await;
    let applied = |v: &serde_json::Value| v["ingest"]["events_applied"].as_u64().unwrap_or(0);
    let before = applied(&c.summary().await);
    // 60 s of heartbeats: every resource heartbeats every ~TTL/2.
    let done = real_timeout(REAL_WAIT, async {
        for _ in 0..60 {
            c.advance(Duration::from_secs(1)).await;
        }
        c.quiesce().await;
    })
    .await;
    assert!(
        done.is_some(),
        "ingest kept up in real time with a hung collector"
    );
    let after = applied(&c.summary().await);
    // 300 agents + 4 proxies + 2 auth servers at least 5 heartbeats each.
    assert!(after - before >= 306 * 5, "{before} → {after}");
    assert_eq!(c.agents_in("stranded").await, Vec::<String>::new());

    // The losses are counted.
    c.eventually("lost spans counted", || async {
        let (_, text) = c.get_text("/metrics").await;
        let lost: f64 = text
            .lines()
            .filter(|l| l.starts_with("lifeline_trace_spans_dropped_total"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        lost > 0.0
    })
    .await;
    c.shutdown().await;
    stop(pipeline).await;
    drop(hung);
}

/// Guards OTLP over TLS: to an `https://` collector whose certificate a CA
/// made in the test signed, spans arrive when the settings name that CA
/// file, and none do (the failed export counted) without it.
#[tokio::test]
async fn spans_reach_an_https_collector_that_the_ca_file_names() {
    let _one = EXPORTING.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let ca = lifeline_sim::pki::Ca::new("collector CA").expect("CA");
    let cert = ca.issue("collector", &["localhost"]).expect("cert");
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).expect("write CA");
    let sink = Sink::start_tls(100, &cert.cert_pem, &cert.key_pem).expect("OTLP receiver");
    let endpoint = format!("https://localhost:{}", sink.addr.port());

    let export_one = |settings: OtlpSettings| async move {
        let pipeline = Pipeline::start(&settings).expect("pipeline");
        let counters = pipeline.counters();
        {
            let _sub = tracing::subscriber::set_default(
                tracing_subscriber::registry().with(pipeline.layer()),
            );
            let span = tracing::info_span!(target: "lifeline", "tls export check");
            span.in_scope(|| {});
        }
        stop(pipeline).await;
        counters
    };

    let mut trusting = OtlpSettings::to(endpoint.clone());
    trusting.ca_file = Some(ca_file.clone());
    let counters = export_one(trusting).await;
    assert!(
        sink.spans().iter().any(|s| s.name == "tls export check"),
        "span over TLS: {:?}",
        counters
    );

    let before = sink.received();
    let counters = export_one(OtlpSettings::to(endpoint)).await;
    assert_eq!(sink.received(), before, "no CA file: nothing trusted");
    assert!(
        counters
            .export_failed
            .load(std::sync::atomic::Ordering::Relaxed)
            > 0,
        "the failed export is counted: {counters:?}"
    );

    let mut missing = OtlpSettings::to("https://localhost:1".to_string());
    missing.ca_file = Some(dir.path().join("nope.pem"));
    let e = Pipeline::start(&missing).expect_err("a missing CA file is refused");
    assert!(e.to_string().contains("nope.pem"), "{e}");
}
