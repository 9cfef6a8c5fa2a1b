//! The dashboard's pages (GET), one file each. Each handler asks the fleet
//! one named question, then the store, then fills a view-model of
//! preformatted strings for its template. Shared here: row models and
//! their builders, paging helpers.

mod agent;
mod agents;
mod auth;
mod confirm;
mod incidents;
mod maintenance;
mod overview;
mod settings;
mod signals;
mod ttl;
mod webhooks;

pub use agent::agent;
pub use agents::agents;
pub use auth::auth;
pub use confirm::confirm_stranded;
pub use incidents::{incident, incidents};
pub use maintenance::{maintenance, refused_maintenance, Declare};
pub use overview::{overview, overview_model, OverviewLive};
pub use settings::settings;
pub use signals::signals;
pub use ttl::ttl;
pub use webhooks::webhooks;

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::fmt::{self, agent_href, enc};
use super::incident_svg::{self, Strip};
use super::ttl_svg::{self, Svg};
use super::{Ctx, Layout, UiError, UiQuery};
use crate::clock::Ts;
use crate::domain::{AgentState, CauseKind, Kind, Outcome};
use crate::fleet::published::Published;
use crate::fleet::view::{self, AgentFilter, AgentItem, RootCause};
use crate::fleet::AgentList;
use crate::fleet::WatchState;
use crate::http::error::ApiError;
use crate::http::paged::{id_cursor, name_cursor};
use crate::http::signals::{select, signal_filter};
use crate::http::AppState;
use crate::store::read::{self, EpisodeFilter};
use crate::store::signals::{self as audit, SignalFilter, SignalRecord};

pub const OVERVIEW_SIGNALS: usize = 8;
pub const PAGE_DEFAULT: usize = 50;
pub const PAGE_MAX: usize = 500;

// ---------------------------------------------------------------- models

pub struct Counts {
    pub total: usize,
    pub healthy: usize,
    pub degraded: usize,
    pub stranded: usize,
    pub planned: usize,
    pub proxies_live: usize,
    pub proxies_total: usize,
    pub connected: usize,
    /// Degraded or stranded (unplanned) with no live proxy to move to.
    pub waiting: usize,
    /// Of the connected, sidecars that restart their agent, and how many
    /// of those restarts are awaiting their agent now.
    pub sidecars: usize,
    pub restarting: usize,
    /// Sidecars here in dry run: they refuse every restart, by design.
    pub dry_run: usize,
}

pub struct Banner {
    pub title: String,
    pub text: String,
}

pub struct SignalRow {
    pub id: i64,
    pub agent: String,
    pub agent_href: String,
    pub kind: &'static str,
    pub proxy: String,
    pub reason: String,
    pub by: String,
    pub at: String,
    pub ago: String,
    pub outcome: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
    pub latency: String,
    pub detail: String,
    pub pending: bool,
}

pub struct TunnelChip {
    pub proxy: String,
    pub state: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
}

pub struct SignalBrief {
    pub id: i64,
    pub outcome: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
    pub ago: String,
}

pub struct AgentRow {
    pub name: String,
    pub href: String,
    pub state: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
    pub reasons: String,
    pub since: String,
    pub tunnels: Vec<TunnelChip>,
    pub last_signal: Option<SignalBrief>,
    pub connected: bool,
    pub auth_server: String,
    /// No live proxy it is not already on: a Reconnect cannot help yet.
    pub waiting: bool,
}

// ---------------------------------------------------------------- builders

pub fn signal_row(now: Ts, r: SignalRecord) -> SignalRow {
    let (icon, class) = fmt::outcome(r.outcome);
    SignalRow {
        id: r.id,
        agent_href: agent_href(&r.agent),
        // A reconnect a sidecar carries out as its agent's restart.
        kind: if r.restart {
            "reconnect ↻ restart"
        } else {
            r.kind.as_str()
        },
        proxy: r.proxy,
        reason: r.reason,
        by: r.requested_by,
        at: fmt::hms(r.created),
        ago: fmt::ago(now, r.created),
        pending: matches!(r.outcome, Outcome::Pending | Outcome::Delivered),
        icon,
        class,
        latency: r
            .latency_ms
            .map(|l| format!("{l:.1} ms"))
            .unwrap_or_default(),
        detail: r.detail,
        outcome: r.outcome.as_str(),
        agent: r.agent,
    }
}

/// A plan in words: "planned: maintenance window 3".
pub(super) fn planned_words(p: crate::domain::Planned) -> String {
    match p.window {
        Some(id) => format!("planned: maintenance window {id}"),
        None => format!("planned: {}", p.kind),
    }
}

fn agent_row(now: Ts, a: AgentItem, last: Option<&SignalRecord>, connected: bool) -> AgentRow {
    AgentRow {
        waiting: a.waiting_for_live_proxy,
        href: agent_href(&a.name),
        state: a.state.as_str(),
        icon: fmt::state_icon(a.state),
        class: fmt::state_class(a.state),
        reasons: {
            let r = a.reasons.join().replace(',', ", ");
            match a.cause.as_ref().and_then(|c| c.planned) {
                Some(p) => format!("{r} · {}", planned_words(p)),
                None => r,
            }
        },
        since: if a.state == AgentState::Healthy {
            String::new()
        } else {
            format!("{} ({})", fmt::hms(a.since), fmt::ago(now, a.since))
        },
        tunnels: a
            .tunnels
            .iter()
            .map(|t| {
                let (icon, class) = fmt::proxy_state(t.proxy_state);
                TunnelChip {
                    proxy: t.proxy.clone(),
                    state: t.proxy_state,
                    icon,
                    class,
                }
            })
            .collect(),
        last_signal: last.map(|r| {
            let (icon, class) = fmt::outcome(r.outcome);
            SignalBrief {
                id: r.id,
                outcome: r.outcome.as_str(),
                icon,
                class,
                ago: fmt::ago(now, r.created),
            }
        }),
        connected,
        auth_server: a.auth_server,
        name: a.name,
    }
}

/// Turns a page of agents into rows, looking up their last signals.
async fn agent_rows(
    st: &AppState,
    now: Ts,
    items: Vec<AgentItem>,
    last: Vec<Option<i64>>,
) -> Result<Vec<AgentRow>, UiError> {
    let ids: Vec<i64> = last.iter().flatten().copied().collect();
    let recs: HashMap<i64, SignalRecord> = audit::by_ids(&st.db, &ids)
        .await?
        .into_iter()
        .map(|r| (r.id, r))
        .collect();
    Ok(items
        .into_iter()
        .zip(last)
        .map(|(a, id)| {
            let connected = st.hub.reachable(&a.name);
            agent_row(now, a, id.and_then(|i| recs.get(&i)), connected)
        })
        .collect())
}

// ---------------------------------------------------------------- helpers

/// An optional form field: empty means absent.
fn field(v: Option<String>) -> Option<String> {
    v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

fn page_limit(v: Option<String>) -> Result<usize, ApiError> {
    match field(v) {
        None => Ok(PAGE_DEFAULT),
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=PAGE_MAX).contains(n))
            .ok_or_else(|| {
                ApiError::BadParameter(format!(
                    "limit must be a number between 1 and {PAGE_MAX}, got {s:?}"
                ))
            }),
    }
}

/// A query string from the non-empty pairs.
fn qs(pairs: &[(&str, &Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", enc(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

pub struct AuthChip {
    pub name: String,
    pub anchor: String,
    pub health: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
    pub since: String,
    pub agents: usize,
    pub strands: bool,
    pub mode: &'static str,
    pub detail: String,
    pub addr: String,
}

pub(super) fn auth_chips(now: Ts, auths: Vec<view::AuthView>) -> Vec<AuthChip> {
    auths
        .into_iter()
        .map(|a| AuthChip {
            anchor: format!("auth-{}", enc(&a.name)),
            health: a.health.as_str(),
            icon: fmt::health_icon(a.health),
            class: fmt::health_class(a.health),
            since: format!("since {} ({})", fmt::hms(a.since), fmt::ago(now, a.since)),
            agents: a.agents,
            strands: a.strands_agents,
            mode: match a.evidence {
                "heartbeat" => "evidence: its heartbeat (health not watched)",
                "health_poll" => "evidence: health, polled with Check",
                _ => "evidence: health, a Watch stream",
            },
            detail: a.detail,
            addr: a.addr,
            name: a.name,
        })
        .collect()
}

/// Minutes as the page says them: "0 min", "12.5 min", "3.2 h".
pub(super) fn minutes_text(m: f64) -> String {
    if m >= 120.0 {
        format!("{:.1} h", m / 60.0)
    } else if m >= 10.0 || m == 0.0 {
        format!("{m:.0} min")
    } else {
        format!("{m:.1} min")
    }
}

/// The starts of the last 7 and the last 30 days before `now`: the windows
/// minutes stranded are shown for.
pub(super) fn week_month(now: Ts) -> (Ts, Ts) {
    let days = |n: u64| now.saturating_sub(std::time::Duration::from_secs(n * 86_400));
    (days(7), days(30))
}
