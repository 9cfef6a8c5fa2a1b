//! Lists, one page at a time: the `limit` and `cursor` parameters are
//! declared here once (for the OpenAPI document, as [`IdPage`] and
//! [`NamePage`]) and checked here once ([`Listed`]); a list endpoint names
//! only its own filters. The page it answers is a [`Page`].
//!
//! Owns: the page parameters, their checks and the page's shape. Must not
//! touch: what is listed (each endpoint's filters and reads).

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::ApiError;
use crate::fleet::view;

pub const DEFAULT_LIMIT: u32 = 100;
pub const MAX_LIMIT: u32 = 1000;

/// A page size given alone (one incident's two pages): 1 to
/// [`MAX_LIMIT`], default [`DEFAULT_LIMIT`].
pub(super) fn limit(l: Option<u32>) -> Result<u32, ApiError> {
    let l = l.unwrap_or(DEFAULT_LIMIT);
    if (1..=MAX_LIMIT).contains(&l) {
        Ok(l)
    } else {
        Err(ApiError::BadParameter(format!(
            "limit must be between 1 and {MAX_LIMIT}, got {l}"
        )))
    }
}

/// A name cursor (`next_cursor` of an agents or TTL page), decoded.
pub(crate) fn name_cursor(c: Option<String>) -> Result<Option<String>, ApiError> {
    c.map(|c| view::cursor::decode(&c).ok_or_else(|| bad_cursor(&c)))
        .transpose()
}

/// An id cursor (`next_cursor` of an episodes or signals page).
pub(crate) fn id_cursor(c: Option<String>) -> Result<Option<i64>, ApiError> {
    c.map(|c| {
        c.parse::<i64>()
            .ok()
            .filter(|v| *v > 0)
            .ok_or_else(|| bad_cursor(&c))
    })
    .transpose()
}

fn bad_cursor(c: &str) -> ApiError {
    ApiError::BadParameter(format!(
        "cursor {:?} is not a valid cursor: pass the next_cursor of an earlier page",
        crate::http::error::clip(c)
    ))
}

/// How a list's cursor is written: the id of the last item (newest first)
/// or the hex of the last name (in name order).
pub trait Cursor {
    type Value;
    fn decode(c: Option<String>) -> Result<Option<Self::Value>, ApiError>;
}

/// Cursors of lists newest first: the last item's id.
pub struct ById;

/// Cursors of lists in name order: the hex of the last key.
pub struct ByName;

impl Cursor for ById {
    type Value = i64;
    fn decode(c: Option<String>) -> Result<Option<i64>, ApiError> {
        id_cursor(c)
    }
}

impl Cursor for ByName {
    type Value = String;
    fn decode(c: Option<String>) -> Result<Option<String>, ApiError> {
        name_cursor(c)
    }
}

/// The page asked for, checked: `limit` within 1 to [`MAX_LIMIT`]
/// (default [`DEFAULT_LIMIT`]) and the cursor one of ours.
pub struct Paging<C: Cursor> {
    pub limit: u32,
    pub cursor: Option<C::Value>,
}

/// The page parameters of a list newest first, as the document shows them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // declared for the document; read by `Listed`
pub struct IdPage {
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[param(pattern = "^[1-9][0-9]{0,17}$")]
    cursor: Option<String>,
}

/// The page parameters of a list in name order, as the document shows them.
#[derive(utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[allow(dead_code)] // declared for the document; read by `Listed`
pub struct NamePage {
    /// Page size, 1 to 1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    #[param(pattern = "^(?:[0-9a-fA-F]{2})+$", max_length = 538)]
    cursor: Option<String>,
}

/// A list's query: its own filters `F` (unknown parameters refused, as
/// everywhere) and the page asked for.
pub struct Listed<F, C: Cursor>(pub F, pub Paging<C>);

impl<S, F, C> FromRequestParts<S> for Listed<F, C>
where
    F: DeserializeOwned,
    C: Cursor,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let (filters, paging) = split(parts.uri.query().unwrap_or(""))?;
        Ok(Listed(filters, paging))
    }
}

fn invalid(e: impl std::fmt::Display) -> ApiError {
    ApiError::BadParameter(format!("invalid query: {e}"))
}

/// Takes `limit` and `cursor` out of `query`, checks them, and reads the
/// rest as `F`.
fn split<F: DeserializeOwned, C: Cursor>(query: &str) -> Result<(F, Paging<C>), ApiError> {
    let pairs: Vec<(String, String)> = serde_urlencoded::from_str(query).map_err(invalid)?;
    let (mut limit, mut cursor) = (None, None);
    let mut rest = Vec::with_capacity(pairs.len());
    for (k, v) in pairs {
        let slot = match k.as_str() {
            "limit" => &mut limit,
            "cursor" => &mut cursor,
            _ => {
                rest.push((k, v));
                continue;
            }
        };
        if slot.replace(v).is_some() {
            return Err(invalid(format!("duplicate field `{k}`")));
        }
    }
    // The rest is read as axum's `Query` reads it, so that its errors name
    // the field as everywhere else (`ApiQuery`).
    let uri: axum::http::Uri = serde_urlencoded::to_string(&rest)
        .map_err(invalid)
        .and_then(|q| format!("/?{q}").parse().map_err(invalid))?;
    let filters = match axum::extract::Query::<F>::try_from_uri(&uri) {
        Ok(axum::extract::Query(f)) => f,
        Err(e) => {
            // serde names the filters it expected; the page's two are
            // expected too.
            let text = e
                .body_text()
                .replace("Failed to deserialize query string: ", "invalid query: ");
            let text = match text.contains("unknown field") && text.contains(", expected") {
                true => format!("{text}, `limit`, `cursor`"),
                false => text,
            };
            return Err(ApiError::BadParameter(text));
        }
    };
    let limit = limit
        .map(|l| l.parse::<u32>())
        .transpose()
        .map_err(|e| invalid(format!("limit: {e}")))
        .and_then(self::limit)?;
    let cursor = C::decode(cursor)?;
    Ok((filters, Paging { limit, cursor }))
}

/// One page of a list and the cursor of the next, if there may be one.
#[derive(Serialize, utoipa::ToSchema)]
pub struct Page<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
}

impl<T> Page<T> {
    /// A full page (`limit` items) has a next page, after the last item's
    /// `id`; a shorter one is the last.
    pub fn by_id(items: Vec<T>, limit: u32, id: impl Fn(&T) -> i64) -> Page<T> {
        let next_cursor = (items.len() == limit as usize)
            .then(|| items.last().map(|i| id(i).to_string()))
            .flatten();
        Page { items, next_cursor }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(serde::Deserialize, Debug, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Filters {
        agent: Option<String>,
    }

    fn read(q: &str) -> Result<(Filters, Paging<ById>), String> {
        split::<Filters, ById>(q).map_err(|e| e.to_string())
    }

    #[test]
    fn the_page_is_taken_out_and_the_filters_read_as_before() {
        let (f, p) = read("agent=a%201&limit=7&cursor=42").expect("valid");
        assert_eq!(f.agent.as_deref(), Some("a 1"));
        assert_eq!((p.limit, p.cursor), (7, Some(42)));
        let (f, p) = read("").expect("empty");
        assert_eq!((f.agent, p.limit, p.cursor), (None, DEFAULT_LIMIT, None));
    }

    #[test]
    fn every_bad_page_parameter_is_a_clear_error() {
        for (q, says) in [
            ("limit=0", "limit must be between 1 and 1000, got 0"),
            ("limit=1001", "got 1001"),
            ("limit=abc", "limit: invalid digit"),
            ("limit=-1", "limit: invalid digit"),
            ("limit=99999999999999999999", "limit: number too large"),
            ("limit=1&limit=2", "duplicate field `limit`"),
            ("cursor=0", "is not a valid cursor"),
            ("cursor=abc", "is not a valid cursor"),
            ("cursor=1&cursor=2", "duplicate field `cursor`"),
            (
                "nope=1",
                "unknown field `nope`, expected `agent`, `limit`, `cursor`",
            ),
        ] {
            let e = read(q).err().unwrap_or_default();
            assert!(e.contains(says), "{q}: {e}");
        }
        let e = split::<Filters, ByName>("cursor=zz")
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("is not a valid cursor"), "{e}");
    }
}
