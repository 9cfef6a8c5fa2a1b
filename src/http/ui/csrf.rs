//! CSRF protection for the dashboard's forms, without server-side sessions.
//!
//! The browser holds a random id in an HttpOnly, SameSite=Strict cookie
//! (`__Host-lifeline_csrf` over TLS, which no other host, a sibling
//! subdomain among them, can set; `lifeline_csrf` in plaintext); each form
//! carries HMAC-SHA256(process key, id, sign-in session cookie). A POST is
//! accepted only when the cookie is present and the form's token is the
//! HMAC of it and of the session the request carries (compared in constant
//! time by `Mac::verify_slice`): a token obtained under another sign-in,
//! or before signing in, is not one for this session. Another site can
//! neither read the cookies nor compute the token, and SameSite=Strict
//! keeps them off its requests anyway; a `Sec-Fetch-Site: cross-site`
//! request is refused outright. The key is the one every replica shares
//! (`access::SigningKeys`), so a form made on one replica posts to any.

use axum::http::{HeaderMap, HeaderValue};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use sha2::Sha256;

use crate::access::SESSION_COOKIE;

/// The CSRF cookie's name: over TLS with the `__Host-` prefix (Secure,
/// `Path=/`, no `Domain`: only this host can set it).
pub fn cookie_name(tls: bool) -> &'static str {
    if tls {
        "__Host-lifeline_csrf"
    } else {
        "lifeline_csrf"
    }
}
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

impl Csrf {
    /// Signing with `key`: the one every replica shares.
    pub fn with_key(key: [u8; 32]) -> Csrf {
        Csrf { key }
    }
}

/// The browser's id: from its cookie, or new (then it must be set); and
/// the sign-in session cookie its tokens are bound to ("" before sign-in).
#[derive(Clone, Debug)]
pub struct Session {
    pub id: String,
    pub new: bool,
    pub bound: String,
}

impl Csrf {
    fn mac(&self, id: &str, bound: &str) -> Hmac<Sha256> {
        // HMAC takes keys of any length; 32 bytes cannot fail.
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        // The id has a fixed length: the two parts cannot run together.
        m.update(id.as_bytes());
        m.update(bound.as_bytes());
        m
    }

    /// The token a form of this browser carries, under the sign-in
    /// session `bound` ("" when not signed in).
    pub fn token(&self, id: &str, bound: &str) -> String {
        hex::encode(self.mac(id, bound).finalize().into_bytes())
    }

    /// True when `token` is this browser's token under `bound`.
    pub fn verify(&self, id: &str, bound: &str, token: &str) -> bool {
        match hex::decode(token.trim()) {
            Ok(raw) => self.mac(id, bound).verify_slice(&raw).is_ok(),
            Err(_) => false,
        }
    }
}

/// The id in the request's cookie, if well-formed.
pub fn cookie_id(headers: &HeaderMap, tls: bool) -> Option<String> {
    crate::http::cookie(headers, cookie_name(tls))
        .filter(|v| v.len() == ID_BYTES * 2 && v.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The sign-in session cookie the request carries ("" without one).
fn bound(headers: &HeaderMap) -> String {
    crate::http::cookie(headers, SESSION_COOKIE).unwrap_or_default()
}

pub fn session(headers: &HeaderMap, tls: bool) -> Session {
    let bound = bound(headers);
    match cookie_id(headers, tls) {
        Some(id) => Session {
            id,
            new: false,
            bound,
        },
        None => {
            let mut raw = [0u8; ID_BYTES];
            rand::rng().fill_bytes(&mut raw);
            Session {
                id: hex::encode(raw),
                new: true,
                bound,
            }
        }
    }
}

pub fn set_cookie(id: &str, tls: bool) -> Option<HeaderValue> {
    crate::http::set_cookie(cookie_name(tls), id, None, tls)
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
pub fn check(c: &Csrf, headers: &HeaderMap, token: &str, tls: bool) -> Result<(), Refusal> {
    if headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site")
    {
        return Err(Refusal::CrossSite);
    }
    let id = cookie_id(headers, tls).ok_or(Refusal::NoCookie)?;
    if c.verify(&id, &bound(headers), token) {
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
        let s = session(&HeaderMap::new(), false);
        assert!(s.new);
        let name = cookie_name(false);
        let h = with_cookie(&format!("theme=dark; {name}={}", s.id));
        assert_eq!(session(&h, false).id, s.id);
        let t = c.token(&s.id, "");
        assert_eq!(check(&c, &h, &t, false), Ok(()));
        assert_eq!(check(&c, &h, "00", false), Err(Refusal::BadToken));
        assert_eq!(check(&c, &h, "not hex", false), Err(Refusal::BadToken));
        assert_eq!(
            check(&c, &HeaderMap::new(), &t, false),
            Err(Refusal::NoCookie)
        );
        // Another process (or a restart) has another key.
        assert_eq!(
            check(&Csrf::default(), &h, &t, false),
            Err(Refusal::BadToken)
        );
        let mut cross = h.clone();
        cross.insert("sec-fetch-site", HeaderValue::from_static("cross-site"));
        assert_eq!(check(&c, &cross, &t, false), Err(Refusal::CrossSite));
        // A malformed cookie is not an id.
        assert!(cookie_id(&with_cookie(&format!("{name}=xyz")), false).is_none());
    }

    /// A token is bound to the sign-in session it was made under: one
    /// made before signing in, or under another session, is refused.
    #[test]
    fn tokens_are_bound_to_the_sign_in_session() {
        let c = Csrf::default();
        let id = session(&HeaderMap::new(), false).id;
        let name = cookie_name(false);
        let mine = with_cookie(&format!("{name}={id}; {SESSION_COOKIE}=mine"));
        let t = c.token(&id, "mine");
        assert_eq!(check(&c, &mine, &t, false), Ok(()));
        let theirs = with_cookie(&format!("{name}={id}; {SESSION_COOKIE}=theirs"));
        assert_eq!(check(&c, &theirs, &t, false), Err(Refusal::BadToken));
        let before = c.token(&id, "");
        assert_eq!(check(&c, &mine, &before, false), Err(Refusal::BadToken));
    }

    /// Over TLS the cookie carries the `__Host-` prefix (and Secure, and
    /// Path=/); a plain-named cookie is not read there.
    #[test]
    fn over_tls_the_cookie_is_host_only() {
        let v = set_cookie("0123456789abcdef0123456789abcdef", true).unwrap();
        let v = v.to_str().unwrap();
        assert!(v.starts_with("__Host-lifeline_csrf="), "{v}");
        assert!(
            v.contains("Secure") && v.contains("Path=/") && !v.contains("Domain"),
            "{v}"
        );
        let tossed = with_cookie("lifeline_csrf=0123456789abcdef0123456789abcdef");
        assert_eq!(cookie_id(&tossed, true), None);
    }
}
