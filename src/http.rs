//! The HTTP room: REST API (`/api/v1`), the dashboard (`/`, `ui`), and the
//! probes (`/healthz`, `/readyz`), on one axum router.
//!
//! Owns: request parsing, validation of parameters, JSON and HTML rendering.
//! Reads fleet state through `FleetHandle::read` (a closure run by the fleet
//! actor) and history straight from SQLite (read-only queries).
//! Signals are asked of the hub, which records them before answering.
//! Must not touch: fleet state directly, or write to SQLite.

pub mod api;
pub mod error;
pub mod metrics;
pub mod probes;
pub mod signals;
pub mod ui;

use std::sync::Arc;

use axum::Router;
use sqlx::SqlitePool;
use tower_http::compression::CompressionLayer;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

use crate::fleet::FleetHandle;
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
    pub db: SqlitePool,
    pub stats: Arc<Stats>,
    pub hub: Arc<Hub>,
    pub guard: tokio::sync::watch::Receiver<Guard>,
}

pub fn router(state: AppState, max_body_bytes: usize) -> Router {
    Router::new()
        .merge(api::router())
        .merge(probes::router())
        .merge(metrics::router())
        .merge(signals::router())
        .merge(ui::router())
        .fallback(error::not_found)
        .with_state(state)
        .layer(RequestBodyLimitLayer::new(max_body_bytes))
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
