//! `/api/v1` signal endpoints: manual reconnects (one agent or a selector)
//! and the signal audit. Every signal is committed to SQLite by the hub
//! before these handlers answer.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{choice, nonempty};
use super::caller::Caller;
use super::contract::{ListErrors, ReadOneErrors, WriteErrors};
use super::error::{ApiError, ApiJson};
use super::paged::{ById, IdPage, Listed};
use super::AppState;
use crate::domain::{AgentState, Outcome, SignalKind, Standing};
use crate::fleet::Selection;
use crate::signals::dispatch::{Origin, Refusal};
use crate::signals::hub::{Ask, SendError, SignalRequest};
use crate::store::signals::{self as audit, SignalFilter, SignalRecord};

/// Most agents one selector may signal at once.
pub const MAX_SELECTED: usize = 100_000;
const MAX_REASON: usize = 256;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(reconnect_one))
        .routes(routes!(reconnect_many))
        .routes(routes!(list))
        .routes(routes!(one))
}

impl From<SendError> for ApiError {
    fn from(e: SendError) -> Self {
        match e {
            SendError::Db(e) => ApiError::from(e),
            SendError::FleetGone => ApiError::FleetGone,
            SendError::NotLeader => ApiError::Busy {
                code: "not_leader",
                message: "this replica no longer leads; try again".into(),
            },
            SendError::Paused(why) => ApiError::Busy {
                code: "paused",
                message: why,
            },
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
        // Free text: kept, with control characters replaced.
        Some(r) if !r.trim().is_empty() => {
            Ok(crate::domain::text::clean_owned(r.trim().to_string()))
        }
        _ => Ok(default.to_string()),
    }
}

#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"proxy": "proxy-2", "reason": "INC-1234"}))]
struct ReconnectBody {
    /// The proxy whose tunnel the agent should leave (default: its least
    /// healthy).
    #[schema(min_length = 1)]
    proxy: Option<String>,
    /// Why, for the audit (at most 256 characters).
    #[schema(max_length = 256)]
    reason: Option<String>,
}

/// Asks one agent to reconnect.
///
/// The audited signal is committed before the answer; follow it at
/// `/api/v1/signals/{id}`. Needs the `update` role.
#[utoipa::path(
    post,
    path = "/api/v1/agents/{name}/reconnect",
    tag = "signals",
    operation_id = "reconnect_agent",
    params(("name" = String, Path, description = "The agent's name.", example = "agent-00042")),
    request_body(content = Option<ReconnectBody>, content_type = "application/json", description = "Optional: none means any proxy and the default reason."),
    security(("bearer" = [])),
    responses(
        (status = 202, description = "The signal, sent and audited; the maintenance window the agent is in, if any.", body = ManualReconnect,
            links(("signal" = (operation_id = "get_signal", parameters(("id" = "$response.body#/id")), description = "What became of the signal.")))),
        WriteErrors,
    )
)]
async fn reconnect_one(
    State(s): State<AppState>,
    Path(name): Path<String>,
    headers: HeaderMap,
    caller: Caller,
    body: axum::body::Bytes,
) -> Result<(StatusCode, Json<ManualReconnect>), ApiError> {
    // The body is optional: none (or `null`) means "any proxy, default
    // reason".
    let body: ReconnectBody = if body.iter().all(u8::is_ascii_whitespace) {
        ReconnectBody::default()
    } else {
        match serde_json::from_slice::<serde_json::Value>(&body)
            .map_err(|e| ApiError::BadBody(format!("invalid JSON body: {e}")))?
        {
            serde_json::Value::Null => ReconnectBody::default(),
            v => super::error::object_body(v)?,
        }
    };
    let proxy = nonempty("proxy", body.proxy).map_err(|e| ApiError::BadBody(e.to_string()))?;
    let reason = reason(body.reason, "manual reconnect")?;
    let row = reconnect_agent(&s, name, proxy, reason, requested_by(&headers, &caller)).await?;
    let maintenance = super::maintenance::window_of(&s, &row.agent).await;
    Ok((
        StatusCode::ACCEPTED,
        Json(ManualReconnect {
            signal: row,
            maintenance,
        }),
    ))
}

/// A manual reconnect's answer: the signal, and the maintenance window
/// the agent is in (planned strandings are not acted on automatically; a
/// manual reconnect still goes).
#[derive(Serialize, utoipa::ToSchema)]
struct ManualReconnect {
    #[serde(flatten)]
    signal: SignalRecord,
    maintenance: Option<super::maintenance::WindowNote>,
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
    let req = SignalRequest {
        agent: name.clone(),
        ask: Ask::Reconnect {
            proxy: proxy.clone().unwrap_or_default(),
        },
        reason,
        requested_by,
        trace: None,
    };
    let mut done = s.dispatch.send(Origin::Manual, vec![req]).await?;
    if let Some(row) = done.sent.pop() {
        return Ok(row);
    }
    let Some((_, why)) = done.refused.pop() else {
        return Err(ApiError::FleetGone);
    };
    Err(match why {
        Refusal::UnknownAgent => ApiError::NotFound {
            what: "agent",
            name,
        },
        Refusal::NotConnected => ApiError::Conflict {
            code: "not_connected",
            message: format!(
                "agent {name:?} is not connected to Lifeline's signal stream, so it cannot be told to reconnect; it will get signals once it connects"
            ),
        },
        Refusal::RestartsFailing => ApiError::Conflict {
            code: "restarts_failing",
            message: why.text().to_string(),
        },
        Refusal::RestartsInFlight => ApiError::TooMany {
            code: "restarts_in_flight",
            message: format!(
                "agent {name:?} is restarted by its sidecar, and as many restarts as signals.max_restarts_in_flight allows are in flight; retry when they are done"
            ),
            retry_after: 10,
        },
        Refusal::NoSuchTunnel => ApiError::Conflict {
            code: "no_such_tunnel",
            message: format!(
                "agent {name:?} holds no tunnel to proxy {:?}",
                proxy.unwrap_or_default()
            ),
        },
        Refusal::NoDestination => ApiError::Conflict {
            code: "no_destination",
            message: format!(
                "agent {name:?} has no live proxy it is not already on to move to; it waits for one"
            ),
        },
        Refusal::RestartWouldNotHelp => ApiError::Conflict {
            code: "restart_would_not_help",
            message: format!("agent {name:?}: {}", why.text()),
        },
        Refusal::RateLimited(wait) => ApiError::TooMany {
            code: "rate_limited",
            message: format!(
                "agent {name:?} was asked to reconnect less than {} ago; manual reconnects of one agent are limited to one per access.manual_reconnect_interval; retry in {:.1} s",
                humantime::format_duration(s.dispatch.manual_interval()),
                wait.as_secs_f64()
            ),
            retry_after: wait.as_secs_f64().ceil() as u64,
        },
    })
}

/// Exactly one of `state`, `proxy`, `auth_server` (a `null` one counts
/// as absent), and an optional `reason`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Selector {
    state: Option<AgentState>,
    proxy: Option<String>,
    auth_server: Option<String>,
    reason: Option<String>,
}

/// By hand: "exactly one selector" is a `oneOf` the derive cannot say.
impl utoipa::PartialSchema for Selector {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use utoipa::openapi::schema::{
            AdditionalProperties, AllOfBuilder, ObjectBuilder, OneOfBuilder, SchemaType, Type,
        };
        let nullable =
            |t: Type| ObjectBuilder::new().schema_type(SchemaType::from_iter([t, Type::Null]));
        let states = || ["stranded", "degraded"];
        let fields = ObjectBuilder::new()
            .property(
                "state",
                nullable(Type::String)
                    .enum_values(Some(
                        states()
                            .map(serde_json::Value::from)
                            .into_iter()
                            .chain([serde_json::Value::Null]),
                    ))
                    .description(Some(
                        "Every agent in this state, as its figure counts them: planned agents are not included (reconnect one by name).",
                    )),
            )
            .property(
                "proxy",
                nullable(Type::String).min_length(Some(1)).description(Some(
                    "Every agent with a tunnel to this proxy (each leaves it).",
                )),
            )
            .property(
                "auth_server",
                nullable(Type::String)
                    .min_length(Some(1))
                    .description(Some("Every agent of this auth server.")),
            )
            .property(
                "reason",
                nullable(Type::String)
                    .max_length(Some(MAX_REASON))
                    .description(Some("Why, for the audit.")),
            )
            .additional_properties(Some(AdditionalProperties::FreeForm(false)));
        let given = |name: &str, value: ObjectBuilder| {
            ObjectBuilder::new().property(name, value).required(name)
        };
        let exactly_one = OneOfBuilder::new()
            .item(given(
                "state",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .enum_values(Some(states())),
            ))
            .item(given(
                "proxy",
                ObjectBuilder::new().schema_type(Type::String),
            ))
            .item(given(
                "auth_server",
                ObjectBuilder::new().schema_type(Type::String),
            ));
        AllOfBuilder::new()
            .schema_type(Type::Object)
            .item(fields)
            .item(exactly_one)
            .description(Some(
                "Exactly one of `state`, `proxy`, `auth_server` (a null one counts as absent).",
            ))
            .examples([serde_json::json!({"state": "stranded", "reason": "INC-1234"})])
            .into()
    }
}

impl utoipa::ToSchema for Selector {}

#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct Skipped {
    pub agent: String,
    pub reason: &'static str,
}

#[derive(Serialize, utoipa::ToSchema)]
struct ReconnectsResponse {
    /// Agents the selector matched.
    matched: usize,
    signals: Vec<SignalRecord>,
    /// Matched agents that got no signal, and why.
    skipped: Vec<Skipped>,
}

/// Asks every agent a selector matches to reconnect.
///
/// At most 100 000 agents; those not connected or rate limited are
/// skipped with the reason. Needs the `update` role.
#[utoipa::path(
    post,
    path = "/api/v1/reconnects",
    tag = "signals",
    operation_id = "reconnect_selected",
    request_body(content = Selector, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 202, description = "The signals sent, and the agents skipped.", body = ReconnectsResponse), WriteErrors)
)]
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
        // The agents the figure of that name counts: planned ones are
        // reconnected by name only.
        (None, None) => Selection::Standing(match state.unwrap_or(AgentState::Stranded) {
            AgentState::Healthy => Standing::Healthy,
            AgentState::Degraded => Standing::Degraded,
            AgentState::Stranded => Standing::Stranded,
        }),
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
    let reqs = agents
        .into_iter()
        .map(|agent| SignalRequest {
            agent,
            ask: Ask::Reconnect {
                // Leaving the selected proxy is the point of selecting it.
                proxy: proxy.clone().unwrap_or_default(),
            },
            reason: reason.clone(),
            requested_by: by.clone(),
            trace: None,
        })
        .collect();
    let done = s.dispatch.send(Origin::Manual, reqs).await?;
    let skipped = done
        .refused
        .into_iter()
        .map(|(agent, why)| Skipped {
            agent,
            reason: why.text(),
        })
        .collect();
    Ok((done.sent, skipped))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
    /// Only signals to this agent.
    #[param(min_length = 1)]
    agent: Option<String>,
    /// Only signals with this outcome.
    #[param(value_type = Option<Outcome>)]
    outcome: Option<String>,
    /// Only signals of this kind.
    #[param(value_type = Option<SignalKind>)]
    kind: Option<String>,
    /// Only signals asked for by this (`auto`, `api:ops`, `cli:ops`, …).
    #[param(min_length = 1)]
    requested_by: Option<String>,
}

#[derive(Serialize, utoipa::ToSchema)]
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

/// The signal audit, newest first.
///
/// Every Reconnect and close-tunnel sent, who asked, and what became of
/// it.
#[utoipa::path(
    get,
    path = "/api/v1/signals",
    tag = "signals",
    operation_id = "list_signals",
    params(ListQuery, IdPage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of signals.", body = SignalPage), ListErrors)
)]
async fn list(
    State(s): State<AppState>,
    Listed(q, page): Listed<ListQuery, ById>,
) -> Result<Json<SignalPage>, ApiError> {
    let (outcome, kind) = signal_filter(q.outcome.as_deref(), q.kind.as_deref())?;
    let limit = page.limit;
    let before_id = page.cursor;
    let items = audit::list(
        &s.db,
        &SignalFilter {
            cluster: super::clusters::scope(&s, q.cluster)?,
            agent: nonempty("agent", q.agent)?,
            outcome,
            kind,
            requested_by: nonempty("requested_by", q.requested_by)?,
            before_id,
            incident: None,
            limit,
        },
    )
    .await?;
    let next_cursor = (items.len() == limit as usize)
        .then(|| items.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(Json(SignalPage { items, next_cursor }))
}

/// One audited signal.
#[utoipa::path(
    get,
    path = "/api/v1/signals/{id}",
    tag = "signals",
    operation_id = "get_signal",
    params(("id" = i64, Path, description = "The signal's id.", minimum = 1, example = 1)),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The signal.", body = SignalRecord), ReadOneErrors)
)]
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
