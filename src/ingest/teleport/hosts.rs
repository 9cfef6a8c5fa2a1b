//! Teleport's agent services folded into Lifeline's agents: one agent per
//! host ID, alive while any of its services' heartbeats is unexpired, with
//! the tunnels Teleport records (`ProxyIDs`, proxy peering) or, where it
//! records none (agent mesh), an assumed tunnel to every known proxy.
//! Every call returns the domain changes it causes, and only those.

use std::borrow::Cow;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use crate::clock::Ts;
use crate::domain::{AgentService, Change, Kind, Server, Tunnel};
use crate::supervise::{joined, scoped};

use super::convert::{self, Beat, Seen};
use super::heartbeat::NodePut;
use crate::domain::text;
use crate::ingest::validate;

pub use super::auth_of::AuthOf;
mod host;
use super::interned::{Interned, ProxyList};
use host::{
    refresh, tunnel, tunnel_name, Host, Out, Said, Touched, AUTH, EVERYTHING, NOTHING, TUNNELS,
};

/// Every host's services, the proxies known, and Auth attachments.
#[derive(Default)]
pub struct Hosts {
    /// In the order first seen: a listing's order (Teleport lists by
    /// name), kept dense, so the snapshot hands the fleet its agents in
    /// that order and a sweep of heartbeats walks neighbouring entries.
    hosts: IndexMap<String, Host, FxBuildHasher>,
    /// The hosts running a service of this name (an app may be served by
    /// several), for deletes that do not name the host.
    host_of: FxHashMap<(AgentService, String), BTreeSet<String>>,
    /// Every proxy known, sorted: the one list agent-mesh hosts share.
    proxies: ProxyList,
    /// The proxy names and versions the hosts hold, once each.
    strings: Interned,
    auth_of: AuthOf,
    /// Agentless (OpenSSH) nodes: not agents, only counted.
    agentless: FxHashSet<String>,
}

/// Indexes the service host `host` just gained (the last of its
/// services) by name, for deletes that do not name the host. Only a gain
/// changes the index: a heartbeat of a service the host runs finds it
/// there already. A node is named by its host: its delete needs no index.
fn index_new_service(
    host_of: &mut FxHashMap<(AgentService, String), BTreeSet<String>>,
    h: &Host,
    host: &str,
) {
    if let Some(r) = h.services.last() {
        if r.service != AgentService::Node {
            host_of
                .entry((r.service, r.name.to_string()))
                .or_default()
                .insert(host.to_string());
        }
    }
}

impl Hosts {
    /// For a resync's listing: the proxies known, then [`Hosts::load`]
    /// for every service listed and [`Hosts::attach`] once. Room for as
    /// many hosts as `previous` held, so a listing of a fleet of that
    /// size does not grow the table as it goes.
    pub fn new(proxies: impl IntoIterator<Item = String>, previous: &Hosts) -> Hosts {
        let mut hosts = Hosts {
            hosts: IndexMap::with_capacity_and_hasher(previous.hosts.len(), FxBuildHasher),
            ..Hosts::default()
        };
        let mut known: Vec<Arc<str>> = proxies.into_iter().map(|p| hosts.strings.get(&p)).collect();
        known.sort_unstable();
        known.dedup();
        hosts.proxies = known.into();
        hosts
    }

    /// Each listed host's Auth (from `GetInstances`), with nothing sent,
    /// and every agent and tunnel for the resync that follows.
    pub fn attach(&mut self, auth_of: AuthOf) -> (Vec<Server>, Vec<Tunnel>) {
        // Sized first: grown by doubling, a large fleet's tunnels were
        // copied and faulted in several times over.
        let mut agents = Vec::with_capacity(self.hosts.len());
        let mut tunnels = Vec::with_capacity(self.hosts.values().map(|h| h.tunnels.len()).sum());
        let half = if self.hosts.len() >= ON_TWO_THREADS {
            self.hosts.len() / 2
        } else {
            0
        };
        let (first, second) = self.hosts.as_mut_slice().split_at_mut(half);
        let auth = &auth_of;
        // At the end of a cold listing nothing else runs: the second half
        // is built on a thread of its own while this one builds the first.
        let other = std::thread::scope(|s| {
            let other = scoped(s, "lifeline-snapshot", move || {
                // Sized first too: growing them copied and faulted in the
                // half they held at each doubling.
                let mut agents = Vec::with_capacity(second.len());
                let mut tunnels =
                    Vec::with_capacity(second.iter().map(|(_, h)| h.tunnels.len()).sum());
                attach_part(second, auth, Names::Own, &mut agents, &mut tunnels);
                (agents, tunnels)
            });
            attach_part(first, auth, Names::Shared, &mut agents, &mut tunnels);
            other.map(joined)
        });
        match other {
            Some((a, t)) => {
                agents.extend(a);
                tunnels.extend(t);
            }
            // No thread to be had: this one builds the second half too.
            None => {
                let (_, second) = self.hosts.as_mut_slice().split_at_mut(half);
                attach_part(second, auth, Names::Shared, &mut agents, &mut tunnels);
            }
        }
        self.auth_of = auth_of;
        (agents, tunnels)
    }

    /// An agentless node seen (PUT or listed): counted, nothing else.
    pub fn put_agentless(&mut self, name: String) {
        self.agentless.insert(name);
    }

    /// How many agentless nodes the cluster has, as last seen.
    pub fn agentless(&self) -> usize {
        self.agentless.len()
    }

    /// Which Auth instance last saw each host, as last polled.
    pub fn auth_of(&self) -> &AuthOf {
        &self.auth_of
    }

    /// A listed service: folded in, with nothing sent (the snapshot says
    /// it all). A service `previous` knew keeps the TTL it learned there.
    pub fn load(&mut self, mut beat: Beat, seen: &Seen, previous: &Hosts) {
        // A listing's hosts are new to this table (it starts empty): one
        // lookup that inserts, not one that misses and then one that
        // inserts. The beat's host name becomes the key, uncopied (a
        // service kept does not hold it).
        let entry = self.hosts.entry(std::mem::take(&mut beat.host));
        let i = entry.index();
        if let indexmap::map::Entry::Vacant(v) = entry {
            let host = Host::attached(&self.auth_of, v.key());
            v.insert(host);
        }
        let Some((host, _)) = self.hosts.get_index(i) else {
            return;
        };
        // The last listing held its hosts in the same order: this host is
        // where it was then unless the fleet changed before it, and is
        // found there without a lookup that misses the cache.
        let learned = previous
            .hosts
            .get_index(i)
            .filter(|(name, _)| *name == host)
            .map(|(_, h)| h)
            .or_else(|| previous.hosts.get(host))
            .and_then(|h| h.learned(beat.service, &beat.name));
        self.put_at(i, beat, seen, learned, &mut Out(None));
    }

    /// A service heartbeat (or any PUT of a service resource).
    /// Says whether its host did not know the service (the service's
    /// kind and name then), from the one lookup the heartbeat needs.
    pub fn put_service(
        &mut self,
        beat: Beat,
        seen: &Seen,
        out: &mut Vec<Change>,
    ) -> Option<(AgentService, String)> {
        self.put(beat, seen, None, &mut Out(Some(out)))
    }

    /// A node's heartbeat read in place from the watch's bytes, taken
    /// when its host runs that node and it says what the last one said:
    /// only the expiry moves, exactly as [`Hosts::put_service`] would
    /// move it. Anything else (an unknown host or node, something new
    /// said, a proxy name or text that validation would refuse or change,
    /// an expiry it would refuse) is `false`: the event then goes the
    /// whole way, and is refused there if it must be.
    pub fn node_heartbeat(
        &mut self,
        put: &NodePut<'_>,
        seen: &Seen,
        out: &mut Vec<Change>,
    ) -> bool {
        let Hosts { hosts, proxies, .. } = self;
        let Some(h) = hosts.get_mut(put.name) else {
            return false;
        };
        let Some(i) = h.service(AgentService::Node, put.name) else {
            return false;
        };
        let kind = AgentService::Node.as_str();
        // An agentless host is no heartbeat at all.
        if convert::AGENTLESS_SUBKINDS.contains(&put.sub_kind) {
            return false;
        }
        // As `convert::beat` takes them: proxies checked, sorted and once
        // each; hostname and version cleaned.
        let proxies_as_kept = put.proxies.is_sorted_by(|a, b| a < b)
            && put
                .proxies
                .iter()
                .all(|p| validate::check_name(kind, p, "ProxyIDs entry").is_ok());
        let clean = |s: &str| matches!(text::clean(s), Cow::Borrowed(_));
        if !proxies_as_kept || !clean(put.hostname) || !clean(put.version) {
            return false;
        }
        let expires = put.expires.filter(|t| !convert::is_go_zero(t));
        let Ok(expires) =
            validate::heartbeat_expires(kind, put.name, expires.as_ref(), seen.now, &seen.limits)
        else {
            return false;
        };
        let r = &mut h.services[i];
        if r.said != Said::digest(put.version, put.hostname, &put.proxies) {
            return false;
        }
        r.ttl = seen.ttl(Some((r.expires, r.ttl)), expires);
        r.expires = expires;
        refresh(h, put.name, NOTHING, proxies, &mut Out(Some(out)));
        true
    }

    fn put(
        &mut self,
        beat: Beat,
        seen: &Seen,
        learned: Option<(Ts, Duration)>,
        out: &mut Out,
    ) -> Option<(AgentService, String)> {
        // A heartbeat's host is nearly always known: found without copying
        // its name, which only a new host's entry needs.
        let i = match self.hosts.get_index_of(&beat.host) {
            Some(i) => i,
            None => {
                let host = Host::attached(&self.auth_of, &beat.host);
                self.hosts.insert_full(beat.host.clone(), host).0
            }
        };
        self.put_at(i, beat, seen, learned, out)
    }

    /// [`Hosts::put`] for the host at position `i` of the table.
    fn put_at(
        &mut self,
        i: usize,
        beat: Beat,
        seen: &Seen,
        learned: Option<(Ts, Duration)>,
        out: &mut Out,
    ) -> Option<(AgentService, String)> {
        let Hosts {
            hosts,
            host_of,
            proxies,
            strings,
            ..
        } = self;
        let (name, h) = hosts.get_index_mut(i)?;
        let touched = h.put(beat, seen, learned, strings);
        let new = touched.services.then(|| {
            index_new_service(host_of, h, name);
            h.services
                .last()
                .map(|r| (r.service, r.name(name).to_string()))
        });
        refresh(h, name, touched, proxies, out);
        new.flatten()
    }

    /// A service resource deleted. `host` is the host the event named, if
    /// any (app server deletes name it in `Description`); without it, the
    /// service goes from every host that ran one of that name.
    pub fn delete_service(
        &mut self,
        service: AgentService,
        name: &str,
        host: Option<&str>,
        out: &mut Vec<Change>,
    ) {
        if service == AgentService::Node && self.agentless.remove(name) {
            return;
        }
        let key = (service, name.to_string());
        let hosts: Vec<String> = match host {
            Some(h) => vec![h.to_string()],
            None if service == AgentService::Node => vec![name.to_string()],
            None => self
                .host_of
                .get(&key)
                .map(|s| s.iter().cloned().collect())
                .unwrap_or_default(),
        };
        for h in hosts {
            if let Some(set) = self.host_of.get_mut(&key) {
                set.remove(&h);
                if set.is_empty() {
                    self.host_of.remove(&key);
                }
            }
            self.remove_service(&h, &key, out);
        }
    }

    fn remove_service(&mut self, host: &str, key: &(AgentService, String), out: &mut Vec<Change>) {
        let Some(h) = self.hosts.get_mut(host) else {
            return;
        };
        let Some(i) = h.service(key.0, &key.1) else {
            return;
        };
        h.services.swap_remove(i);
        if h.services.is_empty() {
            if let Some(h) = self.hosts.swap_remove(host) {
                for p in h.tunnels.iter() {
                    out.push(Change::DeleteTunnel(tunnel_name(host, p)));
                }
                if h.sent.is_some() {
                    out.push(Change::DeleteServer(Kind::Agent, host.to_string()));
                }
            }
        } else {
            self.refresh(host, EVERYTHING, &mut Out(Some(out)));
        }
    }

    /// A proxy seen (PUT or listed): agent-mesh hosts assume a tunnel to it.
    pub fn put_proxy(&mut self, name: &str, out: &mut Vec<Change>) {
        // Most proxy PUTs are heartbeats of a proxy already known.
        if let Err(at) = self.proxies.binary_search_by(|p| (**p).cmp(name)) {
            let mut known = self.proxies.to_vec();
            known.insert(at, self.strings.get(name));
            self.proxies = known.into();
            self.refresh_assumed(out);
        }
    }

    /// A proxy deleted: agent-mesh hosts no longer assume a tunnel to it.
    pub fn delete_proxy(&mut self, name: &str, out: &mut Vec<Change>) {
        if let Ok(at) = self.proxies.binary_search_by(|p| (**p).cmp(name)) {
            let mut known = self.proxies.to_vec();
            known.remove(at);
            self.proxies = known.into();
            self.refresh_assumed(out);
        }
    }

    /// Which Auth instance last saw each host (from `GetInstances`).
    /// Hosts missing from `auth_of` keep no auth server.
    pub fn set_auth(&mut self, auth_of: AuthOf, out: &mut Vec<Change>) {
        self.auth_of = auth_of;
        let mut out = Out(Some(out));
        let mut walk = self.auth_of.walk();
        for (name, h) in &mut self.hosts {
            let auth = walk.get(name).cloned();
            if h.auth != auth {
                h.auth = auth;
                refresh(h, name, AUTH, &self.proxies, &mut out);
            }
        }
    }

    /// Agent-mesh hosts take the proxies known now, walked in place.
    fn refresh_assumed(&mut self, out: &mut Vec<Change>) {
        let mut out = Out(Some(out));
        for (name, h) in self.hosts.iter_mut().filter(|(_, h)| h.assumed) {
            refresh(h, name, TUNNELS, &self.proxies, &mut out);
        }
    }

    /// [`refresh`] for the host named `name`.
    fn refresh(&mut self, name: &str, touched: Touched, out: &mut Out) {
        if let Some(h) = self.hosts.get_mut(name) {
            refresh(h, name, touched, &self.proxies, out);
        }
    }
}

/// Hosts in a table of at least this many are attached on two threads.
const ON_TWO_THREADS: usize = 4_096;

/// Whose Auth names a run of hosts holds.
#[derive(Clone, Copy, PartialEq)]
enum Names {
    /// The shared ones in `auth_of`.
    Shared,
    /// Copies of the run's own: each Auth name is shared by thousands of
    /// hosts, and two threads counting references to one name would take
    /// turns at the cache line its count is in (the dearest step of the
    /// attach, measured).
    Own,
}

/// At most this many Auth names are copied for a run; any further one is
/// shared.
const OWN_NAMES: usize = 16;

/// [`Hosts::attach`] for a run of the table, in its order.
fn attach_part(
    hosts: &mut indexmap::map::Slice<String, Host>,
    auth_of: &AuthOf,
    names: Names,
    agents: &mut Vec<Server>,
    tunnels: &mut Vec<Tunnel>,
) {
    let mut copies: Vec<(Arc<str>, Arc<str>)> = Vec::new();
    let mut own = |shared: &Arc<str>| {
        if names == Names::Shared {
            return shared.clone();
        }
        match copies.iter().find(|(s, _)| Arc::ptr_eq(s, shared)) {
            Some((_, copy)) => copy.clone(),
            None if copies.len() < OWN_NAMES => {
                let copy: Arc<str> = Arc::from(&**shared);
                copies.push((shared.clone(), copy.clone()));
                copy
            }
            None => shared.clone(),
        }
    };
    let mut walk = auth_of.walk();
    for (name, h) in hosts.iter_mut() {
        h.auth = walk.get(name).map(&mut own);
        if let Some(a) = &h.sent {
            agents.push(a.agent(name, h.auth.as_deref()));
        }
        tunnels.extend(h.tunnels.iter().map(|p| tunnel(name, p)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{agent_label, Labels};

    impl Hosts {
        fn is_empty(&self) -> bool {
            self.hosts.is_empty()
        }
    }

    fn beat(
        service: AgentService,
        name: &str,
        host: &str,
        expires_s: i64,
        proxies: &[&str],
    ) -> Beat {
        Beat {
            service,
            name: name.into(),
            host: host.into(),
            hostname: format!("{host}.example"),
            version: "17.0.0".into(),
            expires: Ts(expires_s * 1_000_000),
            proxies: proxies.iter().map(|p| p.to_string()).collect(),
        }
    }

    /// A node's heartbeat: a node is named by its host.
    fn node(host: &str, expires_s: i64, proxies: &[&str]) -> Beat {
        beat(AgentService::Node, host, host, expires_s, proxies)
    }

    fn seen() -> Seen {
        Seen {
            now: Ts(0),
            live: false,
            limits: crate::ingest::validate::Limits {
                default_ttl: Duration::from_secs(60),
                max_expired_age: Duration::from_secs(3600),
                max_ttl: Duration::from_secs(86_400),
            },
        }
    }

    fn put(h: &mut Hosts, b: Beat, out: &mut Vec<Change>) {
        h.put_service(b, &seen(), out);
    }

    fn puts(out: &[Change]) -> Vec<String> {
        out.iter()
            .map(|c| {
                let (k, op, n) = c.describe();
                format!("{} {} {n}", op.as_str(), k.as_str())
            })
            .collect()
    }

    #[test]
    fn a_node_heartbeat_in_place_does_what_the_whole_way_does() {
        let at = |s: i64| Seen {
            now: Ts(s * 1_000_000),
            live: true,
            ..seen()
        };
        let wire = |s: i64| prost_types::Timestamp {
            seconds: s,
            nanos: 0,
        };
        let put = |expires_s: i64| NodePut {
            name: "h1",
            sub_kind: "",
            expires: Some(wire(expires_s)),
            hostname: "h1.example",
            version: "17.0.0",
            proxies: ["p1", "p2"].into_iter().collect(),
        };
        // Two tables fed alike: one takes repeats in place, the other the
        // whole way; what they send and learn must not differ.
        let (mut fast, mut slow) = (Hosts::default(), Hosts::default());
        let mut out = Vec::new();
        for h in [&mut fast, &mut slow] {
            h.put_service(node("h1", 100, &["p1", "p2"]), &at(40), &mut out);
        }
        for (now, expires) in [(70, 130), (100, 160), (100, 160), (131, 190)] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            assert!(fast.node_heartbeat(&put(expires), &at(now), &mut a));
            slow.put_service(node("h1", expires, &["p1", "p2"]), &at(now), &mut b);
            assert_eq!(format!("{a:?}"), format!("{b:?}"), "at {now}");
        }

        // Whatever is new, or would be refused or changed, goes the whole way.
        let declined = [
            NodePut {
                name: "h2",
                ..put(200)
            },
            NodePut {
                sub_kind: "openssh",
                ..put(200)
            },
            NodePut {
                version: "17.0.1",
                ..put(200)
            },
            NodePut {
                hostname: "h1.other",
                ..put(200)
            },
            NodePut {
                hostname: "h1\u{7}",
                ..put(200)
            },
            NodePut {
                proxies: ["p2", "p1"].into_iter().collect(),
                ..put(200)
            },
            NodePut {
                proxies: ["p1", "p1", "p2"].into_iter().collect(),
                ..put(200)
            },
            NodePut {
                proxies: ["p1", "p2", "p\0"].into_iter().collect(),
                ..put(200)
            },
            NodePut {
                expires: None,
                ..put(200)
            },
            NodePut {
                expires: Some(wire(convert::GO_ZERO_SECONDS)),
                ..put(200)
            },
            NodePut {
                expires: Some(wire(10_000_000)),
                ..put(200)
            },
        ];
        for p in declined {
            let mut a = Vec::new();
            assert!(!fast.node_heartbeat(&p, &at(150), &mut a), "{p:?}");
            assert!(a.is_empty(), "{p:?}");
        }
    }

    #[test]
    fn a_host_lives_while_any_service_does_and_goes_with_the_last() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        put(&mut h, node("host-1", 100, &["p1"]), &mut out);
        put(
            &mut h,
            beat(AgentService::AppServer, "grafana", "host-1", 200, &["p1"]),
            &mut out,
        );
        let Some(Change::PutServer(a)) =
            out.iter().rev().find(|c| matches!(c, Change::PutServer(_)))
        else {
            panic!("no agent sent: {out:?}");
        };
        assert_eq!(
            a.expires,
            Ts(200_000_000),
            "the latest expiry speaks for the host"
        );
        assert_eq!(&a.labels[agent_label::SERVICES], "app_server,node");
        assert_eq!(
            &a.labels[agent_label::TUNNELS],
            agent_label::TUNNELS_OBSERVED
        );
        out.clear();
        h.delete_service(AgentService::AppServer, "grafana", None, &mut out);
        let Some(Change::PutServer(a)) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(a.expires, Ts(100_000_000), "an expiry may move back");
        assert_eq!(&a.labels[agent_label::SERVICES], "node");
        out.clear();
        h.delete_service(AgentService::Node, "host-1", None, &mut out);
        assert_eq!(
            puts(&out),
            ["delete tunnel_connection host-1/p1", "delete agent host-1"]
        );
        assert!(h.is_empty());
    }

    #[test]
    fn an_app_served_by_two_hosts_goes_from_the_host_the_delete_names() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        put(
            &mut h,
            beat(AgentService::AppServer, "grafana", "host-1", 100, &[]),
            &mut out,
        );
        put(
            &mut h,
            beat(AgentService::AppServer, "grafana", "host-2", 100, &[]),
            &mut out,
        );
        out.clear();
        h.delete_service(AgentService::AppServer, "grafana", Some("host-1"), &mut out);
        assert_eq!(puts(&out), ["delete agent host-1"]);
        out.clear();
        h.delete_service(AgentService::AppServer, "grafana", None, &mut out);
        assert_eq!(puts(&out), ["delete agent host-2"]);
        assert!(h.is_empty());
    }

    /// Guards the index of services by name, kept only when a host gains
    /// a service: a known host that gains an app, and heartbeats repeating
    /// it, leave the app findable by a delete that names no host.
    #[test]
    fn a_known_host_that_gains_an_app_is_found_by_the_apps_delete() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        put(&mut h, node("host-3", 100, &[]), &mut out);
        let app = beat(AgentService::AppServer, "grafana", "host-3", 100, &[]);
        put(&mut h, app.clone(), &mut out);
        put(&mut h, app, &mut out);
        out.clear();
        h.delete_service(AgentService::AppServer, "grafana", None, &mut out);
        let Some(Change::PutServer(a)) = out.last() else {
            panic!("the host's agent was not sent again: {out:?}");
        };
        assert_eq!(
            a.labels.get(agent_label::SERVICES),
            Some("node"),
            "the app is gone from the host"
        );
        out.clear();
        h.delete_service(AgentService::AppServer, "grafana", None, &mut out);
        assert!(out.is_empty(), "deleted twice: {out:?}");
    }

    #[test]
    fn agent_mesh_hosts_assume_a_tunnel_to_every_proxy_and_peering_hosts_do_not() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        h.put_proxy("p1", &mut out);
        put(&mut h, node("mesh", 100, &[]), &mut out);
        put(&mut h, node("peer", 100, &["p1"]), &mut out);
        out.clear();
        h.put_proxy("p2", &mut out);
        assert_eq!(puts(&out), ["put tunnel_connection mesh/p2"]);
        out.clear();
        h.delete_proxy("p1", &mut out);
        assert_eq!(puts(&out), ["delete tunnel_connection mesh/p1"]);
        let (agents, tunnels) = h.attach(AuthOf::default());
        let mesh = agents
            .iter()
            .find(|a| a.name == "mesh")
            .map(|a| a.labels[agent_label::TUNNELS].to_string());
        assert_eq!(mesh.as_deref(), Some(agent_label::TUNNELS_ASSUMED));
        let mut names: Vec<_> = tunnels.into_iter().map(|t| t.name).collect();
        names.sort();
        assert_eq!(names, ["mesh/p2", "peer/p1"]);
    }

    #[test]
    fn proxy_ids_moving_moves_the_tunnels_and_auth_attachment_updates_the_agent() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        put(&mut h, node("a", 100, &["p1"]), &mut out);
        out.clear();
        put(&mut h, node("a", 100, &["p2"]), &mut out);
        assert_eq!(
            puts(&out),
            [
                "delete tunnel_connection a/p1",
                "put tunnel_connection a/p2"
            ]
        );
        out.clear();
        h.set_auth(
            AuthOf::from_iter([("a".to_string(), Arc::from("auth-1"))]),
            &mut out,
        );
        let Some(Change::PutServer(a)) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(a.auth_server, "auth-1");
        out.clear();
        h.set_auth(
            AuthOf::from_iter([("a".to_string(), Arc::from("auth-1"))]),
            &mut out,
        );
        assert!(out.is_empty(), "nothing changed: {out:?}");
    }

    /// Guards the heartbeat shortcut: a heartbeat that moved only the
    /// expiry sends only that; a later change sends the agent again, with
    /// the labels it sent before when what they say did not change.
    #[test]
    fn a_heartbeat_sends_its_expiry_and_a_change_shares_the_labels() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        put(&mut h, node("n", 100, &["p1"]), &mut out);
        out.retain(|c| matches!(c, Change::PutServer(_)));
        put(&mut h, node("n", 130, &["p1"]), &mut out);
        match out.last() {
            Some(Change::Expiry {
                kind: Kind::Agent,
                name,
                expires,
                ..
            }) => assert_eq!((name.as_str(), *expires), ("n", Ts(130_000_000))),
            other => panic!("not an expiry: {other:?}"),
        }
        let mut upgraded = node("n", 160, &["p1"]);
        upgraded.version = "17.1.0".into();
        put(&mut h, upgraded, &mut out);
        let labels: Vec<&Labels> = out
            .iter()
            .filter_map(|c| match c {
                Change::PutServer(a) => Some(&a.labels),
                _ => None,
            })
            .collect();
        assert_eq!(labels.len(), 2, "{out:?}");
        assert!(
            Labels::ptr_eq(labels[0], labels[1]),
            "rebuilt for a new version"
        );
    }

    /// Guards the table's size: hosts naming the same proxies and
    /// version hold one copy of each, a host with one service holds one
    /// list for its `ProxyIDs` and its tunnels, agent-mesh hosts share
    /// the list of every proxy, and a node does not hold its name twice.
    #[test]
    fn hosts_share_their_proxy_names_lists_and_versions() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        h.put_proxy("p1", &mut out);
        h.put_proxy("p2", &mut out);
        put(&mut h, node("a", 100, &["p1", "p2"]), &mut out);
        put(&mut h, node("b", 100, &["p2"]), &mut out);
        put(&mut h, node("m1", 100, &[]), &mut out);
        put(&mut h, node("m2", 100, &[]), &mut out);
        let host = |n: &str| &h.hosts[n];
        let (a, b) = (&host("a").services[0], &host("b").services[0]);
        assert!(Arc::ptr_eq(&a.proxies[1], &b.proxies[0]), "p2 once");
        assert!(Arc::ptr_eq(&a.version, &b.version), "17.0.0 once");
        assert!(Arc::ptr_eq(&a.proxies, &host("a").tunnels));
        assert!(a.name.is_empty(), "a node's name is its host's");
        assert_eq!(a.name("a"), "a");
        assert!(Arc::ptr_eq(&host("m1").tunnels, &host("m2").tunnels));
        assert_eq!(*host("m1").tunnels, [Arc::from("p1"), Arc::from("p2")]);
        // The known proxies are the same copies hosts name.
        assert!(h.proxies.iter().any(|p| Arc::ptr_eq(p, &b.proxies[0])));

        // A proxy new to the table goes where it sorts; one known again
        // changes nothing; mesh hosts share the new list.
        out.clear();
        h.put_proxy("p0", &mut out);
        h.put_proxy("p1", &mut out);
        assert_eq!(
            puts(&out),
            ["put tunnel_connection m1/p0", "put tunnel_connection m2/p0"]
        );
        let names: Vec<&str> = h.proxies.iter().map(|p| &**p).collect();
        assert_eq!(names, ["p0", "p1", "p2"]);
        assert!(Arc::ptr_eq(&h.hosts["m1"].tunnels, &h.proxies));
        assert!(Arc::ptr_eq(&h.hosts["m2"].tunnels, &h.proxies));
    }

    #[test]
    fn the_same_heartbeat_twice_sends_nothing() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        let b = beat(AgentService::DbServer, "pg", "host-9", 100, &["p1"]);
        put(&mut h, b.clone(), &mut out);
        out.clear();
        put(&mut h, b, &mut out);
        assert!(out.is_empty());
    }

    /// Guards the shortcut for repeated heartbeats: what a heartbeat says
    /// beyond its expiry still reaches the agent, from the same service
    /// or from another that takes over as the host's latest.
    #[test]
    fn a_new_version_or_a_new_latest_service_reaches_the_agent() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        // The agent as last sent, and the expiry its last change carried.
        let agent = |out: &[Change]| {
            let a = out
                .iter()
                .rev()
                .find_map(|c| match c {
                    Change::PutServer(a) => Some(a),
                    _ => None,
                })
                .expect("an agent sent");
            let expires = match out.last() {
                Some(Change::PutServer(a)) => a.expires,
                Some(Change::Expiry { expires, .. }) => *expires,
                other => panic!("no agent change: {other:?}"),
            };
            (
                a.version.clone(),
                a.labels
                    .get(agent_label::HOSTNAME)
                    .map(str::to_string)
                    .unwrap_or_default(),
                expires,
            )
        };
        put(&mut h, node("n", 100, &[]), &mut out);
        put(&mut h, node("n", 130, &[]), &mut out);
        assert_eq!(
            agent(&out),
            ("17.0.0".into(), "n.example".into(), Ts(130_000_000))
        );

        let mut upgraded = node("n", 160, &[]);
        upgraded.version = "17.1.0".into();
        upgraded.hostname = "n.renamed".into();
        put(&mut h, upgraded.clone(), &mut out);
        assert_eq!(
            agent(&out),
            ("17.1.0".into(), "n.renamed".into(), Ts(160_000_000))
        );
        upgraded.expires = Ts(190_000_000);
        put(&mut h, upgraded, &mut out);
        assert_eq!(agent(&out).0, "17.1.0", "a repeat keeps the new version");

        // An app server on the same host, on an older version, outlives
        // the node: it speaks for the host now.
        let mut app = beat(AgentService::AppServer, "grafana", "n", 300, &[]);
        app.version = "16.4.0".into();
        put(&mut h, app.clone(), &mut out);
        assert_eq!(
            agent(&out),
            ("16.4.0".into(), "n.example".into(), Ts(300_000_000))
        );
        // The node's repeat, expiring last again, takes the host back.
        let mut node = node("n", 400, &[]);
        node.version = "17.1.0".into();
        node.hostname = "n.renamed".into();
        put(&mut h, node, &mut out);
        assert_eq!(
            agent(&out),
            ("17.1.0".into(), "n.renamed".into(), Ts(400_000_000))
        );
    }

    /// Guards TTL learning where the host keeps it: a live heartbeat
    /// teaches expiry minus arrival; a listing keeps what the previous
    /// hosts learned, and a service they did not know gets the default.
    #[test]
    fn a_service_learns_its_ttl_live_and_a_listing_keeps_it() {
        let live = |now_s: i64| Seen {
            now: Ts(now_s * 1_000_000),
            live: true,
            ..seen()
        };
        let ttl = |out: &[Change]| {
            out.iter().rev().find_map(|c| match c {
                Change::PutServer(a) => Some(a.ttl),
                Change::Expiry { ttl, .. } => Some(*ttl),
                _ => None,
            })
        };
        let mut h = Hosts::default();
        let mut out = Vec::new();
        h.put_service(node("n", 100, &[]), &live(10), &mut out);
        assert_eq!(ttl(&out), Some(Duration::from_secs(90)), "first heartbeat");
        out.clear();
        h.put_service(node("n", 130, &[]), &live(100), &mut out);
        assert_eq!(ttl(&out), Some(Duration::from_secs(30)), "learned");

        let mut listed = Hosts::new([], &Hosts::default());
        listed.load(node("n", 160, &[]), &seen(), &h);
        listed.load(node("m", 160, &[]), &seen(), &h);
        let (agents, _) = listed.attach(AuthOf::default());
        let ttl_of = |name: &str| agents.iter().find(|a| a.name == name).map(|a| a.ttl);
        assert_eq!(ttl_of("n"), Some(Duration::from_secs(30)), "kept");
        assert_eq!(ttl_of("m"), Some(Duration::from_secs(60)), "the default");

        // A host ahead of "n" now: "n" is no longer where the last listing
        // held it, and is found all the same.
        let mut again = Hosts::new([], &listed);
        again.load(node("a", 160, &[]), &seen(), &listed);
        again.load(node("n", 160, &[]), &seen(), &listed);
        let (agents, _) = again.attach(AuthOf::default());
        let ttl_of = |name: &str| agents.iter().find(|a| a.name == name).map(|a| a.ttl);
        assert_eq!(ttl_of("n"), Some(Duration::from_secs(30)), "kept again");
    }

    #[test]
    fn a_listing_attaches_each_host_to_the_auth_that_saw_it() {
        let mut listed = Hosts::new([], &Hosts::default());
        listed.load(node("n", 160, &[]), &seen(), &Hosts::default());
        listed.load(node("m", 160, &[]), &seen(), &Hosts::default());
        let (agents, _) =
            listed.attach(AuthOf::from_iter([("n".to_string(), Arc::from("auth-1"))]));
        let auth_of = |name: &str| {
            agents
                .iter()
                .find(|a| a.name == name)
                .map(|a| a.auth_server.clone())
        };
        assert_eq!(auth_of("n").as_deref(), Some("auth-1"));
        assert_eq!(auth_of("m").as_deref(), Some(""), "no instance seen it");
        assert_eq!(listed.auth_of().len(), 1, "kept for the heartbeats after");
    }

    /// A table large enough to be split in halves comes out as one pass
    /// would build it: in listing order, each host with its Auth.
    #[test]
    fn a_large_listing_attaches_in_listing_order_across_its_halves() {
        let n = ON_TWO_THREADS + 3;
        let mut listed = Hosts::new(["p1".to_string()], &Hosts::default());
        let names: Vec<String> = (0..n).map(|i| format!("h{:05}", n - i)).collect();
        for name in &names {
            listed.load(node(name, 160, &["p1"]), &seen(), &Hosts::default());
        }
        let auth_of: AuthOf = names
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 3 == 0)
            .map(|(i, name)| (name.clone(), Arc::from(format!("auth-{}", i % 2))))
            .collect();
        let (agents, tunnels) = listed.attach(auth_of.clone());
        let got: Vec<&str> = agents.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(got, names.iter().map(String::as_str).collect::<Vec<_>>());
        for a in &agents {
            let want = auth_of
                .get(&a.name)
                .map(|s| s.to_string())
                .unwrap_or_default();
            assert_eq!(a.auth_server, want, "{}", a.name);
        }
        let tunnel_agents: Vec<&str> = tunnels.iter().map(|t| t.agent.as_str()).collect();
        assert_eq!(tunnel_agents, got);
        assert_eq!(listed.auth_of().len(), auth_of.len());
    }
}
