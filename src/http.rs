//! The HTTP room: REST API (`/api/v1`), the dashboard (`/`, `ui`), and the
//! probes (`/healthz`, `/readyz`), on one axum router.
//!
//! Owns: request parsing, validation of parameters, JSON and HTML rendering.
//! Reads fleet state through `FleetHandle::read` (a closure run by the fleet
//! actor) and history straight from SQLite (read-only queries).
//! Signals are asked of the hub, which records them before answering.
//! Must not touch: fleet state directly, or write to SQLite.

pub mod api;
pub mod auth;
pub mod caller;
pub mod clusters;
pub mod contract;
pub mod error;
pub mod incidents;
pub mod maintenance;
pub mod metrics;
pub mod notify;
pub mod openapi;
pub mod paged;
pub mod probes;
pub mod settings;
pub mod signals;
pub mod ui;

use std::sync::Arc;

use crate::store::Db;
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::Router;
use tower_http::compression::CompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::access::Access;
use crate::config::ProbesConfig;
use crate::fleet::FleetHandle;
use crate::settings::Settings;
use crate::signals::dispatch::Dispatch;
use crate::signals::hub::Hub;
use crate::signals::reconnect::Guard;
use crate::stats::Stats;

/// What every handler gets.
#[derive(Clone)]
pub struct AppState {
    pub fleet: FleetHandle,
    pub ui: Arc<ui::UiShared>,
    /// Fires when Lifeline stops: long-lived responses (live streams) end.
    pub shutdown: tokio_util::sync::CancellationToken,
    pub db: Db,
    pub stats: Arc<Stats>,
    pub hub: Arc<Hub>,
    /// The one door of every signal.
    pub dispatch: Arc<Dispatch>,
    pub guard: tokio::sync::watch::Receiver<Guard>,
    pub access: Arc<Access>,
    pub settings: Arc<Settings>,
    pub probes: Arc<ProbesConfig>,
    /// Answer with `Connection: close` while not ready.
    pub http_close_unhealthy: bool,
    pub max_body_bytes: usize,
    /// A critical task that stopped (the process is on its way out).
    pub failure: crate::supervise::FailureWatch,
    pub store_health: Arc<crate::store::health::StoreHealth>,
    /// What became of the spans this process exported.
    pub spans: Arc<crate::telemetry::SpanCounters>,
    /// Served over TLS: every response carries HSTS, every cookie `Secure`.
    pub tls: bool,
    /// The webhooks configured, as the API and the dashboard show them.
    pub webhooks: Arc<[notify::WebhookInfo]>,
    pub maintenance: Arc<crate::maintenance::Maintenance>,
    /// The clusters configured, as the API names them.
    pub clusters: Arc<[clusters::ClusterInfo]>,
}

/// The rooms the HTTP edge reads and acts through.
pub struct Rooms {
    pub fleet: FleetHandle,
    pub db: Db,
    pub dispatch: Arc<Dispatch>,
    pub access: Arc<Access>,
    pub settings: Arc<Settings>,
    pub store_health: Arc<crate::store::health::StoreHealth>,
    pub spans: Arc<crate::telemetry::SpanCounters>,
    pub maintenance: Arc<crate::maintenance::Maintenance>,
    /// What the dashboard signs its forms with.
    pub keys: crate::access::SigningKeys,
}

/// Serves the API, the dashboard, the probes and `/metrics` on `listener`
/// as `[server]` says (TLS with `tls`), a critical task on `rt`, with the
/// live overview's feed beside it; and, on `admin` (`server.admin_listen`),
/// the probes and `/metrics` alone, under a cap of their own, so that
/// kubelet and Prometheus are answered whatever holds the main port.
pub fn start(
    cfg: &crate::config::Config,
    (listener, addr): (tokio::net::TcpListener, std::net::SocketAddr),
    admin: Option<(tokio::net::TcpListener, std::net::SocketAddr)>,
    tls: Option<&crate::tls::ServerTls>,
    rooms: Rooms,
    rt: &mut crate::supervise::Runtime,
) {
    let state = AppState {
        fleet: rooms.fleet.with_read_timeout(error::READ_TIMEOUT),
        ui: Arc::new(ui::UiShared::new(
            cfg.server.max_live_streams,
            cfg.server.max_live_streams_per_ip,
            rooms.keys.csrf,
        )),
        access: rooms.access,
        settings: rooms.settings,
        probes: Arc::new(cfg.probes.clone()),
        http_close_unhealthy: cfg.server.http_close_unhealthy,
        max_body_bytes: cfg.server.max_body_bytes,
        shutdown: rt.shutdown.clone(),
        db: rooms.db,
        stats: rt.stats.clone(),
        hub: rooms.dispatch.hub().clone(),
        guard: rooms.dispatch.guard().subscribe(),
        dispatch: rooms.dispatch,
        failure: rt.tasks.failure(),
        store_health: rooms.store_health,
        spans: rooms.spans,
        tls: tls.is_some(),
        webhooks: cfg
            .notify
            .webhooks
            .iter()
            .map(notify::WebhookInfo::from)
            .collect(),
        maintenance: rooms.maintenance,
        clusters: clusters::ClusterInfo::all(cfg).into(),
    };
    rt.tasks
        .track("live overview", ui::live::spawn(state.clone()));
    use crate::tls::held::Bounds;
    let (stats, stop) = (rt.stats.clone(), rt.shutdown.clone());
    if let Some((listener, addr)) = admin {
        let served = crate::tls::serve::http(
            listener,
            addr,
            tls,
            admin_router(state.clone()),
            Bounds::admin(&cfg.server),
            stats.clone(),
            stop.clone(),
        );
        rt.tasks.critical("admin server", served);
    }
    let served = crate::tls::serve::http(
        listener,
        addr,
        tls,
        router(state),
        Bounds::of(&cfg.server),
        stats,
        stop,
    );
    rt.tasks.critical("http server", served);
}

/// Everything: the API, the dashboard, the probes and `/metrics`.
pub fn router(state: AppState) -> Router {
    let routes = Router::new()
        .merge(openapi::router())
        .merge(probes::router())
        .merge(metrics::router())
        .merge(ui::router());
    edge(routes, state)
}

/// The admin listener's: `/healthz`, `/readyz` and `/metrics`, behind the
/// same door (`/metrics` asks for a token where reads do).
pub fn admin_router(state: AppState) -> Router {
    let routes = Router::new()
        .merge(probes::health_router())
        .merge(metrics::router());
    edge(routes, state)
}

/// `routes` behind the layers every listener puts in front: access, the
/// body limit, RFD 0226's close, HSTS, compression and tracing.
fn edge(routes: Router<AppState>, state: AppState) -> Router {
    let max_body_bytes = state.max_body_bytes;
    routes
        .fallback(error::not_found)
        .method_not_allowed_fallback(error::method_not_allowed)
        .layer(middleware::from_fn_with_state(state.clone(), auth::guard))
        .layer(RequestBodyLimitLayer::new(max_body_bytes))
        .layer(middleware::from_fn_with_state(state.clone(), body_limit))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            close_unhealthy,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            transport_security,
        ))
        .with_state(state)
        .layer(CompressionLayer::new())
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                // A 503 from /readyz is an answer, not a failure; real errors
                // are logged once where they are handled (ApiError).
                .on_failure(DefaultOnFailure::new().level(Level::DEBUG)),
        )
}

/// The value of cookie `name` in the request, if present (parsed by the
/// `cookie` crate; a malformed pair is skipped, not an error).
pub fn cookie(h: &axum::http::HeaderMap, name: &str) -> Option<String> {
    h.get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(::cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == name)
        .map(|c| c.value().to_string())
}

/// A `Set-Cookie` value for the dashboard: `Path=/`, `HttpOnly`,
/// `SameSite=Strict`, `Secure` when served over TLS; `max_age` when it
/// should outlive the browser session (zero deletes it).
pub fn set_cookie(
    name: &str,
    value: &str,
    max_age: Option<std::time::Duration>,
    secure: bool,
) -> Option<HeaderValue> {
    let mut c = ::cookie::Cookie::build((name, value))
        .path("/")
        .http_only(true)
        .secure(secure)
        .same_site(::cookie::SameSite::Strict);
    if let Some(age) = max_age {
        let secs = i64::try_from(age.as_secs()).unwrap_or(i64::MAX);
        c = c.max_age(::cookie::time::Duration::seconds(secs));
    }
    HeaderValue::from_str(&c.build().to_string()).ok()
}

/// How long browsers keep to HTTPS for this host once told (a year).
pub const HSTS: &str = "max-age=31536000";

/// Over TLS: `Strict-Transport-Security` on every response (the cookies
/// themselves are `Secure` where they are made, `set_cookie`).
async fn transport_security(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    if !st.tls {
        return r;
    }
    let h = r.headers_mut();
    h.insert(
        header::STRICT_TRANSPORT_SECURITY,
        HeaderValue::from_static(HSTS),
    );
    r
}

/// Every 413 (from the body limit layer or an extractor that hit it) as
/// our JSON error naming the limit.
async fn body_limit(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let r = next.run(req).await;
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return error::ApiError::TooLarge(st.max_body_bytes).into_response();
    }
    r
}

/// RFD 0226's HTTP rule, opt-in (`server.http_close_unhealthy`): while
/// Lifeline is not ready, every response says `Connection: close`, so a
/// client behind a load balancer opens its next connection elsewhere.
async fn close_unhealthy(State(st): State<AppState>, req: Request, next: Next) -> Response {
    let mut r = next.run(req).await;
    if st.http_close_unhealthy && !st.fleet.is_ready() {
        r.headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_are_found_by_name_and_junk_is_skipped() {
        let mut h = axum::http::HeaderMap::new();
        h.append(header::COOKIE, HeaderValue::from_static("junk; a=1; b=two"));
        h.append(header::COOKIE, HeaderValue::from_static("c=3"));
        assert_eq!(cookie(&h, "b").as_deref(), Some("two"));
        assert_eq!(cookie(&h, "c").as_deref(), Some("3"));
        assert_eq!(cookie(&h, "junk"), None);
        let set = set_cookie("s", "v", Some(std::time::Duration::from_secs(60)), false).unwrap();
        let set = set.to_str().unwrap();
        for part in ["s=v", "Path=/", "HttpOnly", "SameSite=Strict", "Max-Age=60"] {
            assert!(set.contains(part), "{set}");
        }
        assert!(!set.contains("Secure"), "{set}");
        let secure = set_cookie("s", "v", None, true).unwrap();
        assert!(secure.to_str().unwrap().contains("Secure"), "{secure:?}");
    }
}
