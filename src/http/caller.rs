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

/// The client's address for the per-address limits: the connection's own,
/// or, behind one of `access.trusted_proxies`, the one it forwarded for
/// (see [`crate::access::Access::client_ip`]).
#[derive(Clone, Copy, Debug)]
pub struct ClientIp(pub std::net::IpAddr);

impl axum::extract::FromRequestParts<super::AppState> for ClientIp {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        st: &super::AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
            .map_or(std::net::IpAddr::from([0, 0, 0, 0]), |c| c.0.ip());
        Ok(ClientIp(
            st.access
                .client_ip(peer, parts.headers.get("x-forwarded-for")),
        ))
    }
}
