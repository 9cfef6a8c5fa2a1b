//! `/api/v1` signal endpoints: manual reconnects (one agent or a selector)
//! and the signal audit. Every signal is committed to SQLite by the hub
//! before these handlers answer.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::api::{choice, id_cursor, limit, nonempty};
use super::caller::Caller;
use super::error::{ApiError, ApiJson, ApiQuery};
use super::AppState;
use crate::fleet::query::Selection;
use crate::model::{AgentState, Outcome, SignalKind};
use crate::signals::hub::{Ask, SendError, SignalRequest};
use crate::stats::Stats;
use crate::store::signals::{self as audit, SignalFilter, SignalRecord};

/// Most agents one selector may signal at once.
pub const MAX_SELECTED: usize = 100_000;
const MAX_REASON: usize = 256;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/agents/{name}/reconnect", post(reconnect_one))
        .route("/api/v1/reconnects", post(reconnect_many))
        .route("/api/v1/signals", get(list))
        .route("/api/v1/signals/{id}", get(one))
}

impl From<SendError> for ApiError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Db(e) => ApiError::from(e),
            SendError::FleetGone => ApiError::FleetGone,
        }
    }
}

/// Who asked, for the audit: the channel (`X-Requested-By`, which the CLI
/// sets; `api` otherwise) and the token's name, as `cli:ops`.
pub(super) fn requested_by(h: &HeaderMap, caller: &Caller) -> String {
    format!("{}:{}", channel(h), caller.actor())
}

fn channel(h: &HeaderMap) -> String {
    h.get("x-requested-by")
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.chars()
                .filter(|c| c.is_ascii_alphanumeric() || "-_.:@".contains(*c))
                .take(64)
                .collect::<String>()
        })
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "api".into())
}

pub(super) fn reason(r: Option<String>, default: &str) -> Result<String, ApiError> {
    match r {
        Some(r) if r.chars().count() > MAX_REASON => Err(ApiError::BadBody(format!(
            "reason must be at most {MAX_REASON} characters"
        ))),
        Some(r) if !r.trim().is_empty() => Ok(r.trim().to_string()),
        _ => Ok(default.to_string()),
    }
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct ReconnectBody {
    proxy: Option<String>,
    reason: Option<String>,
}

async fn reconnect_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<SignalRecord>), ApiError> {
    // The body is optional: none means "any proxy, default reason".
    let body: ReconnectBody = if body.iter().all(u8::is_ascii_whitespace) {
        ReconnectBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::BadBody(format!("invalid JSON body: {e}")))?
    };
    let proxy = nonempty("proxy", body.proxy).map_err(|e| ApiError::BadBody(e.to_string()))?;
    let reason = reason(body.reason, "manual reconnect")?;
    let row = reconnect_agent(&s, name, proxy, reason, requested_by(&headers, &caller)).await?;
    Ok((StatusCode::ACCEPTED, Json(row)))
}

/// One manual Reconnect: checks the agent is known, connected and (when a
/// proxy is named) holds a tunnel to it; the row is committed on return.
/// The API and the dashboard's forms both come through here.
pub(super) async fn reconnect_agent(
    s: &AppState,
    name: String,
    proxy: Option<String>,
    reason: String,
    requested_by: String,
) -> Result<SignalRecord, ApiError> {
    let holds = s.fleet.holds_tunnel(name.clone(), proxy.clone()).await?;
    let Some(holds) = holds else {
        return Err(ApiError::NotFound {
            what: "agent",
            name,
        });
    };
    if !s.hub.is_connected(&name) {
        return Err(ApiError::Conflict {
            code: "not_connected",
            message: format!(
                "agent {name:?} is not connected to Lifeline's signal stream, so it cannot be told to reconnect; it will get signals once it connects"
            ),
        });
    }
    if !holds {
        return Err(ApiError::Conflict {
            code: "no_such_tunnel",
            message: format!(
                "agent {name:?} holds no tunnel to proxy {:?}",
                proxy.unwrap_or_default()
            ),
        });
    }
    if let Err(wait) = s.access.admit_reconnect(&name) {
        Stats::inc(&s.stats.http_rate_limited);
        return Err(ApiError::TooMany {
            code: "rate_limited",
            message: format!(
                "agent {name:?} was asked to reconnect less than {} ago; manual reconnects of one agent are limited to one per access.manual_reconnect_interval; retry in {:.1} s",
                humantime::format_duration(s.access.reconnect_every()),
                wait.as_secs_f64()
            ),
            retry_after: wait.as_secs_f64().ceil() as u64,
        });
    }
    let rows = s
        .hub
        .send(vec![SignalRequest {
            agent: name,
            ask: Ask::Reconnect {
                proxy: proxy.unwrap_or_default(),
            },
            reason,
            requested_by,
            trace: None,
        }])
        .await?;
    rows.into_iter().next().ok_or(ApiError::FleetGone)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Selector {
    state: Option<AgentState>,
    proxy: Option<String>,
    auth_server: Option<String>,
    reason: Option<String>,
}

#[derive(Serialize)]
pub(super) struct Skipped {
    pub agent: String,
    pub reason: &'static str,
}

#[derive(Serialize)]
struct ReconnectsResponse {
    /// Agents the selector matched.
    matched: usize,
    signals: Vec<SignalRecord>,
    /// Matched agents that got no signal, and why.
    skipped: Vec<Skipped>,
}

async fn reconnect_many(
    State(s): State<AppState>,
    headers: HeaderMap,
    caller: Caller,
    ApiJson(sel): ApiJson<Selector>,
) -> Result<(StatusCode, Json<ReconnectsResponse>), ApiError> {
    let given = [
        sel.state.is_some(),
        sel.proxy.is_some(),
        sel.auth_server.is_some(),
    ]
    .iter()
    .filter(|b| **b)
    .count();
    if given != 1 {
        return Err(ApiError::BadBody(
            "give exactly one selector: {\"state\":\"stranded\"}, {\"proxy\":\"NAME\"} or {\"auth_server\":\"NAME\"}".into(),
        ));
    }
    if sel.state == Some(AgentState::Healthy) {
        return Err(ApiError::BadBody(
            "state must be \"stranded\" or \"degraded\": healthy agents need no reconnect".into(),
        ));
    }
    let proxy = nonempty("proxy", sel.proxy).map_err(|e| ApiError::BadBody(e.to_string()))?;
    let auth =
        nonempty("auth_server", sel.auth_server).map_err(|e| ApiError::BadBody(e.to_string()))?;
    let agents = select(&s, sel.state, proxy.clone(), auth).await?;
    let reason = reason(sel.reason, "manual reconnect")?;
    let matched = agents.len();
    let (signals, skipped) =
        reconnect_selected(&s, agents, proxy, reason, requested_by(&headers, &caller)).await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(ReconnectsResponse {
            matched,
            signals,
            skipped,
        }),
    ))
}

/// The agents a selector names (one of state, proxy, auth server), in name
/// order. An unknown proxy or auth server is a 404; more than
/// [`MAX_SELECTED`] agents is refused.
pub(super) async fn select(
    s: &AppState,
    state: Option<AgentState>,
    proxy: Option<String>,
    auth: Option<String>,
) -> Result<Vec<String>, ApiError> {
    let sel = match (&proxy, &auth) {
        (Some(p), _) => Selection::Proxy(p.clone()),
        (None, Some(a)) => Selection::AuthServer(a.clone()),
        (None, None) => Selection::State(state.unwrap_or(AgentState::Stranded)),
    };
    let matched = s.fleet.select(sel).await?;
    let Some(agents) = matched else {
        return Err(match (proxy, auth) {
            (Some(p), _) => ApiError::NotFound {
                what: "proxy",
                name: p,
            },
            (_, Some(a)) => ApiError::NotFound {
                what: "auth server",
                name: a,
            },
            _ => ApiError::FleetGone,
        });
    };
    if agents.len() > MAX_SELECTED {
        return Err(ApiError::BadBody(format!(
            "the selector matches {} agents; at most {MAX_SELECTED} per request",
            agents.len()
        )));
    }
    Ok(agents)
}

/// Sends a Reconnect to each connected agent of `agents` (leaving `proxy`
/// when given); the rest are skipped with the reason.
pub(super) async fn reconnect_selected(
    s: &AppState,
    agents: Vec<String>,
    proxy: Option<String>,
    reason: String,
    by: String,
) -> Result<(Vec<SignalRecord>, Vec<Skipped>), ApiError> {
    let mut skipped = Vec::new();
    let mut reqs = Vec::new();
    for agent in agents {
        if !s.hub.is_connected(&agent) {
            skipped.push(Skipped {
                agent,
                reason: "not connected to Lifeline",
            });
            continue;
        }
        if s.access.admit_reconnect(&agent).is_err() {
            Stats::inc(&s.stats.http_rate_limited);
            skipped.push(Skipped {
                agent,
                reason: "rate limited: asked to reconnect less than access.manual_reconnect_interval ago",
            });
            continue;
        }
        reqs.push(SignalRequest {
            agent,
            ask: Ask::Reconnect {
                // Leaving the selected proxy is the point of selecting it.
                proxy: proxy.clone().unwrap_or_default(),
            },
            reason: reason.clone(),
            requested_by: by.clone(),
            trace: None,
        });
    }
    let signals = s.hub.send(reqs).await?;
    Ok((signals, skipped))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    agent: Option<String>,
    outcome: Option<String>,
    kind: Option<String>,
    requested_by: Option<String>,
    limit: Option<u32>,
    cursor: Option<String>,
}

#[derive(Serialize)]
struct SignalPage {
    items: Vec<SignalRecord>,
    next_cursor: Option<String>,
}

/// Parses the audit's `outcome` and `kind` filters (the API and the
/// dashboard's Signals page share them).
pub(super) fn signal_filter(
    outcome: Option<&str>,
    kind: Option<&str>,
) -> Result<(Option<Outcome>, Option<SignalKind>), ApiError> {
    Ok((choice("outcome", outcome)?, choice("kind", kind)?))
}

async fn list(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> Result<Json<SignalPage>, ApiError> {
    let (outcome, kind) = signal_filter(q.outcome.as_deref(), q.kind.as_deref())?;
    let limit = limit(q.limit)?;
    let before_id = id_cursor(q.cursor)?;
    let items = audit::list(
        &s.db,
        &SignalFilter {
            agent: nonempty("agent", q.agent)?,
            outcome,
            kind,
            requested_by: nonempty("requested_by", q.requested_by)?,
            before_id,
            limit,
        },
    )
    .await?;
    let next_cursor = (items.len() == limit as usize)
        .then(|| items.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(Json(SignalPage { items, next_cursor }))
}

async fn one(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SignalRecord>, ApiError> {
    let n = id.parse::<i64>().ok().filter(|v| *v > 0).ok_or_else(|| {
        ApiError::BadParameter(format!("signal id {id:?} is not a positive integer"))
    })?;
    audit::get(&s.db, n)
        .await?
        .map(Json)
        .ok_or(ApiError::NotFound {
            what: "signal",
            name: id,
        })
}
