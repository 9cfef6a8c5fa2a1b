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
        .then(lifeline_sim::TeleportSpec::default);
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
        let (child, uri) = BenchChild::spawn_listening(&args, "cluster process starting").await?;
        Ok(ClusterChild { child, uri })
    }
}

/// One resync leg: a cluster process, Lifeline started cold against it,
/// then (if asked) a warm resync after the stream is killed.
struct ResyncLeg {
    counts: (usize, usize, usize),
    cold: Duration,
    /// CPU time spent during the cold resync, when `/proc` tells it.
    cold_cpu: Option<Cpu>,
    /// None when the leg skipped it.
    warm: Option<Duration>,
    rss_kib: [u64; 3],
}

/// Whether a leg also times a warm resync after its cold one.
#[derive(Clone, Copy)]
enum Warm {
    Timed,
    Skipped,
}

/// The cluster a leg resyncs, and the listing's page size.
#[derive(Clone, Copy)]
struct Fleet {
    agents: usize,
    proxies: usize,
    tunnels_per_agent: usize,
    page_size: u32,
}

async fn resync_leg(
    fleet: Fleet,
    scratch: &Scratch,
    db: &str,
    source: SourceKind,
    warm: Warm,
) -> Result<ResyncLeg, BenchError> {
    let Fleet {
        agents,
        proxies,
        tunnels_per_agent,
        page_size,
    } = fleet;
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
    let cluster_pid = child.child.pid();
    let cpu_before = Cpu::now(cluster_pid);
    let t0 = Instant::now();
    let ll = Lifeline::start(&cfg, clock).await?;
    ll.fleet.wait_ready().await?;
    let sizes = ll.fleet.sizes().await?;
    let counts = (sizes.agents, sizes.proxies, sizes.tunnels);
    let cold = t0.elapsed();
    let cold_cpu = Cpu::now(cluster_pid)
        .zip(cpu_before)
        .map(|(after, before)| after.since(before));
    // Let the first snapshot reach SQLite, so the writer's batch is not
    // counted as the model's memory.
    ll.fleet.flush().await?;
    let rss_after = proc_status_kib("VmRSS:").unwrap_or(0);

    let (warm, rss_warm) = match warm {
        // A second resync on a warm process: the stream dies, comes back.
        Warm::Timed => {
            child.child.send("kill-streams").await?;
            ll.fleet.wait_not_ready().await?;
            let t1 = Instant::now();
            ll.fleet.wait_ready().await?;
            ll.fleet.settled().await?;
            let warm = t1.elapsed();
            ll.fleet.flush().await?;
            (Some(warm), proc_status_kib("VmRSS:").unwrap_or(0))
        }
        Warm::Skipped => (None, rss_after),
    };
    ll.shutdown().await;
    child.child.finish().await;
    scratch.remove(db);
    Ok(ResyncLeg {
        counts,
        cold,
        cold_cpu,
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
    let fleet = Fleet {
        agents,
        proxies,
        tunnels_per_agent,
        page_size,
    };
    // First and alone in the process: its memory figures are Lifeline's.
    let ResyncLeg {
        counts,
        cold,
        warm,
        cold_cpu: _,
        rss_kib: [rss_before, rss_after, rss_warm],
    } = resync_leg(fleet, &scratch, "resync.db", source, Warm::Timed).await?;
    let per_agent = rss_after.saturating_sub(rss_before) as f64 * 1024.0 / counts.0.max(1) as f64;
    let teleport = if source_rounds == 0 {
        Value::Null
    } else {
        // Cold only: a warm resync waits out a random reconnect backoff.
        against_lifeline(source_rounds, "cold resync ms", false, |source, db| {
            let scratch = &scratch;
            async move {
                let leg = resync_leg(fleet, scratch, &db, source, Warm::Timed).await?;
                Ok(Measured {
                    value: leg.cold.as_secs_f64() * 1000.0,
                    cpu: leg.cold_cpu,
                })
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
        "warm_resync_ms": warm.map(|w| w.as_millis()),
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

/// `bench resync-scale`: cold resyncs at several fleet sizes in one run,
/// and how the time per agent grows with the fleet.
#[derive(clap::Args, Debug, Clone)]
pub struct Scale {
    /// Fleet sizes in agents, comma-separated; each sequence runs them
    /// smallest first.
    #[arg(long, value_delimiter = ',', default_value = "100000,300000,1000000")]
    pub sizes: Vec<usize>,
    /// Proxies: one per this many agents (rounded up).
    #[arg(long, default_value_t = 100)]
    pub agents_per_proxy: usize,
    #[arg(long, default_value_t = 2)]
    pub tunnels_per_agent: usize,
    #[arg(long, default_value_t = 5_000)]
    pub page_size: u32,
    /// Sequences, each running every size once, smallest first; a size's
    /// figure is the median of its legs.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[arg(long, value_enum, default_value_t = SourceKind::Lifeline)]
    pub source: SourceKind,
}

/// Every size once per sequence, `rounds` sequences, each leg a cluster
/// process of its own and Lifeline started cold against it. A size's
/// figure is the median of its legs (on a shared machine one leg can pay
/// for memory the host took back while it sat free; the JSON keeps every
/// leg); time per agent is compared with the smallest size's.
pub(super) async fn resync_scale(s: Scale) -> Result<Value, BenchError> {
    let mut sizes = s.sizes;
    sizes.sort_unstable();
    sizes.dedup();
    let Some(&smallest) = sizes.first() else {
        return Err(BenchError::Usage("--sizes names no fleet size".into()));
    };
    if smallest == 0 || s.rounds == 0 || s.agents_per_proxy == 0 || s.page_size == 0 {
        return Err(BenchError::Usage(
            "--sizes, --rounds, --agents-per-proxy and --page-size must be at least 1".into(),
        ));
    }
    let scratch = Scratch::new("resync-scale");
    let mut legs: Vec<Vec<f64>> = vec![Vec::new(); sizes.len()];
    let mut counts = vec![(0, 0, 0); sizes.len()];
    for round in 0..s.rounds {
        for (i, &agents) in sizes.iter().enumerate() {
            let proxies = agents.div_ceil(s.agents_per_proxy);
            let fleet = Fleet {
                agents,
                proxies,
                tunnels_per_agent: s.tunnels_per_agent,
                page_size: s.page_size,
            };
            let leg = resync_leg(
                fleet,
                &scratch,
                &format!("scale-{agents}-{round}.db"),
                s.source,
                Warm::Skipped,
            )
            .await?;
            counts[i] = leg.counts;
            legs[i].push(leg.cold.as_secs_f64() * 1000.0);
        }
    }
    let micros = |ms: f64, agents: usize| ms * 1000.0 / agents.max(1) as f64;
    let round3 = |x: f64| (x * 1000.0).round() / 1000.0;
    let base = micros(median(&legs[0]), counts[0].0);
    let rows: Vec<Value> = sizes
        .iter()
        .zip(&legs)
        .zip(&counts)
        .map(|((_, ms), &(agents, proxies, tunnels))| {
            let per_agent = micros(median(ms), agents);
            json!({
                "agents": agents,
                "proxies": proxies,
                "tunnels": tunnels,
                "cold_resync_ms": ms.iter().map(|m| m.round()).collect::<Vec<_>>(),
                "median_cold_resync_ms": median(ms).round(),
                "us_per_agent": round3(per_agent),
                "per_agent_vs_smallest": round3(per_agent / base),
                "legs_per_agent_vs_smallest": ms.iter().map(|m| round3(micros(*m, agents) / base)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let worst = rows
        .iter()
        .filter_map(|r| r["per_agent_vs_smallest"].as_f64())
        .fold(0.0, f64::max);
    Ok(json!({
        "scenario": "resync-scale",
        "source": source_name(s.source),
        "page_size": s.page_size,
        "rounds": s.rounds,
        "sizes": rows,
        "worst_per_agent_vs_smallest": worst,
        "method": "sequences of cold resyncs, smallest fleet first, each against a cluster process of its own; a size's figure is the median of its legs",
        "target": {"per_agent_vs_smallest": 1.25, "cold_resync_ms_at_1m": 10000},
    }))
}

#[cfg(test)]
mod tests {
    use super::{median, Scratch};

    #[test]
    fn a_finished_leg_leaves_no_files_and_touches_no_other_legs() {
        let scratch = Scratch::new("remove-test");
        let names = [
            "scale-100-0.db",
            "scale-100-0.db-wal",
            "scale-100-0.db-shm",
            "scale-100-0.db.identity",
            "scale-1000-0.db",
            "scale-100-0.db2",
        ];
        for n in names {
            std::fs::write(scratch.db(n), b"x").unwrap();
        }
        scratch.remove("scale-100-0.db");
        let left: Vec<bool> = names.iter().map(|n| scratch.db(n).exists()).collect();
        assert_eq!(left, [false, false, false, false, true, true]);
        // Nothing to remove is not an error.
        scratch.remove("scale-100-0.db");
    }

    #[test]
    fn the_median_of_an_even_count_is_the_mean_of_the_middle_two() {
        assert_eq!(median(&[]), 0.0);
        assert_eq!(median(&[5.0]), 5.0);
        assert_eq!(median(&[82.0, 67.0]), 74.5);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
