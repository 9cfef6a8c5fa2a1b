//! One host of the table: the services it runs as they are kept, the
//! agent and tunnels last sent for it, and what a change to it sends.
//! Must not touch: the table around it (lookups, indexes, listings).

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use smallvec::SmallVec;

use crate::clock::Ts;
use crate::domain::{agent_label, AgentService, Change, Kind, LabelText, Labels, Server, Tunnel};

use super::super::convert::Seen;
use super::super::interned::{no_proxies, Interned, ProxyList};
use super::{AuthOf, Beat};

/// A service a host runs: what its last heartbeat said, the TTL learned
/// from its successive expiries, and a digest of the rest. A large
/// fleet's table holds one per service: kept in the fewest bytes, its
/// proxy names and version shared with every host that names the same.
pub(super) struct Running {
    pub(super) service: AgentService,
    /// The service resource's name; a node's is its host's, the table's
    /// key, and is not held again (empty).
    pub(super) name: Box<str>,
    pub(super) hostname: Box<str>,
    pub(super) version: Arc<str>,
    /// Validated `ProxyIDs`, sorted.
    pub(super) proxies: ProxyList,
    pub(super) expires: Ts,
    pub(super) ttl: Duration,
    pub(super) said: Said,
}

impl Running {
    pub(super) fn kept(beat: Beat, ttl: Duration, said: Said, strings: &mut Interned) -> Running {
        Running {
            service: beat.service,
            name: match beat.service {
                AgentService::Node => Box::default(),
                _ => beat.name.into_boxed_str(),
            },
            hostname: beat.hostname.into_boxed_str(),
            version: strings.get(&beat.version),
            proxies: strings.list(&beat.proxies),
            expires: beat.expires,
            ttl,
            said,
        }
    }

    /// The service's name, on host `host`.
    pub(super) fn name<'a>(&'a self, host: &'a str) -> &'a str {
        match self.service {
            AgentService::Node => host,
            _ => &self.name,
        }
    }
}

/// A digest of what a heartbeat says beyond its expiry: version, hostname
/// and `ProxyIDs`. Most heartbeats repeat the last one; the digest, taken
/// from the message just decoded, says so without reading the strings
/// kept from the last (cold, in a large fleet, by the next heartbeat).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Said(u64);

impl Said {
    pub(super) fn of(b: &Beat) -> Said {
        Said::digest(&b.version, &b.hostname, &b.proxies)
    }

    /// The digest of these parts, owned or borrowed alike (a `String`
    /// hashes as its `str`).
    pub(super) fn digest<P: std::hash::Hash>(version: &str, hostname: &str, proxies: &[P]) -> Said {
        use std::hash::{Hash, Hasher};
        // A fast, deterministic 64-bit digest: no two contents a heartbeat
        // could plausibly carry share one. (With fixed keys no hash here
        // would stand up to a host crafting a collision; the worst such a
        // host gets is its own version, hostname or tunnels shown late.)
        let mut h = rustc_hash::FxHasher::default();
        (version, hostname, proxies).hash(&mut h);
        Said(h.finish())
    }
}

/// A host runs a handful of services and holds a few tunnels: small
/// vectors, not B-trees (whose first node holds room for eleven).
pub(super) struct Host {
    pub(super) services: SmallVec<[Running; 1]>,
    /// No service names a proxy (agent mesh): a tunnel to every known
    /// proxy is assumed.
    pub(super) assumed: bool,
    /// Proxies this host's tunnels go to, as last sent; sorted.
    pub(super) tunnels: ProxyList,
    /// The Auth instance that last saw the host (`GetInstances`), kept
    /// here so a heartbeat looks up nothing else; none known: `None`.
    pub(super) auth: Option<Arc<str>>,
    /// The agent as last sent, in the parts it is made of (the `Server`
    /// itself is built only to be sent).
    pub(super) sent: Option<Sent>,
}

pub(super) struct Sent {
    pub(super) expires: Ts,
    pub(super) ttl: Duration,
    pub(super) version: Arc<str>,
    /// The services (`app_server,node`), whether the tunnels are assumed,
    /// and the hostname; rebuilt only when one changes, and shared by
    /// every agent sent until then.
    pub(super) labels: Labels,
}

impl Host {
    /// A host new to the table, with the Auth last known to have seen it.
    pub(super) fn attached(auth_of: &AuthOf, name: &str) -> Host {
        Host {
            services: SmallVec::new(),
            assumed: false,
            tunnels: no_proxies(),
            auth: auth_of.get(name).cloned(),
            sent: None,
        }
    }

    pub(super) fn service(&self, service: AgentService, name: &str) -> Option<usize> {
        // A node is named by its host: a host runs one, and its name needs
        // no comparing (nor loading, on a heartbeat's hot path).
        self.services.iter().position(|r| {
            r.service == service && (service == AgentService::Node || *r.name == *name)
        })
    }

    /// A service's last expiry and TTL.
    pub(super) fn learned(&self, service: AgentService, name: &str) -> Option<(Ts, Duration)> {
        self.service(service, name)
            .map(|i| (self.services[i].expires, self.services[i].ttl))
    }

    /// A service's heartbeat: updated in place (most change only their
    /// expiry), or a service added with the TTL `learned` elsewhere. Says
    /// what it touched. The host's name is its key in the table: a
    /// service kept does not hold it again.
    pub(super) fn put(
        &mut self,
        beat: Beat,
        seen: &Seen,
        learned: Option<(Ts, Duration)>,
        strings: &mut Interned,
    ) -> Touched {
        let said = Said::of(&beat);
        let Some(i) = self.service(beat.service, &beat.name) else {
            let ttl = seen.ttl(learned, beat.expires);
            self.services.push(Running::kept(beat, ttl, said, strings));
            return EVERYTHING;
        };
        let r = &mut self.services[i];
        r.ttl = seen.ttl(Some((r.expires, r.ttl)), beat.expires);
        r.expires = beat.expires;
        if r.said == said {
            return NOTHING;
        }
        r.said = said;
        r.version = strings.get(&beat.version);
        r.hostname = beat.hostname.into_boxed_str();
        if r.proxies
            .iter()
            .map(|p| &**p)
            .eq(beat.proxies.iter().map(String::as_str))
        {
            return SAID;
        }
        r.proxies = strings.list(&beat.proxies);
        Touched {
            tunnels: true,
            ..SAID
        }
    }
}

impl Sent {
    /// The labels for these services (`None`: as they are), tunnel mode
    /// and hostname; says whether they changed.
    pub(super) fn relabel(
        &mut self,
        services: Option<LabelText>,
        assumed: bool,
        hostname: &str,
    ) -> bool {
        let mode = if assumed {
            agent_label::TUNNELS_ASSUMED
        } else {
            agent_label::TUNNELS_OBSERVED
        };
        let l = &self.labels;
        let same_services = services
            .as_deref()
            .is_none_or(|s| l.get(agent_label::SERVICES) == Some(s));
        if !l.is_empty()
            && same_services
            && l.get(agent_label::TUNNELS) == Some(mode)
            && l.get(agent_label::HOSTNAME).unwrap_or_default() == hostname
        {
            return false;
        }
        let services = match services {
            Some(s) => s,
            None => Cow::Owned(l.get(agent_label::SERVICES).unwrap_or_default().to_string()),
        };
        let mut pairs = vec![
            (Cow::Borrowed(agent_label::SERVICES), services),
            (Cow::Borrowed(agent_label::TUNNELS), Cow::Borrowed(mode)),
        ];
        if !hostname.is_empty() {
            pairs.push((
                Cow::Borrowed(agent_label::HOSTNAME),
                Cow::Owned(hostname.to_string()),
            ));
        }
        self.labels = Labels::from_pairs(pairs);
        true
    }

    pub(super) fn agent(&self, name: &str, auth_server: Option<&str>) -> Server {
        Server {
            kind: Kind::Agent,
            name: name.to_string(),
            addr: String::new(),
            version: self.version.to_string(),
            group_id: String::new(),
            group_generation: 0,
            expires: self.expires,
            ttl: self.ttl,
            labels: self.labels.clone(),
            auth_server: auth_server.unwrap_or_default().to_string(),
        }
    }
}

/// Sets `field` to `value` if it differs; says whether it did.
fn update<T: PartialEq + Clone>(field: &mut T, value: &T) -> bool {
    if field == value {
        return false;
    }
    *field = value.clone();
    true
}

/// Where changes go: to the caller, or nowhere while a listing is loaded
/// (then nothing is built only to be dropped).
pub(super) struct Out<'a>(pub(super) Option<&'a mut Vec<Change>>);

impl Out<'_> {
    pub(super) fn push(&mut self, change: impl FnOnce() -> Change) {
        if let Some(out) = self.0.as_deref_mut() {
            out.push(change());
        }
    }
}

/// What a change to a host can have touched, beyond its expiry.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct Touched {
    /// The set of services (the services label).
    pub(super) services: bool,
    /// The tunnels: its `ProxyIDs`, or for agent mesh the proxies known.
    pub(super) tunnels: bool,
    /// The Auth attachment.
    pub(super) auth: bool,
    /// A service's version or hostname.
    pub(super) said: bool,
}

pub(super) const NOTHING: Touched = Touched {
    services: false,
    tunnels: false,
    auth: false,
    said: false,
};
pub(super) const SAID: Touched = Touched {
    said: true,
    ..NOTHING
};
pub(super) const TUNNELS: Touched = Touched {
    tunnels: true,
    ..NOTHING
};
pub(super) const AUTH: Touched = Touched {
    auth: true,
    ..NOTHING
};
pub(super) const EVERYTHING: Touched = Touched {
    services: true,
    tunnels: true,
    auth: true,
    said: true,
};

pub(super) fn tunnel_name(host: &str, proxy: &str) -> String {
    let mut name = String::with_capacity(host.len() + 1 + proxy.len());
    name.push_str(host);
    name.push('/');
    name.push_str(proxy);
    name
}

pub(super) fn tunnel(host: &str, proxy: &str) -> Tunnel {
    Tunnel {
        name: tunnel_name(host, proxy),
        agent: host.to_string(),
        proxy: proxy.to_string(),
        last_heartbeat: None,
        expires: None,
    }
}

/// Sends what changed of host `name`'s agent and tunnels. A heartbeat
/// (`NOTHING` touched) only compares the agent's scalar parts; the labels
/// are rebuilt only when what they say changed.
pub(super) fn refresh(
    h: &mut Host,
    name: &str,
    touched: Touched,
    known: &ProxyList,
    out: &mut Out,
) {
    // The service whose heartbeat runs out last speaks for the host.
    let Some(latest) = h.services.iter().max_by_key(|r| r.expires) else {
        return;
    };
    // Most heartbeats: a host's only service said the same again, so only
    // the expiry and TTL can have moved. (With several services, another
    // may have become the latest, and what it says is compared below.)
    if let Some(sent) = h
        .sent
        .as_mut()
        .filter(|_| touched == NOTHING && h.services.len() == 1)
    {
        let changed =
            update(&mut sent.expires, &latest.expires) | update(&mut sent.ttl, &latest.ttl);
        if changed {
            out.push(|| Change::Expiry {
                kind: Kind::Agent,
                name: name.to_string(),
                expires: sent.expires,
                ttl: sent.ttl,
            });
        }
        return;
    }
    // The proxies the services name, sorted and once each. Nearly every
    // host runs one service, whose list is already that.
    let observed: Option<ProxyList> = touched.tunnels.then(|| match h.services.as_slice() {
        [only] => only.proxies.clone(),
        all => all
            .iter()
            .flat_map(|r| r.proxies.iter())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .cloned()
            .collect(),
    });
    if let Some(o) = &observed {
        h.assumed = o.is_empty();
    }
    let new = h.sent.is_none();
    let sent = h.sent.get_or_insert_with(|| Sent {
        expires: latest.expires,
        ttl: latest.ttl,
        version: latest.version.clone(),
        labels: Labels::default(),
    });
    let services = (new || touched.services).then(|| match h.services.as_slice() {
        // Nearly every host: one service, named by fixed text.
        [only] => Cow::Borrowed(only.service.as_str()),
        all => {
            let names: BTreeSet<&'static str> = all.iter().map(|r| r.service.as_str()).collect();
            match names.first() {
                Some(only) if names.len() == 1 => Cow::Borrowed(*only),
                _ => Cow::Owned(names.into_iter().collect::<Vec<_>>().join(",")),
            }
        }
    });
    let mut changed = sent.relabel(services, h.assumed, &latest.hostname) | new;
    changed |= update(&mut sent.expires, &latest.expires);
    changed |= update(&mut sent.ttl, &latest.ttl);
    changed |= update(&mut sent.version, &latest.version);
    changed |= touched.auth;
    if changed {
        out.push(|| Change::PutServer(sent.agent(name, h.auth.as_deref())));
    }
    if let Some(observed) = observed {
        // Both sorted: the proxies known and `observed`.
        let want = if h.assumed { known.clone() } else { observed };
        for p in h.tunnels.iter().filter(|p| want.binary_search(p).is_err()) {
            out.push(|| Change::DeleteTunnel(tunnel_name(name, p)));
        }
        for p in want.iter().filter(|p| h.tunnels.binary_search(p).is_err()) {
            out.push(|| Change::PutTunnel(tunnel(name, p)));
        }
        h.tunnels = want;
    }
}
