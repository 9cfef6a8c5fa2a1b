//! `/api/v1/maintenance`: maintenance windows. Reads list and show them
//! (with their audit); `POST` creates one, `POST …/end` ends one early and
//! `DELETE` deletes one, each audited with the caller's name. The rules
//! live in the maintenance room; this file parses and answers.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::caller::Caller;
use super::contract::{ReadErrors, ReadOneErrors, WriteErrors};
use super::error::{ApiError, ApiJson};
use super::paged::{ById, IdPage, Listed, Page};
use super::AppState;
use crate::clock::Ts;
use crate::maintenance::{MaintenanceError, WindowRequest};
use crate::store::maintenance::{AuditRow, WindowView};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(one, remove))
        .routes(routes!(end))
}

impl From<MaintenanceError> for ApiError {
    fn from(e: MaintenanceError) -> Self {
        let message = e.to_string();
        match e {
            MaintenanceError::Missing(id) => ApiError::NotFound {
                what: "maintenance window",
                name: id.to_string(),
            },
            MaintenanceError::AlreadyOver(_) => ApiError::Conflict {
                code: "already_over",
                message,
            },
            MaintenanceError::NeverActive { .. } => ApiError::Conflict {
                code: "never_active",
                message,
            },
            MaintenanceError::AlreadyDeleted(_) => ApiError::Conflict {
                code: "already_deleted",
                message,
            },
            MaintenanceError::Full => ApiError::Conflict {
                code: "too_many_windows",
                message,
            },
            MaintenanceError::Store(e) => ApiError::from(e),
            _ => ApiError::BadBody(message),
        }
    }
}

/// A window's id from the path: a positive integer.
fn window_id(s: &str) -> Result<i64, ApiError> {
    s.parse::<i64>().ok().filter(|id| *id > 0).ok_or_else(|| {
        ApiError::BadParameter(format!(
            "{:?} is not a maintenance window id (a positive integer)",
            super::error::clip(s)
        ))
    })
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListFilters {
    /// Include windows that are over (default true); `false` lists only
    /// those scheduled or active.
    over: Option<bool>,
}

/// Maintenance windows, newest first.
#[utoipa::path(
    get,
    path = "/api/v1/maintenance",
    tag = "maintenance",
    operation_id = "list_maintenance",
    params(ListFilters, IdPage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of windows.", body = Page<WindowView>), ReadErrors)
)]
async fn list(
    State(s): State<AppState>,
    Listed(f, page): Listed<ListFilters, ById>,
) -> Result<Json<Page<WindowView>>, ApiError> {
    let m = &s.maintenance;
    let now = m.now();
    let items = m
        .list(page.cursor, f.over.unwrap_or(true), page.limit)
        .await?
        .iter()
        .map(|w| WindowView::of(w, now))
        .collect();
    Ok(Json(Page::by_id(items, page.limit, |w| w.id)))
}

/// Declares a maintenance window.
///
/// While it is active, strandings caused by a target (a proxy or auth
/// server it names), or of an agent it names, are *planned*: shown, not
/// acted on automatically and not notified. Needs the `update` role.
#[utoipa::path(
    post,
    path = "/api/v1/maintenance",
    tag = "maintenance",
    operation_id = "create_maintenance",
    request_body(content = WindowRequest, content_type = "application/json",
        example = json!({"targets": ["proxy/proxy-2"], "from": "2099-01-01T02:00:00Z", "until": "2099-01-01T04:00:00Z", "reason": "kernel upgrade"})),
    security(("bearer" = [])),
    responses((status = 201, description = "The window, stored and audited, and what may be wrong with it.", body = CreatedWindow), WriteErrors)
)]
async fn create(
    State(s): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<WindowRequest>,
) -> Result<(StatusCode, Json<CreatedWindow>), ApiError> {
    let m = &s.maintenance;
    let (w, warnings) = m.create(&req, &caller.actor()).await?;
    Ok((
        StatusCode::CREATED,
        Json(CreatedWindow {
            window: WindowView::of(&w, m.now()),
            warnings,
        }),
    ))
}

/// A window just created, and what may be wrong with it.
#[derive(Serialize, utoipa::ToSchema)]
struct CreatedWindow {
    #[serde(flatten)]
    window: WindowView,
    /// Targets that name nothing Lifeline knows now (enforced all the
    /// same, for what may appear): likely typos.
    warnings: Vec<String>,
}

/// A window with its audit.
#[derive(Serialize, utoipa::ToSchema)]
struct WindowDetail {
    #[serde(flatten)]
    window: WindowView,
    /// Who created, ended or deleted it, and when, oldest first.
    audit: Vec<AuditView>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct AuditView {
    at: Ts,
    #[serde(flatten)]
    row: AuditRow,
}

/// One maintenance window, with its audit.
#[utoipa::path(
    get,
    path = "/api/v1/maintenance/{id}",
    tag = "maintenance",
    operation_id = "get_maintenance",
    params(("id" = i64, Path, description = "The window's id.", minimum = 1)),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The window.", body = WindowDetail), ReadOneErrors)
)]
async fn one(
    State(s): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<WindowDetail>, ApiError> {
    let id = window_id(&id)?;
    let m = &s.maintenance;
    let w = m.get(id).await?;
    let audit = m
        .audit(id)
        .await?
        .into_iter()
        .map(|row| AuditView {
            at: Ts(row.at_us),
            row,
        })
        .collect();
    Ok(Json(WindowDetail {
        window: WindowView::of(&w, m.now()),
        audit,
    }))
}

/// Ends a maintenance window now.
///
/// Agents it kept planned that are still stranded turn unplanned: from
/// now they are acted on and notified. Needs the `update` role.
#[utoipa::path(
    post,
    path = "/api/v1/maintenance/{id}/end",
    tag = "maintenance",
    operation_id = "end_maintenance",
    params(("id" = i64, Path, description = "The window's id.", minimum = 1)),
    security(("bearer" = [])),
    responses((status = 200, description = "The window, ended.", body = WindowView), WriteErrors)
)]
async fn end(
    State(s): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Json<WindowView>, ApiError> {
    let id = window_id(&id)?;
    let m = &s.maintenance;
    let w = m.end(id, &caller.actor()).await?;
    Ok(Json(WindowView::of(&w, m.now())))
}

/// Deletes a maintenance window.
///
/// As if it had never been declared, from now on: it ends now (by the
/// caller), and is kept as `deleted`, with its audit. Needs the `update`
/// role.
#[utoipa::path(
    delete,
    path = "/api/v1/maintenance/{id}",
    tag = "maintenance",
    operation_id = "delete_maintenance",
    params(("id" = i64, Path, description = "The window's id.", minimum = 1)),
    security(("bearer" = [])),
    responses((status = 200, description = "The window as it was.", body = WindowView), WriteErrors)
)]
async fn remove(
    State(s): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
) -> Result<Json<WindowView>, ApiError> {
    let id = window_id(&id)?;
    let m = &s.maintenance;
    let w = m.delete(id, &caller.actor()).await?;
    Ok(Json(WindowView::of(&w, m.now())))
}

/// The maintenance window a manual reconnect went through, named in its
/// answer: the signal still goes (manual signals are never held back).
#[derive(Serialize, utoipa::ToSchema)]
pub(super) struct WindowNote {
    pub id: i64,
    pub reason: String,
    pub until: Ts,
}

/// The window that keeps `agent`'s stranding planned, or (healthy or
/// not) one active now that names the agent itself.
pub(super) async fn window_of(s: &AppState, agent: &str) -> Option<WindowNote> {
    let m = &s.maintenance;
    let now = m.now();
    let planned = match s.fleet.agent(agent.to_string()).await {
        Ok(Some((d, _))) => d.item.cause.and_then(|c| c.planned).and_then(|p| p.window),
        _ => None,
    };
    m.in_force()
        .iter()
        .filter(|w| w.active(now))
        .filter_map(|w| w.in_cluster(s.fleet.cluster()))
        .find(|w| Some(w.id) == planned || w.covers(crate::domain::TargetKind::Agent, agent))
        .map(|w| WindowNote {
            id: w.id,
            reason: w.reason.clone(),
            until: w.end(),
        })
}
