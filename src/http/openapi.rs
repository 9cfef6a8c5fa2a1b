//! The REST API's contract: an OpenAPI 3.1 document built from the
//! handlers' own `#[utoipa::path]` annotations and types, and served at
//! `/api/v1/openapi.json`. The `/api/v1` routes are registered through
//! `utoipa-axum` with those same annotations, so a route cannot be served
//! without being documented, nor documented without being served.
//!
//! Here: the document's frame (info, the bearer scheme, tags) and its
//! assembly. Each operation lives by its handler; what they share is in
//! `contract`.

use std::sync::OnceLock;

use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::OpenApi as Document;
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::contract::ReadErrors;
use super::error::ErrorBody;
use super::AppState;

pub const PATH: &str = "/api/v1/openapi.json";

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Lifeline",
        description = "Finds agents stranded by unhealthy auth servers or proxies, says why, and moves them. Reads are open unless `access.read_requires_token` is set; every mutation needs `Authorization: Bearer <API token>` with the role it names. Every error is `{\"error\": {\"code\", \"message\"}}`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    modifiers(&Bearer),
    // What only parameters name (the derive registers bodies' schemas).
    components(schemas(
        ErrorBody,
        super::error::ErrorDetail,
        crate::settings::Name,
        crate::notify::webhook::WebhookEvent
    )),
    tags(
        (name = "fleet", description = "Current state: agents, proxies, auth servers, TTL windows."),
        (name = "history", description = "What happened: episodes and heartbeat, health and rejection events."),
        (name = "signals", description = "Manual reconnects and the audit of every signal."),
        (name = "settings", description = "Dynamic settings (RFD 0016), with their origin and history."),
        (name = "maintenance", description = "Maintenance windows: what is planned, so the strandings it explains are shown, not acted on or notified."),
        (name = "notify", description = "Webhooks and their delivery logs; the bodies Lifeline posts to them are under `webhooks`."),
        (name = "meta", description = "This document."),
    )
)]
struct Frame;

/// The `bearer` security scheme: an API token from `[[access.tokens]]`.
struct Bearer;

impl Modify for Bearer {
    fn modify(&self, doc: &mut Document) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API token (`lifeline token new`), hashed in `[[access.tokens]]`.",
                    ))
                    .build(),
            ),
        );
    }
}

/// The document as served: built with the router, once per process (it
/// is the same for every Lifeline).
static DOC: OnceLock<String> = OnceLock::new();

/// The whole `/api/v1` surface: the routes and their document, together.
fn api() -> (axum::Router<AppState>, Document) {
    OpenApiRouter::with_openapi(Frame::openapi())
        .merge(super::api::router())
        .merge(super::clusters::router())
        .merge(super::settings::router())
        .merge(super::signals::router())
        .merge(super::incidents::router())
        .merge(super::notify::router())
        .merge(super::maintenance::router())
        .routes(routes!(document))
        .split_for_parts()
}

/// The `/api/v1` routes; their document is kept for `GET /api/v1/openapi.json`.
pub fn router() -> axum::Router<AppState> {
    let (router, doc) = api();
    DOC.get_or_init(|| {
        let mut doc = serde_json::to_value(&doc).unwrap_or_default();
        per_setting(&mut doc);
        if let Some(serde_json::Value::Object(req)) =
            doc.pointer_mut("/components/schemas/WindowRequest")
        {
            if let serde_json::Value::Object(rule) = crate::maintenance::all_rule() {
                req.extend(rule);
            }
        }
        super::notify::document_webhooks(&mut doc);
        serde_json::to_string_pretty(&doc).unwrap_or_else(|_| "{}".into())
    });
    router
}

/// Settings are a fixed set whose values differ in kind (a flag, a share,
/// a duration, a policy), and a schema cannot tie a body to a path
/// parameter's value. So `/api/v1/settings/{name}`, served for every
/// setting, is documented once per setting at its own path, with that
/// setting's value schema (`contract::setting_body`).
fn per_setting(doc: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else {
        return;
    };
    let Some(item) = paths.remove(super::settings::ONE) else {
        return;
    };
    for name in crate::settings::Name::ALL {
        let mut item = item.clone();
        for (method, op) in item.as_object_mut().into_iter().flatten() {
            let Some(op) = op.as_object_mut() else {
                continue;
            };
            if let Some(Value::Array(params)) = op.get_mut("parameters") {
                params.retain(|p| p["in"] != "path");
                if params.is_empty() {
                    op.remove("parameters");
                }
            }
            if let Some(Value::String(id)) = op.get_mut("operationId") {
                *id = format!("{id}_{}", name.as_str());
            }
            let about = format!("`{}`: {}.", name.as_str(), name.describe());
            match op.get_mut("description") {
                Some(Value::String(d)) => *d = format!("{d}\n\n{about}"),
                _ => {
                    op.insert("description".into(), about.into());
                }
            }
            if method == "put" {
                op["requestBody"]["content"]["application/json"]["schema"] =
                    super::contract::setting_body(name);
            }
        }
        paths.insert(format!("/api/v1/settings/{}", name.as_str()), item);
    }
    if let Some(Value::Object(schemas)) = doc.pointer_mut("/components/schemas") {
        schemas.remove("PutBody");
    }
}

/// This document.
#[utoipa::path(
    get,
    path = "/api/v1/openapi.json",
    tag = "meta",
    operation_id = "openapi",
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The OpenAPI 3.1 document of `/api/v1`.", content_type = "application/json", body = Object),
        ReadErrors,
    )
)]
async fn document() -> Response {
    let doc = DOC.get().map_or("{}", String::as_str);
    ([(header::CONTENT_TYPE, "application/json")], doc).into_response()
}
