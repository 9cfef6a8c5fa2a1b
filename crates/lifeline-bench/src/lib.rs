//! `lifeline-bench <scenario>`: benchmarks that drive the real pipeline
//! (simulator → gRPC → watcher → fleet → SQLite) on loopback and print JSON.
//! Run them from a release build; figures go in the book (docs/src/performance.md).

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

mod child;
mod cpu;
mod failover;
mod history;
mod ingest;
mod notify;
mod recovery;
mod resync;
mod scenario;
mod scratch;
pub mod signals;
mod soak;
pub mod ui;

pub(crate) use child::BenchChild;
use cpu::{cpu_json, Cpu};
use ingest::ingest;
use resync::{cluster_process, resync, resync_scale};
pub use scenario::Scenario;
use scratch::{PgScratch, Scratch};

use lifeline::app::{Lifeline, StartError, Tuning};
use lifeline::clock::{Clock, Ts};
use lifeline::config::DbUrl;
use lifeline::config::{Config, SourceKind};
use lifeline::domain::HistoryEntry;
use lifeline::domain::{AgentState, Kind, Server};
use lifeline::proto::v1 as pb;
use lifeline::store::{self, StoreError, WriteBatch};
use lifeline::telemetry::otlp;
use lifeline::telemetry::sink::Sink;
use lifeline::telemetry::SpanCounters;
use lifeline_sim::cluster::{agent_name, proxy_name, put_server};
use lifeline_sim::{SimCluster, SimSpec, SIM_JOIN_TOKEN};

/// The `lifeline` binary beside this one (`lifeline-bench`), which the
/// failover benchmark starts as its replicas.
pub(crate) fn lifeline_exe() -> std::io::Result<std::path::PathBuf> {
    let exe = std::env::current_exe()?.with_file_name("lifeline");
    if exe.exists() {
        Ok(exe)
    } else {
        Err(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!(
                "{} is not there: build both binaries (`cargo build --release -p lifeline-cli`)",
                exe.display()
            ),
        ))
    }
}

/// Where `lifeline-bench ingest` exports its spans: a local receiver, and the
/// counters of the pipeline that sends to it.
#[derive(Clone, Copy)]
pub struct Export<'a> {
    pub sink: &'a Sink,
    pub spans: &'a SpanCounters,
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("simulator: {0}")]
    Sim(std::io::Error),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("timed out: {0}")]
    Timeout(&'static str),
    #[error("the fleet stopped")]
    FleetGone,
    #[error("agents: {0}")]
    Agents(String),
    #[error("{0}")]
    Unavailable(&'static str),
    #[error("bad option: {0}")]
    Usage(String),
}

async fn discovery_traffic(
    agents: usize,
    proxies: usize,
    ttl: Duration,
    duration: Duration,
    streams: usize,
) -> Result<Value, BenchError> {
    tokio::task::spawn_blocking(move || {
        signals::discovery_traffic(agents, proxies, ttl, duration, streams)
    })
    .await
    .map_err(|e| BenchError::Agents(e.to_string()))?
}

impl From<lifeline::fleet::FleetError> for BenchError {
    fn from(_: lifeline::fleet::FleetError) -> Self {
        BenchError::FleetGone
    }
}

/// Runs `s`. `export` is the local OTLP receiver `main` set up for the
/// ingest scenario (see [`Scenario::wants_export`]).
pub async fn run(s: Scenario, export: Option<Export<'_>>) -> Result<Value, BenchError> {
    match s {
        Scenario::Ingest {
            agents,
            proxies,
            events,
            no_export: _,
            export_rounds,
            source_rounds,
            postgres,
            postgres_rounds,
        } => {
            ingest(
                agents,
                proxies,
                events,
                export_rounds,
                source_rounds,
                postgres.map(DbUrl::new).as_ref(),
                postgres_rounds,
                export,
            )
            .await
        }
        Scenario::Resync {
            agents,
            proxies,
            tunnels_per_agent,
            page_size,
            source_rounds,
            source,
        } => {
            resync(
                agents,
                proxies,
                tunnels_per_agent,
                page_size,
                source_rounds,
                source,
            )
            .await
        }
        Scenario::ResyncScale(scale) => resync_scale(scale).await,
        Scenario::Detect {
            agents,
            proxies,
            expiring,
            spacing,
        } => detect(agents, proxies, expiring, spacing).await,
        Scenario::Notify {
            incidents,
            per_hour,
            agents,
            events,
            rounds,
            fleet,
            webhooks,
            hung,
        } => {
            let hooks = notify::Hooks {
                webhooks,
                hung,
                fleet,
            };
            notify::notify(incidents, per_hour, agents, events, rounds, hooks).await
        }
        Scenario::Fanout {
            agents,
            rounds,
            per_connection,
        } => signals::fanout(agents, rounds, per_connection).await,
        Scenario::DiscoveryTraffic {
            agents,
            proxies,
            ttl,
            duration,
            streams,
        } => discovery_traffic(agents, proxies, ttl, duration, streams).await,
        Scenario::Reconnect { agents, requests } => signals::reconnect(agents, requests).await,
        Scenario::Recovery {
            agents,
            legacy_share,
            source: lifeline::config::SourceKind::Lifeline,
            ..
        } => recovery::recovery(agents, legacy_share).await,
        Scenario::Recovery {
            agents,
            restart,
            restart_cap,
            ..
        } => recovery::recovery_by_restart(agents, restart, restart_cap).await,
        Scenario::Ui {
            agents,
            proxies,
            expiring,
            requests,
            history_days,
            incidents,
            incident_agents,
            postgres,
        } => {
            let history = history::History {
                days: history_days,
                incidents,
                agents_each: incident_agents,
            };
            let db = postgres.map(DbUrl::new);
            ui::ui(agents, proxies, expiring, requests, history, db.as_ref()).await
        }
        Scenario::Failover {
            postgres,
            replicas,
            agents,
            lease,
            requests,
        } => failover::failover(&DbUrl::new(postgres), replicas, agents, lease, requests).await,
        Scenario::Soak(o) => soak::soak(o).await,
        Scenario::SoakCluster {
            agents,
            proxies,
            ttl,
            chaos_period,
        } => soak::cluster_process(agents, proxies, ttl, chaos_period).await,
        Scenario::Cluster {
            agents,
            proxies,
            tunnels_per_agent,
            teleport_identity,
        } => cluster_process(agents, proxies, tunnels_per_agent, teleport_identity).await,
        Scenario::Agents {
            lifeline,
            agents,
            per_connection,
            join_token,
        } => signals::agents_process(lifeline, agents, per_connection, join_token).await,
    }
}

/// The API token benchmarks use (in-process, loopback only).
pub(crate) const BENCH_TOKEN: &str = "bench-token";

fn config(sim: &SimCluster, db: PathBuf, page_size: u32) -> Config {
    config_for(&sim.uri(), &sim.spec().join_token, db, page_size)
}

fn config_for(uri: &str, join_token: &str, db: PathBuf, page_size: u32) -> Config {
    let mut cfg = Config::default();
    cfg.server.listen = ([127, 0, 0, 1], 0).into();
    cfg.server.grpc_listen = ([127, 0, 0, 1], 0).into();
    cfg.cluster.addr = uri.to_string();
    cfg.cluster.page_size = page_size;
    cfg.cluster.max_message_bytes = 64 * 1024 * 1024;
    cfg.storage.path = db;
    cfg.fleet.command_queue = 4096;
    cfg.access.join_tokens = vec![lifeline::access::hash_hex(join_token).into()];
    cfg.access.tokens = vec![lifeline::config::TokenConfig {
        name: "bench".into(),
        sha256: lifeline::access::hash_hex(BENCH_TOKEN),
        roles: lifeline::config::Role::ALL.to_vec(),
    }];
    // The reconnect bench asks again and again: latency, not the limiter.
    cfg.access.manual_reconnect_interval = Duration::from_millis(1);
    cfg
}

fn peak_rss_kib() -> Option<u64> {
    proc_status_kib("VmHWM:")
}

/// A `kB` field of `/proc/self/status` (`VmRSS:`, `VmHWM:`).
fn proc_status_kib(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

async fn wait_until(
    what: &'static str,
    limit: Duration,
    mut f: impl FnMut() -> bool,
) -> Result<(), BenchError> {
    let start = Instant::now();
    while !f() {
        if start.elapsed() > limit {
            return Err(BenchError::Timeout(what));
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    Ok(())
}

async fn wait_until_async<F, Fut>(
    what: &'static str,
    limit: Duration,
    mut f: F,
) -> Result<(), BenchError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    while !f().await {
        if start.elapsed() > limit {
            return Err(BenchError::Timeout(what));
        }
        tokio::task::yield_now().await;
        std::thread::sleep(Duration::from_micros(200));
    }
    Ok(())
}

fn spec(agents: usize, proxies: usize, tunnels: usize, buffer: usize) -> SimSpec {
    SimSpec {
        agents,
        proxies,
        auth_servers: 2,
        ttl: Duration::from_secs(600),
        agent_ttl: Duration::from_secs(600),
        tunnels_per_agent: tunnels,
        heartbeats: false,
        event_buffer: buffer,
        ..SimSpec::default()
    }
}

/// What one leg of a source comparison measured: its figure, and the CPU
/// time spent meanwhile when the leg tells it.
struct Measured {
    value: f64,
    cpu: Option<Cpu>,
}

impl From<f64> for Measured {
    fn from(value: f64) -> Measured {
        Measured { value, cpu: None }
    }
}

/// The `teleport` source against the `lifeline` source in one run:
/// `rounds` rounds of a leg on each, order alternating so an order effect
/// cancels; the figure is the median of the rounds' ratios (Teleport's
/// speed over the lifeline source's: for a time, lifeline/teleport). Each
/// leg gets its source and a database file name of its own.
/// Where every leg tells its CPU time, so does the comparison
/// (`cpu_ms`).
async fn against_lifeline<F, Fut>(
    rounds: usize,
    unit: &str,
    higher_is_better: bool,
    mut leg: F,
) -> Result<Value, BenchError>
where
    F: FnMut(SourceKind, String) -> Fut,
    Fut: std::future::Future<Output = Result<Measured, BenchError>>,
{
    let (mut lifeline, mut teleport, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    // Per round, each source's CPU time, if both legs told it.
    let mut cpu: Vec<Option<[Cpu; 2]>> = Vec::new();
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [SourceKind::Lifeline, SourceKind::Teleport]
        } else {
            [SourceKind::Teleport, SourceKind::Lifeline]
        };
        let mut pair = [0f64; 2];
        let mut pair_cpu = [None; 2];
        for source in order {
            let db = format!("source-{}-{round}.db", source_name(source));
            let i = usize::from(source == SourceKind::Teleport);
            let m = leg(source, db).await?;
            pair[i] = m.value;
            pair_cpu[i] = m.cpu;
        }
        let ratio = if higher_is_better {
            pair[1] / pair[0]
        } else {
            pair[0] / pair[1]
        };
        lifeline.push(pair[0].round());
        teleport.push(pair[1].round());
        ratios.push(thousandths(ratio));
        cpu.push(pair_cpu[0].zip(pair_cpu[1]).map(|(l, t)| [l, t]));
    }
    let mut out = json!({
        "unit": unit,
        "lifeline": lifeline,
        "teleport": teleport,
        "ratio": thousandths(median(&ratios)),
        "round_ratios": ratios,
        "method": "rounds of a lifeline-source and a teleport-source leg (mutual TLS), order alternating; ratio = median of the rounds' teleport speed over lifeline speed",
        "target": {"ratio": 0.85},
    });
    // Only when every round told it.
    let cpu: Option<Vec<[Cpu; 2]>> = cpu.into_iter().collect();
    if let (Some(v), Some(o)) = (cpu.filter(|v| !v.is_empty()), out.as_object_mut()) {
        o.insert("cpu_ms".into(), cpu_json(&v));
    }
    Ok(out)
}

/// `x` to three decimals.
fn thousandths(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

fn source_name(s: SourceKind) -> &'static str {
    match s {
        SourceKind::Lifeline => "lifeline",
        SourceKind::Teleport => "teleport",
    }
}

/// The middle value (the mean of the two middle ones of an even count);
/// 0 for none.
fn median(xs: &[f64]) -> f64 {
    let mut sorted = xs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    match (n.checked_sub(1).map(|_| sorted[n / 2]), n % 2) {
        (None, _) => 0.0,
        (Some(upper), 1) => upper,
        (Some(upper), _) => (upper + sorted[n / 2 - 1]) / 2.0,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

async fn detect(
    agents: usize,
    proxies: usize,
    expiring: usize,
    spacing: Duration,
) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("detect");
    let sim = SimCluster::start(spec(agents, proxies, 2, 1 << 16), clock)
        .await
        .map_err(BenchError::Sim)?;
    let ll = Lifeline::start_tuned(
        &config(&sim, scratch.db("detect.db"), 5000),
        clock,
        Tuning {
            change_capacity: 1024,
            ..Tuning::default()
        },
    )
    .await?;
    ll.fleet.wait_ready().await?;
    let mut changes = ll.fleet.subscribe();

    // Proxies 1..=expiring stop heartbeating: each announces an expiry a
    // little later than the one before. Agents on two of them strand when
    // the second expires.
    let start = clock.now().saturating_add(Duration::from_secs(2));
    let expiring = expiring.min(proxies);
    for i in 0..expiring {
        let at = start.saturating_add(spacing * i as u32);
        let name = proxy_name(i);
        if let Some(mut s) = sim.get_server(Kind::Proxy, &name).await {
            s.expires = Some(lifeline::proto::to_timestamp(at));
            sim.put_server(s).await;
        }
    }
    let expected = if expiring >= 2 {
        (0..agents)
            .filter(|i| i % proxies < expiring - 1 && proxies > 1)
            .count()
    } else {
        0
    };
    let deadline = Instant::now()
        + Duration::from_secs(10)
        + spacing * expiring as u32
        + Duration::from_secs(2);
    let mut lat_ms = Vec::with_capacity(expected);
    while lat_ms.len() < expected && Instant::now() < deadline {
        match tokio::time::timeout(Duration::from_millis(200), changes.recv()).await {
            Ok(Ok(batch)) => {
                for c in batch.iter().filter(|c| c.to == AgentState::Stranded) {
                    lat_ms.push((c.detected_at.as_micros() - c.since.as_micros()) as f64 / 1000.0);
                }
            }
            Err(_) => {}
            Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            Ok(Err(_)) => break,
        }
    }
    let fired = ll.stats.timers_fired.load(Ordering::Relaxed);
    ll.shutdown().await;
    sim.shutdown();
    lat_ms.sort_by(|a, b| a.total_cmp(b));
    Ok(json!({
        "scenario": "detect",
        "agents": agents,
        "proxies": proxies,
        "expiring_proxies": expiring,
        "spacing_ms": spacing.as_millis(),
        "stranded_expected": expected,
        "stranded_seen": lat_ms.len(),
        "latency_ms": {
            "p50": percentile(&lat_ms, 0.50),
            "p99": percentile(&lat_ms, 0.99),
            "max": lat_ms.last().copied().unwrap_or(0.0),
        },
        "timers_fired": fired,
        "target_p99_ms": 50,
        "peak_rss_kib": peak_rss_kib(),
    }))
}
