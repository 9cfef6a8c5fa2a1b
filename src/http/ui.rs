//! The dashboard: server-rendered HTML (askama, `templates/`), plain CSS
//! and one small hand-written JS module (`static/`), live through
//! Server-Sent Events. Every page works with JS off; JS adds the live
//! overview, countdowns and in-place reconnect progress.
//!
//! Owns: page view-models (preformatted strings, so templates stay simple
//! and renders cheap), the TTL timeline's SVG geometry, CSRF for its forms,
//! the shared live-overview broadcaster, and the pages' security headers.
//! Must not: decide anything about agents (it reads `fleet::view`), write
//! SQLite (reconnects go through `http::signals`, which asks the hub), or
//! show a name unescaped: templates autoescape, hrefs are percent-encoded,
//! and the JS only sets `textContent` or swaps in fragments this server
//! rendered and escaped.

mod actions;
pub mod csrf;
pub mod fmt;
pub mod incident_svg;
pub mod live;
mod pages;
mod signin;
pub mod ttl_svg;

use std::sync::Arc;

use askama::Template;
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;
use tracing::error;

use super::error::{ApiError, ApiQuery};
use super::AppState;

/// Shared by every dashboard handler.
pub struct UiShared {
    pub csrf: csrf::Csrf,
    pub live: live::Live,
    /// The overview's last-day strip and when it was drawn.
    strip: std::sync::Mutex<Option<(crate::clock::Ts, Arc<incident_svg::Strip>)>>,
}

impl UiShared {
    pub fn new(max_live_streams: usize, max_per_ip: usize, csrf_key: [u8; 32]) -> Self {
        UiShared {
            csrf: csrf::Csrf::with_key(csrf_key),
            live: live::Live::new(max_live_streams, max_per_ip),
            strip: std::sync::Mutex::new(None),
        }
    }

    pub fn strip(&self) -> Option<(crate::clock::Ts, Arc<incident_svg::Strip>)> {
        self.strip.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn set_strip(&self, at: crate::clock::Ts, s: Arc<incident_svg::Strip>) {
        *self.strip.lock().unwrap_or_else(|e| e.into_inner()) = Some((at, s));
    }
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(pages::overview))
        .route("/ttl", get(pages::ttl))
        .route("/agents", get(pages::agents))
        .route("/agents/{name}", get(pages::agent))
        .route("/agents/{name}/reconnect", post(actions::reconnect_one))
        .route("/auth", get(pages::auth))
        .route("/signals", get(pages::signals))
        .route("/incidents", get(pages::incidents))
        .route("/incidents/{id}", get(pages::incident))
        .route("/webhooks", get(pages::webhooks))
        .route(
            "/maintenance",
            get(pages::maintenance).post(actions::start_maintenance),
        )
        .route("/maintenance/{id}/end", post(actions::end_maintenance))
        .route("/settings", get(pages::settings))
        .route("/settings/{name}", post(actions::put_setting))
        .route("/settings/{name}/reset", post(actions::reset_setting))
        .route(
            "/reconnect-stranded",
            get(pages::confirm_stranded).post(actions::reconnect_stranded),
        )
        .route("/live/overview", get(live::overview_stream))
        .route("/live/changes", get(live::changes_stream))
        .route("/signin", get(signin::page).post(signin::sign_in))
        .route("/signout", post(signin::sign_out))
        .route("/static/lifeline.css", get(css))
        .route("/static/lifeline.js", get(js))
}

pub const CSS: &str = include_str!("../../static/lifeline.css");
pub const JS: &str = include_str!("../../static/lifeline.js");
/// Appended to asset URLs so a new build is never served a cached old one.
pub const ASSET_VERSION: &str = env!("CARGO_PKG_VERSION");

async fn css() -> impl IntoResponse {
    asset("text/css; charset=utf-8", CSS)
}

async fn js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", JS)
}

fn asset(ct: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, ct),
            (header::CACHE_CONTROL, "public, max-age=3600"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        body,
    )
}

/// What every page's frame needs.
pub struct Layout {
    pub nav: &'static str,
    pub title: String,
    /// This browser's CSRF token, for the page's forms.
    pub csrf: String,
    pub version: &'static str,
    /// The signed-in token's name, if any.
    pub user: Option<String>,
    /// Which replica this page comes from and who leads (`None` alone on
    /// SQLite).
    pub replica: Option<String>,
    /// "not watching windows_desktop_service (…)": kinds the cluster
    /// refused; `None` when everything asked for is watched.
    pub unwatched: Option<String>,
    /// The maintenance windows active now, in one line for the banner.
    pub maintenance: Option<String>,
}

/// The active maintenance windows, in one line for the banner: every one
/// is named (the first ten by id), so the window a root cause names is
/// always among them.
fn maintenance_line(active: &[crate::domain::Window]) -> Option<String> {
    let first = active.first()?;
    if active.len() > 1 {
        let ids: Vec<String> = active.iter().take(10).map(|w| w.id.to_string()).collect();
        let more = if active.len() > 10 { ", …" } else { "" };
        let soonest = active.iter().map(|w| w.end()).min().unwrap_or(first.end());
        return Some(format!(
            "{} maintenance windows active: {}{more} (the first ends {})",
            active.len(),
            ids.join(", "),
            soonest.rfc3339()
        ));
    }
    let targets: Vec<&str> = first.targets.iter().take(3).map(|t| t.as_str()).collect();
    let more = if first.targets.len() > 3 { " …" } else { "" };
    Some(format!(
        "Maintenance window {} active until {}: {}{more} ({})",
        first.id,
        first.end().rfc3339(),
        targets.join(" "),
        crate::domain::text::bounded(&first.reason, 120),
    ))
}

/// The kinds the cluster refused, in one line for the header.
fn unwatched_line(kinds: &[crate::stats::Unwatched]) -> Option<String> {
    let first = kinds.first()?;
    let names: Vec<&str> = kinds.iter().map(|u| u.kind.as_str()).collect();
    Some(format!(
        "not watching {}: {}",
        names.join(", "),
        first.reason
    ))
}

/// "replica r1 · leader r2 (term 3)", or `None` for a process alone.
fn replica_line(l: &crate::store::Leadership) -> Option<String> {
    if l.sole {
        return None;
    }
    Some(match (&l.leader, l.leading) {
        (_, true) => format!("replica {} · leads (term {})", l.replica, l.term),
        (Some(leader), false) => {
            format!(
                "replica {} · leader {} (term {})",
                l.replica, leader, l.term
            )
        }
        (None, false) => format!("replica {} · no leader", l.replica),
    })
}

/// Per-request context of a page: the browser's CSRF session and when the
/// request started.
pub struct Ctx {
    pub session: csrf::Session,
    pub started: crate::clock::Stopwatch,
    pub caller: crate::http::caller::Caller,
    /// Served over TLS: cookies are `Secure`.
    pub tls: bool,
}

impl FromRequestParts<AppState> for Ctx {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, st: &AppState) -> Result<Self, Self::Rejection> {
        Ok(Ctx {
            tls: st.tls,
            session: csrf::session(&parts.headers, st.tls),
            // Server-Timing: how long the page took to render.
            started: crate::clock::Stopwatch::start(),
            caller: crate::http::caller::Caller::of(&parts.extensions),
        })
    }
}

/// True when the request asked for JSON (the page's JS does, for forms).
pub fn wants_json(h: &HeaderMap) -> bool {
    h.get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("application/json"))
}

impl Ctx {
    pub fn layout(&self, st: &AppState, nav: &'static str, title: String) -> Layout {
        Layout {
            nav,
            title,
            csrf: st.ui.csrf.token(&self.session.id, &self.session.bound),
            version: ASSET_VERSION,
            user: self.caller.0.as_ref().map(|p| p.name.clone()),
            replica: replica_line(&st.hub.leadership().borrow()),
            unwatched: unwatched_line(&st.stats.unwatched()),
            maintenance: maintenance_line(&st.maintenance.active()),
        }
    }

    /// Renders a page with the dashboard's headers: CSP (no inline script
    /// or style, so an escaping slip still cannot run), the CSRF cookie on
    /// a first visit, and `Server-Timing` with the time spent rendering.
    pub fn render(&self, status: StatusCode, t: &impl Template) -> Response {
        match t.render() {
            Ok(html) => {
                let mut r = (status, html).into_response();
                let h = r.headers_mut();
                h.insert(
                    header::CONTENT_TYPE,
                    HeaderValue::from_static("text/html; charset=utf-8"),
                );
                security_headers(h);
                h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
                if self.session.new {
                    if let Some(v) = csrf::set_cookie(&self.session.id, self.tls) {
                        h.insert(header::SET_COOKIE, v);
                    }
                }
                let us = self.started.elapsed().as_micros();
                if let Ok(v) = HeaderValue::from_str(&format!(
                    "app;desc=\"render\";dur={}.{:03}",
                    us / 1000,
                    us % 1000
                )) {
                    h.insert("server-timing", v);
                }
                r
            }
            Err(e) => {
                error!(error = %e, "dashboard template failed to render");
                UiError::from(ApiError::Render).into_response()
            }
        }
    }
}

pub fn security_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
             connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
}

#[derive(Template)]
#[template(path = "error.html")]
struct ErrorPage {
    layout: Layout,
    status: u16,
    reason: String,
    code: &'static str,
    message: String,
}

/// A dashboard error: an HTML page with the status and the same message
/// the API would give (or the API's JSON when the browser's JS asked).
pub struct UiError {
    pub err: ApiError,
    pub json: bool,
}

impl From<ApiError> for UiError {
    fn from(err: ApiError) -> Self {
        UiError { err, json: false }
    }
}

impl From<crate::fleet::FleetError> for UiError {
    fn from(e: crate::fleet::FleetError) -> Self {
        UiError::from(ApiError::from(e))
    }
}

impl From<sqlx::Error> for UiError {
    fn from(e: sqlx::Error) -> Self {
        UiError::from(ApiError::from(e))
    }
}

impl IntoResponse for UiError {
    fn into_response(self) -> Response {
        if self.json {
            return self.err.into_response();
        }
        let status = self.err.status();
        if let ApiError::Db(e) = &self.err {
            error!(error = %e, "database query failed");
        }
        let reason = status.canonical_reason().unwrap_or("Error").to_string();
        let page = ErrorPage {
            // No forms on an error page, so no CSRF token.
            layout: Layout {
                nav: "",
                title: format!("{} {reason} · Lifeline", status.as_u16()),
                csrf: String::new(),
                version: ASSET_VERSION,
                user: None,
                replica: None,
                unwatched: None,
                maintenance: None,
            },
            status: status.as_u16(),
            reason,
            code: self.err.code(),
            message: match &self.err {
                ApiError::Db(_) => "database error (logged on the server)".to_string(),
                e => e.to_string(),
            },
        };
        let mut r = match page.render() {
            Ok(html) => (status, html).into_response(),
            Err(_) => (status, page.message).into_response(),
        };
        let h = r.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/html; charset=utf-8"),
        );
        security_headers(h);
        r
    }
}

/// `Query<T>` whose rejection is the dashboard's error page (400 naming the
/// parameter), like `ApiQuery` for the API.
pub struct UiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for UiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = UiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let ApiQuery(v) = ApiQuery::from_request_parts(parts, state).await?;
        Ok(UiQuery(v))
    }
}
