//! The signal audit, filtered and paged.

use super::*;

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
    let published = st.fleet.recent().await?;
    let (now, counts) = (published.at(), published.counts().clone());
    let recs = audit::list(
        &st.db,
        &SignalFilter {
            cluster: None,
            agent: agent.clone(),
            outcome: outcome_f,
            kind: kind_f,
            requested_by: by.clone(),
            before_id,
            incident: None,
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
            outcomes: crate::domain::names::<Outcome>(),
            next_href,
            first_href,
            flash,
            stranded: counts.stranded,
        },
    ))
}
