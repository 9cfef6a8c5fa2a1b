//! What the API's operations share in their OpenAPI description: the
//! error responses and the schemas of parameters whose rules the types
//! alone do not say. A leaf: the handlers (`api`, `settings`, `signals`)
//! use it, and `openapi` assembles the document from them.

use super::error::ErrorBody;

/// `?since=`'s durations, as the contract states them: what the events
/// handler accepts, and nothing more.
pub const SINCE_PATTERN: &str = "^[1-9][0-9]{0,8}[smhd]$";

/// A string that is one of `values`.
fn one_of(values: &[&'static str]) -> utoipa::openapi::schema::Object {
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    ObjectBuilder::new()
        .schema_type(Type::String)
        .enum_values(Some(values.iter().copied()))
        .build()
}

/// `?state=` of episodes: healthy periods are not episodes.
pub fn episode_state() -> utoipa::openapi::schema::Object {
    one_of(&["degraded", "stranded"])
}

/// `?kind=` of TTL windows: tunnels have no announce TTL.
pub fn ttl_kind() -> utoipa::openapi::schema::Object {
    one_of(&["proxy", "auth_server", "agent"])
}

/// `?since=`: an RFC 3339 time, or a duration back from now.
pub fn since() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{AnyOfBuilder, KnownFormat, ObjectBuilder, SchemaFormat, Type};
    AnyOfBuilder::new()
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .format(Some(SchemaFormat::KnownFormat(KnownFormat::DateTime))),
        )
        .item(
            ObjectBuilder::new()
                .schema_type(Type::String)
                .pattern(Some(SINCE_PATTERN)),
        )
        .description(Some(
            "An RFC 3339 time, or a duration back from now: a number and one of s, m, h, d.",
        ))
        .examples(["15m", "2026-11-24T07:00:00Z"])
        .build()
        .into()
}

/// What a read can answer besides its own 200.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum ReadErrors {
    /// A parameter is unknown, malformed or out of range (`bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// With `access.read_requires_token`: no token, or one that is not valid.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the `read` role.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// A read of one named thing: as [`ReadErrors`], and 404 `not_found`.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum ReadOneErrors {
    /// A parameter is malformed (`bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// With `access.read_requires_token`: no token, or one that is not valid.
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the `read` role.
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// No such thing (`not_found`, `unknown_setting`).
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}

/// What a mutation can answer besides its own success.
#[derive(utoipa::IntoResponses)]
#[allow(dead_code)]
pub enum WriteErrors {
    /// The body or a parameter is not valid (`bad_body`, `bad_parameter`).
    #[response(status = 400)]
    BadRequest(ErrorBody),
    /// No token, or one that is not valid (`unauthenticated`,
    /// `invalid_token`, `bad_authorization`).
    #[response(status = 401)]
    Unauthorized(ErrorBody),
    /// The token lacks the role the operation needs (`forbidden`).
    #[response(status = 403)]
    Forbidden(ErrorBody),
    /// The agent, proxy, auth server or setting is unknown.
    #[response(status = 404)]
    NotFound(ErrorBody),
    /// Valid, but not now (`not_connected`, `no_such_tunnel`,
    /// `already_exists`, `managed_by_config_file`).
    #[response(status = 409)]
    Conflict(ErrorBody),
    /// The body is larger than `server.max_body_bytes` (`body_too_large`).
    #[response(status = 413)]
    TooLarge(ErrorBody),
    /// A manual reconnect of this agent too soon (`rate_limited`; see
    /// `Retry-After`).
    #[response(status = 429)]
    TooMany(ErrorBody),
    /// Lifeline is busy or stopping (`busy`, `unavailable`); try again.
    #[response(status = 503)]
    Unavailable(ErrorBody),
}
