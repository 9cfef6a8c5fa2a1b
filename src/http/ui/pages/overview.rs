//! The overview: what failed and when, TTL windows, stranded agents and the last signals; its live part is shared with the live stream.

use super::*;

pub struct CauseLine {
    pub lead: String,
    pub rest: String,
    pub href: String,
    pub at: String,
}

/// The part of the overview that the live stream re-renders.
pub struct LiveOverview {
    pub as_of: String,
    /// The read model's generation it was rendered from.
    pub generation: u64,
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
    /// The last day's counts and incidents.
    pub strip: std::sync::Arc<Strip>,
}

/// The strip is drawn again at most this often: its counts move a minute
/// at a time, and the live overview renders far more often.
const STRIP_EVERY: std::time::Duration = std::time::Duration::from_secs(10);
const DAY: std::time::Duration = std::time::Duration::from_secs(86_400);
/// Incident bands on the strip at most (the newest).
const STRIP_INCIDENTS: u32 = 200;

/// The last day's strip, from the cache while it is fresh.
async fn day_strip(st: &AppState, now: Ts) -> Result<std::sync::Arc<Strip>, UiError> {
    if let Some((at, s)) = st.ui.strip() {
        if at <= now && now.since(at) < STRIP_EVERY {
            return Ok(s);
        }
    }
    let from = now.saturating_sub(DAY);
    let points = crate::store::incidents::history(
        &st.db,
        None,
        from,
        now,
        crate::fleet::model::SAMPLE_EVERY,
    )
    .await?;
    let incidents = crate::store::incidents::overlapping(&st.db, from, STRIP_INCIDENTS).await?;
    let s = std::sync::Arc::new(incident_svg::strip(from, now, &points, &incidents));
    st.ui.set_strip(now, s.clone());
    Ok(s)
}

fn cause_line(now: Ts, c: &RootCause) -> CauseLine {
    let n = c.agents;
    let agents = if n == 1 { "agent" } else { "agents" };
    // The standing its agents are in, as the counts above say it.
    let (s, d) = (c.stranded, c.degraded);
    let (lead, state) = if c.planned.is_some() {
        (format!("{n} {agents} planned:"), "planned")
    } else if d == 0 {
        (format!("{n} {agents} stranded:"), "stranded")
    } else if s == 0 {
        (format!("{n} {agents} degraded:"), "degraded")
    } else {
        let agents = if s == 1 { "agent" } else { "agents" };
        (format!("{s} {agents} stranded, {d} degraded:"), "stranded")
    };
    let r = &c.resource;
    let by_proxy = format!("/agents?state={state}&proxy={}", enc(r));
    let by_auth = format!("/agents?state={state}&auth_server={}", enc(r));
    let any = format!("/agents?state={state}");
    let (rest, href) = match c.cause {
        CauseKind::ProxyExpired => (format!("{r} expired {}", fmt::ago(now, c.since)), by_proxy),
        CauseKind::AuthNotServing => (
            format!("{r} NOT_SERVING since {}", fmt::hms(c.since)),
            by_auth,
        ),
        CauseKind::AuthUnknown => (
            format!(
                "{r} health UNKNOWN, counted unhealthy since {}",
                fmt::hms(c.since)
            ),
            by_auth,
        ),
        CauseKind::AuthExpired => (
            format!(
                "auth server {r} stopped heartbeating {} (its health is not watched)",
                fmt::ago(now, c.since)
            ),
            by_auth,
        ),
        CauseKind::ProxyMissing => (
            format!("their tunnels point at {r}, a proxy Lifeline no longer knows"),
            by_proxy,
        ),
        CauseKind::ProxyDeparted => (
            format!(
                "{r} departed (shut down gracefully) {}",
                fmt::ago(now, c.since)
            ),
            by_proxy,
        ),
        CauseKind::TunnelExpired => ("their tunnel records expired".to_string(), any),
        CauseKind::AgentExpired => (
            format!(
                "their own heartbeat expired (auth server {}) {}",
                if r.is_empty() { "?" } else { r },
                fmt::ago(now, c.since)
            ),
            any,
        ),
        CauseKind::NoTunnels => ("no tunnels at all".to_string(), any),
    };
    let rest = match c.planned {
        Some(p) => format!("{rest} ({})", super::planned_words(p)),
        None => rest,
    };
    CauseLine {
        lead,
        rest,
        href,
        at: c.since.rfc3339(),
    }
}

/// Everything the overview's live part shows. Shared by the page and the
/// live stream (one render serves every open overview).
pub async fn overview_model(st: &AppState) -> Result<LiveOverview, UiError> {
    let published = st.fleet.recent().await?;
    let Published {
        summary,
        auth_servers: auths,
        soonest: (ttl, ttl_total),
        stranded: page,
        stranded_last_signals: last,
        ..
    } = &*published;
    let now = summary.generated_at;
    let stranded_more = page.next_cursor.is_some();
    let stranded = agent_rows(st, now, page.items.clone(), last.clone()).await?;
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
    if let Some(why) = &guard.restarts_paused {
        banners.push(Banner {
            title: "Automatic restarts are paused".into(),
            text: format!(
                "Sidecars restart no agent by themselves: {why}. A restart you ask for still goes."
            ),
        });
    }
    let set = &st.hub.settings;
    let restarts = st.hub.restarts();
    let strip = day_strip(st, now).await?;
    Ok(LiveOverview {
        as_of: format!("{} UTC", fmt::hms(now)),
        generation: summary.generation,
        counts: Counts {
            total: summary.agents.total,
            healthy: summary.agents.healthy,
            degraded: summary.agents.degraded,
            stranded: summary.agents.stranded,
            planned: summary.agents.planned,
            proxies_live: summary.proxies.live,
            proxies_total: summary.proxies.total,
            connected: st.hub.connected(),
            waiting: summary.agents.waiting_for_live_proxy,
            sidecars: restarts.1,
            restarting: restarts.0,
            dry_run: st.hub.dry_run_sidecars(),
        },
        banners,
        causes: summary
            .root_causes
            .iter()
            .map(|c| cause_line(now, c))
            .collect(),
        auths: auth_chips(now, auths.clone()),
        svg: ttl_svg::build(ttl, now),
        ttl_total: *ttl_total,
        stranded,
        stranded_more,
        signals,
        strip,
        auto_reconnect: if !set.auto_reconnect() {
            "off"
        } else if guard.paused {
            "paused"
        } else {
            "on"
        },
    })
}

#[derive(Template)]
#[template(path = "overview.html")]
pub struct OverviewPage {
    pub layout: Layout,
    pub live: LiveOverview,
    /// Whether the viewer may act (shown the reconnect link).
    pub signed_in: bool,
}

/// The live fragment alone (what the stream sends).
#[derive(Template)]
#[template(path = "overview_live.html")]
pub struct OverviewLive {
    pub live: LiveOverview,
    pub signed_in: bool,
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
            signed_in: ctx.caller.0.is_some(),
        },
    ))
}
