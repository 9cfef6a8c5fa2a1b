//! `/api/v1`: JSON reads of current state (from the fleet) and history (from
//! SQLite). Thin: parse and validate parameters, delegate, serialise.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::error::{ApiError, ApiQuery};
use super::AppState;
use crate::clock::Ts;
use crate::fleet::view::{self, AgentFilter};
use crate::model::Subject;
use crate::model::{AgentState, HistoryEvent, Kind};
use crate::store::read::{self, EpisodeFilter, EventFilter};

pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/summary", get(summary))
        .route("/api/v1/agents", get(agents))
        .route("/api/v1/agents/{name}", get(agent))
        .route("/api/v1/proxies", get(proxies))
        .route("/api/v1/proxies/{name}", get(proxy))
        .route("/api/v1/auth-servers", get(auth_servers))
        .route("/api/v1/auth-servers/{name}", get(auth_server))
        .route("/api/v1/ttl-windows", get(ttl_windows))
        .route("/api/v1/episodes", get(episodes))
        .route("/api/v1/events", get(events))
}

pub(super) fn limit(l: Option<u32>) -> Result<u32, ApiError> {
    let l = l.unwrap_or(DEFAULT_LIMIT);
    if (1..=MAX_LIMIT).contains(&l) {
        Ok(l)
    } else {
        Err(ApiError::BadParameter(format!(
            "limit must be between 1 and {MAX_LIMIT}, got {l}"
        )))
    }
}

pub(super) fn nonempty(name: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(s) if s.is_empty() => Err(ApiError::BadParameter(format!("{name} must not be empty"))),
        v => Ok(v),
    }
}

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
                crate::model::names::<E>().join(", ")
            ))
        })
    })
    .transpose()
}

/// A name cursor (`next_cursor` of an agents or TTL page), decoded.
pub(crate) fn name_cursor(c: Option<String>) -> Result<Option<String>, ApiError> {
    c.map(|c| view::cursor::decode(&c).ok_or_else(|| bad_cursor(&c)))
        .transpose()
}

/// An id cursor (`next_cursor` of an episodes or signals page).
pub(crate) fn id_cursor(c: Option<String>) -> Result<Option<i64>, ApiError> {
    c.map(|c| {
        c.parse::<i64>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| bad_cursor(&c))
    })
    .transpose()
}

fn bad_cursor(c: &str) -> ApiError {
    ApiError::BadParameter(format!(
        "cursor {:?} is not a valid cursor: pass the next_cursor of an earlier page",
        crate::http::error::clip(c)
    ))
}

#[derive(Serialize)]
struct SummaryResponse {
    #[serde(flatten)]
    fleet: view::Summary,
    /// Counted by every room as it happens, read now.
    ingest: crate::stats::StatsSnapshot,
    signals: SignalsSummary,
}

#[derive(Serialize)]
struct SignalsSummary {
    connected_agents: usize,
    awaiting_ack: usize,
    auto_reconnect: bool,
    full_discovery: bool,
    reconnect_interval: Option<String>,
    graceful_tunnel_closing: bool,
    storm_guard: crate::signals::reconnect::Guard,
}

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
        },
    }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentsQuery {
    state: Option<AgentState>,
    proxy: Option<String>,
    auth_server: Option<String>,
    q: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn agents(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<AgentsQuery>,
) -> Result<Json<view::AgentPage>, ApiError> {
    let filter = AgentFilter {
        state: q.state,
        proxy: nonempty("proxy", q.proxy)?,
        auth_server: nonempty("auth_server", q.auth_server)?,
        q: q.q.filter(|s| !s.is_empty()),
        after: name_cursor(q.cursor)?,
        limit: limit(q.limit)? as usize,
    };
    Ok(Json(s.fleet.agents(filter).await?))
}

#[derive(Serialize)]
struct AgentResponse {
    #[serde(flatten)]
    detail: view::AgentDetail,
    episodes: Vec<read::Episode>,
}

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
            agent: Some(name),
            limit: 50,
            ..Default::default()
        },
    )
    .await?;
    Ok(Json(AgentResponse { detail, episodes }))
}

/// A list answer: `{"items": [...]}`.
#[derive(Serialize)]
pub(super) struct Items<T> {
    pub items: Vec<T>,
}

async fn proxies(State(s): State<AppState>) -> Result<Json<Items<view::ProxyView>>, ApiError> {
    let items = s.fleet.recent().await?.proxies.clone();
    Ok(Json(Items { items }))
}

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

async fn auth_servers(State(s): State<AppState>) -> Result<Json<Items<view::AuthView>>, ApiError> {
    let items = s.fleet.recent().await?.auth_servers.clone();
    Ok(Json(Items { items }))
}

#[derive(Serialize)]
struct TransitionView {
    at: Ts,
    #[serde(flatten)]
    t: read::Transition,
}

#[derive(Serialize)]
struct AuthResponse {
    #[serde(flatten)]
    view: view::AuthView,
    transitions: Vec<TransitionView>,
}

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
    let transitions = read::transitions(&s.db, &name, 100)
        .await?
        .into_iter()
        .map(|t| TransitionView { at: t.at(), t })
        .collect();
    Ok(Json(AuthResponse { view, transitions }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct TtlQuery {
    kind: Option<Kind>,
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn ttl_windows(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<TtlQuery>,
) -> Result<Json<view::TtlPage>, ApiError> {
    if q.kind == Some(Kind::TunnelConnection) {
        return Err(ApiError::BadParameter(
            "kind must be proxy, auth_server or agent (tunnels have no announce TTL)".into(),
        ));
    }
    let limit = limit(q.limit)? as usize;
    let cursor = name_cursor(q.cursor)?;
    let kind = q.kind;
    Ok(Json(s.fleet.ttl_windows(kind, cursor, limit).await?.0))
}

#[derive(Serialize)]
struct Page<T> {
    items: Vec<T>,
    next_cursor: Option<String>,
}

fn page<T>(items: Vec<T>, limit: u32, id: impl Fn(&T) -> i64) -> Page<T> {
    let next_cursor = (items.len() == limit as usize)
        .then(|| items.last().map(|i| id(i).to_string()))
        .flatten();
    Page { items, next_cursor }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EpisodesQuery {
    agent: Option<String>,
    state: Option<AgentState>,
    open: Option<bool>,
    cause_resource: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn episodes(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<EpisodesQuery>,
) -> Result<Json<Page<read::Episode>>, ApiError> {
    if q.state == Some(AgentState::Healthy) {
        return Err(ApiError::BadParameter(
            "state must be degraded or stranded (healthy periods are not episodes)".into(),
        ));
    }
    let f = EpisodeFilter {
        agent: nonempty("agent", q.agent)?,
        state: q.state,
        open: q.open,
        cause_resource: nonempty("cause_resource", q.cause_resource)?,
        before: id_cursor(q.cursor)?,
        limit: limit(q.limit)?,
    };
    let items = read::episodes(&s.db, &f).await?;
    Ok(Json(page(items, f.limit, |e| e.id)))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventsQuery {
    /// RFC 3339 time, or a duration back from now ("15m").
    since: Option<String>,
    kind: Option<String>,
    name: Option<String>,
    event: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

async fn events(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> Result<Json<Page<read::EventView>>, ApiError> {
    let since = match q.since.as_deref() {
        None => None,
        Some(v) => Some(match Ts::parse_rfc3339(v) {
            Some(t) => t,
            None => {
                let d = humantime::parse_duration(v).map_err(|_| {
                    ApiError::BadParameter(format!(
                        "since {v:?} is neither an RFC 3339 time nor a duration like 15m"
                    ))
                })?;
                let now = s.fleet.settled().await?;
                now.saturating_sub(d)
            }
        }),
    };
    let f = EventFilter {
        since,
        kind: choice::<Subject>("kind", q.kind.as_deref())?,
        name: nonempty("name", q.name)?,
        event: choice::<HistoryEvent>("event", nonempty("event", q.event)?.as_deref())?,
        before: id_cursor(q.cursor)?,
        limit: limit(q.limit)?,
    };
    let items = read::events(&s.db, &f).await?;
    Ok(Json(page(items, f.limit, |e| e.id)))
}
