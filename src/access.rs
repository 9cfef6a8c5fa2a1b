//! The access room: who may do what.
//!
//! Owns: API tokens and their roles (from the config file, held only as
//! SHA-256 hashes), agents' join tokens, the dashboard's signed session
//! cookie, and the per-agent rate limit of manual reconnects. Every token
//! check hashes what was presented and compares it in constant time with
//! every configured hash (no early exit). Tokens are never logged; a
//! principal is known by its configured name only.
//! The gRPC interceptor in front of `AgentSignals` ([`join_check`]: join
//! tokens and client certificates) is here, with the rules it applies.
//! Must not touch: HTTP framing (the `http` room calls in here), settings,
//! the fleet.

pub mod teleport;

use std::num::NonZeroU32;
use std::time::Duration;

use governor::state::keyed::DefaultKeyedStateStore;
use governor::{Quota, RateLimiter};
use hmac::{Hmac, KeyInit, Mac};
use rand::RngCore;
use serde::Serialize;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::clock::{Clock, Ts};
use std::sync::Arc;

use crate::config::{AccessConfig, AgentIdentity, Role};

/// Who made a request: a configured token's name and roles.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Principal {
    pub name: String,
    pub roles: Vec<Role>,
}

impl Principal {
    pub fn has(&self, r: Role) -> bool {
        self.roles.contains(&r)
    }
}

/// A join token: its hash, and the agent names it admits (`None`: any).
struct Join {
    hash: [u8; 32],
    agents: Option<Arc<[String]>>,
    clusters: Option<Arc<[String]>>,
}

/// What one signal stream may call itself, decided when it opened: the
/// names its join token admits, and (with `agent_identity =
/// "certificate"`) the names its client certificate holds.
#[derive(Clone, Debug, Default)]
pub struct AgentGrant {
    /// Patterns (`*` matches any run); `None`: any name.
    pub names: Option<Arc<[String]>>,
    /// The clusters (by name) whose agents it admits; `None`: any.
    pub clusters: Option<Arc<[String]>>,
    /// The certificate's CN and DNS/URI SANs; `None`: not checked.
    pub certificate: Option<Vec<String>>,
}

impl AgentGrant {
    /// Whether this stream may speak for agents of `cluster`; why not.
    pub fn admits_cluster(&self, cluster: &str) -> Result<(), NotAdmitted> {
        match &self.clusters {
            Some(c) if !c.iter().any(|c| c == cluster) => Err(NotAdmitted::TokenClusters {
                clusters: c.join(", "),
            }),
            _ => Ok(()),
        }
    }

    /// Whether `agent` is a name this stream may speak for; why not.
    pub fn admits(&self, agent: &str) -> Result<(), NotAdmitted> {
        if let Some(names) = &self.names {
            if !names.iter().any(|p| glob(p, agent)) {
                return Err(NotAdmitted::TokenNames {
                    patterns: names.join(", "),
                });
            }
        }
        if let Some(held) = &self.certificate {
            if !held.iter().any(|n| n == agent) {
                return Err(if held.is_empty() {
                    NotAdmitted::CertificateNamesNone
                } else {
                    NotAdmitted::CertificateNamesOthers
                });
            }
        }
        Ok(())
    }
}

/// Why a stream may not speak for the agent it names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotAdmitted {
    #[error("the join token admits only agents named {patterns}")]
    TokenNames { patterns: String },
    #[error("the join token admits only agents of the clusters {clusters}")]
    TokenClusters { clusters: String },
    #[error("access.agent_identity is \"certificate\" and the client certificate names no agent (no CN, DNS or URI SAN)")]
    CertificateNamesNone,
    #[error("access.agent_identity is \"certificate\" and the client certificate's CN and SANs do not name this agent")]
    CertificateNamesOthers,
}

/// `pattern` matches `name` whole, `*` standing for any run of characters.
pub fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let [first, middle @ .., last] = parts.as_slice() else {
        return pattern == name;
    };
    if parts.len() == 1 {
        return pattern == name;
    }
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The names a client certificate (DER) holds: its subject's CNs, DNS
/// SANs and URI SANs. A certificate that does not parse holds none.
pub fn certificate_names(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(der) else {
        return Vec::new();
    };
    let mut names: Vec<String> = cert
        .subject()
        .iter_common_name()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for n in &san.value.general_names {
            match n {
                x509_parser::extensions::GeneralName::DNSName(d) => names.push(d.to_string()),
                x509_parser::extensions::GeneralName::URI(u) => names.push(u.to_string()),
                _ => {}
            }
        }
    }
    names
}

/// Admits one more for `key`, or says how long to wait; the table of keys
/// is thinned once it holds `MAX_LIMITED`.
fn admit(limiter: &KeyedLimiter, key: String) -> Result<(), Duration> {
    if limiter.len() >= MAX_LIMITED {
        limiter.retain_recent();
    }
    limiter
        .check_key(&key)
        .map_err(|not_until| not_until.wait_time_from(governor::clock::Clock::now(limiter.clock())))
}

struct Token {
    name: String,
    hash: [u8; 32],
    roles: Vec<Role>,
}

/// The token of an `Authorization: Bearer <token>` value (HTTP header or
/// gRPC metadata); `None` for another scheme or an empty token.
pub fn bearer(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// SHA-256 of a token, as the config file holds it.
pub fn hash_hex(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new random token (256 bits), for `lifeline token new` and the demo.
pub fn generate() -> String {
    let mut raw = [0u8; 32];
    rand::rng().fill_bytes(&mut raw);
    format!("ll_{}", hex::encode(raw))
}

fn parse_hash(h: &str) -> Option<[u8; 32]> {
    let raw = hex::decode(h).ok()?;
    raw.try_into().ok()
}

/// Most agents remembered by the reconnect limiter before the ones whose
/// limit has run out are forgotten.
const MAX_LIMITED: usize = 100_000;

/// The limiter's view of Lifeline's clock (so paused test time moves it).
#[derive(Clone)]
struct LimiterClock(Clock);

impl governor::clock::Clock for LimiterClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        Duration::from_micros(u64::try_from(self.0.now().as_micros()).unwrap_or(0))
    }
}

/// A rate per key (GCRA): manual reconnects per agent, sign-ins per address.
type KeyedLimiter = RateLimiter<
    String,
    DefaultKeyedStateStore<String>,
    LimiterClock,
    governor::middleware::NoOpMiddleware<Duration>,
>;

pub struct Access {
    tokens: Vec<Token>,
    join: Vec<Join>,
    /// What proves an agent's name (`access.agent_identity`).
    identity: AgentIdentity,
    /// GETs need the `read` role.
    pub read_requires_token: bool,
    session_key: [u8; 32],
    session_ttl: Duration,
    clock: Clock,
    reconnect_every: Duration,
    reconnects: KeyedLimiter,
    /// Dashboard sign-in attempts per client address.
    sign_ins: KeyedLimiter,
    /// `access.trusted_proxies`: whose `X-Forwarded-For` is read.
    trusted_proxies: Vec<ipnet::IpNet>,
    /// `[access.teleport]`: sign-in through Teleport's app proxy.
    pub teleport: Option<teleport::TeleportJwt>,
}

/// The keys the dashboard signs with: session cookies and CSRF tokens.
/// The same on every replica (from the shared store, or derived from
/// `access.session_secret_file`), so a sign-in on one holds on any.
#[derive(Clone)]
pub struct SigningKeys {
    pub session: [u8; 32],
    pub csrf: [u8; 32],
}

impl std::fmt::Debug for SigningKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SigningKeys(redacted)")
    }
}

/// Why `access.session_secret_file` cannot give the keys.
#[derive(Debug, thiserror::Error)]
pub enum SecretFileError {
    #[error("access.session_secret_file {path}: {why}")]
    Unreadable { path: String, why: String },
    #[error("access.session_secret_file {path} holds {len} bytes: at least 32 are needed (e.g. `head -c 32 /dev/urandom | base64 > {path}`)")]
    TooShort { path: String, len: usize },
}

/// Least secret taken from `access.session_secret_file`.
const MIN_SECRET: usize = 32;
/// Largest secret file read.
const MAX_SECRET: u64 = 64 * 1024;

impl SigningKeys {
    /// Fresh random keys: one process's own (tests, and `Access::new`).
    pub fn random() -> SigningKeys {
        let mut k = SigningKeys {
            session: [0; 32],
            csrf: [0; 32],
        };
        rand::rng().fill_bytes(&mut k.session);
        rand::rng().fill_bytes(&mut k.csrf);
        k
    }

    /// Derived from the secret in `path` (HMAC-SHA256 of a label for each
    /// key), so the secret itself signs nothing.
    pub fn from_secret_file(path: &std::path::Path) -> Result<SigningKeys, SecretFileError> {
        use std::io::Read;
        let shown = path.display().to_string();
        let unreadable = |why: String| SecretFileError::Unreadable {
            path: shown.clone(),
            why,
        };
        let f = std::fs::File::open(path).map_err(|e| unreadable(e.to_string()))?;
        let mut raw = Vec::new();
        f.take(MAX_SECRET)
            .read_to_end(&mut raw)
            .map_err(|e| unreadable(e.to_string()))?;
        let secret = raw.trim_ascii();
        if secret.len() < MIN_SECRET {
            return Err(SecretFileError::TooShort {
                path: shown,
                len: secret.len(),
            });
        }
        let derive = |label: &[u8]| -> [u8; 32] {
            let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(secret)
                .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
            m.update(label);
            m.finalize().into_bytes().into()
        };
        Ok(SigningKeys {
            session: derive(b"lifeline session cookie v1"),
            csrf: derive(b"lifeline csrf token v1"),
        })
    }
}

/// Sign-in attempts one client address may make in a row, and how often
/// it earns one more: ten at once, then one every six seconds.
pub const SIGN_IN_BURST: u32 = 10;
pub const SIGN_IN_EVERY: Duration = Duration::from_secs(6);

/// Session cookie name.
pub const SESSION_COOKIE: &str = "lifeline_session";

/// Longest `X-Forwarded-For` read, and most hops walked in it.
const MAX_FORWARDED_LEN: usize = 4096;
const MAX_FORWARDED_HOPS: usize = 32;

impl Access {
    /// The client a request is from, for the per-address limits: the
    /// connection's address, unless that is one of `access.trusted_proxies`;
    /// then `X-Forwarded-For` is walked from its right end (the hop the
    /// trusted proxy added) past every trusted proxy, and the first other
    /// address is the client. A header that is absent, too long or not a
    /// list of addresses leaves the connection's address.
    pub fn client_ip(
        &self,
        peer: std::net::IpAddr,
        forwarded_for: Option<&axum::http::HeaderValue>,
    ) -> std::net::IpAddr {
        let trusted = |ip: &std::net::IpAddr| self.trusted_proxies.iter().any(|n| n.contains(ip));
        if self.trusted_proxies.is_empty() || !trusted(&peer) {
            return peer;
        }
        let Some(text) = forwarded_for
            .filter(|v| v.len() <= MAX_FORWARDED_LEN)
            .and_then(|v| v.to_str().ok())
        else {
            return peer;
        };
        let mut client = peer;
        for hop in text.rsplit(',').take(MAX_FORWARDED_HOPS) {
            let Ok(ip) = hop.trim().parse::<std::net::IpAddr>() else {
                return client;
            };
            client = ip;
            if !trusted(&ip) {
                return ip;
            }
        }
        client
    }

    /// Builds from a validated config (hashes are 64 hex digits).
    /// [`Self::new`], saying what an operator should know: without API
    /// tokens everything is read-only, without join tokens no agent can
    /// connect.
    pub fn start(
        cfg: &AccessConfig,
        clock: Clock,
        keys: &SigningKeys,
    ) -> Result<std::sync::Arc<Access>, teleport::SetupError> {
        let mut access = Access::new(cfg, clock);
        access.session_key = keys.session;
        if let Some(t) = &cfg.teleport {
            access.teleport = Some(teleport::TeleportJwt::new(t, clock)?);
            tracing::info!(
                cluster = %t.cluster_name,
                audience = %t.audience,
                jwks = %t.jwks_url,
                "signing in through Teleport: requests carrying its app-access JWT are taken as its user"
            );
        }
        if !access.has_tokens() && access.teleport.is_none() {
            tracing::warn!(
                "no API tokens configured ([[access.tokens]]): the API and dashboard are read-only"
            );
        }
        if cfg.join_tokens.is_empty() {
            tracing::warn!(
                "no join tokens configured (access.join_tokens): no agent can connect for signals"
            );
        }
        Ok(std::sync::Arc::new(access))
    }

    pub fn new(cfg: &AccessConfig, clock: Clock) -> Access {
        let session_key = SigningKeys::random().session;
        Access {
            tokens: cfg
                .tokens
                .iter()
                .filter_map(|t| {
                    Some(Token {
                        name: t.name.clone(),
                        hash: parse_hash(&t.sha256)?,
                        roles: t.roles.clone(),
                    })
                })
                .collect(),
            join: cfg
                .join_tokens
                .iter()
                .filter_map(|j| {
                    Some(Join {
                        hash: parse_hash(j.sha256())?,
                        agents: j.agents().map(Arc::from),
                        clusters: j.clusters().map(Arc::from),
                    })
                })
                .collect(),
            identity: cfg.agent_identity,
            trusted_proxies: cfg.trusted_proxies(),
            teleport: None,
            read_requires_token: cfg.read_requires_token,
            session_key,
            session_ttl: cfg.session_ttl,
            clock,
            reconnect_every: cfg.manual_reconnect_interval,
            reconnects: RateLimiter::new(
                // A validated config makes it positive; a second otherwise.
                Quota::with_period(cfg.manual_reconnect_interval)
                    .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
                    .allow_burst(NonZeroU32::MIN),
                DefaultKeyedStateStore::default(),
                LimiterClock(clock),
            ),
            sign_ins: RateLimiter::new(
                Quota::with_period(SIGN_IN_EVERY)
                    .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
                    .allow_burst(NonZeroU32::new(SIGN_IN_BURST).unwrap_or(NonZeroU32::MIN)),
                DefaultKeyedStateStore::default(),
                LimiterClock(clock),
            ),
        }
    }

    /// True when at least one API token is configured.
    pub fn has_tokens(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// The principal `presented` belongs to, if any.
    pub fn authenticate(&self, presented: &str) -> Option<Principal> {
        let h: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found = None;
        for t in &self.tokens {
            let eq: bool = t.hash.ct_eq(&h).into();
            if eq && found.is_none() {
                found = Some(t);
            }
        }
        found.map(|t| Principal {
            name: t.name.clone(),
            roles: t.roles.clone(),
        })
    }

    /// True when `presented` is one of the configured join tokens.
    pub fn join_allowed(&self, presented: &str) -> bool {
        self.join_grant(presented, None).is_some()
    }

    /// What a stream presenting `presented` (and, with
    /// `agent_identity = "certificate"`, the client certificate `leaf`,
    /// DER) may call itself; `None` when the token is not a join token.
    /// Every entry is compared, in constant time.
    pub fn join_grant(&self, presented: &str, leaf: Option<&[u8]>) -> Option<AgentGrant> {
        let h: [u8; 32] = Sha256::digest(presented.as_bytes()).into();
        let mut found: Option<&Join> = None;
        for j in &self.join {
            if bool::from(j.hash.ct_eq(&h)) && found.is_none() {
                found = Some(j);
            }
        }
        let j = found?;
        Some(AgentGrant {
            names: j.agents.clone(),
            clusters: j.clusters.clone(),
            certificate: (self.identity == AgentIdentity::Certificate)
                .then(|| leaf.map(certificate_names).unwrap_or_default()),
        })
    }

    fn mac(&self, body: &str, hash: &[u8; 32]) -> Hmac<Sha256> {
        let mut m = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.session_key)
            .unwrap_or_else(|_| unreachable!("HMAC accepts any key length"));
        m.update(body.as_bytes());
        // Binding the token's hash: replacing a token ends its sessions.
        m.update(hash);
        m
    }

    /// A session cookie value for `p` (who just signed in with a token):
    /// `name.expires_us.hmac`, signed with the key every replica shares.
    pub fn session_value(&self, p: &Principal) -> Option<String> {
        let t = self.tokens.iter().find(|t| t.name == p.name)?;
        let expires = self.clock.now().saturating_add(self.session_ttl);
        let body = format!("{}.{}", t.name, expires.as_micros());
        let mac = hex::encode(self.mac(&body, &t.hash).finalize().into_bytes());
        Some(format!("{body}.{mac}"))
    }

    /// The signed-in principal of a session cookie value, if it is ours,
    /// unexpired, and its token still exists.
    pub fn session(&self, value: &str) -> Option<Principal> {
        let (body, mac) = value.rsplit_once('.')?;
        let (name, expires) = body.split_once('.')?;
        let expires = Ts(expires.parse().ok()?);
        let t = self.tokens.iter().find(|t| t.name == name)?;
        let raw = hex::decode(mac).ok()?;
        self.mac(body, &t.hash).verify_slice(&raw).ok()?;
        (self.clock.now() < expires).then(|| Principal {
            name: t.name.clone(),
            roles: t.roles.clone(),
        })
    }

    pub fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    /// Admits a manual reconnect of `agent`, or says how long to wait.
    pub fn admit_reconnect(&self, agent: &str) -> Result<(), Duration> {
        admit(&self.reconnects, agent.to_string())
    }

    /// Whether the client at `ip` may try a sign-in now; how long to wait
    /// otherwise. Every attempt counts (a person signs in once; a guesser
    /// is held to one try every six seconds after ten).
    pub fn admit_sign_in(&self, ip: std::net::IpAddr) -> Result<(), Duration> {
        admit(&self.sign_ins, ip.to_string())
    }

    pub fn reconnect_every(&self) -> Duration {
        self.reconnect_every
    }
}

/// The gRPC interceptor in front of `AgentSignals`: a stream opens only
/// with a configured join token in `authorization: Bearer <token>`, and,
/// with `client_cert`, over a connection whose client certificate
/// `server.agent_client_ca` signed (rustls checked the signature at the
/// handshake; one is optional there so health checks need none).
pub fn join_check(
    access: std::sync::Arc<Access>,
    client_cert: bool,
    stats: std::sync::Arc<crate::stats::Stats>,
) -> impl FnMut(tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> + Clone {
    move |req: tonic::Request<()>| {
        if client_cert && req.peer_certs().is_none_or(|c| c.is_empty()) {
            crate::stats::Stats::inc(&stats.agent_join_refused);
            return Err(tonic::Status::unauthenticated(
                "AgentSignals.Connect needs a client certificate signed by this Lifeline's server.agent_client_ca, as well as the join token",
            ));
        }
        let presented = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer);
        let leaf = req
            .peer_certs()
            .and_then(|c| c.first().map(|c| c.as_ref().to_vec()));
        match presented.map(|t| access.join_grant(t, leaf.as_deref())) {
            // The hub checks the name the stream's Hello says against it.
            Some(Some(grant)) => {
                let mut req = req;
                req.extensions_mut().insert(grant);
                Ok(req)
            }
            Some(None) => {
                crate::stats::Stats::inc(&stats.agent_join_refused);
                Err(tonic::Status::unauthenticated(
                    "the join token is not valid: it matches no access.join_tokens entry",
                ))
            }
            None => {
                crate::stats::Stats::inc(&stats.agent_join_refused);
                Err(tonic::Status::unauthenticated(
                    "AgentSignals.Connect needs a join token: send `authorization: Bearer <join token>` metadata",
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TokenConfig;

    #[test]
    fn forwarded_for_is_read_only_from_a_trusted_proxy() {
        use axum::http::HeaderValue;
        let ip = |s: &str| s.parse::<std::net::IpAddr>().unwrap();
        let xff = |s: &str| HeaderValue::from_str(s).unwrap();
        let none = Access::new(&AccessConfig::default(), Clock::system());
        assert_eq!(
            none.client_ip(ip("10.0.0.5"), Some(&xff("203.0.113.9"))),
            ip("10.0.0.5"),
            "no trusted proxies: the header is never read"
        );
        let behind = Access::new(
            &AccessConfig {
                trusted_proxies: vec!["10.0.0.0/8".into(), "192.0.2.7".into()],
                ..AccessConfig::default()
            },
            Clock::system(),
        );
        // From a trusted proxy: the right-most address that is not one.
        assert_eq!(
            behind.client_ip(
                ip("10.0.0.5"),
                Some(&xff("198.51.100.1, 203.0.113.9, 192.0.2.7"))
            ),
            ip("203.0.113.9"),
            "a client's own claim on the left is not believed"
        );
        assert_eq!(
            behind.client_ip(ip("10.0.0.5"), Some(&xff("203.0.113.9"))),
            ip("203.0.113.9")
        );
        // From anyone else: the connection's address.
        assert_eq!(
            behind.client_ip(ip("198.51.100.1"), Some(&xff("203.0.113.9"))),
            ip("198.51.100.1")
        );
        // Absent, garbage or over-long: the proxy's own address, never a
        // panic.
        assert_eq!(behind.client_ip(ip("10.0.0.5"), None), ip("10.0.0.5"));
        assert_eq!(
            behind.client_ip(ip("10.0.0.5"), Some(&xff("not-an-ip"))),
            ip("10.0.0.5")
        );
        assert_eq!(
            behind.client_ip(ip("10.0.0.5"), Some(&xff(&"1.2.3.4,".repeat(2000)))),
            ip("10.0.0.5")
        );
        // Every hop trusted: the left-most.
        assert_eq!(
            behind.client_ip(ip("10.0.0.5"), Some(&xff("10.1.1.1, 10.2.2.2"))),
            ip("10.1.1.1")
        );
        let mut bad = AccessConfig {
            trusted_proxies: vec!["10.0.0.0/33".into()],
            ..AccessConfig::default()
        };
        let e = crate::config::Config {
            access: bad.clone(),
            ..crate::config::Config::default()
        }
        .validate()
        .expect_err("a bad CIDR")
        .to_string();
        assert!(e.contains("access.trusted_proxies[0]"), "{e}");
        bad.trusted_proxies = vec!["::1".into()];
        assert_eq!(bad.trusted_proxies().len(), 1);
    }

    fn access(clock: Clock) -> Access {
        Access::new(
            &AccessConfig {
                tokens: vec![TokenConfig {
                    name: "ops".into(),
                    sha256: hash_hex("s3cret"),
                    roles: vec![Role::Read, Role::Update],
                }],
                join_tokens: vec![
                    hash_hex("join-me").into(),
                    crate::config::JoinToken::Bound {
                        sha256: hash_hex("web-only"),
                        agents: Some(crate::config::AgentNames::One("web-*".into())),
                        clusters: None,
                    },
                ],
                ..AccessConfig::default()
            },
            clock,
        )
    }

    #[test]
    fn tokens_match_only_their_hash() {
        let a = access(Clock::system());
        let p = a.authenticate("s3cret").unwrap();
        assert_eq!(p.name, "ops");
        assert!(p.has(Role::Update) && !p.has(Role::Create));
        assert!(a.authenticate("s3cre").is_none());
        assert!(
            a.authenticate(&hash_hex("s3cret")).is_none(),
            "the hash is not the token"
        );
        assert!(a.join_allowed("join-me") && !a.join_allowed("s3cret"));
        assert!(generate().len() > 60);
    }

    #[test]
    fn join_tokens_admit_the_names_they_list() {
        let a = access(Clock::system());
        let any = a.join_grant("join-me", None).unwrap();
        assert!(any.admits("db-1").is_ok() && any.admits("web-1").is_ok());
        let web = a.join_grant("web-only", None).unwrap();
        assert!(web.admits("web-01").is_ok());
        let why = web.admits("db-01").unwrap_err();
        assert!(why.to_string().contains("web-*"), "{why}");
        assert!(a.join_grant("nope", None).is_none());
    }

    #[test]
    fn globs_match_whole_names() {
        for (p, n, m) in [
            ("web-*", "web-1", true),
            ("web-*", "web-", true),
            ("web-*", "xweb-1", false),
            ("*-db", "eu-db", true),
            ("*-db", "eu-db2", false),
            ("a*b*c", "abc", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("exact", "exact", true),
            ("exact", "exactly", false),
            ("*", "", true),
        ] {
            assert_eq!(glob(p, n), m, "{p} ~ {n}");
        }
    }

    #[test]
    fn a_certificate_names_its_cn_and_sans() {
        let mut params = rcgen::CertificateParams::new(vec!["a01.agents.example".into()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "a01");
        params.subject_alt_names.push(rcgen::SanType::URI(
            "spiffe://cluster/agent/a01".try_into().unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let names = certificate_names(cert.der());
        assert_eq!(
            names,
            ["a01", "a01.agents.example", "spiffe://cluster/agent/a01"]
        );
        assert!(certificate_names(b"not a certificate").is_empty());
        let g = AgentGrant {
            names: None,
            clusters: None,
            certificate: Some(names),
        };
        assert!(g.admits("a01").is_ok() && g.admits("a02").is_err());
        // A grant bound to clusters admits their agents only.
        let g = AgentGrant {
            names: None,
            clusters: Some(Arc::from(vec![
                "prod-eu".to_string(),
                "prod-us".to_string(),
            ])),
            certificate: None,
        };
        assert!(g.admits_cluster("prod-us").is_ok());
        assert_eq!(
            g.admits_cluster("staging").unwrap_err().to_string(),
            "the join token admits only agents of the clusters prod-eu, prod-us"
        );
        assert!(AgentGrant {
            clusters: None,
            ..g
        }
        .admits_cluster("staging")
        .is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn sessions_are_signed_and_expire() {
        let clock = Clock::starting_at(Ts(1_000_000));
        let a = access(clock);
        let p = a.authenticate("s3cret").unwrap();
        let v = a.session_value(&p).unwrap();
        assert_eq!(a.session(&v), Some(p.clone()));
        let forged = v.replacen("ops", "adm", 1);
        assert!(a.session(&forged).is_none());
        let other = access(clock);
        assert!(other.session(&v).is_none(), "another process's key");
        tokio::time::advance(a.session_ttl()).await;
        assert!(a.session(&v).is_none(), "expired");
    }

    #[tokio::test(start_paused = true)]
    async fn manual_reconnects_are_limited_per_agent() {
        let clock = Clock::starting_at(Ts(1_000_000));
        let a = access(clock);
        a.admit_reconnect("a").unwrap();
        a.admit_reconnect("b").unwrap();
        let wait = a.admit_reconnect("a").unwrap_err();
        assert_eq!(wait, a.reconnect_every());
        tokio::time::advance(a.reconnect_every()).await;
        a.admit_reconnect("a").unwrap();
    }

    #[test]
    fn keys_from_a_secret_file_are_the_same_everywhere_and_a_short_secret_is_refused() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("secret");
        std::fs::write(&path, "0123456789abcdef0123456789abcdef\n").expect("write");
        let (a, b) = (
            SigningKeys::from_secret_file(&path).expect("keys"),
            SigningKeys::from_secret_file(&path).expect("keys"),
        );
        assert_eq!((a.session, a.csrf), (b.session, b.csrf));
        assert_ne!(a.session, a.csrf, "one key for each use");
        std::fs::write(&path, "too short").expect("write");
        let e = SigningKeys::from_secret_file(&path).expect_err("short");
        assert!(e.to_string().contains("at least 32"), "{e}");
        let e = SigningKeys::from_secret_file(&dir.path().join("absent")).expect_err("absent");
        assert!(e.to_string().contains("access.session_secret_file"), "{e}");
        assert_eq!(format!("{a:?}"), "SigningKeys(redacted)");
    }
}
