//! Each webhook's delivery log.

use super::*;
use crate::store::outbox::{self, DeliveryOutcome};

/// Deliveries shown per webhook.
const ROWS: u32 = 50;

pub struct DeliveryRow {
    event: i64,
    kind: String,
    outcome: &'static str,
    class: &'static str,
    status: String,
    latency: String,
    attempts: u32,
    ago: String,
    error: String,
}

pub struct HookView {
    name: String,
    format: &'static str,
    events: String,
    rows: Vec<DeliveryRow>,
}

#[derive(Template)]
#[template(path = "webhooks.html")]
pub struct WebhooksPage {
    layout: Layout,
    hooks: Vec<HookView>,
}

pub async fn webhooks(State(st): State<AppState>, ctx: Ctx) -> Result<Response, UiError> {
    let now = st.fleet.recent().await?.at();
    let mut hooks = Vec::with_capacity(st.webhooks.len());
    for w in st.webhooks.iter() {
        let log = outbox::deliveries(&st.db, &w.name, None, ROWS).await?;
        let all = w.events.len() == crate::domain::NoticeKind::ALL.len();
        hooks.push(HookView {
            name: w.name.clone(),
            format: w.format,
            events: if all {
                "every event".into()
            } else {
                w.events
                    .iter()
                    .map(|k| k.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            },
            rows: log
                .into_iter()
                .map(|d| DeliveryRow {
                    event: d.event_id,
                    kind: d.kind,
                    outcome: d.outcome.as_str(),
                    class: match d.outcome {
                        DeliveryOutcome::Delivered => "ok",
                        DeliveryOutcome::Retrying => "warn",
                        DeliveryOutcome::Dropped => "bad",
                    },
                    status: d.status.map_or_else(|| "—".into(), |s| s.to_string()),
                    latency: d
                        .latency_ms
                        .map_or_else(|| "—".into(), |ms| fmt::ms(ms.round() as i64)),
                    attempts: d.attempts,
                    ago: fmt::ago(now, d.at),
                    error: d.error.unwrap_or_default(),
                })
                .collect(),
        });
    }
    Ok(ctx.render(
        StatusCode::OK,
        &WebhooksPage {
            layout: ctx.layout(&st, "webhooks", "Webhooks · Lifeline".into()),
            hooks,
        },
    ))
}
