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

/// One entry of `access.join_tokens`: a hash alone admits any agent name;
/// a table may list the names (`*` matches any run of characters) its
/// token admits.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum JoinToken {
    /// Hex SHA-256 of the token.
    Any(String),
    /// `{ sha256 = "…", agents = "web-*" }` or `agents = ["a", "b-*"]`.
    Bound { sha256: String, agents: AgentNames },
}

/// One name pattern or several.
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
            JoinToken::Bound {
                agents: AgentNames::One(p),
                ..
            } => Some(vec![p.clone()]),
            JoinToken::Bound {
                agents: AgentNames::Many(p),
                ..
            } => Some(p.clone()),
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
    pub roles: Vec<Role>,
}

/// Who may do what: API tokens, agents' join tokens, rate limits.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    pub tokens: Vec<TokenConfig>,
    /// Hex SHA-256 of each join token agents may present on
    /// `AgentSignals.Connect` (`authorization: Bearer <token>` metadata).
    /// Empty: no agent can connect. An entry may be a table naming the
    /// agents its token admits (`{ sha256 = "…", agents = "web-*" }`).
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
    /// The reverse proxies and load balancers in front of Lifeline, as
    /// CIDRs (`10.0.0.0/8`, `192.0.2.7/32`). Only a request from one of
    /// them has its `X-Forwarded-For` read, for the per-address limits
    /// (sign-in attempts, live streams). Empty (the default): the
    /// connection's own address always, so no client can claim another's.
    pub trusted_proxies: Vec<String>,
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
            trusted_proxies: Vec::new(),
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
                    "must be a join token's SHA-256 as 64 hex digits (see `lifeline token new`), or a table { sha256 = \"…\", agents = \"web-*\" }",
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
        }
        positive(
            "access.manual_reconnect_interval",
            self.manual_reconnect_interval,
        )?;
        positive("access.session_ttl", self.session_ttl)?;
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
