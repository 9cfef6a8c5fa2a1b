//! Dashboard sign-in: an API token, typed once, becomes a signed session
//! cookie (HttpOnly, SameSite=Strict, `access.session_ttl`); the token
//! itself is never stored in the browser. Sign-out clears the cookie.
//! Both forms carry CSRF tokens like every other form.

use askama::Template;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use tracing::{info, warn};

use super::actions::{see_other, Checked, CsrfForm};
use super::{Ctx, Layout, UiQuery};
use crate::access::SESSION_COOKIE;
use crate::http::caller::ClientIp;
use crate::http::{set_cookie, AppState};
use crate::stats::Stats;

#[derive(Template)]
#[template(path = "signin.html")]
struct SigninPage {
    layout: Layout,
    next: String,
    message: String,
    tokens_configured: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NextQuery {
    next: Option<String>,
}

/// Only a path on this site: never `//host` or another scheme. Browsers
/// drop tabs and newlines from a `Location` and read `\\` as `/`, so
/// `/\t/evil.com` and `/\\evil.com` are `//evil.com` to them: a path with a
/// control character, whitespace, a backslash or `//` anywhere is refused.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n)
            if n.starts_with('/')
                && n.len() <= 2048
                && !n.contains("//")
                && !n
                    .chars()
                    .any(|c| c.is_control() || c.is_whitespace() || c == '\\') =>
        {
            n.to_string()
        }
        _ => "/".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::safe_next;

    #[test]
    fn next_is_a_path_on_this_site_only() {
        for bad in [
            "/\t/evil.com",
            "/\n/evil.com",
            "/ /evil.com",
            "/\u{a0}/evil.com",
            "/\\evil.com",
            "/\\/evil.com",
            "//evil.com",
            "///evil.com",
            "/agents//evil.com",
            "https://evil.com",
            "javascript:alert(1)",
            "evil.com",
            "",
        ] {
            assert_eq!(safe_next(Some(bad)), "/", "{bad:?} was taken");
        }
        assert_eq!(safe_next(None), "/");
        for good in [
            "/",
            "/agents/agent-1",
            "/signals?outcome=refused&limit=5",
            "/incidents/3#timeline",
        ] {
            assert_eq!(safe_next(Some(good)), good);
        }
    }
}

fn render(st: &AppState, ctx: &Ctx, status: StatusCode, next: String, message: String) -> Response {
    let page = SigninPage {
        layout: ctx.layout(st, "signin", "Sign in · Lifeline".into()),
        next,
        message,
        tokens_configured: st.access.has_tokens(),
    };
    ctx.render(status, &page)
}

pub async fn page(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<NextQuery>,
) -> Response {
    let next = safe_next(q.next.as_deref());
    render(&st, &ctx, StatusCode::OK, next, String::new())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SigninForm {
    csrf: String,
    token: String,
    #[serde(default)]
    next: String,
}

impl CsrfForm for SigninForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// A sign-in attempt's turn under the per-address limit, taken before
/// the form's body is read: a client held back is answered 429 at once,
/// and its body (however slowly it comes) is never waited for.
pub struct SignInTurn;

impl axum::extract::FromRequestParts<AppState> for SignInTurn {
    type Rejection = Response;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let Ok(ClientIp(client)) = ClientIp::from_request_parts(parts, st).await;
        let Err(wait) = st.access.admit_sign_in(client) else {
            return Ok(SignInTurn);
        };
        Stats::inc(&st.stats.http_rate_limited);
        warn!(peer = %client, "sign-in attempts from this address are held back");
        let Ok(ctx) = Ctx::from_request_parts(parts, st).await;
        let secs = wait.as_secs().max(1);
        let mut r = render(
            st,
            &ctx,
            StatusCode::TOO_MANY_REQUESTS,
            "/".into(),
            format!("Too many sign-in attempts from this address: try again in {secs} s."),
        );
        if let Ok(v) = secs.to_string().parse() {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        // The body is not read: the connection cannot be reused for
        // another request.
        r.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
        Err(r)
    }
}

pub async fn sign_in(
    State(st): State<AppState>,
    ctx: Ctx,
    _turn: SignInTurn,
    Checked { form, .. }: Checked<SigninForm>,
) -> Response {
    let next = safe_next(Some(&form.next));
    let Some(p) = st.access.authenticate(form.token.trim()) else {
        Stats::inc(&st.stats.http_unauthorized);
        return render(
            &st,
            &ctx,
            StatusCode::UNAUTHORIZED,
            next,
            "That token matches no API token in the config file.".into(),
        );
    };
    let Some(value) = st.access.session_value(&p) else {
        return render(
            &st,
            &ctx,
            StatusCode::UNAUTHORIZED,
            next,
            "The token is no longer configured.".into(),
        );
    };
    info!(token = %p.name, "signed in to the dashboard");
    let mut r = see_other(&next);
    if let Some(v) = set_cookie(
        SESSION_COOKIE,
        &value,
        Some(st.access.session_ttl()),
        st.tls,
    ) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignoutForm {
    csrf: String,
}

impl CsrfForm for SignoutForm {
    fn csrf(&self) -> &str {
        &self.csrf
    }
}

pub async fn sign_out(
    State(st): State<AppState>,
    Checked { .. }: Checked<SignoutForm>,
) -> impl IntoResponse {
    let mut r = see_other("/");
    if let Some(v) = set_cookie(SESSION_COOKIE, "", Some(std::time::Duration::ZERO), st.tls) {
        r.headers_mut().insert(header::SET_COOKIE, v);
    }
    r
}
