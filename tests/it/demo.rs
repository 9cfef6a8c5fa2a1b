//! `lifeline demo` as a newcomer starts it: a healthy start counts
//! nothing wrong. Every counter whose name says something went wrong
//! (`*_rejected*`, `*_refused*`, `*_failed*`) reads 0, and so does every
//! such figure of the summary, once the 200 agents are in and connected.

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const TOKEN: &str = "demo-test-token";
const AGENTS: u64 = 200;

#[tokio::test]
async fn a_healthy_demo_start_counts_nothing_wrong() {
    let dir = tempfile::tempdir().expect("dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--chaos-period",
            "0",
            "--token",
            TOKEN,
            "--db",
        ])
        .arg(dir.path().join("demo.db"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("lifeline demo starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let base = tokio::time::timeout(Duration::from_secs(120), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(u) = l.trim().strip_prefix("dashboard") {
                return Some(u.trim().trim_end_matches('/').to_string());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .expect("the demo prints its dashboard URL");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let req = http.get(format!("{base}{path}")).bearer_auth(TOKEN);
        async move { req.send().await.ok()?.text().await.ok() }
    };
    // Every agent in, healthy and connected (real time: the demo runs on
    // its own clock), polled until a bound.
    #[allow(clippy::disallowed_methods)] // the demo is another process, on real time
    let start = Instant::now();
    let summary = loop {
        let s: Value = get("/api/v1/summary")
            .await
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let a = &s["fleet"]["agents"];
        let a = if a.is_null() { &s["agents"] } else { a };
        if a["healthy"] == AGENTS && s["signals"]["connected_agents"] == AGENTS {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the demo's agents did not all turn healthy and connected: {s}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    eprintln!(
        "demo: {AGENTS} agents healthy and connected {:?} after its dashboard was up",
        start.elapsed()
    );
    let mut wrong = Vec::new();
    crate::support::wrong_figures("summary", &summary, &mut wrong);
    let metrics = get("/metrics").await.expect("metrics");
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        let Some((series, value)) = line.rsplit_once(' ') else {
            continue;
        };
        let name = series.split('{').next().unwrap_or(series);
        let counts_wrong = (["_rejected", "_refused", "_failed"]
            .iter()
            .any(|w| name.contains(w))
            && name.ends_with("_total"))
            || ["outcome=\"failed\"", "outcome=\"refused\""]
                .iter()
                .any(|o| series.contains(o));
        if counts_wrong && value.parse::<f64>().ok() != Some(0.0) {
            wrong.push(line.to_string());
        }
    }
    assert!(
        wrong.is_empty(),
        "a healthy demo start counts these as wrong: {wrong:#?}"
    );
    child.kill().await.ok();
}
