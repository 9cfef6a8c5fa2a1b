//! Auth servers: health, how it is watched, and its transitions.

use super::*;

pub struct TransitionLine {
    pub at: String,
    pub from: &'static str,
    pub to: &'static str,
    pub icon: &'static str,
    pub class: &'static str,
    pub mode: &'static str,
    pub detail: String,
}

pub struct AuthSection {
    pub chip: AuthChip,
    pub transitions: Vec<TransitionLine>,
    /// Agent-minutes stranded by its incidents, last 7 and 30 days.
    pub caused_7d: String,
    pub caused_30d: String,
}

#[derive(Template)]
#[template(path = "auth.html")]
pub struct AuthPage {
    layout: Layout,
    sections: Vec<AuthSection>,
}

pub async fn auth(State(st): State<AppState>, ctx: Ctx) -> Result<Response, UiError> {
    let published = st.fleet.recent().await?;
    let (auths, now) = (published.auth_servers.clone(), published.at());
    let mut sections = Vec::new();
    for chip in auth_chips(now, auths) {
        let transitions = read::transitions(&st.db, st.fleet.cluster(), &chip.name, 20)
            .await?
            .into_iter()
            .map(|t| {
                let h = t.to_status;
                TransitionLine {
                    at: format!("{} ({})", fmt::hms(t.at()), fmt::ago(now, t.at())),
                    icon: fmt::health_icon(h),
                    class: fmt::health_class(h),
                    from: t.from_status.as_str(),
                    to: t.to_status.as_str(),
                    mode: t.mode.as_str(),
                    detail: t.detail,
                }
            })
            .collect();
        let (d7, d30) =
            crate::store::incidents::caused_minutes_stranded(&st.db, &chip.name, week_month(now))
                .await?;
        sections.push(AuthSection {
            caused_7d: minutes_text(d7),
            caused_30d: minutes_text(d30),
            chip,
            transitions,
        });
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
