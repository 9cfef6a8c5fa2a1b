//! One error type for every HTTP surface: `{"error":{"code","message"}}` with
//! the right status. Internal errors are logged here, once, and never leak
//! their detail to the client.

use axum::extract::{FromRequestParts, Query};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;
use serde_json::json;
use tracing::error;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    BadParameter(String),
    #[error("{what} {name:?} not found")]
    NotFound { what: &'static str, name: String },
    #[error("no route for {0}")]
    NoRoute(String),
    /// The path exists; the method does not (405).
    #[error("{method} is not allowed on {path}")]
    MethodNotAllowed { method: String, path: String },
    /// An unknown setting; the message lists the known ones.
    #[error("{message}")]
    NotFoundSetting { name: String, message: String },
    /// `?cluster=` names no cluster watched; the message lists those that are.
    #[error("{message}")]
    UnknownCluster { message: String },
    #[error("{0}")]
    BadBody(String),
    /// The request is valid but the target's state forbids it now.
    #[error("{message}")]
    Conflict { code: &'static str, message: String },
    /// The request is refused (a failed CSRF check, later missing rights).
    #[error("{message}")]
    Forbidden { code: &'static str, message: String },
    /// A bounded resource is full (e.g. live streams); try again later.
    #[error("{message}")]
    Busy { code: &'static str, message: String },
    /// No credentials, or credentials that are not valid (401).
    #[error("{message}")]
    Unauthorized { code: &'static str, message: String },
    /// Too many requests of this kind (429); `retry_after` in seconds.
    #[error("{message}")]
    TooMany {
        code: &'static str,
        message: String,
        retry_after: u64,
    },
    /// The request body is larger than `server.max_body_bytes` (413).
    #[error("the request body is larger than {0} bytes (server.max_body_bytes)")]
    TooLarge(usize),
    #[error("the fleet has stopped")]
    FleetGone,
    /// A dashboard template failed (a bug; logged where it happens).
    #[error("the page failed to render")]
    Render,
    #[error("database error")]
    Db(sqlx::Error),
}

/// A database error: a connection or a lock not had in time is `busy`
/// (503, retry), anything else is internal.
impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        match e {
            sqlx::Error::PoolTimedOut => ApiError::busy("no database connection"),
            sqlx::Error::Database(d) if lock_not_had(d.code().as_deref()) => {
                ApiError::busy("the database did not grant a lock")
            }
            e => ApiError::Db(e),
        }
    }
}

/// A database error code that means another transaction held what this
/// one needed, and trying again will do: PostgreSQL's `lock_timeout`
/// (55P03), a deadlock it broke (40P01) or a serialization failure
/// (40001); SQLite's busy and locked (5, 6 and their extended codes).
fn lock_not_had(code: Option<&str>) -> bool {
    matches!(
        code,
        Some("55P03" | "40P01" | "40001" | "5" | "6" | "261" | "262" | "517")
    )
}

/// One error code the API answers with: its status and what it means.
pub struct ErrorCode {
    pub code: &'static str,
    pub status: u16,
    pub means: &'static str,
}

/// Every error code, by status: the list the book shows (docs/src/reference/errors.md)
/// ([`codes_markdown`]), held to the source by a test (every code the
/// source answers with is here, and nothing else).
pub const CODES: &[ErrorCode] = &[
    ErrorCode { code: "bad_parameter", status: 400, means: "a query parameter is unknown or malformed; the message names it" },
    ErrorCode { code: "bad_body", status: 400, means: "the body is not JSON, not an object, or has a bad field; the message says which" },
    ErrorCode { code: "unauthenticated", status: 401, means: "no credentials: send `Authorization: Bearer <token>` or sign in" },
    ErrorCode { code: "invalid_token", status: 401, means: "the bearer token is not one Lifeline knows" },
    ErrorCode { code: "bad_authorization", status: 401, means: "the `Authorization` header is not `Bearer <token>`" },
    ErrorCode { code: "invalid_teleport_jwt", status: 401, means: "Teleport's app-access JWT did not verify (signature, audience, expiry or issuer)" },
    ErrorCode { code: "forbidden", status: 403, means: "the caller lacks the role this needs (`update` for changes), or a setting must be created first" },
    ErrorCode { code: "csrf", status: 403, means: "a dashboard form without its CSRF token: reload the page" },
    ErrorCode { code: "cross_site", status: 403, means: "a change from another site (its `Origin` or `Sec-Fetch-Site`)" },
    ErrorCode { code: "probe_target_not_allowed", status: 403, means: "a probe asked for a target outside the allowed list" },
    ErrorCode { code: "not_found", status: 404, means: "no such agent, proxy, incident, window, webhook or signal" },
    ErrorCode { code: "unknown_setting", status: 404, means: "no such setting; the message lists the known ones" },
    ErrorCode { code: "unknown_cluster", status: 404, means: "`cluster` names no cluster Lifeline watches; the message lists those it does" },
    ErrorCode { code: "no_route", status: 404, means: "no such path" },
    ErrorCode { code: "method_not_allowed", status: 405, means: "the path exists; the method does not" },
    ErrorCode { code: "not_connected", status: 409, means: "the agent holds no signal stream to Lifeline" },
    ErrorCode { code: "no_such_tunnel", status: 409, means: "the agent holds no tunnel to that proxy" },
    ErrorCode { code: "no_destination", status: 409, means: "the agent has no live proxy it is not already on: a reconnect cannot move it; it waits for one" },
    ErrorCode { code: "restart_would_not_help", status: 409, means: "a sidecar restarts this agent, and a restart would not help it now" },
    ErrorCode { code: "restarts_failing", status: 409, means: "automatic restarts wait: the last ones did not bring their agents back" },
    ErrorCode { code: "already_exists", status: 409, means: "the setting exists; pass `force`" },
    ErrorCode { code: "managed_by_config_file", status: 409, means: "the setting comes from the config file; change it there (or `force` and `confirm`)" },
    ErrorCode { code: "already_over", status: 409, means: "the maintenance window has already ended" },
    ErrorCode { code: "already_deleted", status: 409, means: "the maintenance window was deleted" },
    ErrorCode { code: "never_active", status: 409, means: "the maintenance window would end before it starts" },
    ErrorCode { code: "too_many_windows", status: 409, means: "as many maintenance windows as Lifeline enforces are scheduled or active" },
    ErrorCode { code: "body_too_large", status: 413, means: "the body is larger than `server.max_body_bytes`" },
    ErrorCode { code: "rate_limited", status: 429, means: "this agent was asked to reconnect too recently; `Retry-After` says when" },
    ErrorCode { code: "restarts_in_flight", status: 429, means: "as many restarts as the cap allows are under way; `Retry-After` says when to try" },
    ErrorCode { code: "too_many_streams_from_ip", status: 429, means: "this address holds as many live dashboard streams as it may" },
    ErrorCode { code: "internal", status: 500, means: "a fault in Lifeline; the detail is logged, never returned" },
    ErrorCode { code: "unavailable", status: 503, means: "Lifeline is stopping" },
    ErrorCode { code: "busy", status: 503, means: "the fleet, a database connection or a database lock did not answer in time: retry" },
    ErrorCode { code: "not_leader", status: 503, means: "no replica leads now, so no signal can be sent: retry" },
    ErrorCode { code: "paused", status: 503, means: "automatic signals are paused (the storm guard); the message says why" },
    ErrorCode { code: "too_many_streams", status: 503, means: "the dashboard's live streams are at their cap" },
];

/// [`CODES`] as a Markdown table, as the docs carry it.
pub fn codes_markdown() -> String {
    let mut out = String::from("| status | code | means |\n|---|---|---|\n");
    for c in CODES {
        out.push_str(&format!("| {} | `{}` | {} |\n", c.status, c.code, c.means));
    }
    out
}

impl From<crate::fleet::FleetError> for ApiError {
    fn from(e: crate::fleet::FleetError) -> Self {
        match e {
            crate::fleet::FleetError::Stopped => ApiError::FleetGone,
            crate::fleet::FleetError::Busy(_) => ApiError::busy("the fleet did not answer"),
        }
    }
}

/// How long a request waits for the fleet or a database connection before
/// it is answered 503 `busy` (the pool's acquire timeout, for both).
pub const READ_TIMEOUT: std::time::Duration = crate::store::ACQUIRE_TIMEOUT;

impl ApiError {
    /// 503 `busy`: `what` did not happen within [`READ_TIMEOUT`].
    fn busy(what: &str) -> ApiError {
        ApiError::Busy {
            code: "busy",
            message: format!(
                "Lifeline is busy: {what} within {}; try again",
                humantime::format_duration(READ_TIMEOUT)
            ),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadParameter(_) => StatusCode::BAD_REQUEST,
            ApiError::NotFound { .. }
            | ApiError::NoRoute(_)
            | ApiError::NotFoundSetting { .. }
            | ApiError::UnknownCluster { .. } => StatusCode::NOT_FOUND,
            ApiError::BadBody(_) => StatusCode::BAD_REQUEST,
            ApiError::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            ApiError::Conflict { .. } => StatusCode::CONFLICT,
            ApiError::Forbidden { .. } => StatusCode::FORBIDDEN,
            ApiError::Busy { .. } => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unauthorized { .. } => StatusCode::UNAUTHORIZED,
            ApiError::TooMany { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::FleetGone => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Render => StatusCode::INTERNAL_SERVER_ERROR,
            ApiError::Db(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    pub fn code(&self) -> &'static str {
        match self {
            ApiError::BadParameter(_) => "bad_parameter",
            ApiError::NotFound { .. } => "not_found",
            ApiError::NoRoute(_) => "no_route",
            ApiError::NotFoundSetting { .. } => "unknown_setting",
            ApiError::UnknownCluster { .. } => "unknown_cluster",
            ApiError::BadBody(_) => "bad_body",
            ApiError::MethodNotAllowed { .. } => "method_not_allowed",
            ApiError::Conflict { code, .. } => code,
            ApiError::Forbidden { code, .. } => code,
            ApiError::Busy { code, .. } => code,
            ApiError::Unauthorized { code, .. } => code,
            ApiError::TooMany { code, .. } => code,
            ApiError::TooLarge(_) => "body_too_large",
            ApiError::FleetGone => "unavailable",
            ApiError::Render => "internal",
            ApiError::Db(_) => "internal",
        }
    }
}

impl ApiError {
    /// `WWW-Authenticate` on a 401, `Retry-After` on a 429.
    pub fn add_headers(&self, h: &mut axum::http::HeaderMap) {
        use axum::http::{header, HeaderValue};
        match self {
            ApiError::Unauthorized { .. } => {
                h.insert(
                    header::WWW_AUTHENTICATE,
                    HeaderValue::from_static("Bearer realm=\"lifeline\""),
                );
            }
            ApiError::TooMany { retry_after, .. } => {
                h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after));
            }
            _ => {}
        }
    }
}

impl From<crate::settings::SettingsError> for ApiError {
    fn from(e: crate::settings::SettingsError) -> Self {
        use crate::settings::SettingsError as E;
        let message = e.to_string();
        match e {
            E::Unknown(name) => ApiError::NotFoundSetting { name, message },
            E::Invalid { .. } => ApiError::BadBody(message),
            E::AlreadyExists { .. } => ApiError::Conflict {
                code: "already_exists",
                message,
            },
            E::ManagedByConfigFile { .. } | E::RmManagedByConfigFile { .. } => ApiError::Conflict {
                code: "managed_by_config_file",
                message,
            },
            E::NeedsCreate { .. } | E::ShortenNeedsCreate { .. } => ApiError::Forbidden {
                code: "forbidden",
                message,
            },
            E::Db(e) => ApiError::from(e),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Db(e) = &self {
            error!(error = %e, "database query failed");
        }
        let body = json!({"error": {"code": self.code(), "message": self.to_string()}});
        let mut r = (self.status(), Json(body)).into_response();
        self.add_headers(r.headers_mut());
        r
    }
}

pub async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NoRoute(uri.path().to_string())
}

pub async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: clip(uri.path()),
    }
}

/// Every error's body: `{"error": {"code", "message"}}`.
#[derive(serde::Serialize, utoipa::ToSchema)]
#[schema(example = json!({"error": {"code": "bad_parameter", "message": "limit must be between 1 and 1000, got 0"}}))]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(serde::Serialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable: `bad_parameter`, `bad_body`, `not_found`,
    /// `no_route`, `method_not_allowed`, `unknown_setting`,
    /// `unauthenticated`, `invalid_token`, `bad_authorization`,
    /// `forbidden`, `not_connected`, `no_such_tunnel`, `already_exists`,
    /// `managed_by_config_file`, `rate_limited`, `body_too_large`, `busy`,
    /// `unavailable`, `internal`.
    pub code: String,
    /// What went wrong, in words that say what to do.
    pub message: String,
}

/// `Query<T>` whose rejection is our JSON error (unknown or malformed
/// parameters are a 400 that names the parameter).
pub struct ApiQuery<T>(pub T);

impl<S, T> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(v)) => Ok(ApiQuery(v)),
            Err(e) => Err(ApiError::BadParameter(
                e.body_text()
                    .replace("Failed to deserialize query string: ", "invalid query: "),
            )),
        }
    }
}

/// `Json<T>` whose rejection is our JSON error: a body that is not JSON, not
/// an object, or not the expected shape, is a 400 that says what is wrong.
/// (An object only: serde would read a struct from an array too.)
pub struct ApiJson<T>(pub T);

/// A request body's JSON as `T`, which must come as an object.
pub fn object_body<T: DeserializeOwned>(v: serde_json::Value) -> Result<T, ApiError> {
    if !v.is_object() {
        return Err(ApiError::BadBody(format!(
            "invalid JSON body: expected an object, got {}",
            clip(&v.to_string())
        )));
    }
    serde_json::from_value(v).map_err(|e| ApiError::BadBody(format!("invalid JSON body: {e}")))
}

impl<S, T> axum::extract::FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<serde_json::Value>::from_request(req, state).await {
            Ok(Json(v)) => object_body(v).map(ApiJson),
            // The limit's message is filled in by `http::body_limit`.
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => Err(ApiError::TooLarge(0)),
            Err(e) => Err(ApiError::BadBody(format!(
                "invalid JSON body: {}",
                e.body_text()
            ))),
        }
    }
}

/// A caller's value, cut to a length fit for an error message.
pub(crate) fn clip(v: &str) -> String {
    const MAX: usize = 64;
    match v.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &v[..i]),
        None => v.to_string(),
    }
}

/// A text parameter: absent, or not empty (a 400 that names it), cleaned.
pub fn nonempty(name: &str, v: Option<String>) -> Result<Option<String>, ApiError> {
    match v {
        Some(s) if s.is_empty() => Err(ApiError::BadParameter(format!("{name} must not be empty"))),
        // A name holding a NUL or another control character names nothing
        // Lifeline holds (such names are refused where they enter), and
        // PostgreSQL refuses a NUL in text: it is looked up cleaned, which
        // finds nothing, instead of reaching the database raw.
        Some(s) => Ok(Some(crate::domain::text::clean_owned(s))),
        None => Ok(None),
    }
}
