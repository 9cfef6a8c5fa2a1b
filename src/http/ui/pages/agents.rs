//! The agent list: filters by state, proxy, auth server and name, paged.

use super::*;

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
    /// Filtered by one proxy (the TTL windows link here): the agent
    /// stranding it caused, last 7 and 30 days.
    proxy_caused: Option<(String, String)>,
}

pub async fn agents(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<AgentsQuery>,
) -> Result<Response, UiError> {
    let state_s = field(q.state);
    let state = match state_s.as_deref() {
        None | Some("all") => None,
        Some(s) => Some(s.parse::<crate::domain::Standing>().map_err(|_| {
            ApiError::BadParameter(format!(
                "state must be healthy, degraded, stranded or planned, got {s:?}"
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
    let restarts = st.hub.restarts();
    let proxy_caused = match &proxy {
        Some(p) => {
            let (d7, d30) =
                crate::store::incidents::caused_minutes_stranded(&st.db, p, week_month(now))
                    .await?;
            Some((minutes_text(d7), minutes_text(d30)))
        }
        None => None,
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
            proxy_caused,
            counts: Counts {
                total: counts.total,
                healthy: counts.healthy,
                degraded: counts.degraded,
                stranded: counts.stranded,
                planned: counts.planned,
                proxies_live: 0,
                proxies_total: 0,
                connected: st.hub.connected(),
                waiting: counts.waiting_for_live_proxy,
                sidecars: restarts.1,
                restarting: restarts.0,
                dry_run: st.hub.dry_run_sidecars(),
            },
        },
    ))
}
