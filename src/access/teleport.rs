//! Sign-in through Teleport's Application Access: the JWT Teleport's app
//! proxy adds to every request it forwards (`Teleport-Jwt-Assertion`),
//! verified by `jsonwebtoken` against the cluster's JWKS.
//!
//! - Only RS256 (Teleport's legacy suite) and ES256 (its newer suites,
//!   P-256) are taken; `none`, HMAC and everything else are refused before
//!   any key is looked at.
//! - `aud` must be the configured app URI and `iss` the cluster's name;
//!   `exp` and `nbf` are read on Lifeline's one clock, with a small
//!   leeway.
//! - Keys come from the proxy's `/.well-known/jwks.json`, fetched when
//!   first needed and cached. A token naming a key the cache lacks (a CA
//!   rotation), or one with an empty `kid` (older Teleport) that no cached
//!   key verifies, has the set fetched again: one fetch at a time, at most
//!   one per `refresh_min_interval`, and no request waits for one longer
//!   than `jwks_timeout`.
//! - Teleport roles and traits map to Lifeline's roles (`roles_map`,
//!   `traits_map`); the user's Teleport name is the principal.
//!
//! Owns: the key cache and the verdict on one token. Must not touch: HTTP
//! (the `http` room hands the header in and renders the refusal).

use std::collections::HashMap;

use base64::Engine;
use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, JwkSet};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use tracing::{debug, warn};

use super::Principal;
use crate::clock::{Clock, Ts};
use crate::config::{Role, TeleportAccessConfig};

/// The header Teleport's app proxy sets (`AppJWTHeader`).
pub const HEADER: &str = "teleport-jwt-assertion";
/// Longest token read; a longer header is refused unread.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;
/// Largest key set read.
const MAX_JWKS_BYTES: usize = 1024 * 1024;
/// Most keys kept from one set.
const MAX_KEYS: usize = 64;
/// Longest user name taken.
const MAX_USER: usize = 256;

/// Why a token was refused; each says so in words an operator can act on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("the token is {0} bytes, more than the {MAX_TOKEN_BYTES} read")]
    TooLarge(usize),
    #[error("the token is not a JWT: {0}")]
    Malformed(String),
    #[error("the token is signed with {0:?}: only RS256 and ES256 (Teleport's signature suites) are accepted")]
    Algorithm(String),
    #[error("no key of the cluster's key set is {kid:?} (the set is fetched again for an unknown key at most every access.teleport.refresh_min_interval)")]
    UnknownKey { kid: String },
    #[error("the cluster's key set could not be fetched: {0}")]
    NoKeys(String),
    #[error("the signature matches no key of the cluster's key set")]
    BadSignature,
    #[error("the token expired at {0}")]
    Expired(Ts),
    #[error("the token is not valid before {0}")]
    NotYetValid(Ts),
    #[error("the token is for audience {got:?}, not {want:?} (access.teleport.audience)")]
    Audience { got: String, want: String },
    #[error(
        "the token was issued by {got:?}, not the cluster {want:?} (access.teleport.cluster_name)"
    )]
    Issuer { got: String, want: String },
    #[error("the token's claims are not Teleport's: {0}")]
    Claims(String),
}

impl Refusal {
    /// A short code for the JSON error and the log.
    pub fn code(&self) -> &'static str {
        match self {
            Refusal::TooLarge(_) => "too_large",
            Refusal::Malformed(_) => "malformed",
            Refusal::Algorithm(_) => "algorithm",
            Refusal::UnknownKey { .. } => "unknown_key",
            Refusal::NoKeys(_) => "no_keys",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired(_) => "expired",
            Refusal::NotYetValid(_) => "not_yet_valid",
            Refusal::Audience { .. } => "audience",
            Refusal::Issuer { .. } => "issuer",
            Refusal::Claims(_) => "claims",
        }
    }
}

/// One key of the set.
struct Key {
    kid: String,
    alg: Algorithm,
    key: DecodingKey,
}

/// The cached set, and when it was last fetched (or tried).
#[derive(Default)]
struct Cache {
    keys: Vec<Key>,
    fetched: Option<Ts>,
}

/// The claims Teleport's app JWT carries (`lib/jwt/jwt.go`); `roles` and
/// `traits` may be left out (`rewrite.jwt_claims`).
#[derive(Deserialize)]
struct Claims {
    sub: String,
    #[serde(default)]
    username: Option<String>,
    iss: String,
    #[serde(default)]
    aud: Audience,
    exp: i64,
    #[serde(default)]
    nbf: Option<i64>,
    #[serde(default)]
    roles: Option<Vec<String>>,
    #[serde(default)]
    traits: Option<HashMap<String, Option<Vec<String>>>>,
}

/// `aud`: one string or a list.
#[derive(Deserialize, Default)]
#[serde(untagged)]
enum Audience {
    One(String),
    Many(Vec<String>),
    #[default]
    None,
}

impl Audience {
    fn has(&self, want: &str) -> bool {
        match self {
            Audience::One(a) => a == want,
            Audience::Many(v) => v.iter().any(|a| a == want),
            Audience::None => false,
        }
    }

    fn shown(&self) -> String {
        match self {
            Audience::One(a) => a.clone(),
            Audience::Many(v) => v.join(", "),
            Audience::None => String::new(),
        }
    }
}

/// The verifier of one cluster's app-access JWTs.
pub struct TeleportJwt {
    cfg: TeleportAccessConfig,
    client: reqwest::Client,
    clock: Clock,
    cache: std::sync::RwLock<Cache>,
    /// One fetch at a time.
    fetching: tokio::sync::Mutex<()>,
}

/// Why the verifier could not be built.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error("access.teleport.ca_file {path}: {why}")]
    Ca { path: String, why: String },
    #[error("access.teleport: cannot build the HTTPS client: {0}")]
    Client(String),
}

impl TeleportJwt {
    pub fn new(cfg: &TeleportAccessConfig, clock: Clock) -> Result<TeleportJwt, SetupError> {
        let mut b = reqwest::Client::builder()
            .timeout(cfg.jwks_timeout)
            .connect_timeout(cfg.jwks_timeout)
            .redirect(reqwest::redirect::Policy::none());
        if let Some(path) = &cfg.ca_file {
            let shown = path.display().to_string();
            let pem = std::fs::read(path).map_err(|e| SetupError::Ca {
                path: shown.clone(),
                why: e.to_string(),
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| SetupError::Ca {
                    path: shown.clone(),
                    why: e.to_string(),
                })?;
            if certs.is_empty() {
                return Err(SetupError::Ca {
                    path: shown,
                    why: "holds no PEM certificate".into(),
                });
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        let client = b.build().map_err(|e| SetupError::Client(e.to_string()))?;
        Ok(TeleportJwt {
            cfg: cfg.clone(),
            client,
            clock,
            cache: std::sync::RwLock::new(Cache::default()),
            fetching: tokio::sync::Mutex::new(()),
        })
    }

    /// The principal `token` names, or why it is refused.
    pub async fn verify(&self, token: &str) -> Result<Principal, Refusal> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(Refusal::TooLarge(token.len()));
        }
        let token = token.trim();
        let (alg, kid) = header_of(token)?;
        let claims = match self.try_keys(token, alg, &kid) {
            Some(r) => r?,
            None => {
                // A key the cache lacks: the set may have rotated.
                self.refresh().await?;
                match self.try_keys(token, alg, &kid) {
                    Some(r) => r?,
                    None if kid.is_empty() => return Err(Refusal::BadSignature),
                    None => return Err(Refusal::UnknownKey { kid }),
                }
            }
        };
        self.check(&claims)?;
        Ok(self.principal(&claims))
    }

    /// Verifies with the cached keys that may have signed it: `None` when
    /// none verifies and a fresh set might (an unknown `kid`, or an empty
    /// one that no cached key verifies).
    fn try_keys(&self, token: &str, alg: Algorithm, kid: &str) -> Option<Result<Claims, Refusal>> {
        let cache = self.cache.read().unwrap_or_else(|e| e.into_inner());
        let mut validation = Validation::new(alg);
        // exp and nbf are read on Lifeline's clock (`check`); aud and iss
        // there too, to say which was wrong.
        validation.validate_exp = false;
        validation.validate_nbf = false;
        validation.validate_aud = false;
        validation.required_spec_claims = ["exp", "iss", "sub"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let candidates = cache
            .keys
            .iter()
            .filter(|k| k.alg == alg && (kid.is_empty() || k.kid == kid));
        let mut tried = false;
        for k in candidates {
            tried = true;
            match jsonwebtoken::decode::<Claims>(token, &k.key, &validation) {
                Ok(d) => return Some(Ok(d.claims)),
                Err(e) => match e.kind() {
                    jsonwebtoken::errors::ErrorKind::InvalidSignature => continue,
                    jsonwebtoken::errors::ErrorKind::Json(_)
                    | jsonwebtoken::errors::ErrorKind::MissingRequiredClaim(_) => {
                        return Some(Err(Refusal::Claims(e.to_string())))
                    }
                    _ => return Some(Err(Refusal::Malformed(e.to_string()))),
                },
            }
        }
        if tried && !kid.is_empty() {
            // The named key is held and does not verify: a fresh set
            // would not change that.
            return Some(Err(Refusal::BadSignature));
        }
        None
    }

    fn check(&self, c: &Claims) -> Result<(), Refusal> {
        let now = self.clock.now();
        let leeway = self.cfg.leeway;
        let at = |secs: i64| Ts::from_micros(secs.saturating_mul(1_000_000));
        let exp = at(c.exp);
        if now.saturating_sub(leeway) >= exp {
            return Err(Refusal::Expired(exp));
        }
        if let Some(nbf) = c.nbf.map(at) {
            if now.saturating_add(leeway) < nbf {
                return Err(Refusal::NotYetValid(nbf));
            }
        }
        if c.iss != self.cfg.cluster_name {
            return Err(Refusal::Issuer {
                got: crate::domain::text::excerpt(&c.iss),
                want: self.cfg.cluster_name.clone(),
            });
        }
        if !c.aud.has(&self.cfg.audience) {
            return Err(Refusal::Audience {
                got: crate::domain::text::excerpt(&c.aud.shown()),
                want: self.cfg.audience.clone(),
            });
        }
        let user = c.username.as_deref().unwrap_or(&c.sub);
        if user.is_empty()
            || user.len() > MAX_USER
            || user.chars().any(crate::domain::text::is_unsafe)
        {
            return Err(Refusal::Claims(format!(
                "the user name must be 1 to {MAX_USER} printable characters"
            )));
        }
        Ok(())
    }

    fn principal(&self, c: &Claims) -> Principal {
        let mut roles: Vec<Role> = Vec::new();
        let mut grant = |rs: &[Role]| {
            for r in rs {
                if !roles.contains(r) {
                    roles.push(*r);
                }
            }
        };
        for r in c.roles.iter().flatten() {
            if let Some(rs) = self.cfg.roles_map.get(r) {
                grant(rs);
            }
        }
        for t in &self.cfg.traits_map {
            let has = c
                .traits
                .as_ref()
                .and_then(|m| m.get(&t.name))
                .and_then(|v| v.as_ref())
                .is_some_and(|v| v.contains(&t.value));
            if has {
                grant(&t.roles);
            }
        }
        roles.sort();
        Principal {
            name: c.username.clone().unwrap_or_else(|| c.sub.clone()),
            roles,
        }
    }

    /// Fetches the key set again, unless one was fetched (or tried) within
    /// `refresh_min_interval`, or another fetch is under way (then waits
    /// for it, at most `jwks_timeout`).
    async fn refresh(&self) -> Result<(), Refusal> {
        let wait = self.cfg.jwks_timeout;
        let Ok(_one) = tokio::time::timeout(wait, self.fetching.lock()).await else {
            return Err(Refusal::NoKeys(format!(
                "another fetch has not ended within {}",
                humantime::format_duration(wait)
            )));
        };
        let now = self.clock.now();
        let recent = {
            let c = self.cache.read().unwrap_or_else(|e| e.into_inner());
            c.fetched
                .is_some_and(|t| now.saturating_sub(self.cfg.refresh_min_interval) < t)
        };
        if recent {
            return Ok(());
        }
        self.cache
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .fetched = Some(now);
        let fetched = tokio::time::timeout(wait, self.fetch())
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "{} did not answer within {}",
                    self.cfg.jwks_url,
                    humantime::format_duration(wait)
                ))
            });
        match fetched {
            Ok(keys) => {
                debug!(keys = keys.len(), url = %self.cfg.jwks_url, "Teleport's JWT key set fetched");
                self.cache.write().unwrap_or_else(|e| e.into_inner()).keys = keys;
                Ok(())
            }
            Err(why) => {
                warn!(url = %self.cfg.jwks_url, %why, "cannot fetch Teleport's JWT key set; the keys held are kept");
                let held = !self
                    .cache
                    .read()
                    .unwrap_or_else(|e| e.into_inner())
                    .keys
                    .is_empty();
                if held {
                    Ok(())
                } else {
                    Err(Refusal::NoKeys(why))
                }
            }
        }
    }

    async fn fetch(&self) -> Result<Vec<Key>, String> {
        let mut resp = self
            .client
            .get(&self.cfg.jwks_url)
            .send()
            .await
            .map_err(|e| format!("{}: {e}", self.cfg.jwks_url))?;
        if !resp.status().is_success() {
            return Err(format!("{} answered {}", self.cfg.jwks_url, resp.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| e.to_string())? {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!("the key set is larger than {MAX_JWKS_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        let set: JwkSet =
            serde_json::from_slice(&body).map_err(|e| format!("not a JWK set: {e}"))?;
        Ok(keys_of(&set))
    }
}

/// The keys of a set Lifeline can use: RSA (RS256) and P-256 (ES256).
fn keys_of(set: &JwkSet) -> Vec<Key> {
    set.keys
        .iter()
        .filter_map(|jwk| {
            let alg = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => Algorithm::RS256,
                AlgorithmParameters::EllipticCurve(p) if p.curve == EllipticCurve::P256 => {
                    Algorithm::ES256
                }
                _ => return None,
            };
            let key = DecodingKey::from_jwk(jwk).ok()?;
            Some(Key {
                kid: jwk.common.key_id.clone().unwrap_or_default(),
                alg,
                key,
            })
        })
        .take(MAX_KEYS)
        .collect()
}

/// The header's algorithm and key id, read before anything else so that
/// `none`, HMAC and the rest are refused by name.
fn header_of(token: &str) -> Result<(Algorithm, String), Refusal> {
    #[derive(Deserialize)]
    struct Header {
        alg: Option<String>,
        #[serde(default)]
        kid: Option<String>,
    }
    let mut parts = token.split('.');
    let (Some(head), Some(_), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::Malformed(
            "it must be three base64url parts joined by '.'".into(),
        ));
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(head.trim_end_matches('='))
        .map_err(|e| Refusal::Malformed(format!("its header is not base64url: {e}")))?;
    let h: Header = serde_json::from_slice(&raw)
        .map_err(|e| Refusal::Malformed(format!("its header is not a JWT header: {e}")))?;
    let alg = h.alg.unwrap_or_default();
    let alg = match alg.as_str() {
        "RS256" => Algorithm::RS256,
        "ES256" => Algorithm::ES256,
        _ => return Err(Refusal::Algorithm(crate::domain::text::excerpt(&alg))),
    };
    Ok((alg, h.kid.unwrap_or_default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn only_rs256_and_es256_are_read_from_a_header() {
        for (alg, ok) in [
            ("RS256", true),
            ("ES256", true),
            ("none", false),
            ("HS256", false),
            ("RS512", false),
            ("", false),
        ] {
            let t = format!(
                "{}.{}.sig",
                b64(&format!(r#"{{"alg":"{alg}","kid":"k"}}"#)),
                b64("{}")
            );
            assert_eq!(header_of(&t).is_ok(), ok, "{alg}");
            if !ok {
                assert!(matches!(header_of(&t), Err(Refusal::Algorithm(_))), "{alg}");
            }
        }
        for bad in [
            "",
            "a.b",
            "a.b.c.d",
            "!!.b.c",
            &format!("{}.b.c", b64("not json")),
        ] {
            assert!(
                matches!(header_of(bad), Err(Refusal::Malformed(_))),
                "{bad}"
            );
        }
    }
}
