//! `GET /api/v1/clusters`: a row for each cluster Lifeline watches, with
//! its watch's state, its agents by state, its proxies live, its auth
//! servers' health, its open incidents and its last event. Thin: the
//! figures are the fleet's summary and the store's, rendered here.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::contract::ReadErrors;
use super::error::ApiError;
use super::AppState;
use crate::clock::Ts;
use crate::config::{Config, SourceKind};
use crate::domain::ClusterName;
use crate::fleet::model::WatchState;
use crate::fleet::view::{self, AgentCounts, ProxyCounts};
use crate::store::read::{self, EventFilter};

/// A configured cluster, as the API names it.
#[derive(Clone, Debug)]
pub struct ClusterInfo {
    pub name: String,
    pub source: SourceKind,
}

impl ClusterInfo {
    /// Every cluster `cfg` watches.
    pub fn all(cfg: &Config) -> Vec<ClusterInfo> {
        cfg.clusters()
            .into_iter()
            .map(|c| ClusterInfo {
                name: c.name.clone(),
                source: c.source,
            })
            .collect()
    }
}

/// A list's `?cluster=`, checked against the clusters watched: the one
/// it is narrowed to, or `None` for every cluster. A name no cluster is
/// watched under is a 404 (`unknown_cluster`) that lists the names that
/// are.
pub fn scope(s: &AppState, asked: Option<String>) -> Result<Option<ClusterName>, ApiError> {
    let Some(name) = super::error::nonempty("cluster", asked)? else {
        return Ok(None);
    };
    match s.clusters.iter().find(|c| c.name == name) {
        Some(c) => Ok(Some(ClusterName::new(&c.name))),
        None => {
            let watched: Vec<&str> = s.clusters.iter().map(|c| c.name.as_str()).collect();
            Err(ApiError::UnknownCluster {
                message: format!(
                    "cluster: no cluster named {:?} is watched (watched: {})",
                    crate::domain::text::bounded(&name, 80),
                    watched.join(", ")
                ),
            })
        }
    }
}

/// `?cluster=` alone, for the lists that take no other filter.
#[derive(serde::Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ClusterQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    pub cluster: Option<String>,
}

/// One cluster's row.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ClusterRow {
    /// The cluster's name (`[[clusters]]` `name`, or the one-cluster
    /// form's).
    name: String,
    /// `lifeline` or `teleport`.
    #[schema(value_type = String, example = "teleport")]
    source: SourceKind,
    /// Where its watch stands over every kind: `ready`, `initializing`
    /// or `stale` (the fleet's own reading of its kinds).
    watch: WatchState,
    agents: AgentCounts,
    proxies: ProxyCounts,
    /// Auth servers by health.
    auth_servers: BTreeMap<&'static str, usize>,
    /// Incidents not over yet.
    open_incidents: usize,
    /// When its newest history event happened; none before the first.
    last_event_at: Option<Ts>,
}

/// Every cluster Lifeline watches, in configuration order.
#[derive(Serialize, utoipa::ToSchema)]
pub struct ClusterList {
    items: Vec<ClusterRow>,
}

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list))
}

/// Every cluster Lifeline watches.
///
/// A row each: the watch's state, agents by state, proxies, auth servers'
/// health, open incidents and the newest history event.
#[utoipa::path(
    get,
    path = "/api/v1/clusters",
    tag = "fleet",
    operation_id = "list_clusters",
    security((), ("bearer" = [])),
    responses((status = 200, description = "The clusters.", body = ClusterList), ReadErrors)
)]
async fn list(State(s): State<AppState>) -> Result<Json<ClusterList>, ApiError> {
    let summary: view::Summary = s.fleet.recent().await?.summary.clone();
    let open_incidents = crate::store::incidents::open(&s.db, s.fleet.cluster())
        .await?
        .0
        .len();
    let last_event_at = read::events(
        &s.db,
        &EventFilter {
            cluster: Some(s.fleet.cluster().clone()),
            limit: 1,
            ..EventFilter::default()
        },
    )
    .await?
    .first()
    .map(|e| e.at);
    // One cluster per process: the summary is its.
    let items = s
        .clusters
        .iter()
        .map(|c| ClusterRow {
            name: c.name.clone(),
            source: c.source,
            watch: summary.watcher.overall(),
            agents: summary.agents.clone(),
            proxies: summary.proxies.clone(),
            auth_servers: summary.auth_servers.clone(),
            open_incidents,
            last_event_at,
        })
        .collect();
    Ok(Json(ClusterList { items }))
}
