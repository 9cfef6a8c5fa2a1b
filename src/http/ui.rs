//! The server-rendered overview (`/`): counts, root causes, watcher state and
//! auth health, refreshed by the browser every few seconds. Everything shown
//! comes from the network, so everything is escaped (askama's default).
//! Static assets are compiled into the binary: it runs from any directory.

use askama::Template;
use askama_web::WebTemplate;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

use super::error::ApiError;
use super::AppState;
use crate::fleet::view::{self, AuthView, RootCause, Summary};

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/", get(overview))
        .route("/static/lifeline.css", get(css))
}

#[derive(Template, WebTemplate)]
#[template(path = "overview.html")]
struct Overview {
    s: Summary,
    causes: Vec<(RootCause, String)>,
    auths: Vec<AuthView>,
    kinds: Vec<(&'static str, String, u64)>,
}

async fn overview(State(st): State<AppState>) -> Result<Overview, ApiError> {
    let (s, auths) = st
        .fleet
        .read(|f| (view::summary(f), view::auth_servers(f)))
        .await?;
    let now = s.generated_at;
    let causes = s
        .root_causes
        .iter()
        .map(|c| {
            let ago = humantime::format_duration(std::time::Duration::from_secs(
                now.since(c.since).as_secs(),
            ))
            .to_string();
            (c.clone(), ago)
        })
        .collect();
    let kinds = s
        .watcher
        .kinds
        .iter()
        .map(|(k, st)| {
            let state = serde_json::to_value(st.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            (*k, state, st.generation)
        })
        .collect();
    Ok(Overview {
        s,
        causes,
        auths,
        kinds,
    })
}

async fn css() -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/css; charset=utf-8")],
        include_str!("../../static/lifeline.css"),
    )
}
