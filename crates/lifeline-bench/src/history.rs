//! Past incidents for `bench ui`: days of history written straight into
//! the store before Lifeline starts on it, as a leader would have written
//! them: ended incidents spread over the period (proxies expiring and auth
//! servers NOT_SERVING), each with its agents' episodes and one acked
//! signal per episode, and the per-minute counts they add up to.

use std::time::Duration;

use sqlx::QueryBuilder;

use super::BenchError;
use lifeline::clock::Ts;
use lifeline::domain::ClusterName;
use lifeline::store::Db;
use lifeline_sim::cluster::{agent_name, auth_name, proxy_name};

/// How much history to write.
#[derive(Clone, Copy, Debug)]
pub struct History {
    pub days: u64,
    pub incidents: usize,
    /// Agents (episodes) per incident.
    pub agents_each: usize,
}

/// What was written, for the report.
#[derive(Debug, Default)]
pub struct Seeded {
    pub incidents: usize,
    pub episodes: usize,
    pub signals: usize,
    pub samples: usize,
    /// An incident from the middle of the period, to render.
    pub sample_incident: i64,
}

const ROWS: usize = 500;
const MINUTE_US: i64 = 60_000_000;

/// A row of `incidents`: id, cause, resource, started, ended, agents,
/// stranded time, recovery p50 and max.
type IncidentRow = (
    i64,
    &'static str,
    String,
    i64,
    i64,
    i64,
    i64,
    Option<i64>,
    Option<i64>,
);
/// A row of `episodes` (and of the signal that ended it): incident,
/// agent, cause, resource, from, to.
type EpisodeRow = (i64, String, &'static str, String, i64, i64);

/// The rows to write, made without the database.
struct Plan {
    start: i64,
    incidents: Vec<IncidentRow>,
    episodes: Vec<EpisodeRow>,
    /// Agents stranded in each minute (and degraded).
    minutes: Vec<(i64, i64)>,
}

fn plan(h: &History, now: Ts, agents: usize, proxies: usize, auths: usize) -> Plan {
    let span_us = i64::try_from(Duration::from_secs(h.days * 86_400).as_micros())
        .unwrap_or(i64::MAX)
        .max(MINUTE_US);
    let start = now.as_micros() - span_us;
    let n = h.incidents.max(1);
    let mut incidents = Vec::with_capacity(n);
    let mut episodes = Vec::with_capacity(n * h.agents_each);
    let mut minutes = vec![(0i64, 0i64); (span_us / MINUTE_US) as usize + 1];
    for i in 0..n {
        let id = i as i64 + 1;
        // Evenly spread, an hour before now at the latest; 1 to 30 minutes.
        let started = start + (span_us - 3_600_000_000).max(0) * i as i64 / n as i64;
        let lasted = MINUTE_US * (1 + (i as i64 * 7) % 30);
        let ended = started + lasted;
        let (cause, resource) = if i % 4 == 3 {
            ("auth_not_serving", auth_name(i % auths.max(1)))
        } else {
            ("proxy_expired", proxy_name(i % proxies.max(1)))
        };
        let k = h.agents_each.min(agents);
        let mut recoveries = Vec::with_capacity(k);
        let mut stranded_us = 0i64;
        for a in 0..k {
            let agent = agent_name((i * 37 + a * 101) % agents.max(1));
            let from = started + (a as i64 * 1_000_000) % (lasted / 2).max(1);
            let to = ended - (a as i64 * 3_000_000) % (lasted / 2).max(1);
            recoveries.push(to - from);
            stranded_us += to - from;
            episodes.push((id, agent, cause, resource.clone(), from, to));
            let (m0, m1) = ((from - start) / MINUTE_US, (to - start) / MINUTE_US);
            for m in m0..=m1 {
                if let Some(slot) = minutes.get_mut(m as usize) {
                    slot.0 += 1;
                }
            }
        }
        recoveries.sort_unstable();
        incidents.push((
            id,
            cause,
            resource,
            started,
            ended,
            k as i64,
            stranded_us,
            recoveries
                .get(recoveries.len().saturating_sub(1) / 2)
                .copied(),
            recoveries.last().copied(),
        ));
    }
    Plan {
        start,
        incidents,
        episodes,
        minutes,
    }
}

/// Writes the plan's rows, a statement per `ROWS`.
async fn write(
    db: &Db,
    cluster: &ClusterName,
    plan: &Plan,
    agents: usize,
) -> Result<(), BenchError> {
    let cluster = cluster.as_str();
    let Plan {
        start,
        incidents,
        episodes,
        minutes,
    } = plan;
    let start = *start;
    lifeline::on_pool!(db, pool => {
        for chunk in incidents.chunks(ROWS) {
            let mut q = QueryBuilder::new(
                "INSERT INTO incidents (cluster, id, cause, resource, started_us, ended_us, peak_stranded, peak_degraded, \
                 agents, signals, stranded_us, recover_p50_us, recover_max_us) ",
            );
            q.push_values(chunk, |mut r, (id, cause, resource, started, ended, k, stranded_us, p50, max)| {
                r.push_bind(cluster)
                    .push_bind(*id)
                    .push_bind(*cause)
                    .push_bind(resource.as_str())
                    .push_bind(*started)
                    .push_bind(*ended)
                    .push_bind(*k)
                    .push_bind(0i64)
                    .push_bind(*k)
                    .push_bind(*k)
                    .push_bind(*stranded_us)
                    .push_bind(*p50)
                    .push_bind(*max);
            });
            q.build().execute(pool).await?;
        }
        for (c, chunk) in episodes.chunks(ROWS).enumerate() {
            let first = (c * ROWS) as i64 + 1;
            let mut q = QueryBuilder::new(
                "INSERT INTO episodes (cluster, id, agent, state, reasons, cause, cause_resource, started_us, ended_us, \
                 ended_by_signal, end_reason, incident_id) ",
            );
            q.push_values(chunk.iter().enumerate(), |mut r, (j, (incident, agent, cause, resource, from, to))| {
                let id = first + j as i64;
                r.push_bind(cluster)
                    .push_bind(id)
                    .push_bind(agent.as_str())
                    .push_bind("stranded")
                    .push_bind("no_live_tunnel")
                    .push_bind(*cause)
                    .push_bind(resource.as_str())
                    .push_bind(*from)
                    .push_bind(*to)
                    .push_bind(id)
                    .push_bind("recovered")
                    .push_bind(*incident);
            });
            q.build().execute(pool).await?;
            let mut q = QueryBuilder::new(
                "INSERT INTO signals (cluster, id, kind, agent, proxy, reason, requested_by, created_us, delivered_us, \
                 acked_us, outcome, detail, latency_us, restart) ",
            );
            q.push_values(chunk.iter().enumerate(), |mut r, (j, (_, agent, _, resource, from, _))| {
                let id = first + j as i64;
                r.push_bind(cluster)
                    .push_bind(id)
                    .push_bind("reconnect")
                    .push_bind(agent.as_str())
                    .push_bind(resource.as_str())
                    .push_bind("no_live_tunnel")
                    .push_bind("auto")
                    .push_bind(*from + 500_000)
                    .push_bind(*from + 501_000)
                    .push_bind(*from + 503_000)
                    .push_bind("acked")
                    .push_bind("moved")
                    .push_bind(3_000i64)
                    .push_bind(0i64);
            });
            q.build().execute(pool).await?;
        }
        let rows: Vec<(i64, i64)> = minutes
            .iter()
            .enumerate()
            .map(|(m, (stranded, _))| (start - start.rem_euclid(MINUTE_US) + m as i64 * MINUTE_US, *stranded))
            .collect();
        for chunk in rows.chunks(ROWS) {
            let mut q = QueryBuilder::new("INSERT INTO samples (cluster, at_us, agents, stranded, degraded) ");
            q.push_values(chunk, |mut r, (at, stranded)| {
                r.push_bind(cluster)
                    .push_bind(*at)
                    .push_bind(agents as i64)
                    .push_bind(*stranded)
                    .push_bind(0i64);
            });
            q.push(" ON CONFLICT (cluster, at_us) DO NOTHING");
            q.build().execute(pool).await?;
        }
        Ok::<(), sqlx::Error>(())
    })?;
    Ok(())
}

/// Writes `h` ending at `now` for a fleet of `agents` agents, `proxies`
/// proxies and `auths` auth servers.
pub async fn seed(
    db: &Db,
    cluster: &ClusterName,
    h: History,
    now: Ts,
    agents: usize,
    proxies: usize,
    auths: usize,
) -> Result<Seeded, BenchError> {
    let n = h.incidents.max(1);
    let plan = plan(&h, now, agents, proxies, auths);
    write(db, cluster, &plan, agents).await?;
    // A database that has run for days has its planner statistics
    // (autovacuum's analyze); one written a moment ago has none yet.
    if let Db::Postgres(pg) = db {
        sqlx::query("ANALYZE").execute(&pg.pool).await?;
    }
    Ok(Seeded {
        incidents: n,
        episodes: plan.episodes.len(),
        signals: plan.episodes.len(),
        samples: plan.minutes.len(),
        sample_incident: (n as i64 / 2).max(1),
    })
}
