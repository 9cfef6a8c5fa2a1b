//! `/metrics` read back with a Prometheus text parser: the families the
//! issue lists, values that match what the test did, and label sets that
//! never carry a name from the network.

use crate::support;
use support::{Cluster, STRANDED as AGENT};

fn scrape(text: &str) -> prometheus_parse::Scrape {
    prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .expect("valid exposition")
}

/// The value of the one sample named `name` with `labels`.
fn value(s: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    let found: Vec<f64> = s
        .samples
        .iter()
        .filter(|x| x.metric == name && labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .filter_map(|x| match &x.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(*v),
            _ => None,
        })
        .collect();
    assert_eq!(
        found.len(),
        1,
        "one sample {name}{labels:?}, found {found:?}"
    );
    found[0]
}

/// Guards `/metrics`: parsed by a Prometheus parser, the families the issue
/// lists are there with values matching what the test did (stranded agents,
/// expired proxies, one manual reconnect acked, events ingested, detection
/// and signal latency observed), names follow the conventions, and no label
/// carries an agent's name.
#[tokio::test(start_paused = true)]
async fn metrics_count_what_happened() {
    let c = Cluster::two_stranded_by_hand().await;
    let stranded = c.agents_in("stranded").await;
    assert_eq!(stranded.len(), 2, "{stranded:?}");
    let (status, body) = c
        .post(
            &format!("/api/v1/agents/{AGENT}/reconnect"),
            r#"{"reason":"metrics test"}"#,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    c.eventually("acked", || async {
        c.ok("/api/v1/signals?outcome=acked").await["items"]
            .as_array()
            .is_some_and(|a| a.len() == 1)
    })
    .await;
    c.flush().await;
    let summary = c.summary().await;

    let resp = c
        .http
        .get(format!("{}/metrics", c.ll().base_url()))
        .send()
        .await
        .expect("GET /metrics");
    assert_eq!(resp.status(), 200);
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
    let text = resp.text().await.expect("body");
    let m = scrape(&text);

    let agents = &summary["agents"];
    for st in ["healthy", "degraded", "stranded"] {
        assert_eq!(
            value(&m, "lifeline_agents", &[("state", st)]),
            agents[st].as_f64().unwrap_or(-1.0),
            "{st}"
        );
    }
    assert_eq!(value(&m, "lifeline_proxies", &[("status", "expired")]), 2.0);
    assert_eq!(value(&m, "lifeline_proxies", &[("status", "live")]), 2.0);
    assert_eq!(
        value(&m, "lifeline_auth_servers", &[("health", "SERVING")]),
        2.0
    );
    assert_eq!(
        value(&m, "lifeline_auth_servers", &[("health", "NOT_SERVING")]),
        0.0
    );
    for kind in ["proxy", "auth_server", "agent", "tunnel_connection"] {
        assert_eq!(
            value(
                &m,
                "lifeline_watcher_state",
                &[("kind", kind), ("state", "ready")]
            ),
            1.0
        );
        assert_eq!(
            value(
                &m,
                "lifeline_watcher_state",
                &[("kind", kind), ("state", "stale")]
            ),
            0.0
        );
        assert_eq!(
            value(&m, "lifeline_watcher_generation", &[("kind", kind)]),
            1.0
        );
    }
    // Events by kind and type add up to what the summary says was applied.
    let ingested: f64 = m
        .samples
        .iter()
        .filter(|s| s.metric == "lifeline_events_ingested_total")
        .map(|s| match s.value {
            prometheus_parse::Value::Counter(v) => v,
            _ => panic!("counter"),
        })
        .sum();
    assert_eq!(
        ingested,
        summary["ingest"]["events_applied"].as_f64().unwrap_or(-1.0)
    );
    assert!(
        value(
            &m,
            "lifeline_events_ingested_total",
            &[("kind", "proxy"), ("type", "put")]
        ) > 0.0
    );
    assert_eq!(
        value(
            &m,
            "lifeline_events_rejected_total",
            &[("reason", "bad_ttl")]
        ),
        0.0
    );
    // One manual reconnect, acked.
    for (outcome, n) in [
        ("sent", 1.0),
        ("acked", 1.0),
        ("failed", 0.0),
        ("timeout", 0.0),
        ("undeliverable", 0.0),
    ] {
        assert_eq!(
            value(
                &m,
                "lifeline_signals_total",
                &[("kind", "reconnect"), ("outcome", outcome)]
            ),
            n,
            "{outcome}"
        );
    }
    assert_eq!(
        value(
            &m,
            "lifeline_signal_latency_seconds_count",
            &[("kind", "reconnect")]
        ),
        1.0
    );
    // Both stranded agents (and any degraded ones) were detected.
    assert!(value(&m, "lifeline_detection_latency_seconds_count", &[]) >= 2.0);
    assert!(value(&m, "lifeline_discovery_messages_total", &[("mode", "full")]) >= 6.0);
    assert!(value(&m, "lifeline_discovery_bytes_total", &[("mode", "full")]) > 0.0);
    assert!(value(&m, "lifeline_store_batch_rows_count", &[]) > 0.0);
    assert!(value(&m, "lifeline_store_commit_seconds_count", &[]) > 0.0);
    assert_eq!(value(&m, "lifeline_agent_streams", &[]), 6.0);
    assert_eq!(value(&m, "lifeline_storm_guard_paused", &[]), 0.0);

    // Conventions: a prefix, counters end in _total, and labels are small
    // fixed sets: no value is any agent's, proxy's or auth server's name
    // (the stranded ones included).
    assert!(stranded.iter().all(|a| a.starts_with("agent-")));
    for s in &m.samples {
        assert!(s.metric.starts_with("lifeline_"), "{}", s.metric);
        if matches!(s.value, prometheus_parse::Value::Counter(_)) {
            assert!(s.metric.ends_with("_total"), "{}", s.metric);
        }
        for (k, v) in s.labels.iter() {
            assert!(
                !["agent-", "proxy-", "auth-"]
                    .iter()
                    .any(|p| v.starts_with(p)),
                "{} carries a name: {k}={v}",
                s.metric
            );
        }
    }
    for h in [
        "lifeline_detection_latency_seconds",
        "lifeline_signal_latency_seconds",
        "lifeline_store_commit_seconds",
    ] {
        assert!(text.contains(&format!("# TYPE {h} histogram")), "{h}");
    }
    // Each family is declared once, with its help: one HELP per TYPE.
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let family = line.split_whitespace().nth(2).unwrap_or_default();
        let helps = text
            .lines()
            .filter(|l| l.starts_with(&format!("# HELP {family} ")))
            .count();
        assert_eq!(helps, 1, "{family} has {helps} HELP lines");
    }
    c.shutdown().await;
}
