//! What `bench failover` checks and measures once the cluster has
//! recovered: the audit and the episodes against what the agents saw, and
//! manual reconnects and settings across replicas.

// Benchmarks measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use sqlx::{PgPool, Row};

use super::replica::Replica;
use super::{count, ms, other, poll, wall_us};
use crate::signals::stats_ms;
use crate::{BenchError, BENCH_TOKEN};
use lifeline_sim::agent::AgentEvent;
use lifeline_sim::SimAgent;

/// What the agents acked against the `signals` table.
pub(super) async fn audit(pool: &PgPool, sims: &[SimAgent]) -> Result<Value, BenchError> {
    let rows: HashMap<i64, String> = sqlx::query("SELECT id, outcome FROM signals")
        .fetch_all(pool)
        .await?
        .into_iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut acked: Vec<i64> = Vec::new();
    for a in sims {
        for e in a.events() {
            if let AgentEvent::Acked { id, .. } = e {
                acked.push(id as i64);
            }
        }
    }
    let unique: HashSet<i64> = acked.iter().copied().collect();
    let without_row = unique.iter().filter(|id| !rows.contains_key(id)).count();
    let not_recorded = unique
        .iter()
        .filter(|id| rows.get(id).is_some_and(|o| o != "acked"))
        .count();
    let mut outcomes: HashMap<&str, usize> = HashMap::new();
    for o in rows.values() {
        *outcomes.entry(o.as_str()).or_default() += 1;
    }
    Ok(json!({
        "signal_rows": rows.len(),
        "outcomes": outcomes,
        "acks_by_agents": acked.len(),
        "signals_delivered_twice": acked.len() - unique.len(),
        "acked_without_a_row": without_row,
        "acks_lost_with_the_killed_replica": not_recorded,
    }))
}

/// Episodes: open ones only for agents the leader's model has degraded or
/// stranded now, none twice, none overlapping another of its agent.
pub(super) async fn episodes(
    pool: &PgPool,
    http: &reqwest::Client,
    leader: &Replica,
) -> Result<Value, BenchError> {
    let in_model = || async {
        let v = leader.summary(http).await.unwrap_or_default();
        let n = |k: &str| v["agents"][k].as_i64();
        n("degraded").zip(n("stranded")).map(|(d, s)| d + s)
    };
    // The leader writes history in batches: wait for it to catch up, and
    // report what was last seen if it never does.
    let deadline = Instant::now() + Duration::from_secs(10);
    let (open, model) = loop {
        let open = count(pool, "SELECT count(*) FROM episodes WHERE ended_us IS NULL").await?;
        let model = in_model().await.unwrap_or(-1);
        if model == open || Instant::now() > deadline {
            break (open, model);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    Ok(json!({
        "total": count(pool, "SELECT count(*) FROM episodes").await?,
        "open": open,
        "degraded_or_stranded_in_the_leaders_model": model,
        "open_stranded": count(
            pool,
            "SELECT count(*) FROM episodes WHERE ended_us IS NULL AND state = 'stranded'",
        )
        .await?,
        "duplicated": count(
            pool,
            "SELECT count(*) FROM (SELECT agent, state, started_us FROM episodes \
             GROUP BY agent, state, started_us HAVING count(*) > 1) d",
        )
        .await?,
        "overlapping": count(
            pool,
            "SELECT count(*) FROM episodes a JOIN episodes b \
             ON a.agent = b.agent AND a.id < b.id \
             AND b.started_us < COALESCE(a.ended_us, 9223372036854775807) \
             AND a.started_us < COALESCE(b.ended_us, 9223372036854775807)",
        )
        .await?,
    }))
}

/// A setting changed through `from`'s API (`full_discovery`, on and off
/// again, 10 times): PUT → `to` applies it (its summary, from memory).
pub(super) async fn settings(
    http: &reqwest::Client,
    from: &Replica,
    to: &Replica,
) -> Result<Value, BenchError> {
    let mut lat = Vec::new();
    for i in 0..10 {
        let on = i % 2 == 0;
        let t0 = Instant::now();
        let resp = http
            .put(format!(
                "http://{}/api/v1/settings/full_discovery{}",
                from.http,
                // Overwriting a dynamic value is forced, as in RFD 0016.
                if i == 0 { "" } else { "?force=true" }
            ))
            .bearer_auth(BENCH_TOKEN)
            .json(&json!({ "value": on }))
            .send()
            .await
            .map_err(other)?;
        if !resp.status().is_success() {
            let body = resp.text().await.unwrap_or_default();
            return Err(other(format!(
                "PUT full_discovery on {}: {body}",
                from.name
            )));
        }
        let deadline = t0 + Duration::from_secs(10);
        loop {
            let seen =
                to.summary(http).await.unwrap_or_default()["signals"]["full_discovery"].as_bool();
            if seen == Some(on) {
                lat.push(t0.elapsed().as_secs_f64() * 1000.0);
                break;
            }
            if Instant::now() > deadline {
                return Err(BenchError::Timeout(
                    "a setting changed on one replica applies on another",
                ));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
    Ok(json!({
        "setting": "full_discovery",
        "put_on": from.name,
        "applied_on": to.name,
        "put_to_applied_ms": stats_ms(&mut lat),
        "target_ms": 1000,
    }))
}

/// `requests` manual reconnects posted to `from`, each to an agent whose
/// stream is on `to`: POST → the ack recorded (by `to`).
pub(super) async fn manual(
    pool: &PgPool,
    http: &reqwest::Client,
    from: &Replica,
    to: &Replica,
    requests: usize,
) -> Result<Value, BenchError> {
    let on_to: Vec<String> = sqlx::query_scalar::<_, String>(
        "SELECT agent FROM agent_streams WHERE replica = $1 ORDER BY agent",
    )
    .bind(&to.name)
    .fetch_all(pool)
    .await?;
    if on_to.is_empty() {
        return Err(other(format!("no agent stream is on {}", to.name)));
    }
    let mut started = Vec::with_capacity(requests);
    for i in 0..requests {
        let agent = &on_to[i % on_to.len()];
        let t0 = wall_us();
        let v: Value = http
            .post(format!(
                "http://{}/api/v1/agents/{agent}/reconnect",
                from.http
            ))
            .bearer_auth(BENCH_TOKEN)
            .json(&json!({"reason": "bench"}))
            .send()
            .await
            .map_err(other)?
            .json()
            .await
            .map_err(other)?;
        let id = v["id"]
            .as_i64()
            .ok_or_else(|| other(format!("no signal id: {v}")))?;
        started.push((id, t0));
        // One at a time, a little apart: latency, not throughput.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ids: Vec<i64> = started.iter().map(|(id, _)| *id).collect();
    let ids = &ids;
    let acked: HashMap<i64, i64> = poll(
        "every manual reconnect is acked",
        Duration::from_secs(30),
        || async move {
            let rows: Vec<(i64, Option<i64>)> =
                sqlx::query_as("SELECT id, acked_us FROM signals WHERE id = ANY($1)")
                    .bind(ids)
                    .fetch_all(pool)
                    .await?;
            let acked: HashMap<i64, i64> = rows
                .into_iter()
                .filter_map(|(id, a)| a.map(|a| (id, a)))
                .collect();
            Ok((acked.len() == ids.len()).then_some(acked))
        },
    )
    .await?;
    let mut lat: Vec<f64> = started
        .iter()
        .filter_map(|(id, t0)| acked.get(id).map(|a| ms(a - t0)))
        .collect();
    Ok(json!({
        "api_on": from.name,
        "streams_on": to.name,
        "post_to_ack_ms": stats_ms(&mut lat),
        "target_p99_ms": 50,
    }))
}
