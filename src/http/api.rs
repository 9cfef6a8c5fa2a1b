//! `/api/v1`: JSON reads of current state (from the fleet) and history (from
//! SQLite). Thin: parse and validate parameters, delegate, serialise.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::clusters::ClusterQuery;
use super::contract::{ListErrors, ReadErrors, ReadOneErrors};
use super::error::{ApiError, ApiQuery};
use super::paged::{ById, ByName, IdPage, Listed, NamePage, Page};
use super::AppState;
use crate::clock::Ts;
use crate::domain::Subject;
use crate::domain::{AgentState, HistoryEvent, Kind};
use crate::fleet::view::{self, AgentFilter};
use crate::store::read::{self, EpisodeFilter, EventFilter};

enum Since {
    At(Ts),
    Ago(std::time::Duration),
}

/// An RFC 3339 time (any offset), or a duration written in
/// `contract::SINCE_UNITS`.
fn since(v: &str) -> Option<Since> {
    if let Some(t) = Ts::parse_rfc3339(v) {
        return Some(Since::At(t));
    }
    super::contract::written(v, super::contract::SINCE_UNITS).map(Since::Ago)
}

/// A `?since=`-like parameter: an RFC 3339 time, or a duration back from
/// the fleet's settled time ("15m").
pub(super) async fn since_param(
    s: &AppState,
    name: &str,
    v: Option<&str>,
) -> Result<Option<Ts>, ApiError> {
    let Some(v) = v else { return Ok(None) };
    match since(v) {
        Some(Since::At(t)) => Ok(Some(t)),
        Some(Since::Ago(d)) => Ok(Some(s.fleet.settled().await?.saturating_sub(d))),
        None => Err(ApiError::BadParameter(format!(
            "{name} {:?} is neither an RFC 3339 time nor a duration like 15m (a number and one of s, m, h, d)",
            crate::http::error::clip(v)
        ))),
    }
}

/// A duration parameter such as `step=1m`: a number and one of `units`.
pub(super) fn duration_param(
    name: &str,
    v: &str,
    units: &[(char, u64)],
) -> Result<std::time::Duration, ApiError> {
    super::contract::written(v, units).ok_or_else(|| {
        let names: Vec<String> = units.iter().map(|(u, _)| u.to_string()).collect();
        ApiError::BadParameter(format!(
            "{name} {:?} is not a duration like 1m (a number and one of {})",
            crate::http::error::clip(v),
            names.join(", ")
        ))
    })
}

/// The reads of `/api/v1`, each documented by its `#[utoipa::path]`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(summary))
        .routes(routes!(agents))
        .routes(routes!(agent))
        .routes(routes!(proxies))
        .routes(routes!(proxy))
        .routes(routes!(auth_servers))
        .routes(routes!(auth_server))
        .routes(routes!(ttl_windows))
        .routes(routes!(episodes))
        .routes(routes!(events))
}

pub(super) use super::error::nonempty;

/// An optional parameter naming one value of `E` (its `strum` name); any
/// other text is a 400 that lists the choices.
pub(super) fn choice<E>(name: &str, v: Option<&str>) -> Result<Option<E>, ApiError>
where
    E: std::str::FromStr + strum::VariantArray + Copy + Into<&'static str>,
{
    v.map(|v| {
        v.parse::<E>().map_err(|_| {
            ApiError::BadParameter(format!(
                "{name} must be one of {}, got {v:?}",
                crate::domain::names::<E>().join(", ")
            ))
        })
    })
    .transpose()
}

#[derive(Serialize, utoipa::ToSchema)]
struct SummaryResponse {
    #[serde(flatten)]
    fleet: view::Summary,
    /// Counted by every room as it happens, read now.
    ingest: crate::stats::StatsSnapshot,
    signals: SignalsSummary,
    /// This replica and who leads (always itself, alone on SQLite).
    leadership: crate::store::Leadership,
}

#[derive(Serialize, utoipa::ToSchema)]
struct SignalsSummary {
    connected_agents: usize,
    awaiting_ack: usize,
    auto_reconnect: bool,
    full_discovery: bool,
    reconnect_interval: Option<String>,
    graceful_tunnel_closing: bool,
    storm_guard: crate::signals::reconnect::Guard,
    /// Sidecars restarting their agents, across live replicas.
    sidecars: usize,
    /// Of the sidecars whose streams are on this replica, those in dry run:
    /// every restart asked of them is refused, by design.
    dry_run_sidecars: usize,
    /// Signals the agents' peers refused without trying, since start.
    refused: u64,
}

/// The fleet at a glance.
///
/// Counts of agents by state, proxies, auth servers' health, the
/// watcher's readiness, root causes, ingest counters and the signals'
/// state (storm guard included).
#[utoipa::path(
    get,
    path = "/api/v1/summary",
    tag = "fleet",
    operation_id = "summary",
    security((), ("bearer" = [])),
    responses((status = 200, description = "The summary.", body = SummaryResponse), ReadErrors)
)]
async fn summary(State(s): State<AppState>) -> Result<Json<SummaryResponse>, ApiError> {
    let fleet = s.fleet.recent().await?.summary.clone();
    let set = &s.hub.settings;
    Ok(Json(SummaryResponse {
        fleet,
        ingest: s.stats.snapshot(),
        signals: SignalsSummary {
            connected_agents: s.hub.connected(),
            awaiting_ack: s.hub.in_flight(),
            auto_reconnect: set.auto_reconnect(),
            full_discovery: set.full_discovery(),
            reconnect_interval: set
                .reconnect_interval()
                .map(|d| humantime::format_duration(d).to_string()),
            graceful_tunnel_closing: set.graceful_tunnel_closing(),
            storm_guard: s.guard.borrow().clone(),
            sidecars: s.hub.restarts().1,
            dry_run_sidecars: s.hub.dry_run_sidecars(),
            refused: s.stats.signal_total(crate::stats::SignalOutcome::Refused),
        },
        leadership: s.hub.leadership().borrow().clone(),
    }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct AgentsQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
    /// Only agents in this standing (`planned`: degraded or stranded
    /// with a plan that explains it; `degraded` and `stranded` leave
    /// those out).
    state: Option<crate::domain::Standing>,
    /// Only agents with a tunnel to this proxy.
    #[param(min_length = 1)]
    proxy: Option<String>,
    /// Only agents connected to this auth server.
    #[param(min_length = 1)]
    auth_server: Option<String>,
    /// Only agents whose name contains this.
    q: Option<String>,
}

/// Agents, one page at a time.
///
/// In name order, with their state, reasons, root cause, tunnels and TTL.
#[utoipa::path(
    get,
    path = "/api/v1/agents",
    tag = "fleet",
    operation_id = "list_agents",
    params(AgentsQuery, NamePage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of agents.", body = view::AgentPage), ListErrors)
)]
async fn agents(
    State(s): State<AppState>,
    Listed(q, page): Listed<AgentsQuery, ByName>,
) -> Result<Json<view::AgentPage>, ApiError> {
    // One cluster per fleet: a name it does not hold was refused.
    super::clusters::scope(&s, q.cluster)?;
    let filter = AgentFilter {
        state: q.state,
        proxy: nonempty("proxy", q.proxy)?,
        auth_server: nonempty("auth_server", q.auth_server)?,
        q: q.q.filter(|s| !s.is_empty()),
        after: page.cursor,
        limit: page.limit as usize,
    };
    Ok(Json(s.fleet.agents(filter).await?))
}

#[derive(Serialize, utoipa::ToSchema)]
struct AgentResponse {
    #[serde(flatten)]
    detail: view::AgentDetail,
    episodes: Vec<crate::domain::Episode>,
}

/// One agent.
///
/// Its state and why, tunnels, TTL window, signal stream and its 50
/// newest episodes.
#[utoipa::path(
    get,
    path = "/api/v1/agents/{name}",
    tag = "fleet",
    operation_id = "get_agent",
    params(("name" = String, Path, description = "The agent's name.", example = "agent-00042")),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The agent.", body = AgentResponse), ReadOneErrors)
)]
async fn agent(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<AgentResponse>, ApiError> {
    let detail = s
        .fleet
        .agent(name.clone())
        .await?
        .map(|(d, _)| d)
        .ok_or(ApiError::NotFound {
            what: "agent",
            name: name.clone(),
        })?;
    let episodes = read::episodes(
        &s.db,
        &EpisodeFilter {
            cluster: Some(s.fleet.cluster().clone()),
            agent: Some(name),
            limit: 50,
            ..Default::default()
        },
    )
    .await?;
    Ok(Json(AgentResponse { detail, episodes }))
}

/// A list answer: `{"items": [...]}`.
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Items<T> {
    pub items: Vec<T>,
}

/// Every proxy.
///
/// With its TTL window and how many agents hold tunnels to it.
#[utoipa::path(
    get,
    path = "/api/v1/proxies",
    tag = "fleet",
    operation_id = "list_proxies",
    params(ClusterQuery),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The proxies, by name.", body = Items<view::ProxyView>), ListErrors)
)]
async fn proxies(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ClusterQuery>,
) -> Result<Json<Items<view::ProxyView>>, ApiError> {
    super::clusters::scope(&s, q.cluster)?;
    let items = s.fleet.recent().await?.proxies.clone();
    Ok(Json(Items { items }))
}

/// One proxy.
///
/// With its agents counted by state.
#[utoipa::path(
    get,
    path = "/api/v1/proxies/{name}",
    tag = "fleet",
    operation_id = "get_proxy",
    params(("name" = String, Path, description = "The proxy's name.", example = "proxy-1")),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The proxy.", body = view::ProxyDetail), ReadOneErrors)
)]
async fn proxy(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<view::ProxyDetail>, ApiError> {
    s.fleet
        .proxy(name.clone())
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound {
            what: "proxy",
            name,
        })
}

/// Every auth server.
///
/// With its gRPC health and how many agents use it.
#[utoipa::path(
    get,
    path = "/api/v1/auth-servers",
    tag = "fleet",
    operation_id = "list_auth_servers",
    params(ClusterQuery),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The auth servers, by name.", body = Items<view::AuthView>), ListErrors)
)]
async fn auth_servers(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ClusterQuery>,
) -> Result<Json<Items<view::AuthView>>, ApiError> {
    super::clusters::scope(&s, q.cluster)?;
    let items = s.fleet.recent().await?.auth_servers.clone();
    Ok(Json(Items { items }))
}

#[derive(Serialize, utoipa::ToSchema)]
struct TransitionView {
    at: Ts,
    #[serde(flatten)]
    t: read::Transition,
}

#[derive(Serialize, utoipa::ToSchema)]
struct AuthResponse {
    #[serde(flatten)]
    view: view::AuthView,
    transitions: Vec<TransitionView>,
}

/// One auth server.
///
/// With its 100 newest health transitions.
#[utoipa::path(
    get,
    path = "/api/v1/auth-servers/{name}",
    tag = "fleet",
    operation_id = "get_auth_server",
    params(("name" = String, Path, description = "The auth server's name.", example = "auth-1")),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The auth server.", body = AuthResponse), ReadOneErrors)
)]
async fn auth_server(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<AuthResponse>, ApiError> {
    let view = s
        .fleet
        .recent()
        .await?
        .auth_servers
        .iter()
        .find(|a| a.name == name)
        .cloned()
        .ok_or(ApiError::NotFound {
            what: "auth server",
            name: name.clone(),
        })?;
    let transitions = read::transitions(&s.db, s.fleet.cluster(), &name, 100)
        .await?
        .into_iter()
        .map(|t| TransitionView { at: t.at(), t })
        .collect();
    Ok(Json(AuthResponse { view, transitions }))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct TtlQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
    /// proxy, auth_server or agent; none: proxies and auth servers.
    #[param(schema_with = super::contract::ttl_kind)]
    kind: Option<Kind>,
}

/// TTL windows, one page at a time.
///
/// Each resource's last heartbeat, expiry, time left, the heartbeat
/// interval, heartbeats seen and missed.
#[utoipa::path(
    get,
    path = "/api/v1/ttl-windows",
    tag = "fleet",
    operation_id = "list_ttl_windows",
    params(TtlQuery, NamePage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of TTL windows.", body = view::TtlPage), ListErrors)
)]
async fn ttl_windows(
    State(s): State<AppState>,
    Listed(q, page): Listed<TtlQuery, ByName>,
) -> Result<Json<view::TtlPage>, ApiError> {
    super::clusters::scope(&s, q.cluster)?;
    if q.kind == Some(Kind::TunnelConnection) {
        return Err(ApiError::BadParameter(
            "kind must be proxy, auth_server or agent (tunnels have no announce TTL)".into(),
        ));
    }
    let limit = page.limit as usize;
    Ok(Json(
        s.fleet.ttl_windows(q.kind, page.cursor, limit).await?.0,
    ))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct EpisodesQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
    /// Only this agent's episodes.
    #[param(min_length = 1)]
    agent: Option<String>,
    /// degraded or stranded.
    #[param(schema_with = super::contract::episode_state)]
    state: Option<AgentState>,
    /// true: only open ones; false: only ended ones.
    open: Option<bool>,
    /// Only episodes caused by this proxy or auth server.
    #[param(min_length = 1)]
    cause_resource: Option<String>,
    /// Only the episodes of this incident.
    #[param(minimum = 1)]
    incident: Option<i64>,
}

/// Episodes, newest first.
///
/// Each degraded or stranded period of an agent, its cause and how it
/// ended.
#[utoipa::path(
    get,
    path = "/api/v1/episodes",
    tag = "history",
    operation_id = "list_episodes",
    params(EpisodesQuery, IdPage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of episodes.", body = Page<crate::domain::Episode>), ListErrors)
)]
async fn episodes(
    State(s): State<AppState>,
    Listed(q, page): Listed<EpisodesQuery, ById>,
) -> Result<Json<Page<crate::domain::Episode>>, ApiError> {
    if q.state == Some(AgentState::Healthy) {
        return Err(ApiError::BadParameter(
            "state must be degraded or stranded (healthy periods are not episodes)".into(),
        ));
    }
    if q.incident.is_some_and(|i| i < 1) {
        return Err(ApiError::BadParameter(
            "incident must be an incident id (1 or more)".into(),
        ));
    }
    let f = EpisodeFilter {
        cluster: super::clusters::scope(&s, q.cluster)?,
        agent: nonempty("agent", q.agent)?,
        state: q.state,
        open: q.open,
        cause_resource: nonempty("cause_resource", q.cause_resource)?,
        incident: q.incident,
        before: page.cursor,
        limit: page.limit,
    };
    let items = read::episodes(&s.db, &f).await?;
    Ok(Json(Page::by_id(items, f.limit, |e| e.id)))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
    /// RFC 3339 time, or a duration back from now ("15m").
    #[param(schema_with = super::contract::since)]
    since: Option<String>,
    /// Only events of this kind of subject.
    #[param(value_type = Option<Subject>)]
    kind: Option<String>,
    /// Only events of this resource.
    #[param(min_length = 1)]
    name: Option<String>,
    /// Only events of this type.
    #[param(value_type = Option<HistoryEvent>)]
    event: Option<String>,
}

/// History events, newest first.
///
/// Heartbeats, expiries, health changes and rejected inputs.
#[utoipa::path(
    get,
    path = "/api/v1/events",
    tag = "history",
    operation_id = "list_events",
    params(EventsQuery, IdPage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of events.", body = Page<read::EventView>), ListErrors)
)]
async fn events(
    State(s): State<AppState>,
    Listed(q, page): Listed<EventsQuery, ById>,
) -> Result<Json<Page<read::EventView>>, ApiError> {
    let since = since_param(&s, "since", q.since.as_deref()).await?;
    let f = EventFilter {
        cluster: super::clusters::scope(&s, q.cluster)?,
        since,
        kind: choice::<Subject>("kind", q.kind.as_deref())?,
        name: nonempty("name", q.name)?,
        event: choice::<HistoryEvent>("event", nonempty("event", q.event)?.as_deref())?,
        before: page.cursor,
        limit: page.limit,
    };
    let items = read::events(&s.db, &f).await?;
    Ok(Json(Page::by_id(items, f.limit, |e| e.id)))
}
