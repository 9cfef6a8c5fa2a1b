//! `[access]`: API tokens and their roles, agents' join tokens, session and
//! manual-reconnect limits.

use std::collections::HashSet;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{invalid, positive, ConfigError};
use crate::domain::named_enum;

named_enum! {
    "lowercase";
    /// A role an API token carries, named after RFD 0016's verbs.
    #[derive(clap::ValueEnum)]
    pub enum Role {
        /// GET anything (when reads need a token at all).
        Read,
        /// PUT and DELETE settings, manual reconnects.
        Update,
        /// In addition to `update`: overwrite a setting the config file manages.
        Create,
    }
}

impl Role {}

named_enum! {
    "lowercase";
    /// What proves which agent a signal stream speaks for.
    pub enum AgentIdentity {
        /// The join token (and the names it admits, when it lists any).
        Token,
        /// The client certificate: `Hello.agent` must be its subject's CN
        /// or one of its DNS or URI SANs (needs `server.agent_client_ca`).
        Certificate,
    }
}

/// One entry of `access.join_tokens`: a hash alone admits any agent name
/// of any cluster; a table may list the names (`*` matches any run of
/// characters) and the clusters (by name) its token admits.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged, deny_unknown_fields)]
pub enum JoinToken {
    /// Hex SHA-256 of the token.
    Any(String),
    /// `{ sha256 = "…", agents = "web-*" }` or `agents = ["a", "b-*"]`;
    /// `clusters = "prod-eu"` or `clusters = ["prod-eu", "prod-us"]`.
    Bound {
        sha256: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        agents: Option<AgentNames>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        clusters: Option<AgentNames>,
    },
}

/// One name (or pattern) or several.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum AgentNames {
    One(String),
    Many(Vec<String>),
}

impl JoinToken {
    pub fn sha256(&self) -> &str {
        match self {
            JoinToken::Any(h) | JoinToken::Bound { sha256: h, .. } => h,
        }
    }

    /// The name patterns it admits; `None`: any name.
    pub fn agents(&self) -> Option<Vec<String>> {
        match self {
            JoinToken::Any(_) => None,
            JoinToken::Bound { agents, .. } => agents.as_ref().map(AgentNames::to_vec),
        }
    }

    /// The clusters (by name) whose agents it admits; `None`: any.
    pub fn clusters(&self) -> Option<Vec<String>> {
        match self {
            JoinToken::Any(_) => None,
            JoinToken::Bound { clusters, .. } => clusters.as_ref().map(AgentNames::to_vec),
        }
    }
}

impl AgentNames {
    fn to_vec(&self) -> Vec<String> {
        match self {
            AgentNames::One(p) => vec![p.clone()],
            AgentNames::Many(p) => p.clone(),
        }
    }
}

impl From<String> for JoinToken {
    fn from(sha256: String) -> Self {
        JoinToken::Any(sha256)
    }
}

/// One API token. Only its SHA-256 is kept (`lifeline token new` prints
/// both); the token itself never touches the disk on Lifeline's side.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TokenConfig {
    /// Shown in the audit and the dashboard ("signed in as").
    pub name: String,
    /// Hex SHA-256 of the token.
    pub sha256: String,
    /// What it may do: `read`, `update` (reconnects, maintenance),
    /// `create` (what erases or widens: shortening retention, say).
    pub roles: Vec<Role>,
}

/// Who may do what: API tokens, agents' join tokens, rate limits.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// API tokens (`lifeline token new` prints an entry), each held as its
    /// SHA-256 only.
    pub tokens: Vec<TokenConfig>,
    /// Hex SHA-256 of each join token agents may present on
    /// `AgentSignals.Connect` (`authorization: Bearer <token>` metadata).
    /// Empty: no agent can connect. An entry may be a table naming the
    /// agents its token admits (`{ sha256 = "…", agents = "web-*" }`),
    /// the clusters whose agents it admits (`clusters = "prod-eu"` or a
    /// list, by their configured names), or both.
    pub join_tokens: Vec<JoinToken>,
    /// What proves an agent's name: `token` (the join token, and its
    /// `agents` when listed) or `certificate` (the client certificate's
    /// CN or a DNS/URI SAN must be the name it says).
    pub agent_identity: AgentIdentity,
    /// Reads (GET: API, dashboard, /metrics, probes) need a token with the
    /// `read` role. `/healthz`, `/readyz` and sign-in stay open.
    pub read_requires_token: bool,
    /// Least time between two manual reconnects of one agent.
    #[serde(with = "humantime_serde")]
    pub manual_reconnect_interval: Duration,
    /// How long a dashboard sign-in lasts.
    #[serde(with = "humantime_serde")]
    pub session_ttl: Duration,
    /// A file holding a secret (at least 32 bytes) the dashboard's session
    /// cookies and CSRF tokens are signed with, derived from it. Unset:
    /// keys made once and kept in the database, shared by every replica.
    /// Either way a sign-in holds on every replica and across restarts.
    pub session_secret_file: Option<std::path::PathBuf>,
    /// The reverse proxies and load balancers in front of Lifeline, as
    /// CIDRs (`10.0.0.0/8`, `192.0.2.7/32`). Only a request from one of
    /// them has its `X-Forwarded-For` read, for the per-address limits
    /// (sign-in attempts, live streams). Empty (the default): the
    /// connection's own address always, so no client can claim another's.
    pub trusted_proxies: Vec<String>,
    /// Sign-in through Teleport's Application Access: the JWT its app
    /// proxy adds to every request (`Teleport-Jwt-Assertion`) names the
    /// user and their roles. Unset: the header is ignored.
    pub teleport: Option<TeleportAccessConfig>,
}

/// `[access.teleport]`: which cluster's app-access JWTs Lifeline trusts,
/// and what Teleport's roles (and traits) may do here.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TeleportAccessConfig {
    /// The cluster's JWT keys: `https://<proxy>/.well-known/jwks.json`.
    /// Fetched when first needed, cached, and fetched again when a token
    /// names a key it does not hold (a CA rotation). `https://`, or
    /// `http://` to a loopback address.
    pub jwks_url: String,
    /// CA certificates (PEM) for the proxy's certificate, beside the
    /// system's roots.
    pub ca_file: Option<std::path::PathBuf>,
    /// The app's URI as the `app_service` entry names it (`uri:`): the
    /// token's `aud` must be it.
    pub audience: String,
    /// The Teleport cluster's name: the token's `iss` must be it.
    pub cluster_name: String,
    /// Teleport role → Lifeline roles (`read`, `update`, `create`). A user
    /// holds every Lifeline role any of their Teleport roles maps to.
    #[serde(default)]
    pub roles_map: std::collections::BTreeMap<String, Vec<Role>>,
    /// Traits that grant Lifeline roles too: a user with `value` among
    /// their `trait` values holds `roles`.
    #[serde(default)]
    pub traits_map: Vec<TraitGrant>,
    /// Slack allowed on `exp` and `nbf`, for clocks apart. At most 5 min.
    #[serde(default = "default_leeway", with = "humantime_serde")]
    pub leeway: Duration,
    /// Least time between two fetches of the key set asked for by tokens
    /// naming an unknown key.
    #[serde(default = "default_refresh_every", with = "humantime_serde")]
    pub refresh_min_interval: Duration,
    /// How long a fetch of the key set may take; a request waits for one
    /// no longer than this.
    #[serde(default = "default_jwks_timeout", with = "humantime_serde")]
    pub jwks_timeout: Duration,
}

/// One `[[access.teleport.traits_map]]` entry.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TraitGrant {
    /// The Teleport trait the JWT carries (`logins`, say).
    #[serde(rename = "trait")]
    pub name: String,
    /// The value that trait must hold.
    pub value: String,
    /// The Lifeline roles a user holding it gets.
    pub roles: Vec<Role>,
}

fn default_leeway() -> Duration {
    Duration::from_secs(30)
}

fn default_refresh_every() -> Duration {
    Duration::from_secs(30)
}

fn default_jwks_timeout() -> Duration {
    Duration::from_secs(3)
}

impl TeleportAccessConfig {
    fn validate(&self) -> Result<(), ConfigError> {
        let field = "access.teleport.jwks_url";
        let u = url::Url::parse(&self.jwks_url)
            .map_err(|e| invalid(field, format!("{:?} is not a URL: {e}", self.jwks_url)))?;
        let loopback = match u.host() {
            Some(url::Host::Ipv4(a)) => a.is_loopback(),
            Some(url::Host::Ipv6(a)) => a.is_loopback(),
            Some(url::Host::Domain(d)) => d == "localhost",
            None => false,
        };
        match u.scheme() {
            "https" => {}
            "http" if loopback => {}
            _ => {
                return Err(invalid(
                    field,
                    "must be an https:// URL (http:// only to a loopback address): the keys decide who signs in",
                ))
            }
        }
        if self.audience.trim().is_empty() {
            return Err(invalid(
                "access.teleport.audience",
                "must be the app's URI as its app_service entry names it (the JWT's aud)",
            ));
        }
        if self.cluster_name.trim().is_empty() {
            return Err(invalid(
                "access.teleport.cluster_name",
                "must be the Teleport cluster's name (the JWT's iss)",
            ));
        }
        if self.roles_map.is_empty() && self.traits_map.is_empty() {
            return Err(invalid(
                "access.teleport.roles_map",
                "must map at least one Teleport role (or trait, traits_map) to Lifeline roles",
            ));
        }
        for (role, grants) in &self.roles_map {
            if role.is_empty() || grants.is_empty() {
                return Err(invalid(
                    format!("access.teleport.roles_map.{role}"),
                    "must name a Teleport role and at least one of read, update, create",
                ));
            }
        }
        for (i, t) in self.traits_map.iter().enumerate() {
            if t.name.is_empty() || t.roles.is_empty() {
                return Err(invalid(
                    format!("access.teleport.traits_map[{i}]"),
                    "must name a trait, a value and at least one of read, update, create",
                ));
            }
        }
        if self.leeway > Duration::from_secs(300) {
            return Err(invalid("access.teleport.leeway", "must be at most 5m"));
        }
        positive(
            "access.teleport.refresh_min_interval",
            self.refresh_min_interval,
        )?;
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&self.jwks_timeout) {
            return Err(invalid(
                "access.teleport.jwks_timeout",
                "must be between 100ms and 1m",
            ));
        }
        Ok(())
    }
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            tokens: Vec::new(),
            join_tokens: Vec::new(),
            agent_identity: AgentIdentity::Token,
            read_requires_token: false,
            manual_reconnect_interval: Duration::from_secs(10),
            session_ttl: Duration::from_secs(12 * 3600),
            session_secret_file: None,
            trusted_proxies: Vec::new(),
            teleport: None,
        }
    }
}

/// What a token's name may be (it appears in cookies and the audit).
pub const TOKEN_NAME_RULE: &str = "must be 1 to 64 letters, digits, '-' or '_'";

pub fn valid_token_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Most entries of `access.trusted_proxies`.
pub const MAX_TRUSTED_PROXIES: usize = 256;

impl AccessConfig {
    /// `access.trusted_proxies`, parsed (a validated config parses).
    pub fn trusted_proxies(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies
            .iter()
            .filter_map(|c| parse_cidr(c))
            .collect()
    }

    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.trusted_proxies.len() > MAX_TRUSTED_PROXIES {
            return Err(invalid(
                "access.trusted_proxies",
                format!("at most {MAX_TRUSTED_PROXIES} entries"),
            ));
        }
        for (i, c) in self.trusted_proxies.iter().enumerate() {
            if parse_cidr(c).is_none() {
                return Err(invalid(
                    format!("access.trusted_proxies[{i}]"),
                    format!(
                        "{:?} is not a CIDR such as 10.0.0.0/8 or 2001:db8::/32 (or one address)",
                        crate::domain::text::excerpt(c)
                    ),
                ));
            }
        }
        let hex64 = |v: &str| v.len() == 64 && v.bytes().all(|b| b.is_ascii_hexdigit());
        let mut names = HashSet::new();
        for (i, t) in self.tokens.iter().enumerate() {
            if !valid_token_name(&t.name) {
                return Err(invalid(format!("access.tokens[{i}].name"), TOKEN_NAME_RULE));
            }
            if !names.insert(t.name.as_str()) {
                return Err(invalid(
                    format!("access.tokens[{i}].name"),
                    format!("{:?} is listed twice", t.name),
                ));
            }
            if !hex64(&t.sha256) {
                return Err(invalid(
                    format!("access.tokens[{i}].sha256"),
                    "must be the token's SHA-256 as 64 hex digits (see `lifeline token new`); never the token itself",
                ));
            }
            if t.roles.is_empty() {
                return Err(invalid(
                    format!("access.tokens[{i}].roles"),
                    "must name at least one of read, update, create",
                ));
            }
        }
        for (i, j) in self.join_tokens.iter().enumerate() {
            if !hex64(j.sha256()) {
                return Err(invalid(
                    format!("access.join_tokens[{i}]"),
                    "must be a join token's SHA-256 as 64 hex digits (see `lifeline token new`), or a table { sha256 = \"…\", agents = \"web-*\", clusters = \"prod-eu\" }",
                ));
            }
            if let Some(names) = j.agents() {
                if names.is_empty()
                    || names.iter().any(|p| {
                        p.is_empty()
                            || p.len() > crate::domain::MAX_NAME_LEN
                            || crate::domain::text::name_problem(p).is_some()
                    })
                {
                    return Err(invalid(
                        format!("access.join_tokens[{i}].agents"),
                        "must name at least one agent pattern of 1 to 253 printable characters ('*' matches any run)",
                    ));
                }
            }
            if j.clusters().is_some_and(|c| c.is_empty()) {
                return Err(invalid(
                    format!("access.join_tokens[{i}].clusters"),
                    "must name at least one cluster (a [[clusters]] name), or be left out for any",
                ));
            }
        }
        positive(
            "access.manual_reconnect_interval",
            self.manual_reconnect_interval,
        )?;
        positive("access.session_ttl", self.session_ttl)?;
        if let Some(t) = &self.teleport {
            t.validate()?;
        }
        Ok(())
    }
}

/// A CIDR, or one address (a /32 or /128).
fn parse_cidr(s: &str) -> Option<ipnet::IpNet> {
    let s = s.trim();
    s.parse::<ipnet::IpNet>()
        .ok()
        .or_else(|| s.parse::<std::net::IpAddr>().ok().map(ipnet::IpNet::from))
        .map(|n| n.trunc())
}
