//! The dashboard's forms (POST): reconnect one agent, reconnect every
//! stranded agent, change or reset a setting, start or end a maintenance
//! window. Every form goes through [`Checked`]: parsed, then
//! CSRF-checked, before a handler sees it. Without JS they answer 303 to a
//! page that shows the result; with JS (`Accept: application/json`) they
//! answer the API's JSON so the page can follow the signal in place.

use axum::extract::{Form, FromRequest, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use super::fmt::agent_href;
use super::{csrf, wants_json, Ctx, UiError};
use crate::domain::AgentState;
use crate::http::caller::Caller;
use crate::http::error::ApiError;
use crate::http::signals::{reason, reconnect_agent, reconnect_selected, select};
use crate::http::AppState;

/// A dashboard form: every one carries the browser's CSRF token.
pub trait CsrfForm: DeserializeOwned {
    fn csrf(&self) -> &str;
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconnectForm {
    csrf: String,
    #[serde(default)]
    proxy: String,
    #[serde(default)]
    reason: String,
}

impl CsrfForm for ReconnectForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrandedForm {
    csrf: String,
    #[serde(default)]
    reason: String,
}

impl CsrfForm for StrandedForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// A parsed form whose CSRF token matched, and whether the browser's JS
/// asked for JSON. A bad form is a 400, a refused token a 403, each as a
/// page or as JSON to match the request.
pub struct Checked<T> {
    pub(super) form: T,
    pub(super) json: bool,
}

impl<T: CsrfForm> FromRequest<AppState> for Checked<T> {
    type Rejection = UiError;

    async fn from_request(req: Request, st: &AppState) -> Result<Self, Self::Rejection> {
        let json = wants_json(req.headers());
        let headers = req.headers().clone();
        let Form(form) = Form::<T>::from_request(req, st)
            .await
            .map_err(|e| UiError {
                err: ApiError::BadBody(format!("invalid form: {}", e.body_text())),
                json,
            })?;
        csrf::check(&st.ui.csrf, &headers, form.csrf(), st.tls).map_err(|r| UiError {
            err: ApiError::Forbidden {
                code: "csrf",
                message: r.message().to_string(),
            },
            json,
        })?;
        Ok(Checked { form, json })
    }
}

/// The channel the audit names for dashboard actions (`ui:<token name>`).
const BY: &str = "ui";

fn by(caller: &Caller) -> String {
    format!("{BY}:{}", caller.actor())
}

pub(super) fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}

pub async fn reconnect_one(
    State(st): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    Checked { form, json }: Checked<ReconnectForm>,
) -> Result<Response, UiError> {
    let with = |err| UiError { err, json };
    let reason = reason(Some(form.reason), "manual reconnect from the dashboard").map_err(with)?;
    let proxy = Some(form.proxy.trim().to_string()).filter(|p| !p.is_empty());
    let row = reconnect_agent(&st, name.clone(), proxy, reason, by(&caller))
        .await
        .map_err(with)?;
    info!(agent = %name, signal = row.id, "reconnect requested from the dashboard");
    Ok(if json {
        (StatusCode::ACCEPTED, Json(row)).into_response()
    } else {
        see_other(&format!("{}?signal={}#signal", agent_href(&name), row.id))
    })
}

pub async fn reconnect_stranded(
    State(st): State<AppState>,
    caller: Caller,
    Checked { form, json }: Checked<StrandedForm>,
) -> Result<Response, UiError> {
    let with = |err| UiError { err, json };
    let reason = reason(
        Some(form.reason),
        "reconnect all stranded, from the dashboard",
    )
    .map_err(with)?;
    let agents = select(&st, Some(AgentState::Stranded), None, None)
        .await
        .map_err(with)?;
    let matched = agents.len();
    let (signals, skipped) = reconnect_selected(&st, agents, None, reason, by(&caller))
        .await
        .map_err(with)?;
    info!(
        matched,
        sent = signals.len(),
        skipped = skipped.len(),
        "reconnect of all stranded agents requested from the dashboard"
    );
    Ok(if json {
        (
            StatusCode::ACCEPTED,
            Json(json!({"matched": matched, "signals": signals, "skipped": skipped})),
        )
            .into_response()
    } else {
        see_other(&format!(
            "/signals?requested_by={BY}&sent={}&skipped={}",
            signals.len(),
            skipped.len()
        ))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingForm {
    csrf: String,
    value: String,
    #[serde(default)]
    force: Option<String>,
    #[serde(default)]
    confirm: Option<String>,
}

impl CsrfForm for SettingForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CsrfOnly {
    csrf: String,
}

impl CsrfForm for CsrfOnly {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// A value typed into a form: JSON when it parses as JSON (`true`,
/// `0.25`, `{"…": …}`), else the text as a JSON string (`10m`).
fn form_value(text: &str) -> serde_json::Value {
    let t = text.trim();
    serde_json::from_str(t).unwrap_or_else(|_| serde_json::Value::String(t.to_string()))
}

/// Changes a setting as `PUT /api/v1/settings/{name}` does (the same
/// rules, flags and audit), then shows the settings page again.
pub async fn put_setting(
    State(st): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    Checked { form, json }: Checked<SettingForm>,
) -> Result<Response, UiError> {
    let with = |err: ApiError| UiError { err, json };
    let name = crate::settings::Settings::name(&name).map_err(|e| with(e.into()))?;
    let on = |v: &Option<String>| v.as_deref().is_some_and(|v| v == "true" || v == "on");
    let flags = crate::settings::PutFlags {
        force: on(&form.force),
        confirm: on(&form.confirm),
        may_create: caller.has(crate::config::Role::Create),
    };
    let view = st
        .settings
        .put(name, &form_value(&form.value), flags, &caller.actor())
        .await
        .map_err(|e| with(e.into()))?;
    info!(setting = name.as_str(), actor = %caller.actor(), "setting changed from the dashboard");
    Ok(if json {
        Json(view).into_response()
    } else {
        see_other(&format!("/settings?saved={0}#setting-{0}", name.as_str()))
    })
}

/// Resets a setting as `DELETE /api/v1/settings/{name}` does.
pub async fn reset_setting(
    State(st): State<AppState>,
    Path(name): Path<String>,
    caller: Caller,
    Checked { json, .. }: Checked<CsrfOnly>,
) -> Result<Response, UiError> {
    let with = |err: ApiError| UiError { err, json };
    let name = crate::settings::Settings::name(&name).map_err(|e| with(e.into()))?;
    let view = st
        .settings
        .reset(
            name,
            &caller.actor(),
            caller.has(crate::config::Role::Create),
        )
        .await
        .map_err(|e| with(e.into()))?;
    info!(setting = name.as_str(), actor = %caller.actor(), "setting reset from the dashboard");
    Ok(if json {
        Json(view).into_response()
    } else {
        see_other(&format!("/settings?saved={0}#setting-{0}", name.as_str()))
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaintenanceForm {
    csrf: String,
    targets: String,
    length: String,
    reason: String,
    /// The "every agent or proxy" checkbox (present when ticked).
    all: Option<String>,
}

impl CsrfForm for MaintenanceForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// Declares a window as `POST /api/v1/maintenance` does, from now for
/// the length typed (`2h`).
pub async fn start_maintenance(
    State(st): State<AppState>,
    ctx: Ctx,
    Checked { form, json }: Checked<MaintenanceForm>,
) -> Result<Response, UiError> {
    let caller = &ctx.caller;
    let m = &st.maintenance;
    // Refused: JSON for the dashboard's script, else the page again with
    // the form as typed and why.
    let typed = super::pages::Declare {
        targets: form.targets.clone(),
        length: form.length.clone(),
        reason: form.reason.clone(),
        all: form.all.is_some(),
        error: None,
    };
    let refuse = |err: ApiError| async {
        if json {
            Err(UiError { err, json })
        } else {
            super::pages::refused_maintenance(&st, &ctx, err, typed).await
        }
    };
    let length = match humantime::parse_duration(form.length.trim()) {
        Ok(l) => l,
        Err(e) => {
            return refuse(ApiError::BadBody(format!(
                "for: {e} (write a length such as 30m or 2h)"
            )))
            .await
        }
    };
    let req = crate::maintenance::WindowRequest {
        targets: form
            .targets
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
            .map(str::to_string)
            .collect(),
        from: None,
        until: m.now().saturating_add(length).rfc3339(),
        reason: form.reason,
        all: form.all.is_some(),
    };
    let (w, warnings) = match m.create(&req, &caller.actor()).await {
        Ok(made) => made,
        Err(e) => return refuse(e.into()).await,
    };
    info!(window = w.id, actor = %caller.actor(), "maintenance window started from the dashboard");
    Ok(if json {
        Json(serde_json::json!({
            "window": crate::store::maintenance::WindowView::of(&w, m.now()),
            "warnings": warnings,
        }))
        .into_response()
    } else {
        let said = if warnings.is_empty() {
            String::new()
        } else {
            format!(" ({})", warnings.join("; "))
        };
        see_other(&format!(
            "/maintenance?done={}#window-{}",
            super::fmt::enc(&format!("window {} started{said}", w.id)),
            w.id
        ))
    })
}

/// Ends a window now, as `POST /api/v1/maintenance/{id}/end` does.
pub async fn end_maintenance(
    State(st): State<AppState>,
    Path(id): Path<String>,
    caller: Caller,
    Checked { json, .. }: Checked<CsrfOnly>,
) -> Result<Response, UiError> {
    let with = |err: ApiError| UiError { err, json };
    let id = id
        .parse::<i64>()
        .ok()
        .filter(|id| *id > 0)
        .ok_or_else(|| with(ApiError::BadParameter("not a maintenance window id".into())))?;
    let m = &st.maintenance;
    let w = m
        .end(id, &caller.actor())
        .await
        .map_err(|e| with(e.into()))?;
    info!(window = id, actor = %caller.actor(), "maintenance window ended from the dashboard");
    Ok(if json {
        Json(crate::store::maintenance::WindowView::of(&w, m.now())).into_response()
    } else {
        see_other(&format!("/maintenance?done=window+{id}+ended#window-{id}"))
    })
}

#[cfg(test)]
mod tests {
    use super::form_value;
    use serde_json::json;

    #[test]
    fn a_typed_value_is_json_when_it_parses_and_a_string_otherwise() {
        assert_eq!(form_value(" true "), json!(true));
        assert_eq!(form_value("0.25"), json!(0.25));
        assert_eq!(form_value("10m"), json!("10m"));
        assert_eq!(form_value("\"10m\""), json!("10m"));
        assert_eq!(form_value("{\"a\": 1}"), json!({"a": 1}));
    }
}
