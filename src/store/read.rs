//! Read queries: the last known state loaded at start, and the history the
//! API pages through. Dynamic filters go through `QueryBuilder` with bound
//! parameters only.

use std::time::Duration;

use serde::Serialize;
use sqlx::QueryBuilder;

use super::{on_pool, Db};
use crate::domain::{ClusterName, Episode, LastHealth, Loaded};

use crate::clock::Ts;
use crate::domain::{
    AgentState, CauseKind, EndReason, Health, HealthMode, HistoryEvent, Labels, Server, Subject,
    Tunnel,
};

#[derive(sqlx::FromRow)]
struct ResourceRow {
    kind: String,
    name: String,
    addr: String,
    version: String,
    group_id: String,
    group_generation: i64,
    expires_us: i64,
    ttl_us: i64,
    labels: String,
    auth_server: String,
}

#[derive(sqlx::FromRow)]
struct TunnelRow {
    name: String,
    agent: String,
    proxy: String,
    last_heartbeat_us: Option<i64>,
    expires_us: Option<i64>,
}

#[derive(sqlx::FromRow)]
struct EpisodeRow {
    id: i64,
    cluster: String,
    agent: String,
    state: AgentState,
    reasons: String,
    cause: String,
    cause_resource: String,
    started_us: i64,
    ended_us: Option<i64>,
    ended_by_signal: Option<i64>,
    end_reason: Option<EndReason>,
    incident_id: Option<i64>,
}

impl From<EpisodeRow> for Episode {
    fn from(r: EpisodeRow) -> Self {
        Episode {
            id: r.id,
            cluster: ClusterName::new(&r.cluster),
            agent: r.agent,
            state: r.state,
            reasons: r
                .reasons
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
            cause: CauseKind::parse(&r.cause),
            cause_resource: r.cause_resource,
            started_at: Ts(r.started_us),
            ended_at: r.ended_us.map(Ts),
            ended_by_signal: r.ended_by_signal,
            end_reason: r.end_reason,
            incident: r.incident_id,
        }
    }
}

/// What `cluster` last held: its resources, tunnels, open episodes and
/// incidents, and each auth server's last health.
pub async fn load(db: &Db, cluster: &ClusterName) -> Result<Loaded, sqlx::Error> {
    on_pool!(db, pool => {
    let rows: Vec<ResourceRow> = sqlx::query_as(
        "SELECT kind, name, addr, version, group_id, group_generation, expires_us, ttl_us, labels, auth_server \
         FROM resources WHERE cluster = $1",
    )
    .bind(cluster.as_str())
    .fetch_all(pool)
    .await?;
    let servers = rows
        .into_iter()
        .filter_map(|r| {
            Some(Server {
                kind: r.kind.parse().ok()?,
                name: r.name,
                addr: r.addr,
                version: r.version,
                group_id: r.group_id,
                group_generation: u64::try_from(r.group_generation).unwrap_or(0),
                expires: Ts(r.expires_us),
                ttl: Duration::from_micros(u64::try_from(r.ttl_us).ok().filter(|t| *t > 0)?),
                labels: Labels::from_json(&r.labels),
                auth_server: r.auth_server,
            })
        })
        .collect();
    let rows: Vec<TunnelRow> =
        sqlx::query_as("SELECT name, agent, proxy, last_heartbeat_us, expires_us FROM tunnels WHERE cluster = $1")
            .bind(cluster.as_str())
            .fetch_all(pool)
            .await?;
    let tunnels = rows
        .into_iter()
        .map(|r| Tunnel {
            name: r.name,
            agent: r.agent,
            proxy: r.proxy,
            last_heartbeat: r.last_heartbeat_us.map(Ts),
            expires: r.expires_us.map(Ts),
        })
        .collect();
    let (open_episodes, next_episode_id) = open_episodes(db, cluster).await?;
    let (open_incidents, next_incident_id) = super::incidents::open(db, cluster).await?;
    let rows: Vec<(String, String, Health, i64)> = sqlx::query_as(
        "SELECT auth_server, addr, to_status, at_us FROM health_transitions \
         WHERE id IN (SELECT MAX(id) FROM health_transitions WHERE cluster = $1 GROUP BY auth_server)",
    )
    .bind(cluster.as_str())
    .fetch_all(pool)
    .await?;
    let health = rows
        .into_iter()
        .map(|(auth_server, addr, health, at)| LastHealth {
            auth_server,
            addr,
            health,
            since: Ts(at),
        })
        .collect();
    Ok(Loaded {
        servers,
        tunnels,
        open_episodes,
        next_episode_id,
        open_incidents,
        next_incident_id,
        health,
    })
    })
}

/// `cluster`'s open episodes, and the id the next one takes (one more
/// than any stored, in any cluster): what a replica that starts, or takes
/// the lead, goes on from.
pub async fn open_episodes(
    db: &Db,
    cluster: &ClusterName,
) -> Result<(Vec<Episode>, i64), sqlx::Error> {
    on_pool!(db, pool => {
    let rows: Vec<EpisodeRow> = sqlx::query_as(
        "SELECT id, cluster, agent, state, reasons, cause, cause_resource, started_us, ended_us, ended_by_signal, end_reason, incident_id \
         FROM episodes WHERE ended_us IS NULL AND cluster = $1 ORDER BY id",
    )
    .bind(cluster.as_str())
    .fetch_all(pool)
    .await?;
    let max: Option<i64> = sqlx::query_scalar("SELECT MAX(id) FROM episodes")
        .fetch_one(pool)
        .await?;
    Ok((rows.into_iter().map(Episode::from).collect(), max.unwrap_or(0) + 1))
    })
}

/// Filters for `/api/v1/episodes`. `before` is the paging cursor (an id).
#[derive(Clone, Debug, Default)]
pub struct EpisodeFilter {
    /// Only this cluster's.
    pub cluster: Option<ClusterName>,
    pub agent: Option<String>,
    pub state: Option<AgentState>,
    pub open: Option<bool>,
    pub cause_resource: Option<String>,
    /// Only the episodes of this incident.
    pub incident: Option<i64>,
    pub before: Option<i64>,
    pub limit: u32,
}

pub async fn episodes(db: &Db, f: &EpisodeFilter) -> Result<Vec<Episode>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(
        "SELECT id, cluster, agent, state, reasons, cause, cause_resource, started_us, ended_us, ended_by_signal, end_reason, incident_id \
         FROM episodes WHERE 1 = 1",
    );
    if let Some(c) = &f.cluster {
        q.push(" AND cluster = ").push_bind(c.as_str());
    }
    if let Some(a) = &f.agent {
        q.push(" AND agent = ").push_bind(a.as_str());
    }
    if let Some(s) = f.state {
        q.push(" AND state = ").push_bind(s.as_str());
    }
    super::push_open(&mut q, f.open);
    if let Some(r) = &f.cause_resource {
        q.push(" AND cause_resource = ").push_bind(r.as_str());
    }
    if let Some(i) = f.incident {
        q.push(" AND incident_id = ").push_bind(i);
    }
    if let Some(b) = f.before {
        q.push(" AND id < ").push_bind(b);
    }
    q.push(" ORDER BY id DESC LIMIT ")
        .push_bind(i64::from(f.limit));
    let rows: Vec<EpisodeRow> = q.build_query_as().fetch_all(pool).await?;
    Ok(rows.into_iter().map(Episode::from).collect())
    })
}

/// The episodes that were ever in incident `id`: those it holds now and
/// those that moved in or out of it, newest first.
pub async fn episodes_of_incident(
    db: &Db,
    id: i64,
    limit: u32,
) -> Result<Vec<Episode>, sqlx::Error> {
    on_pool!(db, pool => {
    let rows: Vec<EpisodeRow> = sqlx::query_as(
        "SELECT id, cluster, agent, state, reasons, cause, cause_resource, started_us, ended_us, ended_by_signal, end_reason, incident_id \
         FROM episodes WHERE incident_id = $1 OR id IN \
         (SELECT episode_id FROM incident_moves WHERE from_incident = $1 OR to_incident = $1) \
         ORDER BY id DESC LIMIT $2",
    )
    .bind(id)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(Episode::from).collect())
    })
}

#[derive(sqlx::FromRow)]
struct EventDbRow {
    id: i64,
    cluster: String,
    at_us: i64,
    kind: Subject,
    name: String,
    event: HistoryEvent,
    expires_us: Option<i64>,
    ttl_us: Option<i64>,
    detail: String,
}

/// One history row as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct EventView {
    pub id: i64,
    /// The cluster it happened in.
    #[schema(value_type = String, example = "default")]
    pub cluster: ClusterName,
    pub at: Ts,
    pub kind: Subject,
    pub name: String,
    pub event: HistoryEvent,
    pub expires_at: Option<Ts>,
    pub ttl_ms: Option<i64>,
    pub detail: String,
}

#[derive(Clone, Debug, Default)]
pub struct EventFilter {
    /// Only this cluster's.
    pub cluster: Option<ClusterName>,
    pub since: Option<Ts>,
    pub kind: Option<Subject>,
    pub name: Option<String>,
    pub event: Option<HistoryEvent>,
    pub before: Option<i64>,
    pub limit: u32,
}

pub async fn events(db: &Db, f: &EventFilter) -> Result<Vec<EventView>, sqlx::Error> {
    on_pool!(db, pool => {
    let mut q = QueryBuilder::new(
        "SELECT id, cluster, at_us, kind, name, event, expires_us, ttl_us, detail FROM events WHERE 1 = 1",
    );
    if let Some(c) = &f.cluster {
        q.push(" AND cluster = ").push_bind(c.as_str());
    }
    if let Some(s) = f.since {
        q.push(" AND at_us >= ").push_bind(s.as_micros());
    }
    if let Some(k) = f.kind {
        q.push(" AND kind = ").push_bind(k);
    }
    if let Some(n) = &f.name {
        q.push(" AND name = ").push_bind(n.as_str());
    }
    if let Some(e) = &f.event {
        q.push(" AND event = ").push_bind(*e);
    }
    if let Some(b) = f.before {
        q.push(" AND id < ").push_bind(b);
    }
    q.push(" ORDER BY id DESC LIMIT ")
        .push_bind(i64::from(f.limit));
    let rows: Vec<EventDbRow> = q.build_query_as().fetch_all(pool).await?;
    Ok(rows
        .into_iter()
        .map(|r| EventView {
            id: r.id,
            cluster: ClusterName::new(&r.cluster),
            at: Ts(r.at_us),
            kind: r.kind,
            name: r.name,
            event: r.event,
            expires_at: r.expires_us.map(Ts),
            ttl_ms: r.ttl_us.map(|t| t / 1000),
            detail: r.detail,
        })
        .collect())
    })
}

/// One auth health transition as the API shows it.
#[derive(Clone, Debug, Serialize, sqlx::FromRow, utoipa::ToSchema)]
pub struct Transition {
    pub id: i64,
    pub auth_server: String,
    pub addr: String,
    #[serde(skip)]
    pub at_us: i64,
    pub from_status: Health,
    pub to_status: Health,
    pub mode: HealthMode,
    pub detail: String,
}

impl Transition {
    pub fn at(&self) -> Ts {
        Ts(self.at_us)
    }
}

/// `cluster`'s auth server's newest health transitions.
pub async fn transitions(
    db: &Db,
    cluster: &ClusterName,
    auth_server: &str,
    limit: u32,
) -> Result<Vec<Transition>, sqlx::Error> {
    on_pool!(db, pool => {
    sqlx::query_as(
        "SELECT id, auth_server, addr, at_us, from_status, to_status, mode, detail \
         FROM health_transitions WHERE cluster = $1 AND auth_server = $2 ORDER BY id DESC LIMIT $3",
    )
    .bind(cluster.as_str())
    .bind(auth_server)
    .bind(i64::from(limit))
    .fetch_all(pool)
    .await
    })
}
