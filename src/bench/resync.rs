//! `bench resync`: a full resync of a large cluster served by another
//! process (`bench cluster`), cold and warm, and Lifeline's memory per agent.

use super::*;

/// The body of `bench cluster`: a simulated cluster served until stdin
/// closes.
pub(super) async fn cluster_process(
    agents: usize,
    proxies: usize,
    tunnels_per_agent: usize,
) -> Result<Value, BenchError> {
    use tokio::io::AsyncBufReadExt;
    let sim = SimCluster::start(
        spec(agents, proxies, tunnels_per_agent, 1024),
        Clock::system(),
    )
    .await
    .map_err(BenchError::Sim)?;
    println!("listening {}", sim.uri());
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim() == "kill-streams" {
            sim.kill_streams();
        }
    }
    sim.shutdown();
    Ok(json!({"scenario": "cluster", "agents": agents}))
}

/// A `bench cluster` child process.
pub(super) struct ClusterChild {
    child: BenchChild,
    uri: String,
}

impl ClusterChild {
    async fn start(
        agents: usize,
        proxies: usize,
        tunnels_per_agent: usize,
    ) -> Result<ClusterChild, BenchError> {
        let args = [
            "cluster",
            "--agents",
            &agents.to_string(),
            "--proxies",
            &proxies.to_string(),
            "--tunnels-per-agent",
            &tunnels_per_agent.to_string(),
        ]
        .map(String::from);
        let mut child = BenchChild::spawn(&args, &[])?;
        let line = child
            .line(
                Instant::now() + Duration::from_secs(600),
                "cluster process starting",
            )
            .await?;
        let uri = line
            .strip_prefix("listening ")
            .ok_or_else(|| BenchError::Agents(format!("cluster process said {line:?}")))?
            .to_string();
        Ok(ClusterChild { child, uri })
    }
}

pub(super) async fn resync(
    agents: usize,
    proxies: usize,
    tunnels_per_agent: usize,
    page_size: u32,
) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("resync");
    // The cluster lives in another process: the RSS below is Lifeline's.
    let mut child = ClusterChild::start(agents, proxies, tunnels_per_agent).await?;
    let mut cfg = config_for(
        &child.uri,
        SIM_JOIN_TOKEN,
        scratch.db("resync.db"),
        page_size,
    );
    cfg.signals.auto_reconnect = false;
    let rss_before = proc_status_kib("VmRSS:").unwrap_or(0);
    let t0 = Instant::now();
    let ll = Lifeline::start(&cfg, clock).await?;
    ll.fleet.wait_ready().await?;
    let sizes = ll.fleet.sizes().await?;
    let counts = (sizes.agents, sizes.proxies, sizes.tunnels);
    let cold = t0.elapsed();
    // Let the first snapshot reach SQLite, so the writer's batch is not
    // counted as the model's memory.
    ll.fleet.flush().await?;
    let rss_after = proc_status_kib("VmRSS:").unwrap_or(0);

    // A second resync on a warm process: the stream dies, comes back.
    child.child.send("kill-streams").await?;
    ll.fleet.wait_not_ready().await?;
    let t1 = Instant::now();
    ll.fleet.wait_ready().await?;
    ll.fleet.settled().await?;
    let warm = t1.elapsed();
    ll.fleet.flush().await?;
    let rss_warm = proc_status_kib("VmRSS:").unwrap_or(0);
    ll.shutdown().await;
    child.child.finish().await;
    let per_agent = rss_after.saturating_sub(rss_before) as f64 * 1024.0 / counts.0.max(1) as f64;
    Ok(json!({
        "scenario": "resync",
        "agents": counts.0,
        "proxies": counts.1,
        "tunnels": counts.2,
        "page_size": page_size,
        "cold_start_resync_ms": cold.as_millis(),
        "warm_resync_ms": warm.as_millis(),
        "note": "warm_resync_ms includes the reconnect backoff (full jitter from 250 ms); the simulated cluster runs in another process",
        "target_ms": 2000,
        "lifeline_rss_kib": {
            "before_start": rss_before,
            "after_resync": rss_after,
            "after_warm_resync": rss_warm,
        },
        "lifeline_rss_bytes_per_agent": per_agent.round(),
        "target_rss_bytes_per_agent": 2048,
        "peak_rss_kib": peak_rss_kib(),
    }))
}
