//! `bench failover`: several `lifeline serve` processes on one PostgreSQL
//! database, with the simulated cluster and its agents in this process.
//!
//! Each replica reaches the database through a TCP relay of its own here,
//! so that one can be cut off (a black hole both ways, as a partition
//! looks). The agents are spread over the replicas as a layer-4 load
//! balancer would, and move to another replica when theirs goes away.
//!
//! 1. **Kill.** Proxies fail one after another (legacy agents, so only
//!    Lifeline moves them); while the leader is reconnecting the first
//!    wave, it is killed with SIGKILL as the second wave strands. Measured:
//!    SIGKILL → a new lease, → the new leader's first automatic signal,
//!    → every agent recovered; then the audit and the episodes are checked
//!    against what the agents saw.
//! 2. **Cross-replica manual reconnects**: the API of one replica, agents
//!    whose stream is on another; POST → the agent's ack.
//! 3. **Cut-off.** The leader's database relay goes dark: it must stop
//!    acting as leader before its lease ends, and the last replica takes
//!    over once it has.

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{PgPool, Row};
use tokio_util::sync::CancellationToken;

use super::{BenchError, PgScratch, Scratch};
use lifeline::clock::{Clock, Ts};
use lifeline::config::DbUrl;
use lifeline::domain::Kind;
use lifeline_sim::agent::{LifelineAddr, Lifelines};
use lifeline_sim::cluster::proxy_name;
use lifeline_sim::{SimAgent, SimCluster, SimSpec};

mod checks;
mod replica;

use checks::{audit, episodes, manual, settings};
use replica::{Replica, Setup};

fn wall_us() -> i64 {
    Ts::from_system(std::time::SystemTime::now()).as_micros()
}

fn ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

fn other(what: impl std::fmt::Display) -> BenchError {
    BenchError::Agents(what.to_string())
}

/// The lease row: holder, term, deadline and start (the database's clock).
#[derive(Clone, Debug, PartialEq)]
struct Lease {
    holder: String,
    term: i64,
    deadline_us: i64,
    since_us: i64,
}

async fn lease(pool: &PgPool) -> Result<Option<Lease>, BenchError> {
    let row =
        sqlx::query("SELECT holder, term, deadline_us, since_us FROM leader_lease WHERE id = 1")
            .fetch_optional(pool)
            .await?;
    Ok(row.map(|r| Lease {
        holder: r.get(0),
        term: r.get(1),
        deadline_us: r.get(2),
        since_us: r.get(3),
    }))
}

async fn count(pool: &PgPool, sql: &'static str) -> Result<i64, BenchError> {
    Ok(sqlx::query_scalar::<_, i64>(sql).fetch_one(pool).await?)
}

/// Polls `f` every 10 ms until it yields, or fails after `limit`.
async fn poll<T, F, Fut>(what: &'static str, limit: Duration, mut f: F) -> Result<T, BenchError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, BenchError>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            return Err(BenchError::Timeout(what));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn expiry_us(s: Option<lifeline::proto::v1::Server>) -> i64 {
    s.and_then(|s| s.expires)
        .map(|t| t.seconds * 1_000_000 + i64::from(t.nanos / 1000))
        .unwrap_or(0)
}

/// Stops a proxy's heartbeats; returns when it expires (wall µs).
async fn fail_proxy(sim: &SimCluster, i: usize) -> i64 {
    sim.pause_heartbeats(&proxy_name(i)).await;
    expiry_us(sim.get_server(Kind::Proxy, &proxy_name(i)).await)
}

pub async fn failover(
    server: &DbUrl,
    replicas: usize,
    agents: usize,
    lease_for: Duration,
    requests: usize,
) -> Result<Value, BenchError> {
    if replicas < 3 {
        return Err(BenchError::Unavailable(
            "failover needs at least 3 replicas: one is killed, one cut off, one is left",
        ));
    }
    let pg = PgScratch::create(server, "failover").await?;
    let out = run(&pg.url, replicas, agents, lease_for, requests).await;
    pg.remove().await;
    out
}

async fn run(
    db: &DbUrl,
    n: usize,
    agents: usize,
    lease_for: Duration,
    requests: usize,
) -> Result<Value, BenchError> {
    let scratch = Scratch::new("failover");
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(db.expose())
        .await?;
    let db_addr = {
        let u = url::Url::parse(db.expose())
            .map_err(|_| BenchError::Unavailable("--postgres is not a postgres:// URL"))?;
        let host = u.host_str().unwrap_or("127.0.0.1").to_string();
        tokio::net::lookup_host((host, u.port().unwrap_or(5432)))
            .await
            .map_err(|e| other(format!("database address: {e}")))?
            .next()
            .ok_or(BenchError::Unavailable("the database host has no address"))?
    };
    // Six proxies: agent i is on proxies i and i+1 (mod 6).
    let spec = SimSpec {
        agents,
        proxies: 6,
        auth_servers: 1,
        ttl: Duration::from_secs(6),
        agent_ttl: Duration::from_secs(60),
        tunnels_per_agent: 2,
        heartbeats: true,
        ..SimSpec::default()
    };
    let sim = SimCluster::start(spec, Clock::system())
        .await
        .map_err(BenchError::Sim)?;
    let setup = Setup {
        scratch: &scratch,
        sim: &sim,
        db,
        db_addr,
        lease: lease_for,
    };
    let mut reps = Vec::with_capacity(n);
    for i in 0..n {
        reps.push(Replica::spawn(&format!("r{i}"), &setup).await?);
    }
    let http = reqwest::Client::new();
    for r in &mut reps {
        r.wait_ready(&http, Duration::from_secs(60)).await?;
    }
    let stop = CancellationToken::new();
    let result = scenario(
        &pool, &sim, &mut reps, &http, agents, lease_for, requests, &stop,
    )
    .await;
    stop.cancel();
    for r in &mut reps {
        let _ = r.proc.start_kill();
        let _ = r.proc.wait().await;
    }
    sim.shutdown();
    pool.close().await;
    match result {
        Err(e @ BenchError::Timeout(_)) => {
            let logs: Vec<String> = reps
                .iter()
                .map(|r| format!("{}:\n{}", r.name, r.log_tail()))
                .collect();
            Err(other(format!(
                "{e}; the replicas' logs end:\n{}",
                logs.join("\n")
            )))
        }
        r => r,
    }
}

#[allow(clippy::too_many_arguments)]
async fn scenario(
    pool: &PgPool,
    sim: &SimCluster,
    reps: &mut [Replica],
    http: &reqwest::Client,
    agents: usize,
    lease_for: Duration,
    requests: usize,
    stop: &CancellationToken,
) -> Result<Value, BenchError> {
    let lease_us = lease_for.as_micros() as i64;
    let first = poll("a replica takes the lease", lease_for * 4, || lease(pool)).await?;
    let addrs: Vec<LifelineAddr> = reps.iter().map(|r| LifelineAddr::from(r.grpc)).collect();
    let sims = SimAgent::start_for_cluster(sim, Lifelines(addrs), 1.0, 50, stop)
        .await
        .map_err(other)?;
    let n_agents = agents as i64;
    streams_known(pool, n_agents).await?;
    // Let discovery settle before the incident.
    tokio::time::sleep(Duration::from_secs(1)).await;

    // 1. Kill. The first wave: the leader reconnects its agents.
    first_wave(pool, sim).await?;
    // The second wave strands as the leader dies.
    let wave2 = fail_proxy(sim, 2).await;
    let wait = (wave2 - wall_us() - 20_000).max(0);
    tokio::time::sleep(Duration::from_micros(wait as u64)).await;
    let before = lease(pool).await?.ok_or(BenchError::Timeout("a lease"))?;
    let dead = reps
        .iter()
        .position(|r| r.name == before.holder)
        .ok_or_else(|| {
            other(format!(
                "the lease is held by {}, not a replica",
                before.holder
            ))
        })?;
    let on_dead: HashSet<String> =
        sqlx::query_scalar::<_, String>("SELECT agent FROM agent_streams WHERE replica = $1")
            .bind(&before.holder)
            .fetch_all(pool)
            .await?
            .into_iter()
            .collect();
    let killed_us = wall_us();
    reps[dead]
        .proc
        .start_kill()
        .map_err(|e| other(format!("SIGKILL: {e}")))?;
    let _ = reps[dead].proc.wait().await;
    let old_term = before.term;
    let after = poll("a follower takes the lease", lease_for * 4, || async move {
        Ok(lease(pool).await?.filter(|l| l.term > old_term))
    })
    .await?;
    let first_signal: i64 = poll(
        "the new leader's first automatic signal",
        Duration::from_secs(60),
        || async move {
            Ok(sqlx::query_scalar::<_, Option<i64>>(
            "SELECT min(created_us) FROM signals WHERE requested_by = 'auto' AND created_us > $1",
        )
        .bind(killed_us)
        .fetch_one(pool)
        .await?)
        },
    )
    .await?;
    let survivors: Vec<&Replica> = reps.iter().filter(|r| r.name != before.holder).collect();
    let live: Vec<String> = survivors.iter().map(|r| r.name.clone()).collect();
    let recovered_us =
        every_agent_recovered(pool, http, &survivors, &live, &sims, n_agents).await?;
    every_signal_answered(pool, lease_for).await?;
    let streams_moved = sqlx::query_scalar::<_, i64>(
        "SELECT count(*) FROM agent_streams WHERE agent = ANY($1) AND replica = ANY($2)",
    )
    .bind(on_dead.iter().cloned().collect::<Vec<_>>())
    .bind(&live)
    .fetch_one(pool)
    .await?;
    let audit = audit(pool, &sims).await?;
    let new_leader = reps
        .iter()
        .find(|r| r.name == after.holder)
        .ok_or_else(|| other(format!("the lease is held by {}", after.holder)))?;
    let episodes = episodes(pool, http, new_leader).await?;

    // 2. Manual reconnects through one replica to agents on another.
    let (from, to) = (survivors[0], survivors[1 % survivors.len()]);
    let manual = manual(pool, http, from, to, requests).await?;
    let settings = settings(http, from, to).await?;

    // 3. Cut-off: the leader loses the database.
    let cutoff = cutoff(pool, http, reps, lease_for).await?;
    drop(sims);
    Ok(json!({
        "scenario": "failover",
        "replicas": reps.len(),
        "agents": agents,
        "leader_lease_ms": lease_for.as_millis() as u64,
        "first_leader": first.holder,
        "kill": {
            "leader": before.holder,
            "agent_streams_on_it": on_dead.len(),
            "new_leader": after.holder,
            "to_new_lease_ms": ms(after.since_us - killed_us),
            "to_first_automatic_signal_ms": ms(first_signal - killed_us),
            "target_ms": ms(lease_us + 1_000_000),
            "to_every_agent_recovered_ms": ms(recovered_us - killed_us),
            "agent_streams_moved": streams_moved,
        },
        "audit": audit,
        "episodes": episodes,
        "manual_cross_replica": manual,
        "settings_cross_replica": settings,
        "cutoff": cutoff,
    }))
}

/// Waits until every agent's stream is known to the database.
async fn streams_known(pool: &PgPool, n_agents: i64) -> Result<(), BenchError> {
    poll(
        "every agent's stream is known",
        Duration::from_secs(60),
        || async move {
            let c = count(pool, "SELECT count(*) FROM agent_streams").await?;
            Ok((c >= n_agents).then_some(()))
        },
    )
    .await
}

/// The first wave: two proxies fail; returns once the leader reconnects
/// their agents.
async fn first_wave(pool: &PgPool, sim: &SimCluster) -> Result<(), BenchError> {
    let wave1 = fail_proxy(sim, 0).await.max(fail_proxy(sim, 1).await);
    poll(
        "the leader reconnects the first wave",
        Duration::from_secs(30),
        || async move {
            let c = sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM signals WHERE requested_by = 'auto' AND created_us >= $1",
            )
            .bind(wave1)
            .fetch_one(pool)
            .await?;
            Ok((c > 0).then_some(()))
        },
    )
    .await
}

/// Waits until every signal is answered: rows the killed replica took with
/// it are answered by the new leader's sweep (after the ack timeout and a
/// lease).
async fn every_signal_answered(pool: &PgPool, lease_for: Duration) -> Result<(), BenchError> {
    poll(
        "every signal is answered",
        Duration::from_secs(60) + lease_for * 2,
        || async move {
            let open = count(
                pool,
                "SELECT count(*) FROM signals WHERE outcome IN ('pending', 'delivered')",
            )
            .await?;
            Ok((open == 0).then_some(()))
        },
    )
    .await
}

/// The leader loses the database (a black hole both ways): when it steps
/// down, when its lease ends, and who takes over.
async fn cutoff(
    pool: &PgPool,
    http: &reqwest::Client,
    reps: &mut [Replica],
    lease_for: Duration,
) -> Result<Value, BenchError> {
    let leader = lease(pool).await?.ok_or(BenchError::Timeout("a lease"))?;
    let cut = reps
        .iter()
        .position(|r| r.name == leader.holder)
        .ok_or_else(|| other(format!("the lease is held by {}", leader.holder)))?;
    let cut_us = wall_us();
    reps[cut].cut_off_database();
    // Its last deadline as the database has it, when it stepped down, and
    // who took over.
    let mut last = leader.clone();
    let mut stepped_down_us = None;
    let give_up = Instant::now() + lease_for * 4;
    let taken = loop {
        let r = &reps[cut];
        if stepped_down_us.is_none() && r.says_it_leads(http).await == Some(false) {
            stepped_down_us = Some(wall_us());
        }
        match lease(pool).await? {
            Some(l) if l.holder == r.name => last = l,
            Some(l) => break l,
            None => {}
        }
        if Instant::now() > give_up {
            return Err(BenchError::Timeout(
                "the cut-off leader steps down and another takes over",
            ));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let stepped_down_us = match stepped_down_us {
        Some(t) => t,
        // Still leading by its own account while another holds the lease.
        None => {
            poll("the cut-off leader steps down", lease_for * 2, || async {
                Ok((reps[cut].says_it_leads(http).await == Some(false)).then(wall_us))
            })
            .await?
        }
    };
    Ok(json!({
        "leader": leader.holder,
        "lease_end_ms": ms(last.deadline_us - cut_us),
        "stepped_down_ms": ms(stepped_down_us - cut_us),
        "stepped_down_before_lease_end": stepped_down_us < last.deadline_us,
        "new_leader": taken.holder,
        "taken_over_ms": ms(taken.since_us - cut_us),
        "taken_over_after_lease_end": taken.since_us >= last.deadline_us,
    }))
}

/// Waits until no agent is stranded: no open stranded episode, none in any
/// survivor's model (`live` are their names), every stream on a survivor,
/// and every simulated agent
/// on a live proxy. Returns when.
async fn every_agent_recovered(
    pool: &PgPool,
    http: &reqwest::Client,
    survivors: &[&Replica],
    live: &[String],
    sims: &[SimAgent],
    n_agents: i64,
) -> Result<i64, BenchError> {
    let (live_ref, sims_ref, live_reps) = (live, sims, survivors);
    poll(
        "every agent recovers",
        Duration::from_secs(120),
        || async move {
            let open = count(
                pool,
                "SELECT count(*) FROM episodes WHERE ended_us IS NULL AND state = 'stranded'",
            )
            .await?;
            let mut stranded_in_models = 0;
            for r in live_reps {
                let v = r.summary(http).await.unwrap_or_default();
                stranded_in_models += v["agents"]["stranded"].as_i64().unwrap_or(1);
            }
            let moved = sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM agent_streams WHERE replica = ANY($1)",
            )
            .bind(live_ref)
            .fetch_one(pool)
            .await?;
            let stranded = sims_ref
                .iter()
                .filter(|a| !a.tunnels().iter().any(|p| live_proxy(p)))
                .count();
            Ok(
                (open == 0 && stranded_in_models == 0 && moved >= n_agents && stranded == 0)
                    .then(wall_us),
            )
        },
    )
    .await
}

/// Proxies 0–2 fail; the rest stay.
fn live_proxy(p: &str) -> bool {
    ![proxy_name(0), proxy_name(1), proxy_name(2)]
        .iter()
        .any(|d| d == p)
}
