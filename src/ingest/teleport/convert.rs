//! Teleport's resources as Lifeline's validated values. Each resource is
//! written as the `ClusterEvents` message it means and passed through the
//! one `validate` both sources share, so the rules exist once; what is
//! Teleport's own (Go's zero time, host IDs, `ProxyIDs`, the announce TTL
//! no resource carries) is settled here.

use rustc_hash::FxHashMap;
use std::time::Duration;

use crate::clock::Ts;
use crate::domain::text;
use crate::domain::{AgentService, Kind, RejectCode, Rejection, Server};
use crate::ingest::validate::{self, reject, Limits};
use crate::proto::teleport::{auth, types};
use crate::proto::v1 as pb;

use super::heartbeat::NodePut;

/// One service heartbeat, validated.
#[derive(Clone, Debug, PartialEq)]
pub struct Beat {
    pub service: AgentService,
    /// The service resource's name (a node's is its host ID; an app
    /// server's is the app).
    pub name: String,
    pub host: String,
    pub hostname: String,
    pub version: String,
    pub expires: Ts,
    /// Validated proxy names from `ProxyIDs`.
    pub proxies: Vec<String>,
}

/// Go's zero `time.Time` on the wire: 0001-01-01T00:00:00Z. Unset.
pub const GO_ZERO_SECONDS: i64 = -62_135_596_800;

/// Proxy group labels Teleport puts on proxies.
const GROUP_ID: &str = "teleport.internal/proxygroup-id";
const GROUP_GEN: &str = "teleport.internal/proxygroup-gen";

/// A resource Lifeline keeps: a proxy or auth server as is, or one
/// service heartbeat of a host.
#[derive(Debug)]
pub enum Item {
    Server(Server),
    Beat(Beat),
    /// A registered OpenSSH host (`node` of SubKind `openssh` or
    /// `openssh-ec2-ice`): no agent, no heartbeat, no tunnel. Counted,
    /// never an agent.
    Agentless(String),
}

/// The node SubKinds that are hosts Teleport reaches without an agent.
pub const AGENTLESS_SUBKINDS: [&str; 2] = ["openssh", "openssh-ec2-ice"];

impl Item {
    /// Its Teleport kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Item::Server(s) => s.kind.as_str(),
            Item::Beat(b) => b.service.as_str(),
            Item::Agentless(_) => AgentService::Node.as_str(),
        }
    }
}

/// When and how a resource was seen: in a live event (`live`) or a list,
/// at `now`. Teleport sets `expires = now + TTL` at each heartbeat and the
/// event follows at once, so a new expiry minus its arrival time is the
/// announce TTL no resource carries.
#[derive(Clone, Copy, Debug)]
pub struct Seen {
    pub now: Ts,
    pub live: bool,
    pub limits: Limits,
}

impl Seen {
    /// The TTL of a resource whose expiry is now `expires`, given its last
    /// expiry and TTL (`learned`). A resource seen only in a list keeps
    /// what was learned before, else the default.
    pub fn ttl(&self, learned: Option<(Ts, Duration)>, expires: Ts) -> Duration {
        match learned {
            // Not a heartbeat (the same expiry): nothing new to learn.
            Some((e, ttl)) if e == expires => ttl,
            _ if self.live && expires > self.now => {
                round(expires.since(self.now)).min(self.limits.max_ttl)
            }
            Some((_, ttl)) => ttl,
            None => self.limits.default_ttl,
        }
    }
}

/// Proxies' and auth servers' learned TTLs (agent services keep theirs
/// with their host). Keyed by kind, then name, so a heartbeat of a known
/// resource allocates nothing.
#[derive(Default)]
pub struct Ttls {
    learned: FxHashMap<Kind, FxHashMap<String, Learned>>,
    /// Bumped by each resync; an entry not seen since is forgotten.
    epoch: u64,
}

#[derive(Clone, Copy)]
struct Learned {
    expires: Ts,
    ttl: Duration,
    epoch: u64,
}

impl Ttls {
    /// The TTL for `kind`/`name` whose expiry is `expires`.
    pub fn observe(&mut self, kind: Kind, name: &str, expires: Ts, seen: &Seen) -> Duration {
        let epoch = self.epoch;
        let names = self.learned.entry(kind).or_default();
        if let Some(l) = names.get_mut(name) {
            let ttl = seen.ttl(Some((l.expires, l.ttl)), expires);
            *l = Learned {
                expires,
                ttl,
                epoch,
            };
            return ttl;
        }
        let ttl = seen.ttl(None, expires);
        let learned = Learned {
            expires,
            ttl,
            epoch,
        };
        names.insert(name.to_string(), learned);
        ttl
    }

    pub fn forget(&mut self, kind: Kind, name: &str) {
        if let Some(names) = self.learned.get_mut(&kind) {
            names.remove(name);
        }
    }

    /// A resync begins: what it does not list is forgotten at its end.
    pub fn begin_resync(&mut self) {
        self.epoch += 1;
    }

    /// A resync's listing is in: forgets every resource it did not list.
    pub fn end_resync(&mut self) {
        let epoch = self.epoch;
        for names in self.learned.values_mut() {
            names.retain(|_, l| l.epoch == epoch);
        }
    }
}

/// Whole seconds from two seconds up (the event's delivery shaves a few
/// milliseconds off), whole milliseconds below; never zero.
fn round(d: Duration) -> Duration {
    let ms = d.as_millis() as u64;
    let ms = if ms >= 2_000 {
        (ms + 500) / 1_000 * 1_000
    } else {
        ms
    };
    Duration::from_millis(ms.max(1))
}

/// Go's zero time, which Teleport sends for unset.
pub fn is_go_zero(t: &prost_types::Timestamp) -> bool {
    t.seconds == GO_ZERO_SECONDS && t.nanos == 0
}

/// A wire timestamp with Go's zero time read as unset.
fn expires(m: Option<&types::Metadata>) -> Option<prost_types::Timestamp> {
    m.and_then(|m| m.expires).filter(|t| !is_go_zero(t))
}

/// A `ServerV2`: a proxy, an auth server, or a node (a service of its host).
pub fn server_v2(s: types::ServerV2, seen: &Seen, ttls: &mut Ttls) -> Result<Item, Rejection> {
    let spec = s.spec.unwrap_or_default();
    let mut meta = s.metadata.unwrap_or_default();
    match s.kind.as_str() {
        "proxy" | "auth_server" => {
            let kind = if s.kind == "proxy" {
                Kind::Proxy
            } else {
                Kind::AuthServer
            };
            let group_id = meta.labels.get(GROUP_ID).cloned().unwrap_or_default();
            let group_generation = meta
                .labels
                .get(GROUP_GEN)
                .and_then(|g| g.parse().ok())
                .unwrap_or_default();
            let expires = expires(Some(&meta));
            let wire = pb::Server {
                kind: kind.as_str().to_string(),
                name: meta.name,
                addr: spec.addr,
                version: spec.version,
                group_id,
                group_generation,
                expires,
                ttl: None,
                labels: meta.labels,
                auth_server: String::new(),
            };
            let mut server = validate::server(wire, seen.now, &seen.limits)?;
            server.ttl = ttls.observe(kind, &server.name, server.expires, seen);
            Ok(Item::Server(server))
        }
        "node" if AGENTLESS_SUBKINDS.contains(&s.sub_kind.as_str()) => {
            validate::check_name("node", &meta.name, "Metadata.Name")?;
            Ok(Item::Agentless(meta.name))
        }
        // A node is named by its host ID.
        "node" => beat(
            AgentService::Node,
            Service {
                host: meta.name.clone(),
                name: std::mem::take(&mut meta.name),
                hostname: spec.hostname,
                version: spec.version,
                proxies: spec.proxy_i_ds,
                meta,
            },
            seen,
        ),
        other => Err(reject(
            RejectCode::UnknownKind,
            other,
            &meta.name,
            format!("a ServerV2 of kind {other:?} (expected proxy, auth_server or node)"),
        )),
    }
}

/// A listed node read in place from its page: what [`server_v2`] makes of
/// the same node decoded, built from the few fields a host keeps.
pub fn listed_node(put: &NodePut<'_>, seen: &Seen) -> Result<Item, Rejection> {
    if AGENTLESS_SUBKINDS.contains(&put.sub_kind) {
        validate::check_name("node", put.name, "Metadata.Name")?;
        return Ok(Item::Agentless(put.name.to_string()));
    }
    beat(
        AgentService::Node,
        Service {
            host: put.name.to_string(),
            name: put.name.to_string(),
            hostname: put.hostname.to_string(),
            version: put.version.to_string(),
            proxies: put.proxies.iter().map(|p| p.to_string()).collect(),
            meta: types::Metadata {
                expires: put.expires,
                ..Default::default()
            },
        },
        seen,
    )
}

/// A service resource's parts, whatever its message.
pub struct Service {
    pub name: String,
    pub host: String,
    pub hostname: String,
    pub version: String,
    pub proxies: Vec<String>,
    pub meta: types::Metadata,
}

/// App, database and Kubernetes servers share a shape: named by what
/// they serve, their host in `Spec.HostID`.
macro_rules! service_from {
    ($($msg:ty),*) => {$(
        impl From<$msg> for Service {
            fn from(s: $msg) -> Service {
                let spec = s.spec.unwrap_or_default();
                let mut meta = s.metadata.unwrap_or_default();
                Service {
                    name: std::mem::take(&mut meta.name),
                    host: spec.host_id,
                    hostname: spec.hostname,
                    version: spec.version,
                    proxies: spec.proxy_i_ds,
                    meta,
                }
            }
        }
    )*};
}

service_from!(
    types::AppServerV3,
    types::DatabaseServerV3,
    types::KubernetesServerV3
);

/// A Windows desktop service is named by its host ID.
impl From<types::WindowsDesktopServiceV3> for Service {
    fn from(s: types::WindowsDesktopServiceV3) -> Service {
        let spec = s.spec.unwrap_or_default();
        let mut meta = s.header.and_then(|h| h.metadata).unwrap_or_default();
        Service {
            host: meta.name.clone(),
            name: std::mem::take(&mut meta.name),
            hostname: spec.hostname,
            version: spec.teleport_version,
            proxies: spec.proxy_i_ds,
            meta,
        }
    }
}

/// A resource of a watched kind as a proxy, auth server or service
/// heartbeat; `None` for what carries no such resource.
pub enum Resource {
    Server(types::ServerV2),
    Service(AgentService, Service),
}

impl Resource {
    /// From a watch event.
    pub fn of_event(r: auth::event::Resource) -> Option<Resource> {
        use auth::event::Resource as R;
        Some(match r {
            R::Server(s) => Resource::Server(*s),
            R::AppServer(s) => Resource::Service(AgentService::AppServer, (*s).into()),
            R::DatabaseServer(s) => Resource::Service(AgentService::DbServer, (*s).into()),
            R::KubernetesServer(s) => Resource::Service(AgentService::KubeServer, (*s).into()),
            R::WindowsDesktopService(s) => {
                Resource::Service(AgentService::WindowsDesktopService, (*s).into())
            }
            R::ResourceHeader(_) | R::WatchStatus(_) => return None,
        })
    }

    /// From a `ListResources` page.
    pub fn of_page(r: auth::paginated_resource::Resource) -> Resource {
        use auth::paginated_resource::Resource as R;
        match r {
            R::Node(s) => Resource::Server(s),
            R::AppServer(s) => Resource::Service(AgentService::AppServer, s.into()),
            R::DatabaseServer(s) => Resource::Service(AgentService::DbServer, s.into()),
            R::KubernetesServer(s) => Resource::Service(AgentService::KubeServer, s.into()),
            R::WindowsDesktopService(s) => {
                Resource::Service(AgentService::WindowsDesktopService, s.into())
            }
        }
    }

    /// Its name as a service heartbeat names it (a node by its host ID),
    /// unvalidated; `None` without one.
    pub fn name(&self) -> Option<String> {
        let name = match self {
            Resource::Server(s) => s.metadata.as_ref().map(|m| m.name.clone())?,
            Resource::Service(_, s) => s.name.clone(),
        };
        (!name.is_empty()).then_some(name)
    }

    /// Validated; a proxy's or auth server's TTL learned (a service's is
    /// learned with its host).
    pub fn validate(self, seen: &Seen, ttls: &mut Ttls) -> Result<Item, Rejection> {
        match self {
            Resource::Server(s) => server_v2(s, seen, ttls),
            Resource::Service(k, s) => beat(k, s, seen),
        }
    }
}

/// One service heartbeat, validated as the agent it speaks for.
pub fn beat(service: AgentService, s: Service, seen: &Seen) -> Result<Item, Rejection> {
    let kind = service.as_str();
    if s.host.trim().is_empty() {
        return Err(reject(
            RejectCode::MissingField,
            kind,
            &s.name,
            "the service names no host (Spec.HostID is empty)",
        ));
    }
    validate::check_name(kind, &s.name, "Metadata.Name")?;
    // The heartbeat is the host's: checked as that agent's would be.
    validate::check_name(kind, &s.host, "host")?;
    let expires = validate::heartbeat_expires(
        kind,
        &s.name,
        expires(Some(&s.meta)).as_ref(),
        seen.now,
        &seen.limits,
    )?;
    let mut proxies = s.proxies;
    for p in &proxies {
        validate::check_name(kind, p, "ProxyIDs entry").map_err(|r| Rejection {
            name: s.name.clone(),
            ..r
        })?;
    }
    // Teleport sends them sorted: most heartbeats need no sort.
    if !proxies.is_sorted() {
        proxies.sort();
    }
    proxies.dedup();
    Ok(Item::Beat(Beat {
        service,
        name: s.name,
        host: s.host,
        hostname: text::clean_owned(s.hostname),
        version: text::clean_owned(s.version),
        expires,
        proxies,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(now: Ts) -> Seen {
        Seen {
            now,
            live: true,
            limits: limits(),
        }
    }

    fn listed(now: Ts) -> Seen {
        Seen {
            live: false,
            ..live(now)
        }
    }

    fn limits() -> Limits {
        Limits {
            default_ttl: Duration::from_secs(600),
            max_expired_age: Duration::from_secs(3600),
            max_ttl: Duration::from_secs(86_400),
        }
    }

    fn meta(name: &str, expires: Option<prost_types::Timestamp>) -> types::Metadata {
        types::Metadata {
            name: name.into(),
            expires,
            ..Default::default()
        }
    }

    fn at(secs: i64) -> prost_types::Timestamp {
        prost_types::Timestamp {
            seconds: secs,
            nanos: 0,
        }
    }

    const NOW: Ts = Ts(1_700_000_000 * 1_000_000);

    #[test]
    fn a_go_zero_expiry_is_unset_and_so_refused_for_a_heartbeat() {
        let s = types::ServerV2 {
            kind: "proxy".into(),
            metadata: Some(meta("p1", Some(at(GO_ZERO_SECONDS)))),
            ..Default::default()
        };
        let err = server_v2(s, &live(NOW), &mut Ttls::default()).unwrap_err();
        assert_eq!(err.code, RejectCode::MissingExpires, "{err:?}");
    }

    #[test]
    fn a_proxy_keeps_its_group_and_learns_its_ttl_from_a_live_heartbeat() {
        let mut ttls = Ttls::default();
        let mut m = meta("p1", Some(at(1_700_000_030)));
        m.labels.insert(GROUP_ID.into(), "g".into());
        m.labels.insert(GROUP_GEN.into(), "7".into());
        let s = types::ServerV2 {
            kind: "proxy".into(),
            metadata: Some(m.clone()),
            ..Default::default()
        };
        let listed = server_v2(s.clone(), &listed(NOW), &mut ttls);
        let Ok(Item::Server(p)) = listed else {
            panic!("{listed:?}")
        };
        assert_eq!(
            (p.kind, p.group_id.as_str(), p.group_generation),
            (Kind::Proxy, "g", 7)
        );
        assert_eq!(p.ttl, Duration::from_secs(600), "listed only: the default");
        let mut s = s;
        s.metadata = Some(types::Metadata {
            expires: Some(at(1_700_000_045)),
            ..m
        });
        let later = Ts(NOW.0 + 15_000_000 + 3_000);
        let Ok(Item::Server(p)) = server_v2(s, &live(later), &mut ttls) else {
            panic!()
        };
        assert_eq!(
            p.ttl,
            Duration::from_secs(30),
            "expiry minus arrival, rounded"
        );
    }

    #[test]
    fn an_app_without_a_host_and_a_bad_proxy_id_are_refused_with_the_field() {
        let app = types::AppServerV3 {
            kind: "app_server".into(),
            metadata: Some(meta("grafana", Some(at(1_700_000_030)))),
            spec: Some(types::AppServerSpecV3::default()),
            ..Default::default()
        };
        let err = beat(AgentService::AppServer, app.clone().into(), &live(NOW)).unwrap_err();
        assert_eq!(err.code, RejectCode::MissingField);
        assert!(err.message.contains("HostID"), "{}", err.message);
        let mut app = app;
        app.spec = Some(types::AppServerSpecV3 {
            host_id: "host-1".into(),
            proxy_i_ds: vec!["".into()],
            ..Default::default()
        });
        let err = beat(AgentService::AppServer, app.into(), &live(NOW)).unwrap_err();
        assert!(err.message.starts_with("ProxyIDs"), "{}", err.message);
    }

    #[test]
    fn a_resync_forgets_the_ttls_of_what_it_did_not_list() {
        let mut ttls = Ttls::default();
        let (e1, e2) = (Ts(NOW.0 + 30_000_000), Ts(NOW.0 + 31_000_000));
        ttls.observe(Kind::Proxy, "gone", e1, &live(NOW));
        ttls.observe(Kind::Proxy, "kept", e1, &live(NOW));
        ttls.begin_resync();
        let kept = ttls.observe(Kind::Proxy, "kept", e2, &listed(NOW));
        ttls.end_resync();
        assert_eq!(
            kept,
            Duration::from_secs(30),
            "listed: keeps what it learned"
        );
        let gone = ttls.observe(Kind::Proxy, "gone", e2, &listed(NOW));
        assert_eq!(
            gone,
            Duration::from_secs(600),
            "forgotten: the default again"
        );
    }

    #[test]
    fn a_node_is_a_service_of_the_host_it_names() {
        let s = types::ServerV2 {
            kind: "node".into(),
            metadata: Some(meta("host-1", Some(at(1_700_000_030)))),
            spec: Some(types::ServerSpecV2 {
                hostname: "web".into(),
                proxy_i_ds: vec!["p2".into(), "p1".into(), "p2".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let Ok(Item::Beat(b)) = server_v2(s, &live(NOW), &mut Ttls::default()) else {
            panic!()
        };
        assert_eq!((b.host.as_str(), b.hostname.as_str()), ("host-1", "web"));
        assert_eq!(b.proxies, ["p1", "p2"]);
    }

    /// A listed node read in place and the same node decoded come out
    /// alike, refused or not.
    #[test]
    fn a_listed_node_in_place_is_what_the_decoded_node_is() {
        use crate::proto::teleport::auth as tp;
        use prost::Message;
        let now = Ts::from_micros(1_700_000_000_000_000);
        let seen = listed(now);
        let node = |name: &str,
                    sub: &str,
                    host: &str,
                    version: &str,
                    proxies: &[&str],
                    exp: Option<prost_types::Timestamp>| types::ServerV2 {
            kind: "node".into(),
            sub_kind: sub.into(),
            version: "v2".into(),
            metadata: Some(types::Metadata {
                labels: [("env".to_string(), "prod".to_string())].into(),
                ..meta(name, exp)
            }),
            spec: Some(types::ServerSpecV2 {
                hostname: host.into(),
                version: version.into(),
                proxy_i_ds: proxies.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            }),
        };
        let soon = Some(at(1_700_000_600));
        let cases = [
            node("h1", "", "web-1", "16.4.2", &["p2", "p1", "p1"], soon),
            node("h2", "", "web\u{7}2", " 16.4.2 ", &[], soon),
            node("h3", "openssh", "ssh-3", "", &[], None),
            node("bad name\n", "openssh", "", "", &[], None),
            node("h4", "", "web-4", "16", &["bad proxy\u{0}"], soon),
            node("h5", "", "web-5", "16", &[], None),
            node("h6", "", "web-6", "16", &[], Some(at(GO_ZERO_SECONDS))),
            node("h7", "", "web-7", "16", &[], Some(at(4_000_000_000))),
            node("", "", "web-8", "16", &[], soon),
        ];
        for s in cases {
            let page = tp::ListResourcesResponse {
                resources: vec![tp::PaginatedResource {
                    resource: Some(tp::paginated_resource::Resource::Node(s.clone())),
                }],
                ..Default::default()
            };
            let bytes = prost::bytes::Bytes::from(page.encode_to_vec());
            let entries = super::super::heartbeat::page_entries(&bytes).unwrap();
            let Some(super::super::heartbeat::Entry::Node(n)) = entries.first() else {
                panic!("{s:?} was not read in place");
            };
            let in_place = listed_node(&n.read().unwrap(), &seen);
            let decoded = server_v2(s.clone(), &seen, &mut Ttls::default());
            assert_eq!(format!("{in_place:?}"), format!("{decoded:?}"), "{s:?}");
        }
    }
}
