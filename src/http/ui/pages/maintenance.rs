//! Maintenance windows: those scheduled or active first, then the newest
//! that are over; a form to declare one and a button to end each.

use super::*;
use crate::domain::maintenance::WindowStatus;
use crate::domain::Window;

/// Windows shown (the API pages through the rest).
const ROWS: u32 = 100;

pub struct WindowRow {
    pub id: i64,
    pub status: &'static str,
    pub class: &'static str,
    pub targets: String,
    pub from: String,
    pub until: String,
    pub reason: String,
    pub by: String,
    pub ended: String,
    pub open: bool,
}

fn row(w: &Window, now: Ts) -> WindowRow {
    let status = w.status(now);
    WindowRow {
        id: w.id,
        status: status.as_str(),
        class: match status {
            WindowStatus::Active => "warn",
            WindowStatus::Scheduled => "",
            WindowStatus::Over | WindowStatus::Deleted => "muted",
        },
        targets: w
            .targets
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(" "),
        from: w.from.rfc3339(),
        until: w.until.rfc3339(),
        reason: w.reason.clone(),
        by: w.created_by.clone(),
        ended: match (&w.ended_by, w.ended_at) {
            (Some(by), Some(at)) => format!("ended by {by} at {}", at.rfc3339()),
            _ => String::new(),
        },
        open: matches!(status, WindowStatus::Scheduled | WindowStatus::Active),
    }
}

#[derive(Template)]
#[template(path = "maintenance.html")]
pub struct MaintenancePage {
    layout: Layout,
    rows: Vec<WindowRow>,
    /// What the last form did ("window 3 started").
    done: Option<String>,
    form: Declare,
}

/// The declare form as shown: empty, or what was sent with why it was
/// refused, so nothing typed is lost.
pub struct Declare {
    pub targets: String,
    pub length: String,
    pub reason: String,
    pub all: bool,
    pub error: Option<String>,
}

impl Default for Declare {
    fn default() -> Self {
        Declare {
            targets: String::new(),
            length: "1h".into(),
            reason: String::new(),
            all: false,
            error: None,
        }
    }
}

#[derive(Deserialize, Default)]
pub struct MaintenanceQuery {
    done: Option<String>,
}

pub async fn maintenance(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<MaintenanceQuery>,
) -> Result<Response, UiError> {
    let done = q.done.map(|d| crate::domain::text::bounded(&d, 200));
    page(&st, &ctx, StatusCode::OK, done, Declare::default()).await
}

/// The page with the declare form refused: its status is the error's,
/// and the form keeps what was typed and says why.
pub async fn refused_maintenance(
    st: &AppState,
    ctx: &Ctx,
    err: ApiError,
    mut form: Declare,
) -> Result<Response, UiError> {
    form.error = Some(err.to_string());
    page(st, ctx, err.status(), None, form).await
}

async fn page(
    st: &AppState,
    ctx: &Ctx,
    status: StatusCode,
    done: Option<String>,
    form: Declare,
) -> Result<Response, UiError> {
    let m = &st.maintenance;
    let now = m.now();
    let mut list = m.list(None, true, ROWS).await.map_err(ApiError::from)?;
    // Scheduled and active first (soonest end first), then the rest.
    list.sort_by_key(|w| {
        let over = w.end() <= now;
        (over, if over { Ts(-w.id) } else { w.end() })
    });
    Ok(ctx.render(
        status,
        &MaintenancePage {
            layout: ctx.layout(st, "maintenance", "Maintenance · Lifeline".into()),
            rows: list.iter().map(|w| row(w, now)).collect(),
            done,
            form,
        },
    ))
}
