//! `bench resync`: a full resync of a large cluster served by another
//! process (`bench cluster`), cold and warm, and Lifeline's memory per agent.

use super::*;

/// The body of `bench cluster`: a simulated cluster served until stdin
/// closes.
pub(super) async fn cluster_process(
    agents: usize,
    proxies: usize,
    tunnels_per_agent: usize,
    teleport_identity: Option<PathBuf>,
) -> Result<Value, BenchError> {
    use tokio::io::AsyncBufReadExt;
    let mut spec = spec(agents, proxies, tunnels_per_agent, 1024);
    // Real time, like a real cluster's servers.
    spec.nodelay = true;
    spec.teleport = teleport_identity
        .is_some()
        .then(crate::sim::TeleportSpec::default);
    let sim = SimCluster::start(spec, Clock::system())
        .await
        .map_err(BenchError::Sim)?;
    match &teleport_identity {
        Some(path) => {
            sim.write_identity(path).map_err(BenchError::Sim)?;
            println!("listening {}", sim.addr());
        }
        None => println!("listening {}", sim.uri()),
    }
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
        teleport_identity: Option<&std::path::Path>,
    ) -> Result<ClusterChild, BenchError> {
        let mut args: Vec<String> = [
            "cluster",
            "--agents",
            &agents.to_string(),
            "--proxies",
            &proxies.to_string(),
            "--tunnels-per-agent",
            &tunnels_per_agent.to_string(),
        ]
        .map(String::from)
        .to_vec();
        if let Some(p) = teleport_identity {
            args.extend(["--teleport-identity".to_string(), p.display().to_string()]);
        }
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

/// One resync leg: a cluster process, Lifeline started cold against it,
/// then a warm resync after the stream is killed.
struct ResyncLeg {
    counts: (usize, usize, usize),
    cold: Duration,
    warm: Duration,
    rss_kib: [u64; 3],
}

async fn resync_leg(
    agents: usize,
    proxies: usize,
    tunnels_per_agent: usize,
    page_size: u32,
    scratch: &Scratch,
    db: &str,
    source: SourceKind,
) -> Result<ResyncLeg, BenchError> {
    let clock = Clock::system();
    let identity = scratch.db(&format!("{db}.identity"));
    let teleport = (source == SourceKind::Teleport).then_some(identity.as_path());
    // The cluster lives in another process: the RSS below is Lifeline's.
    let mut child = ClusterChild::start(agents, proxies, tunnels_per_agent, teleport).await?;
    let mut cfg = config_for(&child.uri, SIM_JOIN_TOKEN, scratch.db(db), page_size);
    if let Some(identity) = teleport {
        cfg.cluster.source = SourceKind::Teleport;
        cfg.cluster.identity_file = Some(identity.to_path_buf());
    }
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
    Ok(ResyncLeg {
        counts,
        cold,
        warm,
        rss_kib: [rss_before, rss_after, rss_warm],
    })
}

pub(super) async fn resync(
    agents: usize,
    proxies: usize,
    tunnels_per_agent: usize,
    page_size: u32,
    source_rounds: usize,
    source: SourceKind,
) -> Result<Value, BenchError> {
    let scratch = Scratch::new("resync");
    // First and alone in the process: its memory figures are Lifeline's.
    let ResyncLeg {
        counts,
        cold,
        warm,
        rss_kib: [rss_before, rss_after, rss_warm],
    } = resync_leg(
        agents,
        proxies,
        tunnels_per_agent,
        page_size,
        &scratch,
        "resync.db",
        source,
    )
    .await?;
    let per_agent = rss_after.saturating_sub(rss_before) as f64 * 1024.0 / counts.0.max(1) as f64;
    let teleport = if source_rounds == 0 {
        Value::Null
    } else {
        // Cold only: a warm resync waits out a random reconnect backoff.
        against_lifeline(source_rounds, "cold resync ms", false, |source, db| {
            let scratch = &scratch;
            async move {
                let leg = resync_leg(
                    agents,
                    proxies,
                    tunnels_per_agent,
                    page_size,
                    scratch,
                    &db,
                    source,
                )
                .await?;
                Ok(leg.cold.as_secs_f64() * 1000.0)
            }
        })
        .await?
    };
    Ok(json!({
        "scenario": "resync",
        "source": source_name(source),
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
        "teleport_source": teleport,
        "peak_rss_kib": peak_rss_kib(),
    }))
}
