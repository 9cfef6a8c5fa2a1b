//! Every `lifeline-bench` scenario, run at a tiny size through the real
//! command line (the same binary and entry point an operator uses), its JSON
//! checked for every field and for values that make sense: counts as
//! expected, rates and latencies positive, nothing lost. No time threshold is
//! ever asserted here: the figures belong in the book, from a release
//! build. A scenario that breaks fails this test, and so CI.

use std::process::Command;

use serde_json::Value;

/// Runs `lifeline-bench <args>`, whatever its outcome.
fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_lifeline-bench"))
        .args(args)
        .env_remove("LIFELINE_CONFIG")
        .output()
        .expect("the lifeline binary runs")
}

/// Runs `lifeline-bench <args>` and parses its JSON.
fn bench(args: &[&str]) -> Value {
    let out = run(args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "lifeline-bench {args:?} failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("lifeline-bench {args:?}: not JSON ({e}):\n{stdout}"))
}

/// The value at a `/`-separated path, which must exist.
fn at<'a>(v: &'a Value, path: &str) -> &'a Value {
    let p = format!("/{path}");
    v.pointer(&p)
        .unwrap_or_else(|| panic!("missing field {path} in {v:#}"))
}

fn num(v: &Value, path: &str) -> f64 {
    at(v, path)
        .as_f64()
        .unwrap_or_else(|| panic!("{path} is not a number in {v:#}"))
}

fn positive(v: &Value, path: &str) -> f64 {
    let n = num(v, path);
    assert!(n > 0.0, "{path} = {n}, expected > 0 in {v:#}");
    n
}

fn eq(v: &Value, path: &str, want: f64) {
    let n = num(v, path);
    assert_eq!(n, want, "{path} in {v:#}");
}

/// A latency summary: p50 ≤ p99 ≤ max, all positive, `n` if present.
fn latency(v: &Value, path: &str, n: Option<f64>) {
    let p50 = positive(v, &format!("{path}/p50"));
    let p99 = positive(v, &format!("{path}/p99"));
    let max = positive(v, &format!("{path}/max"));
    assert!(p50 <= p99 && p99 <= max, "{path}: {p50} {p99} {max}");
    if let Some(n) = n {
        eq(v, &format!("{path}/n"), n);
    }
}

/// One round of the teleport source against the lifeline source ran: a
/// figure for each and their ratio.
fn source_comparison(v: &Value) {
    for leg in ["lifeline", "teleport"] {
        assert_eq!(
            at(v, &format!("teleport_source/{leg}"))
                .as_array()
                .map(Vec::len),
            Some(1),
            "{v}"
        );
        positive(v, &format!("teleport_source/{leg}/0"));
    }
    positive(v, "teleport_source/ratio");
    eq(v, "teleport_source/target/ratio", 0.85);
}

/// A resync comparison also says where the CPU went: each process's time
/// per source (a tiny leg may take under one 10 ms tick), and how
/// Lifeline's own compares.
fn cpu_of_sources(v: &Value) {
    for process in ["lifeline_process", "cluster_process"] {
        for leg in ["lifeline", "teleport"] {
            let path = format!("teleport_source/cpu_ms/{process}/{leg}/0");
            let ms = num(v, &path);
            assert!(ms >= 0.0, "{path} = {ms} in {v:#}");
        }
    }
    positive(v, "teleport_source/cpu_ms/lifeline_process/lifeline/0");
    positive(v, "teleport_source/cpu_ms/lifeline_process_ratio");
}

#[test]
fn bench_ingest_runs_and_loses_nothing() {
    let server = crate::support::postgres_server("bench_ingest");
    let mut args = vec![
        "ingest",
        "--agents",
        "200",
        "--proxies",
        "10",
        "--events",
        "5000",
        "--export-rounds",
        "1",
        "--source-rounds",
        "1",
    ];
    if let Some(url) = &server {
        args.extend(["--postgres", url.as_str(), "--postgres-rounds", "1"]);
    }
    let v = bench(&args);
    assert_eq!(at(&v, "scenario"), "ingest");
    source_comparison(&v);
    // An ingest leg times the pipeline alone, not its process's CPU.
    assert!(v.pointer("/teleport_source/cpu_ms").is_none(), "{v:#}");
    eq(&v, "events", 5000.0);
    positive(&v, "pipeline_events_per_s");
    positive(&v, "raw_insert_events_per_s");
    positive(&v, "ratio");
    positive(&v, "pipeline_seconds");
    eq(&v, "history_rows_dropped", 0.0);
    // The export comparison ran: one round, both legs, every span received.
    assert_eq!(
        at(&v, "export/off_events_per_s").as_array().map(Vec::len),
        Some(1)
    );
    positive(&v, "export/off_events_per_s/0");
    positive(&v, "export/on_events_per_s/0");
    positive(&v, "export/ratio");
    positive(&v, "export/spans_received");
    eq(&v, "export/spans_lost", 0.0);
    positive(&v, "peak_rss_kib");
    // The same stream on PostgreSQL, in the same run.
    if server.is_some() {
        for f in [
            "pipeline_events_per_s",
            "raw_insert_events_per_s",
            "ratio",
            "sqlite_pipeline_events_per_s",
            "postgres_to_sqlite_pipeline",
        ] {
            positive(&v, &format!("postgres/{f}"));
        }
        positive(&v, "postgres/rounds/postgres/0");
        positive(&v, "postgres/rounds/sqlite/0");
        positive(&v, "postgres/rounds/ratios/0");
        eq(&v, "postgres/history_rows_dropped", 0.0);
    } else {
        assert!(at(&v, "postgres").is_null(), "{v:#}");
    }
}

#[test]
fn bench_resync_runs_with_the_cluster_in_another_process() {
    let v = bench(&[
        "resync",
        "--agents",
        "300",
        "--proxies",
        "10",
        "--tunnels-per-agent",
        "2",
        "--page-size",
        "100",
        "--source-rounds",
        "1",
    ]);
    assert_eq!(at(&v, "scenario"), "resync");
    source_comparison(&v);
    cpu_of_sources(&v);
    eq(&v, "agents", 300.0);
    eq(&v, "proxies", 10.0);
    eq(&v, "tunnels", 600.0);
    positive(&v, "cold_start_resync_ms");
    positive(&v, "warm_resync_ms");
    let before = positive(&v, "lifeline_rss_kib/before_start");
    let after = positive(&v, "lifeline_rss_kib/after_resync");
    assert!(
        after > before,
        "the model takes memory: {before} → {after} KiB"
    );
    positive(&v, "lifeline_rss_bytes_per_agent");
    eq(&v, "target_rss_bytes_per_agent", 2048.0);
}

#[test]
fn bench_resync_measures_memory_with_the_teleport_source() {
    let v = bench(&[
        "resync",
        "--agents",
        "300",
        "--proxies",
        "10",
        "--page-size",
        "100",
        "--source-rounds",
        "0",
        "--source",
        "teleport",
    ]);
    assert_eq!(at(&v, "source"), "teleport");
    eq(&v, "agents", 300.0);
    eq(&v, "tunnels", 600.0);
    positive(&v, "cold_start_resync_ms");
    positive(&v, "lifeline_rss_bytes_per_agent");
    assert!(at(&v, "teleport_source").is_null(), "{v:#}");
}

#[test]
fn bench_resync_scale_compares_time_per_agent_across_sizes() {
    let v = bench(&[
        "resync-scale",
        "--sizes",
        "400,200",
        "--agents-per-proxy",
        "20",
        "--page-size",
        "100",
        "--rounds",
        "2",
    ]);
    assert_eq!(at(&v, "scenario"), "resync-scale");
    eq(&v, "rounds", 2.0);
    let sizes = at(&v, "sizes").as_array().expect("sizes is a list");
    assert_eq!(sizes.len(), 2, "{v:#}");
    // Smallest first, whatever order they were given in.
    for (i, (agents, proxies)) in [(200.0, 10.0), (400.0, 20.0)].into_iter().enumerate() {
        let row = &sizes[i];
        eq(row, "agents", agents);
        eq(row, "proxies", proxies);
        eq(row, "tunnels", agents * 2.0);
        let legs = at(row, "cold_resync_ms").as_array().expect("legs");
        assert_eq!(legs.len(), 2, "a leg per round: {row:#}");
        positive(row, "median_cold_resync_ms");
        positive(row, "us_per_agent");
        positive(row, "per_agent_vs_smallest");
    }
    eq(&sizes[0], "per_agent_vs_smallest", 1.0);
    let worst = positive(&v, "worst_per_agent_vs_smallest");
    assert!(worst >= 1.0, "the smallest size compares as 1: {v:#}");
    eq(&v, "target/per_agent_vs_smallest", 1.25);
}

#[test]
fn bench_resync_scale_refuses_an_empty_size() {
    let out = run(&["resync-scale", "--sizes", "0,100"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a fleet of 0 agents is refused");
    assert!(
        stderr.contains("must be at least 1"),
        "the error names the options: {stderr}"
    );
}

#[test]
fn bench_detect_sees_every_stranded_agent() {
    let v = bench(&[
        "detect",
        "--agents",
        "400",
        "--proxies",
        "20",
        "--expiring",
        "4",
        "--spacing",
        "20ms",
    ]);
    assert_eq!(at(&v, "scenario"), "detect");
    let expected = positive(&v, "stranded_expected");
    eq(&v, "stranded_seen", expected);
    latency(&v, "latency_ms", None);
    positive(&v, "timers_fired");
}

#[test]
fn bench_notify_tells_every_incident_both_ways() {
    let v = bench(&[
        "notify",
        "--incidents",
        "3",
        "--per-hour",
        "36000",
        "--agents",
        "200",
        "--events",
        "2000",
        "--rounds",
        "1",
        "--fleet",
        "40",
        "--webhooks",
        "3",
        "--hung",
        "1",
    ]);
    assert_eq!(at(&v, "scenario"), "notify");
    let opened = positive(&v, "incidents_opened");
    // Each incident told by each of the two answering webhooks; the hung
    // one holds neither of them up.
    latency(&v, "webhook_opened_ms", Some(opened * 2.0));
    latency(&v, "alertmanager_first_post_ms", Some(opened));
    positive(&v, "ingest/ratio");
    positive(&v, "ingest/off_events_per_s/0");
    positive(&v, "ingest/on_events_per_s/0");
}

#[test]
fn bench_fanout_delivers_every_heartbeat_to_every_agent() {
    let v = bench(&[
        "fanout",
        "--agents",
        "30",
        "--rounds",
        "3",
        "--per-connection",
        "10",
    ]);
    assert_eq!(at(&v, "scenario"), "fanout");
    eq(&v, "agents", 30.0);
    eq(&v, "deliveries_missing", 0.0);
    latency(&v, "heartbeat_to_each_agent_ms", Some(90.0));
    latency(&v, "heartbeat_to_every_agent_ms", Some(3.0));
    positive(&v, "server_rss_kib/with_agents");
    num(&v, "server_rss_per_agent_kib");
    positive(&v, "discovery/discovery_delta");
}

#[test]
fn bench_discovery_traffic_compares_delta_and_full() {
    let v = bench(&[
        "discovery-traffic",
        "--agents",
        "100",
        "--proxies",
        "5",
        "--ttl",
        "1m",
        "--duration",
        "3m",
        "--streams",
        "2",
    ]);
    assert_eq!(at(&v, "scenario"), "discovery-traffic");
    for mode in ["delta", "full"] {
        positive(&v, &format!("{mode}/messages_per_agent"));
        positive(&v, &format!("{mode}/bytes_per_agent"));
        positive(&v, &format!("{mode}/bytes_all_agents"));
    }
    let r = positive(&v, "delta_over_full_bytes");
    assert!(r < 1.0, "deltas carry fewer bytes than full lists: {r}");
    positive(&v, "delta_over_full_messages");
}

#[test]
fn bench_reconnect_sees_every_ack() {
    let v = bench(&["reconnect", "--agents", "20", "--requests", "20"]);
    assert_eq!(at(&v, "scenario"), "reconnect");
    latency(&v, "post_to_ack_ms", Some(20.0));
    latency(&v, "post_response_ms", Some(20.0));
    eq(&v, "acks_seen_by_agents", 20.0);
}

#[test]
fn bench_recovery_recovers_every_stranded_agent() {
    let v = bench(&["recovery", "--agents", "40"]);
    assert_eq!(at(&v, "scenario"), "recovery");
    // Agents on the two stopped proxies: every fourth.
    eq(&v, "stranded", 10.0);
    eq(&v, "recovered", 10.0);
    latency(&v, "expiry_to_each_recovered_ms", Some(10.0));
    positive(&v, "expiry_to_all_recovered_ms");
    positive(&v, "signals/sent");
    // Only agents with somewhere to go are signalled: none fails.
    eq(&v, "signals/failed", 0.0);
}

/// The same on a Teleport cluster: no agent holds a stream, a sidecar
/// beside each restarts it, and every stranded agent comes back through
/// its restart, at most two in flight at once.
#[test]
fn bench_recovery_through_sidecar_restarts() {
    let v = bench(&[
        "recovery",
        "--agents",
        "40",
        "--source",
        "teleport",
        "--restart",
        "200ms",
        "--restart-cap",
        "2",
    ]);
    assert_eq!(at(&v, "source"), "teleport");
    eq(&v, "stranded", 10.0);
    eq(&v, "recovered", 10.0);
    eq(&v, "restart_cap", 2.0);
    latency(&v, "expiry_to_each_recovered_ms", Some(10.0));
    positive(&v, "signals/acked");
    eq(&v, "signals/failed", 0.0);
}

/// Lifeline under chaos for a few seconds, its cluster in another process:
/// every agent connected, memory sampled each second and set against the
/// budget's parts. Whether it levels off is a figure of the full run (30
/// minutes, the book's Memory budget page), never asserted here.
#[test]
fn bench_soak_samples_memory_against_the_budget() {
    let v = bench(&[
        "soak",
        "--agents",
        "60",
        "--proxies",
        "3",
        "--duration",
        "4s",
        "--sample",
        "1s",
        "--chaos-period",
        "1s",
        "--ttl",
        "2s",
    ]);
    assert_eq!(at(&v, "scenario"), "soak");
    eq(&v, "agents", 60.0);
    eq(&v, "streams", 60.0);
    let samples = at(&v, "samples").as_array().expect("samples");
    assert!(
        samples.len() >= 5,
        "a sample a second and one at the end: {v:#}"
    );
    for s in samples {
        positive(s, "rss_kib");
        positive(s, "anon_kib");
        positive(s, "db_kib");
    }
    let ready = positive(&v, "rss_kib/ready");
    assert!(num(&v, "rss_kib/max") >= ready, "{v:#}");
    for part in ["fixed", "page_cache", "fleet", "streams"] {
        positive(&v, &format!("budget_kib/{part}"));
    }
    let total = num(&v, "budget_kib/total");
    let parts: f64 = ["fixed", "page_cache", "fleet", "streams"]
        .iter()
        .map(|p| num(&v, &format!("budget_kib/{p}")))
        .sum();
    assert!(
        (total - parts).abs() <= 4.0,
        "the total is its parts: {v:#}"
    );
    assert!(at(&v, "within_budget").is_boolean(), "{v:#}");
    assert!(at(&v, "levelled_off").is_boolean(), "{v:#}");
    assert_eq!(
        at(&v, "rss_median_kib_by_quarter").as_array().map(Vec::len),
        Some(4),
        "{v:#}"
    );
    assert!(at(&v, "summary").is_object(), "{v:#}");
}

/// Three `lifeline serve` processes on one PostgreSQL database: the leader
/// killed with SIGKILL during an incident, manual reconnects across
/// replicas, and a leader cut off from the database. Times are bounded only
/// loosely (a loaded CI machine); what must hold exactly is checked
/// exactly: one leader at a time, every stream moved, no signal lost or
/// delivered twice, no episode duplicated or left open.
#[test]
fn bench_failover_hands_over_and_loses_nothing() {
    let Some(url) = crate::support::postgres_server("bench_failover") else {
        return;
    };
    let v = bench(&[
        "failover",
        "--postgres",
        &url,
        "--agents",
        "30",
        "--lease",
        "2s",
        "--requests",
        "10",
    ]);
    assert_eq!(at(&v, "scenario"), "failover");
    eq(&v, "replicas", 3.0);
    let lease = num(&v, "leader_lease_ms");
    assert_eq!(lease, 2000.0);
    // SIGKILL: a follower takes the lease (the dead leader's last renewal
    // left at most one lease to wait), then signals and everyone recovers.
    assert_ne!(at(&v, "kill/new_leader"), at(&v, "kill/leader"), "{v:#}");
    let took = positive(&v, "kill/to_new_lease_ms");
    assert!(
        took <= 2.0 * lease,
        "the lease took {took} ms to move: {v:#}"
    );
    let first = positive(&v, "kill/to_first_automatic_signal_ms");
    assert!(first >= took, "{v:#}");
    positive(&v, "kill/to_every_agent_recovered_ms");
    let moved = positive(&v, "kill/agent_streams_on_it");
    eq(&v, "kill/agent_streams_moved", moved);
    // The audit against what the agents saw.
    positive(&v, "audit/signal_rows");
    positive(&v, "audit/acks_by_agents");
    eq(&v, "audit/acked_without_a_row", 0.0);
    eq(&v, "audit/signals_delivered_twice", 0.0);
    // Episodes.
    positive(&v, "episodes/total");
    let open = num(&v, "episodes/open");
    eq(
        &v,
        "episodes/degraded_or_stranded_in_the_leaders_model",
        open,
    );
    eq(&v, "episodes/open_stranded", 0.0);
    eq(&v, "episodes/duplicated", 0.0);
    eq(&v, "episodes/overlapping", 0.0);
    // Manual reconnects through one replica to agents on another.
    latency(&v, "manual_cross_replica/post_to_ack_ms", Some(10.0));
    assert_ne!(
        at(&v, "manual_cross_replica/api_on"),
        at(&v, "manual_cross_replica/streams_on"),
        "{v:#}"
    );
    latency(&v, "settings_cross_replica/put_to_applied_ms", Some(10.0));
    // Cut off: it stops leading before its lease ends; the next takes over
    // only after.
    assert_eq!(
        at(&v, "cutoff/stepped_down_before_lease_end"),
        true,
        "{v:#}"
    );
    assert_eq!(at(&v, "cutoff/taken_over_after_lease_end"), true, "{v:#}");
    assert_ne!(
        at(&v, "cutoff/new_leader"),
        at(&v, "cutoff/leader"),
        "{v:#}"
    );
}

#[test]
fn bench_ui_renders_every_page() {
    let server = crate::support::postgres_server("bench_ui");
    let mut args = vec![
        "ui",
        "--agents",
        "300",
        "--proxies",
        "10",
        "--expiring",
        "3",
        "--requests",
        "5",
        "--history-days",
        "2",
        "--incidents",
        "20",
        "--incident-agents",
        "5",
    ];
    if let Some(url) = &server {
        args.extend(["--postgres", url.as_str()]);
    }
    let v = bench(&args);
    let mut legs = vec![""];
    if server.is_some() {
        legs.push("postgres/");
    }
    for leg in legs {
        assert_eq!(at(&v, &format!("{leg}scenario")), "ui");
        eq(&v, &format!("{leg}agents"), 300.0);
        positive(&v, &format!("{leg}stranded"));
        eq(&v, &format!("{leg}history/incidents"), 20.0);
        eq(&v, &format!("{leg}history/episodes"), 100.0);
        positive(&v, &format!("{leg}history/minute_counts"));
        for page in [
            "overview",
            "stranded_agents_page",
            "agents_page_filter_matching_nothing",
            "agents_page_filter_matching_few",
            "agents_page_filter_matching_many",
            "incidents_page",
            "incident_page",
        ] {
            latency(&v, &format!("{leg}{page}/render_ms"), None);
            positive(&v, &format!("{leg}{page}/html_bytes"));
        }
        for api in [
            "history_24h_1m",
            "agents_api_filter_matching_nothing",
            "agents_api_filter_matching_many",
        ] {
            latency(&v, &format!("{leg}{api}/round_trip_ms"), None);
            positive(&v, &format!("{leg}{api}/json_bytes"));
        }
        positive(&v, &format!("{leg}overview_download_bytes/total"));
        positive(&v, &format!("{leg}overview_download_bytes/total_gzip"));
    }
}
