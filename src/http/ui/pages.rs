//! The dashboard's pages (GET). Each handler reads the fleet once (one
//! closure on the actor), then the store, then fills a view-model of
//! preformatted strings for its template.

use std::collections::HashMap;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::Deserialize;

use super::fmt::{self, agent_href, enc};
use super::ttl_svg::{self, Svg};
use super::{Ctx, Layout, UiError, UiQuery};
use crate::clock::Ts;
use crate::fleet::query::{AgentList, Overview};
use crate::fleet::view::{self, AgentFilter, AgentItem, RootCause};
use crate::fleet::WatchState;
use crate::http::api::{id_cursor, name_cursor};
use crate::http::error::ApiError;
use crate::http::signals::{select, signal_filter};
use crate::http::AppState;
use crate::model::{AgentState, CauseKind, Kind, Outcome};
use crate::store::read::{self, EpisodeFilter};
use crate::store::signals::{self as audit, SignalFilter, SignalRecord};

/// Rows of the TTL timeline on the overview (the soonest to expire).
pub const OVERVIEW_TTL_ROWS: usize = 24;
/// Stranded agents listed on the overview.
pub const OVERVIEW_STRANDED: usize = 10;
pub const OVERVIEW_SIGNALS: usize = 8;
pub const PAGE_DEFAULT: usize = 50;
pub const PAGE_MAX: usize = 500;

// ---------------------------------------------------------------- models

pub struct Counts {
    pub total: usize,
    pub healthy: usize,
    pub degraded: usize,
    pub stranded: usize,
    pub proxies_live: usize,
    pub proxies_total: usize,
    pub connected: usize,
    /// Degraded or stranded with no live proxy to move to.
    pub waiting: usize,
}

pub struct Banner {
    pub title: String,
    pub text: String,
}

pub struct CauseLine {
    pub lead: String,
    pub rest: String,
    pub href: String,
    pub at: String,
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

/// The part of the overview that the live stream re-renders.
pub struct LiveOverview {
    pub as_of: String,
    pub counts: Counts,
    pub banners: Vec<Banner>,
    pub causes: Vec<CauseLine>,
    pub auths: Vec<AuthChip>,
    pub svg: Svg,
    pub ttl_total: usize,
    pub stranded: Vec<AgentRow>,
    pub stranded_more: bool,
    pub signals: Vec<SignalRow>,
    pub auto_reconnect: &'static str,
}

// ---------------------------------------------------------------- builders

fn cause_line(now: Ts, c: &RootCause) -> CauseLine {
    let n = c.agents;
    let agents = if n == 1 { "agent" } else { "agents" };
    let r = &c.resource;
    let (lead, rest, href) = match c.cause {
        CauseKind::ProxyExpired => (
            format!("{n} {agents} stranded:"),
            format!("{r} expired {}", fmt::ago(now, c.since)),
            format!("/agents?state=stranded&proxy={}", enc(r)),
        ),
        CauseKind::AuthNotServing => (
            format!("{n} {agents}:"),
            format!("{r} NOT_SERVING since {}", fmt::hms(c.since)),
            format!("/agents?state=stranded&auth_server={}", enc(r)),
        ),
        CauseKind::AuthUnknown => (
            format!("{n} {agents}:"),
            format!(
                "{r} health UNKNOWN, counted unhealthy since {}",
                fmt::hms(c.since)
            ),
            format!("/agents?state=stranded&auth_server={}", enc(r)),
        ),
        CauseKind::ProxyMissing => (
            format!("{n} {agents} stranded:"),
            format!("their tunnels point at {r}, a proxy Lifeline no longer knows"),
            format!("/agents?state=stranded&proxy={}", enc(r)),
        ),
        CauseKind::TunnelExpired => (
            format!("{n} {agents} stranded:"),
            "their tunnel records expired".to_string(),
            "/agents?state=stranded".to_string(),
        ),
        CauseKind::AgentExpired => (
            format!("{n} {agents} stranded:"),
            format!(
                "their own heartbeat expired (auth server {}) {}",
                if r.is_empty() { "?" } else { r },
                fmt::ago(now, c.since)
            ),
            "/agents?state=stranded".to_string(),
        ),
        CauseKind::NoTunnels => (
            format!("{n} {agents} stranded:"),
            "no tunnels at all".to_string(),
            "/agents?state=stranded".to_string(),
        ),
    };
    CauseLine {
        lead,
        rest,
        href,
        at: c.since.rfc3339(),
    }
}

fn auth_chips(now: Ts, auths: Vec<view::AuthView>) -> Vec<AuthChip> {
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
            mode: a.mode,
            detail: a.detail,
            addr: a.addr,
            name: a.name,
        })
        .collect()
}

pub fn signal_row(now: Ts, r: SignalRecord) -> SignalRow {
    let (icon, class) = fmt::outcome(r.outcome);
    SignalRow {
        id: r.id,
        agent_href: agent_href(&r.agent),
        kind: r.kind.as_str(),
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

fn agent_row(now: Ts, a: AgentItem, last: Option<&SignalRecord>, connected: bool) -> AgentRow {
    AgentRow {
        waiting: a.waiting_for_live_proxy,
        href: agent_href(&a.name),
        state: a.state.as_str(),
        icon: fmt::state_icon(a.state),
        class: fmt::state_class(a.state),
        reasons: a.reasons.join().replace(',', ", "),
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
            let connected = st.hub.is_connected(&a.name);
            agent_row(now, a, id.and_then(|i| recs.get(&i)), connected)
        })
        .collect())
}

/// Everything the overview's live part shows. Shared by the page and the
/// live stream (one render serves every open overview).
pub async fn overview_model(st: &AppState) -> Result<LiveOverview, UiError> {
    let filter = AgentFilter {
        state: Some(AgentState::Stranded),
        limit: OVERVIEW_STRANDED,
        ..AgentFilter::default()
    };
    let Overview {
        summary,
        auth_servers: auths,
        ttl: (ttl, ttl_total),
        stranded: page,
        last_signals: last,
    } = st.fleet.overview(filter, OVERVIEW_TTL_ROWS).await?;
    let now = summary.generated_at;
    let stranded_more = page.next_cursor.is_some();
    let stranded = agent_rows(st, now, page.items, last).await?;
    let signals = audit::list(
        &st.db,
        &SignalFilter {
            limit: OVERVIEW_SIGNALS as u32,
            ..SignalFilter::default()
        },
    )
    .await?
    .into_iter()
    .map(|r| signal_row(now, r))
    .collect();

    let mut banners = Vec::new();
    for (kind, k) in &summary.watcher.kinds {
        match k.state {
            WatchState::Ready => {}
            WatchState::Rejected => banners.push(Banner {
                title: format!("The cluster cannot watch {kind}"),
                text: format!(
                    "The cluster's event source rejected the {kind} kind (since {}). Lifeline cannot see it, so nothing about it can strand an agent or be shown here.",
                    fmt::hms(k.since)
                ),
            }),
            WatchState::Stale | WatchState::Initializing => banners.push(Banner {
                title: format!(
                    "{kind} data is {}",
                    if k.state == WatchState::Stale { "stale" } else { "still loading" }
                ),
                text: format!(
                    "Since {} ({}), Lifeline has no live stream for {kind}. Agent states are frozen until the watcher resyncs: nothing expires from data Lifeline cannot trust, and automatic reconnects wait.",
                    fmt::hms(k.since),
                    fmt::ago(now, k.since)
                ),
            }),
        }
    }
    let guard = st.guard.borrow().clone();
    if guard.paused {
        banners.push(Banner {
            title: "Automatic reconnects are paused".into(),
            text: format!(
                "{}{}. Reconnect buttons and “Reconnect all stranded” still work.",
                guard
                    .reason
                    .unwrap_or_else(|| "the storm guard is on".into()),
                guard
                    .since
                    .map(|s| format!(" (since {})", fmt::hms(s)))
                    .unwrap_or_default()
            ),
        });
    }
    let set = &st.hub.settings;
    Ok(LiveOverview {
        as_of: format!("{} UTC", fmt::hms(now)),
        counts: Counts {
            total: summary.agents.total,
            healthy: summary.agents.healthy,
            degraded: summary.agents.degraded,
            stranded: summary.agents.stranded,
            proxies_live: summary.proxies.live,
            proxies_total: summary.proxies.total,
            connected: st.hub.connected(),
            waiting: summary.agents.waiting_for_live_proxy,
        },
        banners,
        causes: summary
            .root_causes
            .iter()
            .map(|c| cause_line(now, c))
            .collect(),
        auths: auth_chips(now, auths),
        svg: ttl_svg::build(&ttl, now),
        ttl_total,
        stranded,
        stranded_more,
        signals,
        auto_reconnect: if !set.auto_reconnect() {
            "off"
        } else if guard.paused {
            "paused"
        } else {
            "on"
        },
    })
}

// ---------------------------------------------------------------- overview

#[derive(Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub layout: Layout,
    pub live: LiveOverview,
}

/// The live fragment alone (what the stream sends).
#[derive(Template)]
#[template(path = "overview_live.html")]
pub struct OverviewLive {
    pub live: LiveOverview,
}

pub async fn overview(State(st): State<AppState>, ctx: Ctx) -> Result<Response, UiError> {
    let live = overview_model(&st).await?;
    let title = if live.counts.stranded > 0 {
        format!("{} stranded · Lifeline", live.counts.stranded)
    } else {
        "Lifeline".to_string()
    };
    Ok(ctx.render(
        StatusCode::OK,
        &OverviewPage {
            layout: ctx.layout(&st, "overview", title),
            live,
        },
    ))
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

// ---------------------------------------------------------------- ttl

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtlQuery {
    kind: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

#[derive(Template)]
#[template(path = "ttl.html")]
pub struct TtlPage {
    layout: Layout,
    svg: Svg,
    kind: String,
    next_href: Option<String>,
    first_href: Option<String>,
}

pub async fn ttl(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<TtlQuery>,
) -> Result<Response, UiError> {
    let kind_s = field(q.kind);
    let kind = match kind_s.as_deref() {
        None | Some("all") => None,
        Some("proxy") => Some(Kind::Proxy),
        Some("auth_server") => Some(Kind::AuthServer),
        Some("agent") => Some(Kind::Agent),
        Some(k) => {
            return Err(ApiError::BadParameter(format!(
                "kind must be proxy, auth_server or agent, got {k:?}"
            ))
            .into())
        }
    };
    let limit_s = field(q.limit.clone());
    let limit = page_limit(q.limit)?;
    let cursor = field(q.cursor);
    let c2 = name_cursor(cursor.clone())?;
    let (page, now) = st.fleet.ttl_windows(kind, c2, limit).await?;
    let kind_v = kind_s.clone();
    let next_href = page.next_cursor.as_ref().map(|c| {
        format!(
            "/ttl{}",
            qs(&[
                ("kind", &kind_v),
                ("limit", &limit_s),
                ("cursor", &Some(c.clone())),
            ])
        )
    });
    let first_href =
        cursor.map(|_| format!("/ttl{}", qs(&[("kind", &kind_v), ("limit", &limit_s)])));
    Ok(ctx.render(
        StatusCode::OK,
        &TtlPage {
            layout: ctx.layout(&st, "ttl", "TTL windows · Lifeline".into()),
            svg: ttl_svg::build(&page.items, now),
            kind: kind_s.unwrap_or_default(),
            next_href,
            first_href,
        },
    ))
}

// ---------------------------------------------------------------- agents

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsQuery {
    state: Option<String>,
    proxy: Option<String>,
    auth_server: Option<String>,
    q: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

#[derive(Template)]
#[template(path = "agents.html")]
pub struct AgentsPage {
    layout: Layout,
    rows: Vec<AgentRow>,
    state: String,
    proxy: String,
    auth_server: String,
    q: String,
    auth_names: Vec<String>,
    next_href: Option<String>,
    first_href: Option<String>,
    counts: Counts,
}

pub async fn agents(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<AgentsQuery>,
) -> Result<Response, UiError> {
    let state_s = field(q.state);
    let state = match state_s.as_deref() {
        None | Some("all") => None,
        Some(s) => Some(AgentState::parse(s).ok_or_else(|| {
            ApiError::BadParameter(format!(
                "state must be healthy, degraded or stranded, got {s:?}"
            ))
        })?),
    };
    let (proxy, auth, name_q, cursor) = (
        field(q.proxy),
        field(q.auth_server),
        field(q.q),
        field(q.cursor),
    );
    let filter = AgentFilter {
        state,
        proxy: proxy.clone(),
        auth_server: auth.clone(),
        q: name_q.clone(),
        after: name_cursor(cursor.clone())?,
        limit: page_limit(q.limit.clone())?,
    };
    let limit_s = field(q.limit);
    let AgentList {
        page,
        last_signals: last,
        counts,
        auth_servers: mut auth_names,
        at: now,
    } = st.fleet.agent_list(filter).await?;
    auth_names.sort();
    let rows = agent_rows(&st, now, page.items, last).await?;
    let pairs = |c: Option<String>| {
        qs(&[
            ("state", &state_s),
            ("proxy", &proxy),
            ("auth_server", &auth),
            ("q", &name_q),
            ("limit", &limit_s),
            ("cursor", &c),
        ])
    };
    let next_href = page
        .next_cursor
        .as_ref()
        .map(|c| format!("/agents{}", pairs(Some(c.clone()))));
    let first_href = cursor.as_ref().map(|_| format!("/agents{}", pairs(None)));
    let title = match state {
        Some(s) => format!("{} agents · Lifeline", s.as_str()),
        None => "Agents · Lifeline".into(),
    };
    Ok(ctx.render(
        StatusCode::OK,
        &AgentsPage {
            layout: ctx.layout(&st, "agents", title),
            rows,
            state: state_s.clone().unwrap_or_default(),
            proxy: proxy.clone().unwrap_or_default(),
            auth_server: auth.clone().unwrap_or_default(),
            q: name_q.clone().unwrap_or_default(),
            auth_names,
            next_href,
            first_href,
            counts: Counts {
                total: counts.total,
                healthy: counts.healthy,
                degraded: counts.degraded,
                stranded: counts.stranded,
                proxies_live: 0,
                proxies_total: 0,
                connected: st.hub.connected(),
                waiting: counts.waiting_for_live_proxy,
            },
        },
    ))
}

// ---------------------------------------------------------------- agent

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentQuery {
    signal: Option<String>,
}

pub struct HistoryItem {
    pub state: String,
    pub icon: &'static str,
    pub class: &'static str,
    pub from: String,
    pub to: String,
    pub lasted: String,
    pub reasons: String,
    pub cause: String,
    pub ended_by_signal: Option<i64>,
    pub open: bool,
}

pub struct TunnelLine {
    pub name: String,
    pub proxy: String,
    pub state: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
}

#[derive(Template)]
#[template(path = "agent.html")]
pub struct AgentPage {
    layout: Layout,
    row: AgentRow,
    href: String,
    addr: String,
    version: String,
    auth_health: String,
    ttl: String,
    link: Option<String>,
    tunnels: Vec<TunnelLine>,
    history: Vec<HistoryItem>,
    signals: Vec<SignalRow>,
    flash: Option<SignalRow>,
    svg: Svg,
}

pub async fn agent(
    State(st): State<AppState>,
    ctx: Ctx,
    Path(name): Path<String>,
    UiQuery(q): UiQuery<AgentQuery>,
) -> Result<Response, UiError> {
    let flash_id = match field(q.signal) {
        None => None,
        Some(s) => Some(s.parse::<i64>().ok().filter(|v| *v > 0).ok_or_else(|| {
            ApiError::BadParameter(format!("signal must be a signal id, got {s:?}"))
        })?),
    };
    let found = st.fleet.agent(name.clone()).await?;
    let Some((d, now)) = found else {
        return Err(ApiError::NotFound {
            what: "agent",
            name,
        }
        .into());
    };
    let episodes = read::episodes(
        &st.db,
        &EpisodeFilter {
            agent: Some(name.clone()),
            limit: 50,
            ..EpisodeFilter::default()
        },
    )
    .await?;
    let sigs = audit::list(
        &st.db,
        &SignalFilter {
            agent: Some(name.clone()),
            limit: 20,
            ..SignalFilter::default()
        },
    )
    .await?;
    // Usually among its latest signals, already read; an older one by id.
    let flash = match flash_id {
        Some(id) => match sigs.iter().find(|r| r.id == id) {
            Some(r) => Some(r.clone()),
            None => audit::get(&st.db, id).await?,
        }
        .filter(|r| r.agent == name)
        .map(|r| signal_row(now, r)),
        None => None,
    };
    let last = d
        .last_signal
        .and_then(|id| sigs.iter().find(|r| r.id == id).cloned());
    let tunnels = d
        .item
        .tunnels
        .iter()
        .map(|t| {
            let (icon, class) = fmt::proxy_state(t.proxy_state);
            TunnelLine {
                name: t.name.clone(),
                proxy: t.proxy.clone(),
                state: t.proxy_state,
                icon,
                class,
            }
        })
        .collect();
    let history = episodes
        .into_iter()
        .map(|e| {
            let state = AgentState::parse(&e.state).unwrap_or(AgentState::Degraded);
            let end = e.ended_at.unwrap_or(now);
            HistoryItem {
                icon: fmt::state_icon(state),
                class: fmt::state_class(state),
                from: fmt::hms(e.started_at),
                to: match e.ended_at {
                    Some(t) => fmt::hms(t),
                    None => "now".into(),
                },
                lasted: fmt::compact(end.since(e.started_at)),
                reasons: e.reasons.join(", "),
                cause: if e.cause_resource.is_empty() {
                    e.cause.clone()
                } else {
                    format!("{} {}", e.cause, e.cause_resource)
                },
                ended_by_signal: e.ended_by_signal,
                open: e.ended_at.is_none(),
                state: e.state,
            }
        })
        .collect();
    let ttl_line = format!(
        "last heartbeat {} · TTL {} · expires {} ({}) · heartbeats missed {}",
        fmt::hms(d.ttl_window.last_heartbeat_at),
        fmt::ms(d.ttl_window.ttl_ms),
        fmt::hms(d.ttl_window.expires_at),
        fmt::left(now, d.ttl_window.expires_at),
        d.ttl_window.heartbeats_missed
    );
    let link = d.link.as_ref().map(|l| {
        format!(
            "connected since {} ({}) · version {} · wants {} tunnel(s) · {} report(s)",
            fmt::hms(l.since),
            fmt::ago(now, l.since),
            l.version,
            l.desired_tunnels,
            l.reports
        )
    });
    let auth_health = d
        .item
        .auth_health
        .map(|h| format!("{} {}", fmt::health_icon(h), h.as_str()))
        .unwrap_or_else(|| "? not known to Lifeline".into());
    let svg = ttl_svg::build(std::slice::from_ref(&d.ttl_window), now);
    let connected = st.hub.is_connected(&name);
    let row = agent_row(now, d.item, last.as_ref(), connected);
    Ok(ctx.render(
        StatusCode::OK,
        &AgentPage {
            layout: ctx.layout(&st, "agents", format!("{name} · Lifeline")),
            href: agent_href(&name),
            row,
            addr: d.addr,
            version: d.version,
            auth_health,
            ttl: ttl_line,
            link,
            tunnels,
            history,
            signals: sigs.into_iter().map(|r| signal_row(now, r)).collect(),
            flash,
            svg,
        },
    ))
}

// ---------------------------------------------------------------- auth

pub struct TransitionLine {
    pub at: String,
    pub from: String,
    pub to: String,
    pub icon: &'static str,
    pub class: &'static str,
    pub mode: String,
    pub detail: String,
}

pub struct AuthSection {
    pub chip: AuthChip,
    pub transitions: Vec<TransitionLine>,
}

#[derive(Template)]
#[template(path = "auth.html")]
pub struct AuthPage {
    layout: Layout,
    sections: Vec<AuthSection>,
}

pub async fn auth(State(st): State<AppState>, ctx: Ctx) -> Result<Response, UiError> {
    let (auths, now) = st.fleet.auth_servers().await?;
    let mut sections = Vec::new();
    for chip in auth_chips(now, auths) {
        let transitions = read::transitions(&st.db, &chip.name, 20)
            .await?
            .into_iter()
            .map(|t| {
                let h = crate::model::Health::parse(&t.to_status)
                    .unwrap_or(crate::model::Health::Unknown);
                TransitionLine {
                    at: format!("{} ({})", fmt::hms(t.at()), fmt::ago(now, t.at())),
                    icon: fmt::health_icon(h),
                    class: fmt::health_class(h),
                    from: t.from_status,
                    to: t.to_status,
                    mode: t.mode,
                    detail: t.detail,
                }
            })
            .collect();
        sections.push(AuthSection { chip, transitions });
    }
    sections.sort_by(|a, b| a.chip.name.cmp(&b.chip.name));
    Ok(ctx.render(
        StatusCode::OK,
        &AuthPage {
            layout: ctx.layout(&st, "auth", "Auth servers · Lifeline".into()),
            sections,
        },
    ))
}

// ---------------------------------------------------------------- signals

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignalsQuery {
    agent: Option<String>,
    outcome: Option<String>,
    kind: Option<String>,
    requested_by: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
    /// Set by the reconnect-all action's redirect.
    sent: Option<String>,
    skipped: Option<String>,
}

#[derive(Template)]
#[template(path = "signals.html")]
pub struct SignalsPage {
    layout: Layout,
    rows: Vec<SignalRow>,
    agent: String,
    outcome: String,
    kind: String,
    requested_by: String,
    outcomes: Vec<&'static str>,
    next_href: Option<String>,
    first_href: Option<String>,
    flash: Option<String>,
    stranded: usize,
}

pub async fn signals(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<SignalsQuery>,
) -> Result<Response, UiError> {
    let (agent, outcome, kind, by, cursor) = (
        field(q.agent),
        field(q.outcome),
        field(q.kind),
        field(q.requested_by),
        field(q.cursor),
    );
    let (outcome_f, kind_f) = signal_filter(outcome.as_deref(), kind.as_deref())?;
    let before_id = id_cursor(cursor.clone())?;
    let limit_s = field(q.limit.clone());
    let limit = page_limit(q.limit)?;
    let (now, counts) = st.fleet.counts().await?;
    let recs = audit::list(
        &st.db,
        &SignalFilter {
            agent: agent.clone(),
            outcome: outcome_f,
            kind: kind_f,
            requested_by: by.clone(),
            before_id,
            limit: limit as u32,
        },
    )
    .await?;
    let next = (recs.len() == limit)
        .then(|| recs.last().map(|r| r.id.to_string()))
        .flatten();
    let pairs = |c: Option<String>| {
        qs(&[
            ("agent", &agent),
            ("outcome", &outcome),
            ("kind", &kind),
            ("requested_by", &by),
            ("limit", &limit_s),
            ("cursor", &c),
        ])
    };
    let next_href = next.map(|c| format!("/signals{}", pairs(Some(c))));
    let first_href = cursor.as_ref().map(|_| format!("/signals{}", pairs(None)));
    let flash = field(q.sent).map(|n| {
        let skipped = field(q.skipped).unwrap_or_else(|| "0".into());
        format!(
            "Reconnect sent to {} stranded agent(s); {} skipped (not connected to Lifeline).",
            n.parse::<usize>().unwrap_or(0),
            skipped.parse::<usize>().unwrap_or(0)
        )
    });
    Ok(ctx.render(
        StatusCode::OK,
        &SignalsPage {
            layout: ctx.layout(&st, "signals", "Signals · Lifeline".into()),
            rows: recs.into_iter().map(|r| signal_row(now, r)).collect(),
            agent: agent.clone().unwrap_or_default(),
            outcome: outcome.clone().unwrap_or_default(),
            kind: kind.clone().unwrap_or_default(),
            requested_by: by.clone().unwrap_or_default(),
            outcomes: Outcome::names(),
            next_href,
            first_href,
            flash,
            stranded: counts.stranded,
        },
    ))
}

// ---------------------------------------------------------------- confirm

#[derive(Template)]
#[template(path = "confirm.html")]
pub struct ConfirmPage {
    layout: Layout,
    stranded: usize,
    connected: usize,
}

/// "Reconnect all stranded": says how many agents it will touch first.
pub async fn confirm_stranded(State(st): State<AppState>, ctx: Ctx) -> Result<Response, UiError> {
    // The same selection the action makes.
    let names = select(&st, Some(AgentState::Stranded), None, None).await?;
    let connected = names.iter().filter(|n| st.hub.is_connected(n)).count();
    Ok(ctx.render(
        StatusCode::OK,
        &ConfirmPage {
            layout: ctx.layout(&st, "signals", "Reconnect all stranded · Lifeline".into()),
            stranded: names.len(),
            connected,
        },
    ))
}
