//! `/metrics` read back with a Prometheus text parser: the families the
//! families Lifeline declares, values that match what the test did, label
//! sets that carry a name from the network only where capped, and the alert
//! rules and dashboard reading only metrics that are served.

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

/// The sum of every sample named `name`.
fn total(s: &prometheus_parse::Scrape, name: &str) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .map(|x| match x.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Gauge(v) => v,
            _ => panic!("{name}: not a counter or a gauge"),
        })
        .sum()
}

/// Guards `/metrics`: parsed by a Prometheus parser, the families Lifeline
/// declares are there with values matching what the test did (stranded agents,
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
    let ingested = total(&m, "lifeline_events_ingested_total");
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
    // Alone on SQLite, it always leads.
    assert_eq!(value(&m, "lifeline_leader", &[]), 1.0);
    assert_eq!(value(&m, "lifeline_leader_term", &[]), 0.0);

    // Root causes and auth servers, by name: the stranded agents add up,
    // each cause is as old as its proxy's expiry, each auth server shows
    // its one current health.
    let causes: Vec<_> = m
        .samples
        .iter()
        .filter(|s| s.metric == "lifeline_root_cause_agents")
        .collect();
    let in_causes = total(&m, "lifeline_root_cause_agents");
    assert_eq!(
        in_causes,
        agents["stranded"].as_f64().unwrap_or(-1.0),
        "{causes:?}"
    );
    assert!(in_causes >= 1.0, "{causes:?}");
    for s in &causes {
        let (cause, resource) = (
            s.labels.get("cause").unwrap_or_default(),
            s.labels.get("resource").unwrap_or_default(),
        );
        assert!(!cause.is_empty() && !resource.is_empty(), "{s:?}");
        let age = value(
            &m,
            "lifeline_root_cause_age_seconds",
            &[("cause", cause), ("resource", resource)],
        );
        // At least as old as the summary (read before the scrape) says
        // the cause is, and not older than the test.
        let at = |v: &serde_json::Value| {
            humantime::parse_rfc3339(v.as_str().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{v}: {e}"))
        };
        let rc = summary["root_causes"]
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|r| r["cause"] == cause && r["resource"] == resource)
            })
            .unwrap_or_else(|| panic!("{cause} {resource} not in {summary}"));
        let floor = at(&summary["generated_at"])
            .duration_since(at(&rc["since"]))
            .unwrap_or_default()
            .as_secs_f64();
        assert!(
            age + 0.001 >= floor && age < floor + 3600.0,
            "{age} vs {floor}"
        );
        assert!(age > 0.0, "the proxy expired before the scrape: {age}");
    }
    for auth in ["auth-1", "auth-2"] {
        assert_eq!(
            value(
                &m,
                "lifeline_auth_server_health",
                &[("auth_server", auth), ("health", "SERVING")]
            ),
            1.0
        );
    }

    // Conventions: a prefix, counters end in _total, and labels are small
    // fixed sets: no value is any agent's name, and only the capped
    // families that say which resource is at fault name a proxy or an
    // auth server.
    assert!(stranded.iter().all(|a| a.starts_with("agent-")));
    let named = [
        "lifeline_root_cause_agents",
        "lifeline_root_cause_age_seconds",
        "lifeline_auth_server_health",
    ];
    for s in &m.samples {
        assert!(s.metric.starts_with("lifeline_"), "{}", s.metric);
        if matches!(s.value, prometheus_parse::Value::Counter(_)) {
            assert!(s.metric.ends_with("_total"), "{}", s.metric);
        }
        let names: &[&str] = if named.contains(&s.metric.as_str()) {
            &["agent-"]
        } else {
            &["agent-", "proxy-", "auth-"]
        };
        for (k, v) in s.labels.iter() {
            assert!(
                !names.iter().any(|p| v.starts_with(p)),
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

/// Guards the alert rules and the Grafana dashboard against renames: every
/// `lifeline_*` metric their expressions read is a family a running
/// Lifeline serves.
#[tokio::test(start_paused = true)]
async fn alert_rules_and_dashboard_read_only_served_metrics() {
    use lifeline::telemetry::{alerts, grafana};
    let c = Cluster::two_stranded_by_hand().await;
    let text = c
        .http
        .get(format!("{}/metrics", c.ll().base_url()))
        .send()
        .await
        .expect("GET /metrics")
        .text()
        .await
        .expect("body");
    let served: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let settings = alerts::AlertSettings {
        external_url: "https://lifeline.example.com".into(),
        stranded_for: std::time::Duration::from_secs(300),
    };
    let exprs: Vec<String> = alerts::expressions(&settings)
        .into_iter()
        .chain(grafana::expressions())
        .collect();
    let mut used = 0;
    for e in &exprs {
        let names = alerts::metrics_in(e);
        assert!(!names.is_empty(), "{e} reads no Lifeline metric");
        for n in names {
            assert!(served.contains(&n.as_str()), "{n} (in {e}) is not served");
            used += 1;
        }
    }
    assert!(used >= 30, "{used}");
    c.shutdown().await;
}
