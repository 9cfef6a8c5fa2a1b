//! Settings: every dynamic setting with its value, origin, default and
//! recent changes; signed in with the `update` role, a form per setting
//! changes or resets it through the same rules as the API.

use super::*;
use crate::settings::Settings;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsQuery {
    /// Set by a change's redirect: the setting just changed.
    saved: Option<String>,
}

pub struct ChangeLine {
    pub at: String,
    pub action: &'static str,
    pub old: String,
    pub new: String,
    pub origin: &'static str,
    pub actor: String,
}

pub struct SettingLine {
    pub name: &'static str,
    pub anchor: String,
    pub value: String,
    pub origin: &'static str,
    pub default: String,
    pub config_key: &'static str,
    pub description: &'static str,
    pub updated: String,
    pub history: Vec<ChangeLine>,
}

#[derive(Template)]
#[template(path = "settings.html")]
pub struct SettingsPage {
    layout: Layout,
    settings: Vec<SettingLine>,
    flash: Option<String>,
}

/// Changes shown per setting (the API has more).
const HISTORY: u32 = 5;

pub async fn settings(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<SettingsQuery>,
) -> Result<Response, UiError> {
    let now = st.fleet.published().at();
    let views = st.settings.list().await.map_err(ApiError::from)?;
    let mut lines = Vec::with_capacity(views.len());
    for v in views {
        let name = Settings::name(v.name).map_err(ApiError::from)?;
        let history = st
            .settings
            .history(name, HISTORY)
            .await
            .map_err(ApiError::from)?
            .into_iter()
            .map(|c| ChangeLine {
                at: format!("{} ({})", fmt::hms(c.at()), fmt::ago(now, c.at())),
                action: c.action.as_str(),
                old: c.old_value.clone().unwrap_or_default(),
                new: c.new_value.clone(),
                origin: c.new_origin.as_str(),
                actor: c.actor.clone(),
            })
            .collect();
        lines.push(SettingLine {
            name: v.name,
            anchor: format!("setting-{}", v.name),
            value: v.value.to_string(),
            origin: v.origin.as_str(),
            default: v.default.to_string(),
            config_key: v.config_key,
            description: v.description,
            updated: if v.updated_by.is_empty() {
                String::new()
            } else {
                format!("{} by {}", fmt::hms(v.updated_at), v.updated_by)
            },
            history,
        });
    }
    let flash = field(q.saved)
        .and_then(|s| Settings::name(&s).ok())
        .map(|n| format!("{} saved.", n.as_str()));
    Ok(ctx.render(
        StatusCode::OK,
        &SettingsPage {
            layout: ctx.layout(&st, "settings", "Settings · Lifeline".into()),
            settings: lines,
            flash,
        },
    ))
}
