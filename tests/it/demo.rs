//! `lifeline demo` as a newcomer starts it: a healthy start counts
//! nothing wrong. Every counter whose name says something went wrong
//! (`*_rejected*`, `*_refused*`, `*_failed*`) reads 0, and so does every
//! such figure of the summary, once the 200 agents are in and connected.

use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

pub(crate) const TOKEN: &str = "demo-test-token";
const AGENTS: u64 = 200;

/// Starts `lifeline demo` with `args` on free ports, its database in
/// `dir`: the process, and its dashboard's URL once it prints it (the
/// rest of its output is drained).
pub(crate) async fn start_demo(
    dir: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (tokio::process::Child, String, Vec<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--token",
            TOKEN,
            "--db",
        ])
        .arg(dir.join("demo.db"))
        .args(args)
        .envs(env.iter().copied())
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("lifeline demo starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let mut banner = Vec::new();
    let base = tokio::time::timeout(Duration::from_secs(120), async {
        while let Ok(Some(l)) = lines.next_line().await {
            banner.push(l.clone());
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
    // The banner's lines after the URL, then the rest drained.
    for _ in 0..12 {
        match tokio::time::timeout(Duration::from_secs(5), lines.next_line()).await {
            Ok(Ok(Some(l))) => banner.push(l),
            _ => break,
        }
    }
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, base, banner)
}

#[tokio::test]
async fn a_healthy_demo_start_counts_nothing_wrong() {
    let dir = tempfile::tempdir().expect("dir");
    let (mut child, base, _) = start_demo(dir.path(), &["--chaos-period", "0"], &[]).await;
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let req = http.get(format!("{base}{path}")).bearer_auth(TOKEN);
        async move { req.send().await.ok()?.text().await.ok() }
    };
    // Every agent in, healthy and connected (real time: the demo runs on
    // its own clock), polled until a bound.
    // The demo is another process, on real time.
    let start = lifeline::clock::Stopwatch::start();
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

/// `lifeline demo --config FILE` (or `LIFELINE_CONFIG`) tells whom the
/// file's `[notify]` names: the demo's chaos reaches a webhook, signed.
#[tokio::test]
async fn the_demo_tells_the_webhook_its_config_names() {
    use lifeline::clock::Clock;
    use lifeline_sim::receiver::Receiver;
    let dir = tempfile::tempdir().expect("dir");
    let rx = Receiver::start(Clock::system()).await.expect("receiver");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "whsec_demo\n").expect("secret");
    let config = dir.path().join("demo.toml");
    std::fs::write(
        &config,
        format!(
            "[notify]\ncluster = \"demo\"\n[[notify.webhooks]]\nname = \"local\"\nurl = \"{}\"\nsecret_file = \"{}\"\n",
            rx.url("/hook"),
            secret.display()
        ),
    )
    .expect("config");
    let config = config.display().to_string();
    let (mut child, _, banner) = start_demo(
        dir.path(),
        &["--agents", "20", "--ttl", "4s", "--chaos-period", "2s"],
        &[("LIFELINE_CONFIG", config.as_str())],
    )
    .await;
    assert!(
        banner
            .iter()
            .any(|l| l.contains("notify") && l.contains("webhooks local")),
        "the banner says whom it tells: {banner:#?}"
    );
    // Real time (the demo is another process): polled, up to 90 s.
    let mut polls = 0;
    let opened = loop {
        if let Some(r) = rx
            .got()
            .into_iter()
            .find(|r| r.json()["type"] == "incident.opened")
        {
            break r;
        }
        polls += 1;
        assert!(
            polls < 360,
            "no incident reached the webhook: {:?}",
            rx.got().len()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(opened.json()["cluster"], "demo");
    let h = opened
        .header(lifeline::notify::sign::HEADER)
        .expect("signed");
    let now = opened.at.as_micros() / 1_000_000;
    assert_eq!(
        lifeline::notify::sign::verify(b"whsec_demo", h, &opened.body, now, 300),
        Ok(())
    );
    child.kill().await.ok();
}

/// A section that makes no sense in a demo is refused by name, and the
/// demo does not start.
#[tokio::test]
async fn the_demo_refuses_a_config_section_it_cannot_use() {
    let dir = tempfile::tempdir().expect("dir");
    let config = dir.path().join("demo.toml");
    std::fs::write(&config, "[storage]\npath = \"/tmp/x.db\"\n").expect("config");
    let out = Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config)
        .arg("--db")
        .arg(dir.path().join("demo.db"))
        .stdin(Stdio::null())
        .output()
        .await
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("[storage] makes no sense in a demo") && err.contains("[notify] and [access]"),
        "{err}"
    );
}
