//! `/api/v1/settings`: the dynamic settings (RFD 0016). Reads show each
//! setting's value, origin and default; `PUT` is `create` (with `force`
//! and `confirm` as query flags), `DELETE` is `rm`. The rules live in the
//! settings room; this file parses, checks the `create` role, and answers.

use axum::extract::{Path, State};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::api::Items;
use super::caller::Caller;
use super::error::{ApiError, ApiJson, ApiQuery};
use super::AppState;
use crate::clock::Ts;
use crate::config::Role;
use crate::settings::{PutFlags, SettingView, Settings};
use crate::store::settings::SettingChange;

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/settings", get(list))
        .route("/api/v1/settings/{name}", get(one).put(put).delete(remove))
}

async fn list(State(s): State<AppState>) -> Result<Json<Items<SettingView>>, ApiError> {
    Ok(Json(Items {
        items: s.settings.list().await?,
    }))
}

#[derive(Serialize)]
struct ChangeView {
    at: Ts,
    #[serde(flatten)]
    change: SettingChange,
}

#[derive(Serialize)]
struct OneResponse {
    #[serde(flatten)]
    setting: SettingView,
    /// The newest changes, newest first.
    history: Vec<ChangeView>,
}

async fn one(
    State(s): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<OneResponse>, ApiError> {
    let name = Settings::name(&name)?;
    let setting = s.settings.get(name).await?;
    let history = s
        .settings
        .history(name, 50)
        .await?
        .into_iter()
        .map(|change| ChangeView {
            at: change.at(),
            change,
        })
        .collect();
    Ok(Json(OneResponse { setting, history }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutQuery {
    force: Option<bool>,
    confirm: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody {
    value: Value,
}

async fn put(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    ApiQuery(q): ApiQuery<PutQuery>,
    ApiJson(body): ApiJson<PutBody>,
) -> Result<Json<SettingView>, ApiError> {
    let name = Settings::name(&name)?;
    let flags = PutFlags {
        force: q.force.unwrap_or(false),
        confirm: q.confirm.unwrap_or(false),
        may_create: caller.has(Role::Create),
    };
    Ok(Json(
        s.settings
            .put(name, &body.value, flags, &caller.actor())
            .await?,
    ))
}

async fn remove(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
) -> Result<Json<SettingView>, ApiError> {
    let name = Settings::name(&name)?;
    Ok(Json(s.settings.reset(name, &caller.actor()).await?))
}
