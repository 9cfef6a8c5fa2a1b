//! Recovery after two proxies expire: by discovery and reconnects (the
//! `lifeline` source), or by sidecar restarts (Teleport's agents).

// Benchmarks measure real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::{config, BenchError, Scratch};
use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::Clock;
use lifeline::domain::{AgentState, Kind};
use lifeline::proto::v1 as pb;
use lifeline_sim::cluster::proxy_name;
use lifeline_sim::{SimAgent, SimCluster, SimSpec};

use super::signals::{sim_spec, stats_ms};

/// In a demo-shaped cluster with simulated agents and automatic reconnects:
/// two of four proxies stop; time from the later expiry until every agent it
/// stranded has a live tunnel again.
pub async fn recovery(agents: usize, legacy_share: f64) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("recovery");
    let sim = SimCluster::start(recovery_spec(agents), clock)
        .await
        .map_err(BenchError::Sim)?;
    let cfg = config(&sim, scratch.db("recovery.db"), 5000);
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    let stop = CancellationToken::new();
    let sims = SimAgent::start_for_cluster(&sim, ll.grpc_addr, legacy_share, 100, &stop)
        .await
        .map_err(|e| BenchError::Agents(e.to_string()))?;
    let connected = sims.len();
    super::wait_until("agents connected", Duration::from_secs(60), || {
        ll.hub.connected() == connected
    })
    .await?;
    // Let every agent get its discovery and settle.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let run = expire_two_proxies(&ll, &sim, agents, Duration::from_secs(40)).await;
    stop.cancel();
    drop(sims);
    ll.shutdown().await;
    sim.shutdown();
    let mut v = run.json(agents);
    v["legacy_share"] = json!(legacy_share);
    v["target_ms"] = json!(1000);
    Ok(v)
}

/// `recovery` on a Teleport cluster (proxy peering, so an agent's tunnels
/// are its `ProxyIDs`): no agent holds a signal stream, a sidecar beside
/// each restarts it (taking `restart`), and at most `restart_cap` restarts
/// are in flight (`signals.max_restarts_in_flight.cap`).
pub async fn recovery_by_restart(
    agents: usize,
    restart: Duration,
    restart_cap: usize,
) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("recovery-teleport");
    let mut spec = recovery_spec(agents);
    spec.teleport = Some(lifeline_sim::TeleportSpec::default());
    let sim = SimCluster::start(spec, clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db("recovery.db"), 5000);
    lifeline_sim::demo::watch_sim(&mut cfg, &sim, &scratch.db("recovery.identity"))
        .map_err(BenchError::Sim)?;
    cfg.signals.max_restarts_in_flight = lifeline::config::RestartLimit {
        share: lifeline::config::Ratio::ONE,
        cap: restart_cap.max(1),
    };
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    let stop = CancellationToken::new();
    let sims = SimAgent::start_sidecars(&sim, ll.grpc_addr, 1.0, restart, &stop)
        .await
        .map_err(|e| BenchError::Agents(e.to_string()))?;
    super::wait_until("sidecars connected", Duration::from_secs(60), || {
        ll.hub.connected() == agents
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let within =
        Duration::from_secs(60) + restart * (agents as u32 / restart_cap.max(1) as u32 + 1);
    let run = expire_two_proxies(&ll, &sim, agents, within).await;
    stop.cancel();
    drop(sims);
    ll.shutdown().await;
    sim.shutdown();
    let mut v = run.json(agents);
    v["source"] = json!("teleport");
    v["restart_ms"] = json!(restart.as_millis() as u64);
    v["restart_cap"] = json!(restart_cap);
    Ok(v)
}

fn recovery_spec(agents: usize) -> SimSpec {
    let mut spec = sim_spec(agents, 4, Duration::from_secs(6));
    spec.heartbeats = true;
    spec.agent_ttl = Duration::from_secs(30);
    spec.auth_servers = 2;
    spec
}

/// What `expire_two_proxies` saw: when the later proxy expired, and when
/// each agent it stranded turned stranded and recovered (µs).
struct RecoveryRun {
    expiry: i64,
    stranded_at: HashMap<String, i64>,
    recovered_at: HashMap<String, i64>,
    signals: Value,
}

impl RecoveryRun {
    fn json(&self, agents: usize) -> Value {
        let mut each: Vec<f64> = self
            .recovered_at
            .values()
            .map(|t| (t - self.expiry) as f64 / 1000.0)
            .collect();
        let all = each.iter().copied().fold(0.0, f64::max);
        json!({
            "scenario": "recovery",
            "agents": agents,
            "proxies": 4,
            "stranded": self.stranded_at.len(),
            "recovered": self.recovered_at.len(),
            "expiry_to_each_recovered_ms": stats_ms(&mut each),
            "expiry_to_all_recovered_ms": all,
            "signals": self.signals,
        })
    }
}

/// Stops two of the four proxies' heartbeats (every fourth agent holds
/// tunnels to both, so is stranded) and follows the fleet's changes until
/// every stranded agent recovered, or `within`.
async fn expire_two_proxies(
    ll: &Lifeline,
    sim: &SimCluster,
    agents: usize,
    within: Duration,
) -> RecoveryRun {
    let mut changes = ll.fleet.subscribe();
    sim.pause_heartbeats(&proxy_name(0)).await;
    sim.pause_heartbeats(&proxy_name(1)).await;
    let exp = |s: Option<pb::Server>| {
        s.and_then(|s| s.expires)
            .map(|t| t.seconds * 1_000_000 + i64::from(t.nanos / 1000))
            .unwrap_or(0)
    };
    let expiry = exp(sim.get_server(Kind::Proxy, &proxy_name(0)).await)
        .max(exp(sim.get_server(Kind::Proxy, &proxy_name(1)).await));
    let expected: usize = (0..agents).filter(|i| i % 4 == 0).count();
    let mut stranded_at: HashMap<String, i64> = HashMap::new();
    let mut recovered_at: HashMap<String, i64> = HashMap::new();
    let deadline = Instant::now() + within;
    while Instant::now() < deadline
        && !(stranded_at.len() >= expected && recovered_at.len() >= stranded_at.len())
    {
        match tokio::time::timeout(Duration::from_millis(200), changes.recv()).await {
            Ok(Ok(batch)) => {
                for c in batch.iter() {
                    if c.to == AgentState::Stranded {
                        stranded_at
                            .entry(c.agent.clone())
                            .or_insert(c.detected_at.as_micros());
                    } else if c.from == AgentState::Stranded && stranded_at.contains_key(&c.agent) {
                        recovered_at.insert(c.agent.clone(), c.detected_at.as_micros());
                    }
                }
            }
            Ok(Err(tokio::sync::broadcast::error::RecvError::Closed)) => break,
            _ => {}
        }
    }
    let signals = serde_json::to_value(ll.stats.snapshot().signals).unwrap_or(Value::Null);
    RecoveryRun {
        expiry,
        stranded_at,
        recovered_at,
        signals,
    }
}
