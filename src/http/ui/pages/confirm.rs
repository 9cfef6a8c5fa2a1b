//! The confirmation before reconnecting every stranded agent.

use super::*;

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
    let connected = names.iter().filter(|n| st.hub.reachable(n)).count();
    Ok(ctx.render(
        StatusCode::OK,
        &ConfirmPage {
            layout: ctx.layout(&st, "signals", "Reconnect all stranded · Lifeline".into()),
            stranded: names.len(),
            connected,
        },
    ))
}
