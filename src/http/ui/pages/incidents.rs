//! Incidents: the list (open ones on top, then the newest) and one
//! incident with its timeline, figures, agents and signals.

use super::*;
use crate::http::ui::incident_svg::{self, Timeline};
use crate::store::incidents::{self as inc, Incident, IncidentFilter, SignalCount};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IncidentsQuery {
    cause: Option<String>,
    resource: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

pub struct IncidentRowView {
    pub id: i64,
    pub href: String,
    pub title: String,
    pub open: bool,
    pub started: String,
    pub ago: String,
    pub lasted: String,
    /// In words, by standing ("38 stranded, 2 degraded").
    pub peak: String,
    /// Agent-minutes in words, by standing.
    pub minutes: String,
    pub agents: u32,
    pub signals: u32,
    pub recover: String,
}

fn lasted(i: &Incident, now: Ts) -> String {
    fmt::compact(i.ended.unwrap_or(now).since(i.started))
}

fn recovery(i: &Incident) -> String {
    match (i.recover_p50_ms, i.recover_max_ms) {
        (Some(p50), Some(max)) => format!(
            "{} / {}",
            fmt::compact(std::time::Duration::from_millis(p50 as u64)),
            fmt::compact(std::time::Duration::from_millis(max as u64))
        ),
        _ if i.open => "open".into(),
        _ => "—".into(),
    }
}

fn row(now: Ts, i: Incident) -> IncidentRowView {
    IncidentRowView {
        id: i.id,
        href: format!("/incidents/{}", i.id),
        open: i.open,
        started: fmt::hms(i.started),
        ago: fmt::ago(now, i.started),
        lasted: lasted(&i, now),
        recover: recovery(&i),
        peak: i.peak_words(),
        minutes: i.minutes_words(),
        agents: i.agents,
        signals: i.signals_sent,
        title: i.title,
    }
}

#[derive(Template)]
#[template(path = "incidents.html")]
pub struct IncidentsPage {
    layout: Layout,
    open: Vec<IncidentRowView>,
    rows: Vec<IncidentRowView>,
    cause: String,
    resource: String,
    causes: Vec<&'static str>,
    next_href: Option<String>,
    first_href: Option<String>,
}

/// Open incidents listed on top, at most this many.
const OPEN_SHOWN: u32 = 100;

pub async fn incidents(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<IncidentsQuery>,
) -> Result<Response, UiError> {
    let (cause, resource, cursor) = (field(q.cause), field(q.resource), field(q.cursor));
    let cause_f = crate::http::api::choice::<CauseKind>("cause", cause.as_deref())?;
    let before = id_cursor(cursor.clone())?;
    let limit_s = field(q.limit.clone());
    let limit = page_limit(q.limit)?;
    let now = st.fleet.published().at();
    let filter = |open: Option<bool>, before: Option<i64>, limit: u32| IncidentFilter {
        cluster: None,
        open,
        cause: cause_f,
        resource: resource.clone(),
        since: None,
        before,
        limit,
    };
    let open = if before.is_none() {
        inc::list(&st.db, &filter(Some(true), None, OPEN_SHOWN)).await?
    } else {
        Vec::new()
    };
    let ended = inc::list(&st.db, &filter(Some(false), before, limit as u32)).await?;
    let next = (ended.len() == limit)
        .then(|| ended.last().map(|i| i.id.to_string()))
        .flatten();
    let pairs = |c: Option<String>| {
        qs(&[
            ("cause", &cause),
            ("resource", &resource),
            ("limit", &limit_s),
            ("cursor", &c),
        ])
    };
    Ok(ctx.render(
        StatusCode::OK,
        &IncidentsPage {
            layout: ctx.layout(&st, "incidents", "Incidents · Lifeline".into()),
            open: open.into_iter().map(|i| row(now, i)).collect(),
            rows: ended.into_iter().map(|i| row(now, i)).collect(),
            cause: cause.clone().unwrap_or_default(),
            resource: resource.clone().unwrap_or_default(),
            causes: crate::domain::names::<CauseKind>(),
            next_href: next.map(|c| format!("/incidents{}", pairs(Some(c)))),
            first_href: cursor
                .as_ref()
                .map(|_| format!("/incidents{}", pairs(None))),
        },
    ))
}

pub struct AgentLine {
    pub agent: String,
    pub href: String,
    pub state: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
    pub from: String,
    pub to: String,
    pub lasted: String,
    pub end: String,
}

#[derive(Template)]
#[template(path = "incident.html")]
pub struct IncidentPage {
    layout: Layout,
    i: IncidentRowView,
    cause: &'static str,
    resource: String,
    resource_href: Option<String>,
    started: String,
    ended: String,
    svg: Timeline,
    counts: Vec<SignalCount>,
    agents: Vec<AgentLine>,
    agents_more: bool,
    /// "88 agents moved to incident 3 (…)".
    moved_out: Vec<inc::MovedOut>,
    signals: Vec<SignalRow>,
    signals_more: bool,
}

/// Episodes and signals the page reads at most (the API pages them all).
const PAGE_EPISODES: u32 = 2000;
const PAGE_SIGNALS: u32 = 200;

pub async fn incident(
    State(st): State<AppState>,
    ctx: Ctx,
    Path(id): Path<String>,
) -> Result<Response, UiError> {
    let not_found = || ApiError::NotFound {
        what: "incident",
        name: id.clone(),
    };
    let n: i64 = id.parse().ok().filter(|v| *v > 0).ok_or_else(not_found)?;
    let i = inc::get(&st.db, n).await?.ok_or_else(not_found)?;
    let now = st.fleet.published().at();
    let mut episodes = read::episodes_of_incident(&st.db, n, PAGE_EPISODES + 1).await?;
    let agents_more = episodes.len() > PAGE_EPISODES as usize;
    episodes.truncate(PAGE_EPISODES as usize);
    // Agents that moved in count from their move, those that moved out
    // until it: the table, the timeline and the figures agree.
    let moves = inc::moves_of(&st.db, n).await?;
    let spans = inc::spans_in(n, &episodes, &moves);
    let moved_out = inc::moved_out(&st.db, n).await?;
    let episodes: Vec<_> = spans.iter().map(|(e, _)| e.clone()).collect();
    let mut signals = inc::signals(&st.db, &i, None, PAGE_SIGNALS + 1).await?;
    let signals_more = signals.len() > PAGE_SIGNALS as usize;
    signals.truncate(PAGE_SIGNALS as usize);
    let counts = inc::signal_counts(&st.db, &i).await?;
    let svg = incident_svg::timeline(i.started, i.ended, now, &episodes, &signals);
    let agents = spans
        .iter()
        .map(|(e, moved)| AgentLine {
            agent: e.agent.clone(),
            href: agent_href(&e.agent),
            state: e.state.as_str(),
            icon: fmt::state_icon(e.state),
            class: fmt::state_class(e.state),
            from: fmt::hms(e.started_at),
            to: e.ended_at.map_or_else(|| "now".into(), fmt::hms),
            lasted: fmt::compact(e.ended_at.unwrap_or(now).since(e.started_at)),
            end: match moved {
                Some(to) => format!("moved to #{to}"),
                None => e.end_reason.map_or("", |r| r.as_str()).to_string(),
            },
        })
        .collect();
    let resource_href = match i.cause {
        _ if i.resource.is_empty() => None,
        CauseKind::ProxyExpired | CauseKind::ProxyMissing | CauseKind::ProxyDeparted => {
            Some(format!("/agents?proxy={}", enc(&i.resource)))
        }
        _ => Some(format!("/agents?auth_server={}", enc(&i.resource))),
    };
    Ok(ctx.render(
        StatusCode::OK,
        &IncidentPage {
            layout: ctx.layout(
                &st,
                "incidents",
                format!("Incident {n}: {} · Lifeline", i.title),
            ),
            cause: i.cause.as_str(),
            resource: i.resource.clone(),
            resource_href,
            started: i.started.rfc3339(),
            ended: i.ended.map_or_else(|| "open".into(), Ts::rfc3339),
            svg,
            counts,
            agents,
            agents_more,
            moved_out,
            signals: signals.into_iter().map(|r| signal_row(now, r)).collect(),
            signals_more,
            i: row(now, i),
        },
    ))
}
