//! `lifeline-bench soak`: Lifeline run for a long time against a cluster
//! under the demo's chaos, its resident memory sampled against the memory
//! budget (`lifeline::app::memory`). The cluster, its agents and the chaos
//! run in another process (`lifeline-bench soak-cluster`, hidden), so the
//! memory sampled here is Lifeline's alone: its fleet, the agents' signal
//! streams, SQLite's page cache as the database grows.

use std::net::SocketAddr;

use tokio_util::sync::CancellationToken;

use super::*;
use lifeline::app::memory::{Budget, Engine};
use lifeline::domain::LbPolicy;
use lifeline_sim::SimAgent;

/// What `soak` runs: the cluster's shape, how long, how often it samples.
#[derive(clap::Args, Debug, Clone)]
pub struct Soak {
    #[arg(long, default_value_t = 10_000)]
    pub agents: usize,
    #[arg(long, default_value_t = 6)]
    pub proxies: usize,
    /// How long Lifeline runs under chaos after its agents are connected.
    #[arg(long, default_value = "30m", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How often resident memory is sampled.
    #[arg(long, default_value = "30s", value_parser = humantime::parse_duration)]
    pub sample: Duration,
    /// The chaos loop's period (`lifeline demo --chaos-period`).
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub chaos_period: Duration,
    /// Announce TTL of the cluster's servers and agents.
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub ttl: Duration,
}

/// The body of `soak-cluster`: the simulated cluster, served until stdin
/// closes; `lifeline <addr>` on stdin connects its agents there and starts
/// the chaos.
pub(super) async fn cluster_process(
    agents: usize,
    proxies: usize,
    ttl: Duration,
    chaos_period: Duration,
) -> Result<Value, BenchError> {
    use tokio::io::AsyncBufReadExt;
    let spec = SimSpec {
        agents,
        proxies,
        auth_servers: 2,
        ttl,
        agent_ttl: ttl,
        heartbeats: true,
        // Real time, like a real cluster's servers.
        nodelay: true,
        ..SimSpec::default()
    };
    let sim = SimCluster::start(spec, Clock::system())
        .await
        .map_err(BenchError::Sim)?;
    println!("listening {}", sim.uri());
    let stop = CancellationToken::new();
    let mut connected = Vec::new();
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        let Some(addr) = line.trim().strip_prefix("lifeline ") else {
            continue;
        };
        let addr: SocketAddr = addr
            .parse()
            .map_err(|e| BenchError::Usage(format!("soak-cluster: {addr:?}: {e}")))?;
        connected = SimAgent::start_for_cluster(&sim, addr, 0.2, 100, &stop)
            .await
            .map_err(|e| BenchError::Agents(e.to_string()))?;
        println!("agents {}", connected.len());
        if !chaos_period.is_zero() {
            tokio::spawn(lifeline_sim::chaos::run(
                sim.clone(),
                chaos_period,
                stop.clone(),
            ));
        }
    }
    stop.cancel();
    drop(connected);
    sim.shutdown();
    Ok(json!({"scenario": "soak-cluster", "agents": agents}))
}

/// One sample of Lifeline's memory and database.
struct Sample {
    at: Duration,
    rss_kib: u64,
    anon_kib: u64,
    db_kib: u64,
    connected: usize,
}

fn file_kib(path: &std::path::Path) -> u64 {
    let mut total = 0;
    for suffix in ["", "-wal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        total += std::fs::metadata(PathBuf::from(p))
            .map(|m| m.len())
            .unwrap_or(0);
    }
    total / 1024
}

/// The median resident memory of each quarter of the run, in order: a
/// single high or low sample (a burst, a purge) moves none of them.
fn quarter_medians(samples: &[Sample]) -> Vec<u64> {
    let n = samples.len();
    (0..4)
        .map(|q| {
            let mut rss: Vec<u64> = samples[q * n / 4..((q + 1) * n / 4).max(q * n / 4 + 1).min(n)]
                .iter()
                .map(|s| s.rss_kib)
                .collect();
            rss.sort_unstable();
            rss.get(rss.len() / 2).copied().unwrap_or(0)
        })
        .collect()
}

pub(super) async fn soak(o: Soak) -> Result<Value, BenchError> {
    if o.agents == 0 || o.proxies < 2 || o.sample.is_zero() || o.duration < o.sample {
        return Err(BenchError::Usage(
            "soak needs agents, at least 2 proxies, and a duration of at least one sample".into(),
        ));
    }
    let rss_before = proc_status_kib("VmRSS:").unwrap_or(0);
    let scratch = Scratch::new("soak");
    let db = scratch.db("soak.db");
    let args: Vec<String> = vec![
        "soak-cluster".into(),
        "--agents".into(),
        o.agents.to_string(),
        "--proxies".into(),
        o.proxies.to_string(),
        "--ttl".into(),
        humantime::format_duration(o.ttl).to_string(),
        "--chaos-period".into(),
        humantime::format_duration(o.chaos_period).to_string(),
    ];
    let (mut child, uri) = BenchChild::spawn_listening(&args, "soak cluster starting").await?;
    let mut cfg = config_for(&uri, SIM_JOIN_TOKEN, db.clone(), 5000);
    // As the demo runs: its short TTLs, its agents' policy.
    cfg.health.unknown_grace = o.ttl.min(Duration::from_secs(30));
    cfg.signals.grpc_client_lb_policy = LbPolicy::reconnect().to_json();
    cfg.signals.auto_reconnect = true;
    let ll = Lifeline::start_tuned(&cfg, Clock::system(), Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    child.send(&format!("lifeline {}", ll.grpc_addr)).await?;
    let said = child
        .line(
            Instant::now() + Duration::from_secs(600),
            "soak agents connecting",
        )
        .await?;
    let streams: usize = said
        .strip_prefix("agents ")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| BenchError::Agents(format!("soak cluster said {said:?}")))?;
    wait_until("soak agents connected", Duration::from_secs(600), || {
        ll.hub.connected() >= streams
    })
    .await?;
    let rss_ready = proc_status_kib("VmRSS:").unwrap_or(0);
    let start = Instant::now();
    let mut samples = Vec::new();
    loop {
        let at = start.elapsed();
        samples.push(Sample {
            at,
            rss_kib: proc_status_kib("VmRSS:").unwrap_or(0),
            anon_kib: proc_status_kib("RssAnon:").unwrap_or(0),
            db_kib: file_kib(&db),
            connected: ll.hub.connected(),
        });
        if at >= o.duration {
            break;
        }
        tokio::time::sleep(o.sample.min(o.duration - at)).await;
    }
    // What the chaos did, as the API tells it.
    let summary = reqwest::Client::new()
        .get(format!("{}/api/v1/summary", ll.base_url()))
        .bearer_auth(BENCH_TOKEN)
        .send()
        .await
        .map_err(|e| BenchError::Agents(format!("the summary: {e}")))?
        .json::<Value>()
        .await
        .map_err(|e| BenchError::Agents(format!("the summary: {e}")))?;
    // Lifeline first, so the cluster it watches is still there as it
    // stops.
    ll.shutdown().await;
    child.finish().await;
    let budget = Budget::of(Engine::Sqlite, o.agents as u64, streams as u64);
    let budget_kib = budget.total() / 1024;
    let max = samples.iter().map(|s| s.rss_kib).max().unwrap_or(0);
    let end = samples.last().map(|s| s.rss_kib).unwrap_or(0);
    let quarters = quarter_medians(&samples);
    // Levelled off: from the third quarter's median to the last's,
    // resident memory grew by at most 2 % of the budget.
    let last_quarter_kib = quarters[3] as i64 - quarters[2] as i64;
    let levelled_off = last_quarter_kib as f64 <= budget_kib as f64 * 0.02;
    Ok(json!({
        "scenario": "soak",
        "agents": o.agents,
        "proxies": o.proxies,
        "streams": streams,
        "duration_s": o.duration.as_secs_f64(),
        "chaos_period_s": o.chaos_period.as_secs_f64(),
        "rss_kib": {
            "before_start": rss_before,
            "ready": rss_ready,
            "max": max,
            "end": end,
        },
        "rss_median_kib_by_quarter": quarters,
        "rss_growth_last_quarter_kib": last_quarter_kib,
        "budget_kib": {
            "fixed": budget.fixed / 1024,
            "page_cache": budget.page_cache / 1024,
            "fleet": budget.fleet / 1024,
            "streams": budget.streams / 1024,
            "total": budget_kib,
        },
        "within_budget": max <= budget_kib,
        "levelled_off": levelled_off,
        "db_kib_end": samples.last().map(|s| s.db_kib).unwrap_or(0),
        "summary": summary,
        "samples": samples.iter().map(|s| json!({
            "t_s": s.at.as_secs(),
            "rss_kib": s.rss_kib,
            "anon_kib": s.anon_kib,
            "db_kib": s.db_kib,
            "connected": s.connected,
        })).collect::<Vec<_>>(),
        "peak_rss_kib": peak_rss_kib(),
    }))
}
