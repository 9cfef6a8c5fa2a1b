//! CSRF protection for the dashboard's forms, without server-side sessions.
//!
//! The browser holds a random id in an HttpOnly, SameSite=Strict cookie;
//! each form carries HMAC-SHA256(process key, id). A POST is accepted only
//! when the cookie is present and the form's token is the HMAC of it
//! (compared in constant time by `Mac::verify_slice`). Another site can
//! neither read the cookie nor compute the token, and SameSite=Strict keeps
//! the cookie off its requests anyway; a `Sec-Fetch-Site: cross-site`
//! request is refused outright. The key is per process: a restart makes
//! open forms stale, and the refusal says to reload.

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;

pub const COOKIE: &str = "lifeline_csrf";
const ID_BYTES: usize = 16;

pub struct Csrf {
    key: [u8; 32],
}

impl Default for Csrf {
    fn default() -> Self {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Csrf { key }
    }
}

/// The browser's id: from its cookie, or new (then it must be set).
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub new: bool,
}

impl Csrf {
    fn mac(&self, id: &str) -> Hmac<Sha256> {
        // HMAC takes keys of any length; 32 bytes cannot fail.
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(id.as_bytes());
        m
    }

    /// The token a form of this browser carries.
    pub fn token(&self, id: &str) -> String {
        hex::encode(self.mac(id).finalize().into_bytes())
    }

    /// True when `token` is this browser's token.
    pub fn verify(&self, id: &str, token: &str) -> bool {
        match hex::decode(token.trim()) {
            Ok(raw) => self.mac(id).verify_slice(&raw).is_ok(),
            Err(_) => false,
        }
    }
}

/// The id in the request's cookie, if well-formed.
pub fn cookie_id(headers: &HeaderMap) -> Option<String> {
    crate::http::cookie(headers, COOKIE)
        .filter(|v| v.len() == ID_BYTES * 2 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

pub fn session(headers: &HeaderMap) -> Session {
    match cookie_id(headers) {
        Some(id) => Session { id, new: false },
        None => {
            let mut raw = [0u8; ID_BYTES];
            rand::rng().fill_bytes(&mut raw);
            Session {
                id: hex::encode(raw),
                new: true,
            }
        }
    }
}

pub fn set_cookie(id: &str, secure: bool) -> Option<HeaderValue> {
    crate::http::set_cookie(COOKIE, id, None, secure)
}

/// Why a form POST was refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    CrossSite,
    NoCookie,
    BadToken,
}

impl Refusal {
    pub fn message(&self) -> &'static str {
        match self {
            Refusal::CrossSite => "refused: this form was posted from another site (CSRF protection)",
            Refusal::NoCookie => "refused: the form came without Lifeline's CSRF cookie; reload the page and submit again",
            Refusal::BadToken => "refused: the form's CSRF token does not match (the page is stale or Lifeline restarted); reload the page and submit again",
        }
    }
}

/// Checks a form POST.
pub fn check(c: &Csrf, headers: &HeaderMap, token: &str) -> Result<(), Refusal> {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Err(Refusal::CrossSite);
    }
    let id = cookie_id(headers).ok_or(Refusal::NoCookie)?;
    if c.verify(&id, token) {
        Ok(())
    } else {
        Err(Refusal::BadToken)
    }
}

#[cfg(test)]
mod tests {
    use axum::http::header;

    use super::*;

    fn with_cookie(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::COOKIE, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn token_round_trip_and_refusals() {
        let c = Csrf::default();
        let s = session(&HeaderMap::new());
        assert!(s.new);
        let h = with_cookie(&format!("theme=dark; {COOKIE}={}", s.id));
        assert_eq!(session(&h).id, s.id);
        let t = c.token(&s.id);
        assert_eq!(check(&c, &h, &t), Ok(()));
        assert_eq!(check(&c, &h, "00"), Err(Refusal::BadToken));
        assert_eq!(check(&c, &h, "not hex"), Err(Refusal::BadToken));
        assert_eq!(check(&c, &HeaderMap::new(), &t), Err(Refusal::NoCookie));
        // Another process (or a restart) has another key.
        assert_eq!(check(&Csrf::default(), &h, &t), Err(Refusal::BadToken));
        let mut cross = h.clone();
        cross.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert_eq!(check(&c, &cross, &t), Err(Refusal::CrossSite));
        // A malformed cookie is not an id.
        assert!(cookie_id(&with_cookie(&format!("{COOKIE}=xyz"))).is_none());
    }
}
