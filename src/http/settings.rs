//! `/api/v1/settings`: the dynamic settings (RFD 0016). Reads show each
//! setting's value, origin and default; `PUT` is `create` (with `force`
//! and `confirm` as query flags), `DELETE` is `rm`. The rules live in the
//! settings room; this file parses, checks the `create` role, and answers.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::Items;
use super::caller::Caller;
use super::contract::{ReadErrors, ReadOneErrors, WriteErrors};
use super::error::{ApiError, ApiJson, ApiQuery};
use super::AppState;
use crate::clock::Ts;
use crate::config::Role;
use crate::settings::{PutFlags, SettingView, Settings};
use crate::store::settings::SettingChange;

/// One setting's path, as annotated below; the document shows it once per
/// setting (`openapi`).
pub(super) const ONE: &str = "/api/v1/settings/{name}";

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(one, put, remove))
}

/// Every dynamic setting.
///
/// Its value, origin, default, and who set it when.
#[utoipa::path(
    get,
    path = "/api/v1/settings",
    tag = "settings",
    operation_id = "list_settings",
    security((), ("bearer" = [])),
    responses((status = 200, description = "The settings, by name.", body = Items<SettingView>), ReadErrors)
)]
async fn list(State(s): State<AppState>) -> Result<Json<Items<SettingView>>, ApiError> {
    Ok(Json(Items {
        items: s.settings.list().await?,
    }))
}

#[derive(Serialize, utoipa::ToSchema)]
struct ChangeView {
    at: Ts,
    #[serde(flatten)]
    change: SettingChange,
}

#[derive(Serialize, utoipa::ToSchema)]
struct OneResponse {
    #[serde(flatten)]
    setting: SettingView,
    /// The newest changes, newest first.
    history: Vec<ChangeView>,
}

/// One setting.
///
/// With its 50 newest changes.
#[utoipa::path(
    get,
    path = "/api/v1/settings/{name}",
    tag = "settings",
    operation_id = "get_setting",
    params(("name" = crate::settings::Name, Path, description = "The setting's name.", example = "auto_reconnect")),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The setting.", body = OneResponse), ReadOneErrors)
)]
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

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct PutQuery {
    /// Overwrite a value set through the API before (RFD 0016 `create --force`).
    force: Option<bool>,
    /// With `force` and the `create` role: overwrite a value the config
    /// file set.
    confirm: Option<bool>,
}

#[derive(Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"value": true}))]
struct PutBody {
    /// The new value, as the setting's type (a boolean, a duration such as
    /// "6h", a JSON policy); each setting's path documents its own.
    value: Value,
}

/// Sets a setting.
///
/// RFD 0016 `create`: needs the `update` role; over a value the config
/// file set, also `force`, `confirm` and the `create` role.
#[utoipa::path(
    put,
    path = "/api/v1/settings/{name}",
    tag = "settings",
    operation_id = "put_setting",
    params(("name" = crate::settings::Name, Path, description = "The setting's name.", example = "auto_reconnect"), PutQuery),
    request_body(content = PutBody, content_type = "application/json"),
    security(("bearer" = [])),
    responses((status = 200, description = "The setting as it now is.", body = SettingView), WriteErrors)
)]
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

/// Removes a setting's API value.
///
/// RFD 0016 `rm`: back to the config file's value or the default. Needs
/// the `update` role.
#[utoipa::path(
    delete,
    path = "/api/v1/settings/{name}",
    tag = "settings",
    operation_id = "remove_setting",
    params(("name" = crate::settings::Name, Path, description = "The setting's name.", example = "auto_reconnect")),
    security(("bearer" = [])),
    responses((status = 200, description = "The setting as it now is.", body = SettingView), WriteErrors)
)]
async fn remove(
    State(s): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
) -> Result<Json<SettingView>, ApiError> {
    let name = Settings::name(&name)?;
    Ok(Json(
        s.settings
            .reset(name, &caller.actor(), caller.has(Role::Create))
            .await?,
    ))
}
