//! `/api/v1/webhooks`: the webhooks Lifeline delivers to (by name: their
//! URLs and secrets are never shown) and each one's delivery log.

use axum::extract::{Path, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::contract::{ReadErrors, ReadOneErrors};
use super::error::ApiError;
use super::paged::{ById, IdPage, Listed, Page};
use super::AppState;
use crate::config::{WebhookConfig, WebhookFormat};
use crate::domain::NoticeKind;
use crate::store::outbox::{self, Delivery};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(deliveries))
}

/// A webhook as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct WebhookInfo {
    pub name: String,
    /// `json` or `slack`.
    pub format: &'static str,
    /// The events it is sent.
    pub events: Vec<NoticeKind>,
}

impl From<&WebhookConfig> for WebhookInfo {
    fn from(w: &WebhookConfig) -> Self {
        WebhookInfo {
            name: w.name.clone(),
            format: match w.format {
                WebhookFormat::Json => "json",
                WebhookFormat::Slack => "slack",
            },
            events: if w.events.is_empty() {
                NoticeKind::ALL.to_vec()
            } else {
                w.events.clone()
            },
        }
    }
}

#[derive(Serialize, utoipa::ToSchema)]
struct Webhooks {
    items: Vec<WebhookInfo>,
}

/// The webhooks configured (`[[notify.webhooks]]`).
#[utoipa::path(
    get,
    path = "/api/v1/webhooks",
    tag = "notify",
    operation_id = "list_webhooks",
    security((), ("bearer" = [])),
    responses((status = 200, description = "Every webhook, by name.", body = Webhooks), ReadErrors)
)]
async fn list(State(s): State<AppState>) -> Json<Webhooks> {
    Json(Webhooks {
        items: s.webhooks.to_vec(),
    })
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct NoFilters {}

/// One webhook's delivery log, newest event first: each event's outcome
/// (delivered, retrying, dropped), the receiver's last status, the last
/// attempt's latency and the attempts made.
#[utoipa::path(
    get,
    path = "/api/v1/webhooks/{name}/deliveries",
    tag = "notify",
    operation_id = "webhook_deliveries",
    params(("name" = String, Path, description = "The webhook's name."), IdPage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of deliveries.", body = Page<Delivery>), ReadOneErrors)
)]
async fn deliveries(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Listed(_, page): Listed<NoFilters, ById>,
) -> Result<Json<Page<Delivery>>, ApiError> {
    if !s.webhooks.iter().any(|w| w.name == name) {
        return Err(ApiError::NotFound {
            what: "webhook",
            name: crate::http::error::clip(&name),
        });
    }
    let items = outbox::deliveries(&s.db, &name, page.cursor, page.limit).await?;
    Ok(Json(Page::by_id(items, page.limit, |d| d.event_id)))
}

/// The document's `webhooks` (OpenAPI 3.1): one entry per event kind, each
/// a POST of a [`WebhookEvent`] with its signature header.
pub fn document_webhooks(doc: &mut serde_json::Value) {
    use serde_json::json;
    let mut hooks = serde_json::Map::new();
    for k in NoticeKind::ALL {
        hooks.insert(
            k.as_str().to_string(),
            json!({"post": {
                "operationId": format!("webhook_{}", k.as_str().replace('.', "_")),
                "summary": format!("`{}`, posted to each `[[notify.webhooks]]` that takes it.", k.as_str()),
                "parameters": [
                    {"name": crate::notify::sign::HEADER, "in": "header", "required": true,
                     "description": "t=<unix seconds>,v1=<hex HMAC-SHA256 of \"<t>.<body>\" under the webhook's secret>",
                     "schema": {"type": "string"}},
                    {"name": "X-Lifeline-Event", "in": "header", "required": true, "schema": {"type": "string"}},
                    {"name": "X-Lifeline-Delivery", "in": "header", "required": true,
                     "description": "The event's id.", "schema": {"type": "string"}}
                ],
                "requestBody": {"required": true, "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/WebhookEvent"}}}},
                "responses": {"2XX": {"description": "Taken. Any other answer, or none, is retried with backoff until the webhook's max_age."}}
            }}),
        );
    }
    if let Some(o) = doc.as_object_mut() {
        o.insert("webhooks".into(), serde_json::Value::Object(hooks));
    }
}
