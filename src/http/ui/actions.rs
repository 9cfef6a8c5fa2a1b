//! The dashboard's forms (POST): reconnect one agent, reconnect every
//! stranded agent. CSRF-checked; without JS they answer 303 to a page that
//! shows the result, with JS (`Accept: application/json`) they answer the
//! API's JSON so the page can follow the signal in place.

use axum::extract::rejection::FormRejection;
use axum::extract::{Form, Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;
use serde_json::json;
use tracing::info;

use super::fmt::agent_href;
use super::{csrf, Ctx, UiError};
use crate::http::error::ApiError;
use crate::http::signals::{reason, reconnect_agent, reconnect_selected, select};
use crate::http::AppState;
use crate::model::AgentState;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReconnectForm {
    csrf: String,
    #[serde(default)]
    proxy: String,
    #[serde(default)]
    reason: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StrandedForm {
    csrf: String,
    #[serde(default)]
    reason: String,
}

/// Who the audit names for dashboard actions.
const BY: &str = "ui";

fn forbidden(r: csrf::Refusal, json: bool) -> Response {
    if json {
        return (
            StatusCode::FORBIDDEN,
            Json(json!({"error": {"code": "csrf", "message": r.message()}})),
        )
            .into_response();
    }
    UiError {
        err: ApiError::Forbidden {
            code: "csrf",
            message: r.message().to_string(),
        },
        json: false,
    }
    .into_response()
}

fn bad_form(e: FormRejection, json: bool) -> Response {
    UiError {
        err: ApiError::BadBody(format!("invalid form: {}", e.body_text())),
        json,
    }
    .into_response()
}

fn see_other(to: &str) -> Response {
    (StatusCode::SEE_OTHER, [(header::LOCATION, to.to_string())]).into_response()
}

pub async fn reconnect_one(
    State(st): State<AppState>,
    ctx: Ctx,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<Form<ReconnectForm>, FormRejection>,
) -> Response {
    let json = ctx.wants_json;
    let form = match form {
        Ok(Form(f)) => f,
        Err(e) => return bad_form(e, json),
    };
    if let Err(r) = csrf::check(&st.ui.csrf, &headers, &form.csrf) {
        return forbidden(r, json);
    }
    let result = async {
        let reason = reason(Some(form.reason), "manual reconnect from the dashboard")?;
        let proxy = Some(form.proxy.trim().to_string()).filter(|p| !p.is_empty());
        reconnect_agent(&st, name.clone(), proxy, reason, BY.into()).await
    }
    .await;
    match result {
        Ok(row) => {
            info!(agent = %name, signal = row.id, "reconnect requested from the dashboard");
            if json {
                (StatusCode::ACCEPTED, Json(row)).into_response()
            } else {
                see_other(&format!("{}?signal={}#signal", agent_href(&name), row.id))
            }
        }
        Err(err) => UiError { err, json }.into_response(),
    }
}

pub async fn reconnect_stranded(
    State(st): State<AppState>,
    ctx: Ctx,
    headers: HeaderMap,
    form: Result<Form<StrandedForm>, FormRejection>,
) -> Response {
    let json = ctx.wants_json;
    let form = match form {
        Ok(Form(f)) => f,
        Err(e) => return bad_form(e, json),
    };
    if let Err(r) = csrf::check(&st.ui.csrf, &headers, &form.csrf) {
        return forbidden(r, json);
    }
    let result = async {
        let reason = reason(
            Some(form.reason),
            "reconnect all stranded, from the dashboard",
        )?;
        let agents = select(&st, Some(AgentState::Stranded), None, None).await?;
        let matched = agents.len();
        let (signals, skipped) = reconnect_selected(&st, agents, None, reason, BY.into()).await?;
        Ok::<_, ApiError>((matched, signals, skipped))
    }
    .await;
    match result {
        Ok((matched, signals, skipped)) => {
            info!(
                matched,
                sent = signals.len(),
                skipped = skipped.len(),
                "reconnect of all stranded agents requested from the dashboard"
            );
            if json {
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
            }
        }
        Err(err) => UiError { err, json }.into_response(),
    }
}
