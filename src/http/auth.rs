//! Access control at the HTTP edge: one middleware in front of every route,
//! so no route can forget it.
//!
//! - Reads (GET, HEAD) are open, or need the `read` role when
//!   `access.read_requires_token` is set.
//! - Everything else (POST, PUT, DELETE) needs the `update` role; the
//!   handlers that overwrite a config-file setting also ask for `create`.
//! - `/healthz`, `/readyz`, `/signin`, `/signout` and `/static/` are open
//!   (load balancers and the sign-in page must work without a token).
//!
//! Credentials: `Authorization: Bearer <token>` anywhere; on dashboard
//! paths (not `/api/`, `/metrics`, `/probes/`) also the signed session cookie set by sign-in, whose
//! forms carry CSRF tokens as well. The API takes no cookies, so another
//! site cannot ride a browser's session into it. Tokens are never logged.

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use tracing::debug;

use super::caller::Caller;
use super::error::ApiError;
use super::ui::{wants_json, UiError};
use super::AppState;
use crate::access::SESSION_COOKIE;
use crate::config::Role;
use crate::stats::Stats;

fn open_path(path: &str) -> bool {
    matches!(path, "/healthz" | "/readyz" | "/signin" | "/signout") || path.starts_with("/static/")
}

/// The bearer token, if an `Authorization` header is present.
fn bearer(h: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = h.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    match crate::access::bearer(v.to_str().unwrap_or_default()) {
        Some(token) => Ok(Some(token.to_string())),
        None => Err(ApiError::Unauthorized {
            code: "bad_authorization",
            message: "the Authorization header must be `Bearer <token>`".into(),
        }),
    }
}

/// Where a refusal goes: JSON for the API (and the dashboard's JS), a
/// sign-in redirect for a dashboard page, an error page for a form.
fn refuse(st: &AppState, err: ApiError, req: &Request, api: bool) -> Response {
    match err.status().as_u16() {
        401 => Stats::inc(&st.stats.http_unauthorized),
        403 => Stats::inc(&st.stats.http_forbidden),
        _ => {}
    }
    debug!(path = %req.uri().path(), code = err.code(), "request refused");
    if api || wants_json(req.headers()) {
        return err.into_response();
    }
    if err.status().as_u16() == 401 && req.method() == Method::GET {
        let next = req
            .uri()
            .path_and_query()
            .map_or("/", |p| p.as_str())
            .to_string();
        let q = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("next", &next)
            .finish();
        return Redirect::to(&format!("/signin?{q}")).into_response();
    }
    UiError { err, json: false }.into_response()
}

/// The `Teleport-Jwt-Assertion` header's value, when `[access.teleport]`
/// is set (otherwise the header means nothing here). A value that is not
/// text is handed on as it is, to be refused as malformed.
fn teleport_jwt(st: &AppState, h: &HeaderMap) -> Option<String> {
    st.access.teleport.as_ref()?;
    let v = h.get(crate::access::teleport::HEADER)?;
    Some(String::from_utf8_lossy(v.as_bytes()).into_owned())
}

/// The Teleport user a JWT names, or the refusal to answer with: a 401
/// naming what is wrong with the token (an error page, never the sign-in
/// page, which could not help). A request that changes something and
/// comes from another site is refused too: Teleport's app proxy adds the
/// JWT to whatever the browser sends it.
async fn signed_in_through_teleport(
    st: &AppState,
    token: &str,
    req: (&Method, &str, &HeaderMap),
) -> Result<crate::access::Principal, Response> {
    let (method, path, headers) = req;
    let Some(t) = st.access.teleport.as_ref() else {
        return Err(ApiError::Unauthorized {
            code: "invalid_teleport_jwt",
            message: "signing in through Teleport is not configured ([access.teleport])".into(),
        }
        .into_response());
    };
    let reading = matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    if !reading && cross_site {
        Stats::inc(&st.stats.http_forbidden);
        return Err(ApiError::Forbidden {
            code: "cross_site",
            message: "a change asked for by another site is refused".into(),
        }
        .into_response());
    }
    match t.verify(token).await {
        Ok(p) => Ok(p),
        Err(r) => {
            Stats::inc(&st.stats.http_unauthorized);
            debug!(%path, reason = r.code(), "Teleport JWT refused");
            let err = ApiError::Unauthorized {
                code: "invalid_teleport_jwt",
                message: format!("Teleport's JWT (Teleport-Jwt-Assertion) is refused: {r}"),
            };
            let api = path.starts_with("/api/") || wants_json(headers);
            Err(if api {
                err.into_response()
            } else {
                UiError { err, json: false }.into_response()
            })
        }
    }
}

/// The middleware: finds the caller, checks the role the request needs,
/// and leaves a [`Caller`] in the request's extensions.
pub async fn guard(State(st): State<AppState>, mut req: Request, next: Next) -> Response {
    let path = req.uri().path().to_string();
    if open_path(&path) {
        req.extensions_mut().insert(Caller(None));
        return next.run(req).await;
    }
    // Machine surfaces: bearer tokens only, JSON refusals, no redirects.
    let api = path.starts_with("/api/") || path == "/metrics" || path.starts_with("/probes/");
    let jwt = teleport_jwt(&st, req.headers());
    let principal = match bearer(req.headers()) {
        Err(e) => return refuse(&st, e, &req, api),
        Ok(Some(token)) => match st.access.authenticate(&token) {
            Some(p) => Some(p),
            // `Authorization: Bearer {{internal.jwt}}` in the app's
            // definition puts Teleport's JWT here.
            None if st.access.teleport.is_some() && token.split('.').count() == 3 => {
                match signed_in_through_teleport(&st, &token, (req.method(), &path, req.headers()))
                    .await
                {
                    Ok(p) => Some(p),
                    Err(r) => return r,
                }
            }
            None => {
                let e = ApiError::Unauthorized {
                    code: "invalid_token",
                    message: "the API token is not valid: it matches no token in the config file"
                        .into(),
                };
                return refuse(&st, e, &req, api);
            }
        },
        Ok(None) if jwt.is_some() => {
            let token = jwt.unwrap_or_default();
            match signed_in_through_teleport(&st, &token, (req.method(), &path, req.headers()))
                .await
            {
                Ok(p) => Some(p),
                Err(r) => return r,
            }
        }
        Ok(None) if !api => {
            super::cookie(req.headers(), SESSION_COOKIE).and_then(|v| st.access.session(&v))
        }
        Ok(None) => None,
    };
    let reading = matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let need = if reading {
        st.access.read_requires_token.then_some(Role::Read)
    } else {
        Some(Role::Update)
    };
    if let Some(role) = need {
        let what = format!("{} {path}", req.method());
        match &principal {
            None => {
                let message = if !st.access.has_tokens() {
                    format!("{what} needs an API token with the {} role, and none is configured: add an [[access.tokens]] entry to the config file (`lifeline token new` prints one)", role.as_str())
                } else if api {
                    format!("{what} needs an API token with the {} role: send `Authorization: Bearer <token>`", role.as_str())
                } else {
                    format!(
                        "{what} needs you to sign in with an API token that has the {} role",
                        role.as_str()
                    )
                };
                let e = ApiError::Unauthorized {
                    code: "unauthenticated",
                    message,
                };
                return refuse(&st, e, &req, api);
            }
            Some(p) if !p.has(role) => {
                let has: Vec<&str> = p.roles.iter().map(|r| r.as_str()).collect();
                let e = ApiError::Forbidden {
                    code: "forbidden",
                    message: format!(
                        "token {:?} lacks the {} role, which {what} needs (it has: {})",
                        p.name,
                        role.as_str(),
                        has.join(", ")
                    ),
                };
                return refuse(&st, e, &req, api);
            }
            Some(_) => {}
        }
    }
    req.extensions_mut().insert(Caller(principal));
    next.run(req).await
}
