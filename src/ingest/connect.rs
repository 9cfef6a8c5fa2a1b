//! What the `[cluster]` config asks for, as dialers: the identity or CA
//! files read and checked (a bad one stops start-up, naming the file), the
//! TLS set up for the source and for the auth servers' health, the ALPN
//! connection upgrade where a proxy may need it, and what the identity
//! watch renews. The transport itself is [`super::dial`]'s.

use crate::clock::Ts;
use crate::config::{ClusterConfig, ConfigError, SourceKind};
use crate::stats::Stats;

use super::dial::{teleport_alpn, DialError, Dialer, Upgrade};
use super::teleport::identity::{self, Identity, IdentityError};
use super::teleport::renew::{self, Renewal};

/// The cluster source's dialer, the auth servers' health dialer, and the
/// identity file to watch for renewals, if any.
pub struct Dialers {
    pub source: Dialer,
    pub health: Dialer,
    pub renewal: Option<Renewal>,
}

#[derive(Debug, thiserror::Error)]
pub enum DialersError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("cluster TLS: {0}")]
    Dial(#[from] DialError),
}

impl Dialers {
    /// How to reach the cluster source and the auth servers' health: plaintext
    /// for a plain `lifeline` source; TLS from the identity or CA file
    /// otherwise (Teleport: its server name, ALPN `h2`, or the routing
    /// protocol first through a proxy; health always straight to each Auth).
    pub fn for_cluster(c: &ClusterConfig, now: Ts, stats: &Stats) -> Result<Dialers, DialersError> {
        let (identity, loaded) = match &c.identity_file {
            Some(p) => {
                let bytes = Identity::read(p)?;
                let id = Identity::parse(p, &bytes, now)?;
                renew::record(stats, &id);
                renew::warn_if_readable(p);
                (Some(id), bytes)
            }
            None => (None, Vec::new()),
        };
        // What the identity watch renews, from the bytes just loaded.
        let renewal = |dialers: Vec<Dialer>, roots: Option<Vec<_>>| {
            c.identity_file.as_ref().map(|p| Renewal {
                path: p.clone(),
                dialers,
                roots,
                loaded: loaded.clone(),
            })
        };
        match c.source {
            SourceKind::Lifeline => {
                if !c.uri()?.starts_with("https://") {
                    return Ok(Dialers {
                        source: Dialer::Plain,
                        health: Dialer::Plain,
                        renewal: None,
                    });
                }
                let (roots, from) = match (&c.ca_file, &identity) {
                    (Some(p), _) => (identity::load_roots(p)?, p.display().to_string()),
                    (None, Some(id)) => (id.roots.clone(), id.path.display().to_string()),
                    (None, None) => {
                        return Err(DialersError::Config(crate::config::invalid(
                            "cluster.ca_file",
                            "an https:// source needs a CA file",
                        )))
                    }
                };
                let key = identity.as_ref().map(|i| i.key.clone());
                let fixed_roots = c.ca_file.is_some().then(|| roots.clone());
                let d = Dialer::tls(
                    &roots,
                    key,
                    &c.server_name,
                    vec![b"h2".to_vec()],
                    &from,
                    None,
                )?;
                let r = renewal(vec![d.clone()], fixed_roots);
                // The lifeline source's auth servers speak plaintext health.
                Ok(Dialers {
                    source: d,
                    health: Dialer::Plain,
                    renewal: r,
                })
            }
            SourceKind::Teleport => {
                let Some(id) = identity else {
                    return Err(DialersError::Config(crate::config::invalid(
                        "cluster.identity_file",
                        "the teleport source needs an identity file",
                    )));
                };
                let from = format!("identity file {}", id.path.display());
                let routing = c.tls_routing.then_some(c.cluster_name.as_str());
                let upgrade = if c.tls_routing {
                    let proxy_roots = match &c.proxy_ca_file {
                        Some(p) => identity::load_roots(p)?,
                        None => Vec::new(),
                    };
                    Upgrade::new(c.alpn_upgrade, &proxy_roots)?
                } else {
                    None
                };
                let source = Dialer::tls(
                    &id.roots,
                    Some(id.key.clone()),
                    &c.server_name,
                    teleport_alpn(routing),
                    &from,
                    upgrade,
                )?;
                let health = Dialer::tls(
                    &id.roots,
                    Some(id.key.clone()),
                    &c.server_name,
                    teleport_alpn(None),
                    &from,
                    None,
                )?;
                let r = renewal(vec![source.clone(), health.clone()], None);
                Ok(Dialers {
                    source,
                    health,
                    renewal: r,
                })
            }
        }
    }
}
