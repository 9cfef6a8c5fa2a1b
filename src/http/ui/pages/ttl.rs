//! TTL windows of proxies and auth servers, soonest to expire first.

use super::*;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TtlQuery {
    kind: Option<String>,
    cursor: Option<String>,
    limit: Option<String>,
}

#[derive(Template)]
#[template(path = "ttl.html")]
pub struct TtlPage {
    layout: Layout,
    svg: Svg,
    kind: String,
    next_href: Option<String>,
    first_href: Option<String>,
}

pub async fn ttl(
    State(st): State<AppState>,
    ctx: Ctx,
    UiQuery(q): UiQuery<TtlQuery>,
) -> Result<Response, UiError> {
    let kind_s = field(q.kind);
    let kind = match kind_s.as_deref() {
        None | Some("all") => None,
        Some("proxy") => Some(Kind::Proxy),
        Some("auth_server") => Some(Kind::AuthServer),
        Some("agent") => Some(Kind::Agent),
        Some(k) => {
            return Err(ApiError::BadParameter(format!(
                "kind must be proxy, auth_server or agent, got {k:?}"
            ))
            .into())
        }
    };
    let limit_s = field(q.limit.clone());
    let limit = page_limit(q.limit)?;
    let cursor = field(q.cursor);
    let c2 = name_cursor(cursor.clone())?;
    let (page, now) = st.fleet.ttl_windows(kind, c2, limit).await?;
    let kind_v = kind_s.clone();
    let next_href = page.next_cursor.as_ref().map(|c| {
        format!(
            "/ttl{}",
            qs(&[
                ("kind", &kind_v),
                ("limit", &limit_s),
                ("cursor", &Some(c.clone())),
            ])
        )
    });
    let first_href =
        cursor.map(|_| format!("/ttl{}", qs(&[("kind", &kind_v), ("limit", &limit_s)])));
    Ok(ctx.render(
        StatusCode::OK,
        &TtlPage {
            layout: ctx.layout(&st, "ttl", "TTL windows · Lifeline".into()),
            svg: ttl_svg::build(&page.items, now),
            kind: kind_s.unwrap_or_default(),
            next_href,
            first_href,
        },
    ))
}
