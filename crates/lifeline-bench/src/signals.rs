//! Signal benchmarks: discovery fan-out, discovery traffic (delta vs full),
//! and reconnect round trip (recovery after a proxy expiry is in
//! `recovery.rs`).
//!
//! `fanout` and `reconnect` run the agents in a child process
//! (`lifeline-bench agents`, hidden), so the server's memory is measured
//! alone; both processes stamp times with the same system clock.

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use super::{config, percentile, BenchChild, BenchError, Scratch};
use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::{Clock, Ts};
use lifeline::domain::Kind;
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::agent_signals_client::AgentSignalsClient;
use lifeline_sim::agent::{join_request, lifeline_channel};
use lifeline_sim::cluster::{agent_name, proxy_name};
use lifeline_sim::{SimCluster, SimSpec};

fn wall_us() -> i64 {
    Ts::from_system(std::time::SystemTime::now()).as_micros()
}

fn rss_kib() -> Option<u64> {
    super::proc_status_kib("VmRSS:")
}

/// Opens one bare agent stream with the join token: Hello sent, the sender
/// kept for acks.
async fn agent_stream(
    ch: tonic::transport::Channel,
    name: &str,
    join_token: &str,
) -> Result<(mpsc::Sender<pb::AgentMessage>, tonic::Streaming<pb::Signal>), tonic::Status> {
    let (tx, rx) = mpsc::channel(8);
    tx.send(pb::AgentMessage::hello(name, "bench", 2))
        .await
        .map_err(|_| tonic::Status::internal("agent stream closed"))?;
    let resp = AgentSignalsClient::new(ch)
        .connect(join_request(ReceiverStream::new(rx), join_token))
        .await?;
    Ok((tx, resp.into_inner()))
}

/// The environment variable that hands the join token to the agents
/// process (never its command line, which every user of the host can read).
pub const JOIN_TOKEN_ENV: &str = "LIFELINE_BENCH_JOIN_TOKEN";

/// What the agents process reports when its stdin closes.
#[derive(Serialize, Deserialize, Default)]
pub struct AgentsReport {
    pub connected: usize,
    /// proxy → wall µs at which each agent first got it in a delta.
    pub receipts: HashMap<String, Vec<i64>>,
    pub acks: usize,
    pub messages: u64,
}

/// The child process: `n` bare agents named `agent-00001`…, multiplexed
/// `per_connection` to an HTTP/2 connection. They record when each proxy
/// first reaches them in a delta and ack every signal at once. Prints one
/// JSON report when stdin closes.
pub async fn agents_process(
    lifeline: SocketAddr,
    n: usize,
    per_connection: usize,
    join_token: String,
) -> Result<Value, BenchError> {
    let stop = CancellationToken::new();
    let join_token: Arc<str> = Arc::from(join_token);
    let refused = Arc::new(std::sync::Mutex::new(None::<String>));
    let (done_tx, mut done_rx) = mpsc::channel::<(Vec<(String, i64)>, usize, u64)>(1024);
    let connected = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut channel = None;
    for i in 0..n {
        if i % per_connection.max(1) == 0 {
            channel =
                Some(lifeline_channel(lifeline).map_err(|e| BenchError::Agents(e.to_string()))?);
        }
        let Some(ch) = channel.clone() else { break };
        let (stop, done, connected) = (stop.clone(), done_tx.clone(), connected.clone());
        let (token, refused) = (join_token.clone(), refused.clone());
        tokio::spawn(async move {
            let mut got: Vec<(String, i64)> = Vec::new();
            let (mut acks, mut messages) = (0usize, 0u64);
            let mut seen: std::collections::HashSet<String> = Default::default();
            let stream = agent_stream(ch, &agent_name(i), &token).await;
            if let Err(e) = &stream {
                let mut r = refused.lock().unwrap_or_else(|p| p.into_inner());
                r.get_or_insert_with(|| format!("{}: {}", agent_name(i), e.message()));
            }
            if let Ok((tx, mut inbound)) = stream {
                connected.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                loop {
                    let m = tokio::select! {
                        _ = stop.cancelled() => break,
                        m = inbound.message() => m,
                    };
                    let Ok(Some(s)) = m else { break };
                    messages += 1;
                    match s.kind {
                        Some(pb::signal::Kind::Discovery(d)) if !d.full => {
                            let at = wall_us();
                            for p in d.proxies {
                                if seen.insert(p.name.clone()) {
                                    got.push((p.name, at));
                                }
                            }
                        }
                        Some(pb::signal::Kind::Reconnect(_))
                        | Some(pb::signal::Kind::CloseTunnel(_)) => {
                            acks += 1;
                            let _ = tx
                                .send(pb::AgentMessage::ack(s.id, true, String::new()))
                                .await;
                        }
                        _ => {}
                    }
                }
            }
            let _ = done.send((got, acks, messages)).await;
        });
    }
    drop(done_tx);
    // Tell the parent how many are connected, then wait for stdin to close.
    let mut stdin = tokio::io::stdin();
    let mut last = usize::MAX;
    let mut buf = [0u8; 64];
    let mut told_refusal = false;
    loop {
        let c = connected.load(std::sync::atomic::Ordering::SeqCst);
        if c != last {
            println!("connected {c}");
            last = c;
        }
        if !told_refusal {
            if let Some(why) = refused.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                // The parent stops waiting and says why.
                println!("refused {why}");
                told_refusal = true;
            }
        }
        tokio::select! {
            r = stdin.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    stop.cancel();
    let mut report = AgentsReport {
        connected: connected.load(std::sync::atomic::Ordering::SeqCst),
        ..AgentsReport::default()
    };
    while let Some((got, acks, messages)) = done_rx.recv().await {
        for (p, at) in got {
            report.receipts.entry(p).or_default().push(at);
        }
        report.acks += acks;
        report.messages += messages;
    }
    serde_json::to_value(report).map_err(|e| BenchError::Agents(e.to_string()))
}

/// The agents process, started and connected.
struct Child(BenchChild);

impl Child {
    async fn start(
        lifeline: SocketAddr,
        n: usize,
        per_connection: usize,
        join_token: &str,
    ) -> Result<Child, BenchError> {
        let args = [
            "agents",
            "--lifeline",
            &lifeline.to_string(),
            "--agents",
            &n.to_string(),
            "--per-connection",
            &per_connection.to_string(),
        ]
        .map(String::from);
        BenchChild::spawn(&args, &[(JOIN_TOKEN_ENV, join_token)]).map(Child)
    }

    /// Waits until the child says all `n` are connected.
    async fn connected(&mut self, n: usize, limit: Duration) -> Result<(), BenchError> {
        let deadline = Instant::now() + limit;
        loop {
            let line = self.0.line(deadline, "agents connecting").await?;
            if line.trim() == format!("connected {n}") {
                return Ok(());
            }
            if let Some(why) = line.strip_prefix("refused ") {
                return Err(BenchError::Agents(format!(
                    "Lifeline refused an agent stream: {why}"
                )));
            }
        }
    }

    async fn finish(self) -> Result<AgentsReport, BenchError> {
        let json: String = self
            .0
            .finish()
            .await
            .into_iter()
            .filter(|l| !l.starts_with("connected ") && !l.starts_with("refused "))
            .collect();
        serde_json::from_str(&json).map_err(|e| BenchError::Agents(format!("bad report: {e}")))
    }
}

pub(super) fn sim_spec(agents: usize, proxies: usize, ttl: Duration) -> SimSpec {
    SimSpec {
        agents,
        proxies,
        auth_servers: 1,
        ttl,
        agent_ttl: Duration::from_secs(3600),
        tunnels_per_agent: 2,
        heartbeats: false,
        ..SimSpec::default()
    }
}

pub(super) fn stats_ms(v: &mut [f64]) -> Value {
    v.sort_by(|a, b| a.total_cmp(b));
    json!({
        "p50": percentile(v, 0.50),
        "p99": percentile(v, 0.99),
        "max": v.last().copied().unwrap_or(0.0),
        "n": v.len(),
    })
}

pub async fn fanout(
    agents: usize,
    rounds: usize,
    per_connection: usize,
) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("fanout");
    let sim = SimCluster::start(sim_spec(0, rounds.max(1), Duration::from_secs(600)), clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db("fanout.db"), 5000);
    cfg.signals.auto_reconnect = false;
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss_before = rss_kib().unwrap_or(0);
    let mut child =
        Child::start(ll.grpc_addr, agents, per_connection, &sim.spec().join_token).await?;
    child.connected(agents, Duration::from_secs(300)).await?;
    super::wait_until("hub sees every agent", Duration::from_secs(60), || {
        ll.hub.connected() == agents
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = rss_kib().unwrap_or(0);

    let mut sent_at = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let name = proxy_name(r);
        sent_at.push((name.clone(), wall_us()));
        sim.heartbeat(Kind::Proxy, &name).await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let report = child.finish().await?;
    let stats = ll.stats.snapshot();
    ll.shutdown().await;
    sim.shutdown();

    let mut each = Vec::new();
    let mut every = Vec::new();
    let mut missing = 0usize;
    for (name, t0) in &sent_at {
        let got = report.receipts.get(name).cloned().unwrap_or_default();
        missing += agents.saturating_sub(got.len());
        for at in &got {
            each.push((at - t0) as f64 / 1000.0);
        }
        if let Some(max) = got.iter().max() {
            every.push((max - t0) as f64 / 1000.0);
        }
    }
    let per_agent = (rss_after.saturating_sub(rss_before)) as f64 / agents.max(1) as f64;
    Ok(json!({
        "scenario": "fanout",
        "agents": agents,
        "agents_per_connection": per_connection,
        "rounds": rounds,
        "heartbeat_to_each_agent_ms": stats_ms(&mut each),
        "heartbeat_to_every_agent_ms": stats_ms(&mut every),
        "deliveries_missing": missing,
        "target_p99_ms": 200,
        "server_rss_kib": {"before_agents": rss_before, "with_agents": rss_after},
        "server_rss_per_agent_kib": (per_agent * 100.0).round() / 100.0,
        "target_rss_per_agent_kib": 32,
        "discovery": stats.signals,
    }))
}

pub async fn reconnect(agents: usize, requests: usize) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("reconnect");
    let sim = SimCluster::start(sim_spec(agents, 3, Duration::from_secs(600)), clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db("reconnect.db"), 5000);
    cfg.signals.auto_reconnect = false;
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    let mut child = Child::start(ll.grpc_addr, agents, 100, &sim.spec().join_token).await?;
    child.connected(agents, Duration::from_secs(120)).await?;
    super::wait_until("hub sees every agent", Duration::from_secs(60), || {
        ll.hub.connected() == agents
    })
    .await?;
    let http = reqwest::Client::new();
    let base = ll.base_url();
    let mut started = Vec::with_capacity(requests);
    let mut http_ms = Vec::with_capacity(requests);
    for i in 0..requests {
        let agent = agent_name(i % agents.max(1));
        let t0 = wall_us();
        let i0 = Instant::now();
        let resp = http
            .post(format!("{base}/api/v1/agents/{agent}/reconnect"))
            .bearer_auth(super::BENCH_TOKEN)
            .json(&json!({"reason": "bench"}))
            .send()
            .await
            .map_err(|e| BenchError::Agents(e.to_string()))?;
        http_ms.push(i0.elapsed().as_secs_f64() * 1000.0);
        let v: Value = resp
            .json()
            .await
            .map_err(|e| BenchError::Agents(e.to_string()))?;
        let id = v["id"]
            .as_i64()
            .ok_or(BenchError::Agents(format!("no signal id: {v}")))?;
        started.push((id, t0));
        // One at a time, a little apart: latency, not throughput.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Every ack recorded.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut lat = Vec::with_capacity(requests);
    loop {
        lat.clear();
        let mut pending = 0;
        for (id, t0) in &started {
            match lifeline::store::signals::get(&ll.db, *id).await? {
                Some(r) if r.acked.is_some() => {
                    lat.push((r.acked.map_or(0, |a| a.as_micros()) - t0) as f64 / 1000.0)
                }
                _ => pending += 1,
            }
        }
        if pending == 0 || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let report = child.finish().await?;
    ll.shutdown().await;
    sim.shutdown();
    Ok(json!({
        "scenario": "reconnect",
        "agents": agents,
        "requests": requests,
        "post_to_ack_ms": stats_ms(&mut lat),
        "post_response_ms": stats_ms(&mut http_ms),
        "acks_seen_by_agents": report.acks,
        "target_p99_ms": 20,
    }))
}

/// 100 proxies heartbeating at TTL/2 + jitter for `virtual_time`, a few real
/// agent streams: what Lifeline sends each agent with deltas and with
/// `full_discovery`, scaled to `agents`. Runs on a paused clock moved in
/// 100 ms steps, so an hour takes seconds.
pub fn discovery_traffic(
    agents: usize,
    proxies: usize,
    ttl: Duration,
    virtual_time: Duration,
    streams: usize,
) -> Result<Value, BenchError> {
    let mut out = serde_json::Map::new();
    for full in [false, true] {
        let rt = lifeline::clock::virtual_time::paused_runtime()
            .ok_or(BenchError::Unavailable(
                "discovery-traffic simulates an hour on a paused clock, which this build lacks: \
                 run `cargo run --release --features virtual-time -- bench discovery-traffic`",
            ))?
            .map_err(|e| BenchError::Agents(e.to_string()))?;
        let v = rt.block_on(traffic_run(proxies, ttl, virtual_time, streams, full))?;
        out.insert(if full { "full".into() } else { "delta".into() }, v);
    }
    fn per(out: &serde_json::Map<String, Value>, m: &str, k: &str) -> f64 {
        out[m][k].as_f64().unwrap_or(0.0)
    }
    let ratio_bytes =
        per(&out, "delta", "bytes_per_agent") / per(&out, "full", "bytes_per_agent").max(1.0);
    let ratio_msgs =
        per(&out, "delta", "messages_per_agent") / per(&out, "full", "messages_per_agent").max(1.0);
    for m in ["delta", "full"] {
        let b = per(&out, m, "bytes_per_agent");
        let n = per(&out, m, "messages_per_agent");
        if let Some(o) = out.get_mut(m).and_then(Value::as_object_mut) {
            o.insert("bytes_all_agents".into(), json!((b * agents as f64) as u64));
            o.insert(
                "messages_all_agents".into(),
                json!((n * agents as f64) as u64),
            );
        }
    }
    Ok(json!({
        "scenario": "discovery-traffic",
        "agents": agents,
        "proxies": proxies,
        "ttl_s": ttl.as_secs(),
        "virtual_seconds": virtual_time.as_secs(),
        "measured_streams": streams,
        "note": "every agent stream gets the same sequence; measured on real streams, scaled to all agents",
        "delta": out["delta"],
        "full": out["full"],
        "delta_over_full_bytes": ratio_bytes,
        "delta_over_full_messages": ratio_msgs,
        "target_ratio_bytes": 0.05,
    }))
}

async fn traffic_run(
    proxies: usize,
    ttl: Duration,
    virtual_time: Duration,
    streams: usize,
    full: bool,
) -> Result<Value, BenchError> {
    // A blocking task keeps tokio from auto-advancing the paused clock while
    // loopback I/O is in flight; time moves only by the steps below.
    let (hold, held) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = held.recv();
    });
    // Paused time: the clock must move with tokio's.
    let clock = Clock::manual();
    let scratch = Scratch::new("traffic");
    let mut spec = sim_spec(0, proxies, ttl);
    spec.heartbeats = true;
    let sim = SimCluster::start(spec, clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db("traffic.db"), 5000);
    cfg.signals.full_discovery = full;
    cfg.signals.auto_reconnect = false;
    // An hour passes in steps: no ping could be answered within one.
    cfg.server.grpc_keepalive = None;
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    let ready = ll.fleet.clone();
    super::wait_until_async("ready", Duration::from_secs(30), || {
        let f = ready.clone();
        async move { f.readiness().ready }
    })
    .await?;
    let stop = CancellationToken::new();
    for i in 0..streams {
        let ch = lifeline_channel(ll.grpc_addr).map_err(|e| BenchError::Agents(e.to_string()))?;
        let stop = stop.clone();
        let token = sim.spec().join_token.clone();
        tokio::spawn(async move {
            // Lifeline counts what it sends; the agent only has to read it.
            let (_tx, mut inbound) = match agent_stream(ch, &agent_name(i), &token).await {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e.message(), "bench agent stream refused");
                    return;
                }
            };
            loop {
                tokio::select! {
                    _ = stop.cancelled() => break,
                    m = inbound.message() => if !matches!(m, Ok(Some(_))) { break },
                }
            }
        });
    }
    let hub = ll.hub.clone();
    super::wait_until_async("streams connected", Duration::from_secs(30), || {
        let h = hub.clone();
        async move { h.connected() == streams }
    })
    .await?;
    let base = ll.stats.snapshot().signals;
    let step = Duration::from_millis(100);
    let steps = (virtual_time.as_millis() / step.as_millis()) as usize;
    let wall = Instant::now();
    for _ in 0..steps {
        lifeline::clock::virtual_time::advance(step).await;
        // Let every heartbeat reach the fleet and every stream its message.
        let _ = ll.fleet.settled().await;
        for _ in 0..8 {
            tokio::task::yield_now().await;
        }
    }
    let _ = ll.fleet.settled().await;
    let end = ll.stats.snapshot().signals;
    stop.cancel();
    ll.shutdown().await;
    sim.shutdown();
    drop(hold);
    let msgs =
        (end.discovery_full + end.discovery_delta) - (base.discovery_full + base.discovery_delta);
    let bytes = end.discovery_bytes - base.discovery_bytes;
    let s = streams.max(1) as f64;
    Ok(json!({
        "mode": if full { "full_discovery" } else { "delta" },
        "messages_per_agent": msgs as f64 / s,
        "bytes_per_agent": bytes as f64 / s,
        "full_messages": end.discovery_full - base.discovery_full,
        "delta_messages": end.discovery_delta - base.discovery_delta,
        "wall_seconds": wall.elapsed().as_secs_f64(),
    }))
}
