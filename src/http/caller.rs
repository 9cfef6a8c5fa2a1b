//! Who is asking: the principal the access middleware found, as an
//! extractor for handlers. A leaf: it knows roles, not routes or pages.

use crate::access::Principal;
use crate::config::Role;

/// The request's principal, if it presented one (in request extensions).
#[derive(Clone, Debug, Default)]
pub struct Caller(pub Option<Principal>);

impl Caller {
    /// The caller `guard` left in the request's extensions.
    pub fn of(ext: &axum::http::Extensions) -> Caller {
        ext.get::<Caller>().cloned().unwrap_or_default()
    }

    /// How the audit names the caller.
    pub fn actor(&self) -> String {
        self.0
            .as_ref()
            .map_or_else(|| "anonymous".to_string(), |p| p.name.clone())
    }

    pub fn has(&self, r: Role) -> bool {
        self.0.as_ref().is_some_and(|p| p.has(r))
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Caller::of(&parts.extensions))
    }
}
