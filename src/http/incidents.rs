//! `/api/v1/incidents` and `/api/v1/history`: what happened, to whom and
//! how fast it was fixed (read from the store, which the leader writes, so
//! every replica answers the same), and a postmortem draft in Markdown.

use std::fmt::Write as _;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::api::{choice, duration_param, nonempty, since_param};
use super::contract::{ListErrors, ReadOneErrors};
use super::error::{ApiError, ApiQuery};
use super::paged::{id_cursor, limit, ById, IdPage, Listed, Page};
use super::AppState;
use crate::clock::Ts;
use crate::domain::CauseKind;
use crate::domain::Episode;
use crate::store::incidents::{self, Incident, IncidentFilter, Point, SignalCount};
use crate::store::read::{self, EpisodeFilter};
use crate::store::signals::SignalRecord;

/// History's finest step, and the most points one answer holds.
const MIN_STEP: Duration = Duration::from_secs(60);
const MAX_POINTS: u64 = 10_000;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(one))
        .routes(routes!(report))
        .routes(routes!(history))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct ListQuery {
    /// Only this cluster's (a name `/api/v1/clusters` lists).
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
    /// true: only open ones; false: only ended ones.
    open: Option<bool>,
    /// Only incidents of this root cause.
    #[param(value_type = Option<CauseKind>)]
    cause: Option<String>,
    /// Only incidents of this proxy or auth server.
    #[param(min_length = 1)]
    resource: Option<String>,
    /// Only those open at or after this time: RFC 3339, or a duration back
    /// from now ("24h").
    #[param(schema_with = super::contract::since)]
    since: Option<String>,
}

/// Incidents, newest first.
///
/// An incident is one root cause's occurrence ("proxy-1 expired"), from
/// the first agent it stranded or degraded to the last one's recovery.
#[utoipa::path(
    get,
    path = "/api/v1/incidents",
    tag = "history",
    operation_id = "list_incidents",
    params(ListQuery, IdPage),
    security((), ("bearer" = [])),
    responses((status = 200, description = "A page of incidents.", body = Page<Incident>), ListErrors)
)]
async fn list(
    State(s): State<AppState>,
    Listed(q, page): Listed<ListQuery, ById>,
) -> Result<Json<Page<Incident>>, ApiError> {
    let f = IncidentFilter {
        cluster: super::clusters::scope(&s, q.cluster)?,
        open: q.open,
        cause: choice::<CauseKind>("cause", nonempty("cause", q.cause)?.as_deref())?,
        resource: nonempty("resource", q.resource)?,
        since: since_param(&s, "since", q.since.as_deref()).await?,
        before: page.cursor,
        limit: page.limit,
    };
    let items = incidents::list(&s.db, &f).await?;
    Ok(Json(Page::by_id(items, f.limit, |i| i.id)))
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct OneQuery {
    /// Page size of its episodes and of its signals, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `episodes.next_cursor` of the previous answer.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    episodes_cursor: Option<String>,
    /// `signals.next_cursor` of the previous answer.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    signals_cursor: Option<String>,
}

/// One incident with its agents and signals.
#[derive(Serialize, utoipa::ToSchema)]
struct IncidentResponse {
    #[serde(flatten)]
    incident: Incident,
    /// Signals sent to its agents while it lasted, by kind and outcome.
    signal_counts: Vec<SignalCount>,
    /// Its agents' episodes (each agent's time in it), newest first.
    episodes: Page<Episode>,
    /// The signals sent to its agents while it lasted, newest first.
    signals: Page<SignalRecord>,
    /// Agents that left it for another incident (their cause changed
    /// while they stayed stranded or degraded), by where they went: its
    /// `agents` and peaks count them until they left.
    moved_out: Vec<incidents::MovedOut>,
}

/// The incident a path names: a positive id (400 otherwise), found (404).
async fn find(s: &AppState, id: &str) -> Result<Incident, ApiError> {
    let n = id.parse::<i64>().ok().filter(|v| *v > 0).ok_or_else(|| {
        ApiError::BadParameter(format!(
            "incident id {:?} is not a positive integer",
            crate::http::error::clip(id)
        ))
    })?;
    incidents::get(&s.db, n).await?.ok_or(ApiError::NotFound {
        what: "incident",
        name: n.to_string(),
    })
}

/// One incident.
///
/// With its signals by kind and outcome, and pages of its agents'
/// episodes and of the signals sent to them while it lasted.
#[utoipa::path(
    get,
    path = "/api/v1/incidents/{id}",
    tag = "history",
    operation_id = "get_incident",
    params(("id" = i64, Path, description = "The incident's id.", minimum = 1), OneQuery),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The incident.", body = IncidentResponse), ReadOneErrors)
)]
async fn one(
    State(s): State<AppState>,
    Path(id): Path<String>,
    ApiQuery(q): ApiQuery<OneQuery>,
) -> Result<Json<IncidentResponse>, ApiError> {
    let limit = limit(q.limit)?;
    let (episodes_before, signals_before) =
        (id_cursor(q.episodes_cursor)?, id_cursor(q.signals_cursor)?);
    let incident = find(&s, &id).await?;
    let id = incident.id;
    let episodes = read::episodes(
        &s.db,
        &EpisodeFilter {
            incident: Some(id),
            before: episodes_before,
            limit,
            ..Default::default()
        },
    )
    .await?;
    let signals = incidents::signals(&s.db, &incident, signals_before, limit).await?;
    let signal_counts = incidents::signal_counts(&s.db, &incident).await?;
    let moved_out = incidents::moved_out(&s.db, id).await?;
    Ok(Json(IncidentResponse {
        incident,
        signal_counts,
        episodes: Page::by_id(episodes, limit, |e| e.id),
        signals: Page::by_id(signals, limit, |r| r.id),
        moved_out,
    }))
}

/// A postmortem draft of one incident, in Markdown.
///
/// Its timeline, root cause, impact (agents, agent-minutes stranded), what
/// Lifeline did (signals by kind and outcome) and the times to act and to
/// recover.
#[utoipa::path(
    get,
    path = "/api/v1/incidents/{id}/report",
    tag = "history",
    operation_id = "incident_report",
    params(("id" = i64, Path, description = "The incident's id.", minimum = 1)),
    security((), ("bearer" = [])),
    responses(
        (status = 200, description = "The draft.", content_type = "text/markdown", body = String),
        ReadOneErrors
    )
)]
async fn report(State(s): State<AppState>, Path(id): Path<String>) -> Result<Response, ApiError> {
    let incident = find(&s, &id).await?;
    let now = s.fleet.published().at();
    let facts = Facts::read(&s, &incident).await?;
    let body = draft(&incident, &facts, now);
    Ok((
        [
            (header::CONTENT_TYPE, "text/markdown; charset=utf-8"),
            (
                header::CONTENT_DISPOSITION,
                "inline; filename=\"incident.md\"",
            ),
        ],
        body,
    )
        .into_response())
}

/// Episodes a report reads at most, for its timeline's first agent (its
/// figures are the incident's own).
const REPORT_EPISODES: u32 = 10_000;

/// What a report says beyond the incident's row.
pub struct Facts {
    pub episodes: Vec<Episode>,
    /// Where agents that left it went.
    pub moved_out: Vec<incidents::MovedOut>,
    pub signals: Vec<SignalCount>,
    /// The first signal sent for it.
    pub first_signal: Option<Ts>,
}

impl Facts {
    pub async fn read(s: &AppState, i: &Incident) -> Result<Facts, ApiError> {
        let episodes = read::episodes_of_incident(&s.db, i.id, REPORT_EPISODES).await?;
        // Each agent's time in this incident: moved-in agents from their
        // move, moved-out ones until it.
        let moves = incidents::moves_of(&s.db, i.id).await?;
        let episodes = incidents::spans_in(i.id, &episodes, &moves)
            .into_iter()
            .map(|(e, _)| e)
            .collect();
        let signals = incidents::signal_counts(&s.db, i).await?;
        Ok(Facts {
            episodes,
            moved_out: incidents::moved_out(&s.db, i.id).await?,
            first_signal: signals.iter().map(|c| c.first).min(),
            signals,
        })
    }
}

/// `s` as Markdown code: a name from the cluster, whatever it holds.
fn code(s: &str) -> String {
    let clean: String = s
        .chars()
        .map(|c| if c == '`' || c.is_control() { '\'' } else { c })
        .collect();
    format!("`{clean}`")
}

/// `s` as Markdown text: what Markdown would read as markup is escaped.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\`*_[]<>#|!{}()".contains(c) {
            out.push('\\');
        }
        out.push(if c.is_control() { ' ' } else { c });
    }
    out
}

fn minutes(d: Duration) -> String {
    let s = d.as_secs();
    if s < 120 {
        format!("{s} s")
    } else {
        format!("{:.1} min", s as f64 / 60.0)
    }
}

/// The Markdown draft of `i` (`now` ends what is still open).
pub fn draft(i: &Incident, f: &Facts, now: Ts) -> String {
    let mut md = String::new();
    let status = if i.open { "open" } else { "resolved" };
    let title = esc(&i.title);
    let _ = writeln!(md, "# Incident {}: {title} ({status})\n", i.id);
    let _ = writeln!(md, "_A draft from Lifeline: check it, then add what it cannot know (why the resource failed, what people did)._\n");
    let _ = writeln!(md, "## Summary\n");
    let _ = writeln!(
        md,
        "- **Root cause:** {title} (`{}`{})",
        i.cause.as_str(),
        if i.resource.is_empty() {
            String::new()
        } else {
            format!(", resource {}", code(&i.resource))
        }
    );
    let _ = writeln!(md, "- **Started:** {}", i.started.rfc3339());
    match i.ended {
        Some(e) => {
            let _ = writeln!(
                md,
                "- **Ended:** {} (lasted {})",
                e.rfc3339(),
                minutes(e.since(i.started))
            );
        }
        None => {
            let _ = writeln!(
                md,
                "- **Ended:** not yet ({} so far, at {})",
                minutes(now.since(i.started)),
                now.rfc3339()
            );
        }
    }
    let _ = writeln!(md, "\n## Impact\n");
    let _ = writeln!(md, "- **Agents affected:** {}", i.agents);
    for mv in &f.moved_out {
        let _ = writeln!(
            md,
            "  - {} moved to incident {} ({}) when their cause changed",
            mv.agents,
            mv.incident,
            esc(&mv.title)
        );
    }
    let _ = writeln!(md, "- **Peak at once:** {}", i.peak_words());
    // The incident's own figures: it counts every agent, whatever the
    // draft reads of its episodes.
    let _ = writeln!(
        md,
        "- **Agent-minutes:** {}{}",
        i.minutes_words(),
        if i.planned.is_some() {
            " (planned time is in no stranded or degraded figure)"
        } else {
            ""
        }
    );
    let _ = writeln!(md, "\n## What Lifeline did\n");
    if f.signals.is_empty() {
        let _ = writeln!(md, "- No signals were sent to its agents.");
    } else {
        let _ = writeln!(md, "| signal | outcome | count |\n|---|---|---|");
        for c in &f.signals {
            let _ = writeln!(
                md,
                "| {} | {} | {} |",
                c.kind.as_str(),
                c.outcome.as_str(),
                c.count
            );
        }
    }
    let _ = writeln!(md, "\n## Times\n");
    let _ = writeln!(md, "- **Detected:** at the cause's own time ({}): Lifeline classifies on the expiry schedule, not by polling", i.started.rfc3339());
    match f.first_signal {
        Some(t) => {
            let _ = writeln!(
                md,
                "- **Time to act:** {} (first signal at {})",
                minutes(t.since(i.started)),
                t.rfc3339()
            );
        }
        None => {
            let _ = writeln!(md, "- **Time to act:** no signal was sent");
        }
    }
    match (i.recover_p50_ms, i.recover_max_ms) {
        (Some(p50), Some(max)) => {
            let ms = |v: f64| minutes(Duration::from_micros((v * 1000.0) as u64));
            let _ = writeln!(
                md,
                "- **Time to recover, per agent:** median {}, longest {}",
                ms(p50),
                ms(max)
            );
        }
        _ if i.open => {
            let _ = writeln!(md, "- **Time to recover, per agent:** once it has ended");
        }
        _ => {
            let _ = writeln!(md, "- **Time to recover, per agent:** no agent recovered within it (they moved to another cause or left)");
        }
    }
    let _ = writeln!(md, "\n## Timeline\n");
    let _ = writeln!(md, "- {} — {title} begins", i.started.rfc3339());
    let mut firsts: Vec<&Episode> = f.episodes.iter().collect();
    firsts.sort_by_key(|e| (e.started_at, e.id));
    if let Some(e) = firsts.first() {
        let _ = writeln!(
            md,
            "- {} — first agent {}: `{}`",
            e.started_at.rfc3339(),
            e.state.as_str(),
            code(&e.agent)
        );
    }
    if let Some(t) = f.first_signal {
        let _ = writeln!(md, "- {} — first signal", t.rfc3339());
    }
    if let Some(e) = i.ended {
        let _ = writeln!(
            md,
            "- {} — last agent recovered or moved on; the incident ends",
            e.rfc3339()
        );
    }
    let _ = writeln!(md, "\n_Details: `GET /api/v1/incidents/{}`._", i.id);
    md
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
struct HistoryQuery {
    /// Comma-separated: `stranded`, `degraded`, `agents` (default
    /// `stranded,degraded`).
    #[param(pattern = "^(stranded|degraded|agents)(,(stranded|degraded|agents))*$")]
    series: Option<String>,
    /// One point per step: whole minutes, hours or days, at least 1m
    /// (default 1m).
    #[param(schema_with = super::contract::step)]
    step: Option<String>,
    /// From: RFC 3339, or a duration back from now (default 24h). The
    /// answer starts no earlier than the oldest kept count, and covers at
    /// most 10,000 steps (the newest); its `since` says where it starts.
    #[param(schema_with = super::contract::since)]
    since: Option<String>,
    /// Only this cluster's counts (a name `/api/v1/clusters` lists);
    /// without it, every cluster's added up minute by minute.
    #[param(min_length = 1, max_length = 63)]
    cluster: Option<String>,
}

/// One series' points: `[time, count]` per step.
#[derive(Serialize, utoipa::ToSchema)]
struct HistoryResponse {
    step_seconds: u64,
    /// Where the answer starts: the `since` asked, or later (see the
    /// parameter).
    since: Ts,
    until: Ts,
    /// Each step's start, then what each asked series counted in it: the
    /// most at any minute within the step. Steps nobody counted (no
    /// replica led, or before the first count) are left out.
    points: Vec<HistoryPoint>,
}

#[derive(Serialize, utoipa::ToSchema)]
struct HistoryPoint {
    at: Ts,
    #[serde(skip_serializing_if = "Option::is_none")]
    stranded: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    degraded: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    agents: Option<u32>,
}

/// Agents stranded and degraded over time.
///
/// Counted by the leader at the start of every minute.
#[utoipa::path(
    get,
    path = "/api/v1/history",
    tag = "history",
    operation_id = "history",
    params(HistoryQuery),
    security((), ("bearer" = [])),
    responses((status = 200, description = "The counts over time.", body = HistoryResponse), ListErrors)
)]
async fn history(
    State(s): State<AppState>,
    ApiQuery(q): ApiQuery<HistoryQuery>,
) -> Result<Json<HistoryResponse>, ApiError> {
    let cluster = super::clusters::scope(&s, q.cluster)?;
    let (mut stranded, mut degraded, mut agents) = (false, false, false);
    for name in q
        .series
        .as_deref()
        .unwrap_or("stranded,degraded")
        .split(',')
    {
        match name {
            "stranded" => stranded = true,
            "degraded" => degraded = true,
            "agents" => agents = true,
            other => {
                return Err(ApiError::BadParameter(format!(
                    "series must list stranded, degraded or agents (comma-separated), got {:?}",
                    crate::http::error::clip(other)
                )))
            }
        }
    }
    let step = match q.step.as_deref() {
        None => MIN_STEP,
        Some(v) => duration_param("step", v, super::contract::STEP_UNITS)?,
    };
    let until = s.fleet.settled().await?;
    // A `since` after now asks for nothing yet: no points, not an error.
    let asked = since_param(&s, "since", q.since.as_deref().or(Some("24h")))
        .await?
        .unwrap_or(until);
    // Nothing is counted before the oldest kept sample, and at most
    // MAX_POINTS steps are answered: the answer starts at the latest of
    // the three, and its `since` says where.
    let kept = incidents::oldest_sample(&s.db, cluster.as_ref())
        .await?
        .map_or(until, |t| t.floor_to(step));
    let newest = until.saturating_sub(step.saturating_mul(MAX_POINTS as u32));
    let since = asked.max(kept).max(newest).min(until);
    let rows: Vec<Point> = incidents::history(&s.db, cluster.as_ref(), since, until, step).await?;
    let points = rows
        .into_iter()
        .map(|p| HistoryPoint {
            at: p.at,
            stranded: stranded.then_some(p.stranded),
            degraded: degraded.then_some(p.degraded),
            agents: agents.then_some(p.agents),
        })
        .collect();
    Ok(Json(HistoryResponse {
        step_seconds: step.as_secs(),
        since,
        until,
        points,
    }))
}
