//! Reading incidents back: the open ones a replica goes on from, the list
//! and one incident for the API and the dashboard, with the episodes of
//! its agents and the signals sent to them while they were in it. The
//! fleet writes them (`IncidentRecord`, through the batch writer).

use serde::Serialize;
use sqlx::QueryBuilder;

use super::signals::SignalRecord;
use super::{on_pool, Db};
use crate::clock::Ts;
pub use crate::domain::incident::{peak_words, title, Incident};
use crate::domain::{CauseKind, Outcome, Plan, SignalKind};
use crate::domain::{ClusterName, IncidentRecord};

#[derive(sqlx::FromRow)]
struct Row {
    id: i64,
    cluster: String,
    cause: String,
    resource: String,
    started_us: i64,
    ended_us: Option<i64>,
    peak_stranded: i64,
    peak_degraded: i64,
    peak_planned: i64,
    agents: i64,
    signals: i64,
    stranded_us: i64,
    degraded_us: i64,
    planned_us: i64,
    recover_p50_us: Option<i64>,
    recover_max_us: Option<i64>,
    planned: Option<String>,
    window_id: Option<i64>,
}

const COLUMNS: &str =
    "SELECT id, cluster, cause, resource, started_us, ended_us, peak_stranded, peak_degraded, \
     peak_planned, agents, signals, stranded_us, degraded_us, planned_us, recover_p50_us, \
     recover_max_us, planned, window_id FROM incidents";

fn count(n: i64) -> u32 {
    u32::try_from(n.max(0)).unwrap_or(u32::MAX)
}

impl Row {
    fn into_incident(self) -> Option<Incident> {
        let cluster = ClusterName::new(&self.cluster);
        self.into_row().map(|r| Incident::of(cluster, r))
    }

    /// `None` for a cause this build does not know (written by a newer
    /// one): left out rather than misnamed.
    fn into_row(self) -> Option<IncidentRecord> {
        Some(IncidentRecord {
            id: self.id,
            cause: CauseKind::parse(&self.cause)?,
            resource: self.resource,
            started: Ts(self.started_us),
            ended: self.ended_us.map(Ts),
            peak_stranded: count(self.peak_stranded),
            peak_degraded: count(self.peak_degraded),
            peak_planned: count(self.peak_planned),
            agents: count(self.agents),
            signals: count(self.signals),
            stranded_us: self.stranded_us.max(0),
            degraded_us: self.degraded_us.max(0),
            planned_us: self.planned_us.max(0),
            recover_p50_us: self.recover_p50_us,
            recover_max_us: self.recover_max_us,
            planned: Plan::from_stored(self.planned.as_deref(), self.window_id),
        })
    }
}

/// `cluster`'s incidents still open, and the id the next one takes (above
/// every cluster's): what a replica that starts, or takes the lead, goes
/// on from.
pub async fn open(
    db: &Db,
    cluster: &ClusterName,
) -> Result<(Vec<IncidentRecord>, i64), sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE ended_us IS NULL AND cluster = ")
        .push_bind(cluster.as_str())
        .push(" ORDER BY id");
    let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
    // Above every id ever written, not only those still kept: pruning
    // never hands an id out again.
    let max: Option<i64> = sqlx::query_scalar(
        "SELECT MAX(v) FROM (SELECT MAX(id) AS v FROM incidents \
         UNION ALL SELECT value FROM id_high_water WHERE name = 'incidents') AS ids",
    )
    .fetch_one(pool)
    .await?;
    Ok((
        rows.into_iter().filter_map(Row::into_row).collect(),
        max.unwrap_or(0) + 1,
    ))
    })
}

/// Incidents from their rows as read (a row that does not decode is left
/// out, as everywhere in this file).
fn incidents_of(rows: Vec<Row>) -> Vec<Incident> {
    rows.into_iter().filter_map(Row::into_incident).collect()
}

/// Filters for `/api/v1/incidents`. `before` is the paging cursor (an id).
#[derive(Clone, Debug, Default)]
pub struct IncidentFilter {
    /// Only this cluster's.
    pub cluster: Option<ClusterName>,
    pub open: Option<bool>,
    pub cause: Option<CauseKind>,
    pub resource: Option<String>,
    /// Those that started at or after, or were still open then.
    pub since: Option<Ts>,
    pub before: Option<i64>,
    pub limit: u32,
}

/// Incidents, newest first.
pub async fn list(db: &Db, f: &IncidentFilter) -> Result<Vec<Incident>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE 1 = 1");
    if let Some(c) = &f.cluster {
        q.push(" AND cluster = ").push_bind(c.as_str());
    }
    super::push_open(&mut q, f.open);
    if let Some(c) = f.cause {
        q.push(" AND cause = ").push_bind(c.as_str());
    }
    if let Some(r) = &f.resource {
        q.push(" AND resource = ").push_bind(r.as_str());
    }
    if let Some(s) = f.since {
        q.push(" AND (ended_us IS NULL OR ended_us >= ")
            .push_bind(s.as_micros())
            .push(")");
    }
    if let Some(b) = f.before {
        q.push(" AND id < ").push_bind(b);
    }
    q.push(" ORDER BY id DESC LIMIT ").push_bind(i64::from(f.limit));
    let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
    Ok(incidents_of(rows))
    })
}

pub async fn get(db: &Db, id: i64) -> Result<Option<Incident>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE id = ").push_bind(id);
    let row: Option<Row> = q.build_query_as().fetch_optional(pool).await?;
    Ok(row.and_then(Row::into_incident))
    })
}

/// The signals counted toward an incident (each sent to an agent while
/// the incident held it), newest first, `limit` after the cursor `before`
/// (an id): as many in all as its `signals_sent`.
pub async fn signals(
    db: &Db,
    i: &Incident,
    before: Option<i64>,
    limit: u32,
) -> Result<Vec<SignalRecord>, sqlx::Error> {
    let f = super::signals::SignalFilter {
        incident: Some(i.id),
        before_id: before,
        limit,
        ..Default::default()
    };
    super::signals::list(db, &f).await
}

/// How many of an incident's signals there are of each kind and outcome
/// (their sum is its `signals_sent`).
#[derive(Clone, Debug, Serialize, PartialEq, utoipa::ToSchema)]
pub struct SignalCount {
    #[schema(value_type = String)]
    pub kind: SignalKind,
    #[schema(value_type = String)]
    pub outcome: Outcome,
    pub count: u64,
    /// When the first of them was sent.
    pub first: Ts,
}

pub async fn signal_counts(db: &Db, i: &Incident) -> Result<Vec<SignalCount>, sqlx::Error> {
    on_pool!(db, pool => {
    let rows: Vec<(SignalKind, Outcome, i64, i64)> = sqlx::query_as(
        "SELECT kind, outcome, count(*), MIN(created_us) FROM signals \
         WHERE incident_id = $1 GROUP BY kind, outcome ORDER BY kind, outcome",
    )
    .bind(i.id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|(kind, outcome, n, first)| SignalCount {
            kind,
            outcome,
            count: u64::try_from(n).unwrap_or(0),
            first: Ts(first),
        })
        .collect())
    })
}

/// The agents by state over time: one point per `step`, each the most
/// agents stranded (and degraded) at any minute within it.
#[derive(Clone, Debug, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Point {
    /// The step's start.
    pub at: Ts,
    pub agents: u32,
    pub stranded: u32,
    pub degraded: u32,
}

/// The oldest kept count (`samples`) of `cluster`, or of any cluster
/// for `None`, if any.
pub async fn oldest_sample(
    db: &Db,
    cluster: Option<&ClusterName>,
) -> Result<Option<Ts>, sqlx::Error> {
    on_pool!(db, pool => {
    let (at,): (Option<i64>,) =
        sqlx::query_as("SELECT MIN(at_us) FROM samples WHERE ($1 IS NULL OR cluster = $1)")
            .bind(cluster.map(ClusterName::as_str))
            .fetch_one(pool)
            .await?;
    Ok(at.map(Ts))
    })
}

/// The counts between `from` and `to` of `cluster`, or of every cluster
/// added up minute by minute for `None`: a point per `step` that holds
/// a count (minutes nobody counted, such as while no replica led, have
/// none).
pub async fn history(
    db: &Db,
    cluster: Option<&ClusterName>,
    from: Ts,
    to: Ts,
    step: std::time::Duration,
) -> Result<Vec<Point>, sqlx::Error> {
    let rows: Vec<(i64, i64, i64, i64)> = on_pool!(db, pool => {
        sqlx::query_as(
            "SELECT at_us, CAST(SUM(agents) AS BIGINT), CAST(SUM(stranded) AS BIGINT), \
             CAST(SUM(degraded) AS BIGINT) FROM samples \
             WHERE at_us >= $1 AND at_us <= $2 AND ($3 IS NULL OR cluster = $3) \
             GROUP BY at_us ORDER BY at_us",
        )
        .bind(from.as_micros())
        .bind(to.as_micros())
        .bind(cluster.map(ClusterName::as_str))
        .fetch_all(pool)
        .await
    })?;
    let mut out: Vec<Point> = Vec::new();
    for (at, agents, stranded, degraded) in rows {
        let at = Ts(at).floor_to(step);
        let (agents, stranded, degraded) = (count(agents), count(stranded), count(degraded));
        match out.last_mut() {
            Some(p) if p.at == at => {
                p.agents = p.agents.max(agents);
                p.stranded = p.stranded.max(stranded);
                p.degraded = p.degraded.max(degraded);
            }
            _ => out.push(Point {
                at,
                agents,
                stranded,
                degraded,
            }),
        }
    }
    Ok(out)
}

/// The incidents open at any time since `since`, newest first, at most
/// `limit` (the overview's strip).
pub async fn overlapping(db: &Db, since: Ts, limit: u32) -> Result<Vec<Incident>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(COLUMNS);
    q.push(" WHERE ended_us IS NULL OR ended_us >= ")
        .push_bind(since.as_micros())
        .push(" ORDER BY id DESC LIMIT ")
        .push_bind(i64::from(limit));
    let rows: Vec<Row> = q.build_query_as().fetch_all(pool).await?;
    Ok(incidents_of(rows))
    })
}

/// Minutes `agent` spent stranded (planned strandings left out) since
/// `recent` and since `earlier`
/// (`earlier` ≤ `recent` ≤ `now`): its stranded episodes cut to each
/// window, in one read.
pub async fn agent_minutes_stranded(
    db: &Db,
    agent: &str,
    (recent, earlier): (Ts, Ts),
    now: Ts,
) -> Result<(f64, f64), sqlx::Error> {
    on_pool!(db, pool => {
    let (a, b): (Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT \
         CAST(SUM(CASE WHEN ended_us IS NULL OR ended_us > $2 \
           THEN (CASE WHEN ended_us IS NULL OR ended_us > $4 THEN $4 ELSE ended_us END) \
              - (CASE WHEN started_us < $2 THEN $2 ELSE started_us END) ELSE 0 END) AS BIGINT), \
         CAST(SUM((CASE WHEN ended_us IS NULL OR ended_us > $4 THEN $4 ELSE ended_us END) \
              - (CASE WHEN started_us < $3 THEN $3 ELSE started_us END)) AS BIGINT) \
         FROM episodes WHERE agent = $1 AND state = 'stranded' \
         AND (ended_us IS NULL OR ended_us > $3) AND started_us < $4 \
         AND (incident_id IS NULL OR incident_id NOT IN \
              (SELECT id FROM incidents WHERE planned IS NOT NULL))",
    )
    .bind(agent)
    .bind(recent.as_micros())
    .bind(earlier.as_micros())
    .bind(now.as_micros())
    .fetch_one(pool)
    .await?;
    Ok((minutes(a), minutes(b)))
    })
}

fn minutes(us: Option<i64>) -> f64 {
    us.unwrap_or(0).max(0) as f64 / 60e6
}

/// Agent-minutes stranded by incidents of `resource` (a proxy or auth
/// server) that started since `recent` and since `earlier`, in one read;
/// planned incidents are not counted.
pub async fn caused_minutes_stranded(
    db: &Db,
    resource: &str,
    (recent, earlier): (Ts, Ts),
) -> Result<(f64, f64), sqlx::Error> {
    on_pool!(db, pool => {
    let (a, b): (Option<i64>, Option<i64>) = sqlx::query_as(
        "SELECT CAST(SUM(CASE WHEN started_us >= $2 THEN stranded_us ELSE 0 END) AS BIGINT), \
         CAST(SUM(stranded_us) AS BIGINT) FROM incidents WHERE resource = $1 AND started_us >= $3 \
         AND planned IS NULL",
    )
    .bind(resource)
    .bind(recent.as_micros())
    .bind(earlier.as_micros())
    .fetch_one(pool)
    .await?;
    Ok((minutes(a), minutes(b)))
    })
}

/// Agents that left an incident for another, by where they went.
#[derive(Clone, Debug, Serialize, PartialEq, utoipa::ToSchema)]
pub struct MovedOut {
    /// The incident they moved to.
    pub incident: i64,
    /// Its title ("agents' own heartbeats expired (auth server auth-1)").
    pub title: String,
    pub agents: u32,
}

#[derive(sqlx::FromRow)]
struct MovedRow {
    to: i64,
    n: i64,
    cause: Option<String>,
    resource: Option<String>,
    planned: Option<String>,
    window: Option<i64>,
}

/// Where incident `id`'s agents went when they moved out, most first.
pub async fn moved_out(db: &Db, id: i64) -> Result<Vec<MovedOut>, sqlx::Error> {
    on_pool!(db, pool => {
    let rows: Vec<MovedRow> = sqlx::query_as(
        "SELECT m.to_incident AS \"to\", COUNT(DISTINCT m.agent) AS n, i.cause, i.resource, i.planned, \
         i.window_id AS \"window\" \
         FROM incident_moves m LEFT JOIN incidents i ON i.id = m.to_incident \
         WHERE m.from_incident = $1 GROUP BY m.to_incident, i.cause, i.resource, i.planned, i.window_id \
         ORDER BY 2 DESC, 1 LIMIT 100",
    )
    .bind(id)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|MovedRow { to, n, cause, resource, planned, window }| {
            let base = match cause.as_deref().and_then(CauseKind::parse) {
                Some(c) => title(c, resource.as_deref().unwrap_or("")),
                None => format!("incident {to}"),
            };
            MovedOut {
                incident: to,
                title: match Plan::from_stored(planned.as_deref(), window) {
                    Some(p) => format!("{base} ({})", p.words()),
                    None => base,
                },
                agents: count(n),
            }
        })
        .collect())
    })
}

/// One move of an episode between incidents.
#[derive(Clone, Copy, Debug, PartialEq, Eq, sqlx::FromRow)]
pub struct Move {
    pub episode_id: i64,
    pub from_incident: i64,
    pub to_incident: i64,
    pub at_us: i64,
}

/// Every move into or out of incident `id`, oldest first.
pub async fn moves_of(db: &Db, id: i64) -> Result<Vec<Move>, sqlx::Error> {
    on_pool!(db, pool => {
    sqlx::query_as(
        "SELECT episode_id, from_incident, to_incident, at_us FROM incident_moves \
         WHERE from_incident = $1 OR to_incident = $1 ORDER BY at_us, id LIMIT 100000",
    )
    .bind(id)
    .fetch_all(pool)
    .await
    })
}

/// The parts of `episodes` spent in incident `id`, given the `moves` into
/// and out of it: an episode that moved out ends (here) when it left, and
/// names where it went; one that moved in starts (here) when it came. What
/// the incident's page, timeline and figures count, so they agree with
/// the incident's own peak and agents.
pub fn spans_in(
    id: i64,
    episodes: &[crate::domain::Episode],
    moves: &[Move],
) -> Vec<(crate::domain::Episode, Option<i64>)> {
    let mut out = Vec::with_capacity(episodes.len());
    for e in episodes {
        let mine: Vec<&Move> = moves.iter().filter(|m| m.episode_id == e.id).collect();
        let mut here = mine.first().map_or(e.incident, |m| Some(m.from_incident));
        let mut start = e.started_at;
        for m in &mine {
            let at = Ts(m.at_us).max(start);
            if here == Some(id) {
                let mut part = e.clone();
                part.started_at = start;
                part.ended_at = Some(at);
                part.end_reason = None;
                part.ended_by_signal = None;
                part.incident = Some(id);
                out.push((part, Some(m.to_incident)));
            }
            here = Some(m.to_incident);
            start = at;
        }
        if here == Some(id) {
            let mut part = e.clone();
            part.started_at = start;
            out.push((part, None));
        }
    }
    out
}
