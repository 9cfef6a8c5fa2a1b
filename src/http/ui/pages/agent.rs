//! One agent: its state and why, tunnels, history, episodes and signals.

use super::*;
use crate::domain::{agent_label, CauseKind, Episode};
use crate::fleet::Link;

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
    pub incident: Option<i64>,
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
    /// No tunnel was observed: one to every known proxy is assumed
    /// (a Teleport host in agent mesh, which records no `ProxyIDs`).
    tunnels_assumed: bool,
    labels: String,
    /// Minutes stranded in the last 7 and 30 days.
    stranded_7d: String,
    stranded_30d: String,
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
            cluster: Some(st.fleet.cluster().clone()),
            agent: Some(name.clone()),
            limit: 50,
            ..EpisodeFilter::default()
        },
    )
    .await?;
    let (stranded_7d, stranded_30d) =
        crate::store::incidents::agent_minutes_stranded(&st.db, &name, week_month(now), now)
            .await?;
    let sigs = audit::list(
        &st.db,
        &SignalFilter {
            cluster: Some(st.fleet.cluster().clone()),
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
    let tunnels = d.item.tunnels.iter().map(tunnel_line).collect();
    let history = episodes.into_iter().map(|e| history_item(e, now)).collect();
    let ttl_line = format!(
        "last heartbeat {} · TTL {} · expires {} ({}) · heartbeats missed {}",
        fmt::hms(d.ttl_window.last_heartbeat_at),
        fmt::ms(d.ttl_window.ttl_ms),
        fmt::hms(d.ttl_window.expires_at),
        fmt::left(now, d.ttl_window.expires_at),
        d.ttl_window.heartbeats_missed
    );
    let link = d.link.as_ref().map(|l| link_line(l, now));
    let auth_health = d
        .item
        .auth_health
        .map(|h| format!("{} {}", fmt::health_icon(h), h.as_str()))
        .unwrap_or_else(|| "? not known to Lifeline".into());
    let tunnels_assumed = d.labels.get(agent_label::TUNNELS).map(String::as_str)
        == Some(agent_label::TUNNELS_ASSUMED);
    let labels = d
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" · ");
    let svg = ttl_svg::build(std::slice::from_ref(&d.ttl_window), now);
    let connected = st.hub.reachable(&name);
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
            tunnels_assumed,
            labels,
            stranded_7d: minutes_text(stranded_7d),
            stranded_30d: minutes_text(stranded_30d),
            history,
            signals: sigs.into_iter().map(|r| signal_row(now, r)).collect(),
            flash,
            svg,
        },
    ))
}

/// One episode as a line of the agent's history.
fn history_item(e: Episode, now: Ts) -> HistoryItem {
    let state = e.state;
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
        cause: {
            let cause = e.cause.map_or("", CauseKind::as_str);
            if e.cause_resource.is_empty() {
                cause.to_string()
            } else {
                format!("{cause} {}", e.cause_resource)
            }
        },
        ended_by_signal: e.ended_by_signal,
        open: e.ended_at.is_none(),
        incident: e.incident,
        state: e.state.as_str().to_string(),
    }
}

/// How the agent's sidecar or stream is linked to Lifeline, in one line.
fn link_line(l: &Link, now: Ts) -> String {
    match &l.restart {
        None => format!(
            "connected since {} ({}) · version {} · wants {} tunnel(s) · {} report(s)",
            fmt::hms(l.since),
            fmt::ago(now, l.since),
            l.version,
            l.desired_tunnels,
            l.reports
        ),
        Some(r) => {
            let mut line = format!(
                "sidecar {} · {}{} · connected since {} ({})",
                l.version,
                r.method,
                if r.dry_run { " (dry run)" } else { "" },
                fmt::hms(l.since),
                fmt::ago(now, l.since),
            );
            if let Some(p) = &l.report {
                if let Some(at) = p.last_restart {
                    line.push_str(&format!(" · last restart {}", fmt::hms(at)));
                    if let Some(ms) = p.last_restart_ready_ms {
                        line.push_str(&format!(", ready in {:.1} s", ms as f64 / 1000.0));
                    }
                }
                line.push_str(&format!(" · the agent says: {}", p.status));
                if let Some(pid) = p.pid {
                    line.push_str(&format!(" (pid {pid})"));
                }
                line.push_str(&format!(" at {}", fmt::hms(p.at)));
            }
            line
        }
    }
}

/// One of the agent's tunnels, with its proxy's state.
fn tunnel_line(t: &crate::fleet::view::TunnelItem) -> TunnelLine {
    let (icon, class) = fmt::proxy_state(t.proxy_state);
    TunnelLine {
        name: t.name.clone(),
        proxy: t.proxy.clone(),
        state: t.proxy_state,
        icon,
        class,
    }
}
