//! Teleport's agent services folded into Lifeline's agents: one agent per
//! host ID, alive while any of its services' heartbeats is unexpired, with
//! the tunnels Teleport records (`ProxyIDs`, proxy peering) or, where it
//! records none (agent mesh), an assumed tunnel to every known proxy.
//! Every call returns the domain changes it causes, and only those.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use crate::clock::Ts;
use crate::model::{AgentService, Change, Kind, Server, Tunnel};

/// The label naming the services a host runs (`app_server,node`).
pub const SERVICES_LABEL: &str = "teleport.dev/services";
/// The label saying whether the agent's tunnels were observed or assumed.
pub const TUNNELS_LABEL: &str = "lifeline.dev/tunnels";
/// Tunnels from `ProxyIDs` (proxy peering).
pub const TUNNELS_OBSERVED: &str = "observed";
/// No `ProxyIDs` (agent mesh): one tunnel to every known proxy, assumed.
pub const TUNNELS_ASSUMED: &str = "assumed";

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
    pub ttl: Duration,
    /// Validated proxy names from `ProxyIDs`.
    pub proxies: Vec<String>,
}

#[derive(Default)]
struct Host {
    services: BTreeMap<(AgentService, String), Beat>,
    /// Every proxy its services' `ProxyIDs` name (empty: agent mesh).
    observed: BTreeSet<String>,
    /// Proxies this host's tunnels go to, as last sent.
    tunnels: BTreeSet<String>,
    /// The agent as last sent.
    sent: Option<Server>,
}

/// Every host's services, the proxies known, and Auth attachments.
#[derive(Default)]
pub struct Hosts {
    hosts: HashMap<String, Host>,
    /// The hosts running a service of this name (an app may be served by
    /// several), for deletes that do not name the host.
    host_of: HashMap<(AgentService, String), BTreeSet<String>>,
    proxies: BTreeSet<String>,
    auth_of: HashMap<String, String>,
}

/// Where changes go: to the caller, or nowhere while a listing is loaded
/// (then nothing is built only to be dropped).
struct Out<'a>(Option<&'a mut Vec<Change>>);

impl Out<'_> {
    fn push(&mut self, change: impl FnOnce() -> Change) {
        if let Some(out) = self.0.as_deref_mut() {
            out.push(change());
        }
    }
}

/// What a change to a host can have touched, beyond its expiry.
#[derive(Clone, Copy)]
struct Touched {
    /// The set of services (the services label).
    services: bool,
    /// The tunnels: its `ProxyIDs`, or for agent mesh the proxies known.
    tunnels: bool,
}

const NOTHING: Touched = Touched {
    services: false,
    tunnels: false,
};
const EVERYTHING: Touched = Touched {
    services: true,
    tunnels: true,
};

pub fn tunnel_name(host: &str, proxy: &str) -> String {
    format!("{host}/{proxy}")
}

fn tunnel(host: &str, proxy: &str) -> Tunnel {
    Tunnel {
        name: tunnel_name(host, proxy),
        agent: host.to_string(),
        proxy: proxy.to_string(),
        last_heartbeat: None,
        expires: None,
    }
}

impl Hosts {
    /// A resync's listing: proxies, service heartbeats and Auth
    /// attachments, with nothing sent (the snapshot says it all).
    pub fn listed(
        proxies: impl IntoIterator<Item = String>,
        beats: impl IntoIterator<Item = Beat>,
        auth_of: HashMap<String, String>,
    ) -> Hosts {
        let mut h = Hosts {
            proxies: proxies.into_iter().collect(),
            auth_of,
            ..Hosts::default()
        };
        for b in beats {
            h.put(b, &mut Out(None));
        }
        h
    }

    /// A service heartbeat (or any PUT of a service resource).
    pub fn put_service(&mut self, beat: Beat, out: &mut Vec<Change>) {
        self.put(beat, &mut Out(Some(out)));
    }

    fn put(&mut self, beat: Beat, out: &mut Out) {
        let key = (beat.service, beat.name.clone());
        let host = self.hosts.entry(beat.host.clone()).or_default();
        let touched = match host.services.get(&key) {
            Some(old) if old.proxies == beat.proxies => NOTHING,
            Some(_) => Touched {
                services: false,
                tunnels: true,
            },
            None => EVERYTHING,
        };
        if touched.services {
            self.host_of
                .entry(key.clone())
                .or_default()
                .insert(beat.host.clone());
        }
        let name = beat.host.clone();
        host.services.insert(key, beat);
        self.refresh(&name, touched, out);
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
        let key = (service, name.to_string());
        let hosts: Vec<String> = match host {
            Some(h) => vec![h.to_string()],
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
        if h.services.remove(key).is_none() {
            return;
        }
        if h.services.is_empty() {
            if let Some(h) = self.hosts.remove(host) {
                for p in h.tunnels {
                    out.push(Change::DeleteTunnel(tunnel_name(host, &p)));
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
        if !self.proxies.contains(name) {
            self.proxies.insert(name.to_string());
            self.refresh_assumed(out);
        }
    }

    /// A proxy deleted: agent-mesh hosts no longer assume a tunnel to it.
    pub fn delete_proxy(&mut self, name: &str, out: &mut Vec<Change>) {
        if self.proxies.remove(name) {
            self.refresh_assumed(out);
        }
    }

    /// Which Auth instance last saw each host (from `GetInstances`).
    /// Hosts missing from `auth_of` keep no auth server.
    pub fn set_auth(&mut self, auth_of: HashMap<String, String>, out: &mut Vec<Change>) {
        let changed: Vec<String> = self
            .hosts
            .keys()
            .filter(|h| self.auth_of.get(*h) != auth_of.get(*h))
            .cloned()
            .collect();
        self.auth_of = auth_of;
        for h in changed {
            self.refresh(&h, NOTHING, &mut Out(Some(out)));
        }
    }

    fn refresh_assumed(&mut self, out: &mut Vec<Change>) {
        let assumed: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.observed.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        let touched = Touched {
            services: false,
            tunnels: true,
        };
        for h in assumed {
            self.refresh(&h, touched, &mut Out(Some(out)));
        }
    }

    /// Sends what changed of `host`'s agent and tunnels. A heartbeat
    /// (`NOTHING` touched) only compares the agent's scalar fields.
    fn refresh(&mut self, name: &str, touched: Touched, out: &mut Out) {
        let Some(h) = self.hosts.get_mut(name) else {
            return;
        };
        // The service whose heartbeat runs out last speaks for the host.
        let Some(latest) = h.services.values().max_by_key(|b| b.expires) else {
            return;
        };
        if touched.tunnels {
            h.observed = h
                .services
                .values()
                .flat_map(|b| b.proxies.iter().cloned())
                .collect();
        }
        let assumed = h.observed.is_empty();
        let auth = self
            .auth_of
            .get(name)
            .map(String::as_str)
            .unwrap_or_default();
        let new = h.sent.is_none();
        let mut changed = new;
        let agent = h.sent.get_or_insert_with(|| Server {
            kind: Kind::Agent,
            name: name.to_string(),
            addr: String::new(),
            version: String::new(),
            group_id: String::new(),
            group_generation: 0,
            expires: latest.expires,
            ttl: latest.ttl,
            labels: BTreeMap::new(),
            auth_server: String::new(),
        });
        if agent.expires != latest.expires || agent.ttl != latest.ttl {
            (agent.expires, agent.ttl) = (latest.expires, latest.ttl);
            changed = true;
        }
        for (field, value) in [
            (&mut agent.version, latest.version.as_str()),
            (&mut agent.auth_server, auth),
        ] {
            if field != value {
                *field = value.to_string();
                changed = true;
            }
        }
        if new || touched.services || touched.tunnels {
            let labels = labels(&h.services, assumed, &latest.hostname);
            changed |= agent.labels != labels;
            agent.labels = labels;
        } else if agent
            .labels
            .get(HOSTNAME_LABEL)
            .map(String::as_str)
            .unwrap_or_default()
            != latest.hostname
        {
            agent.labels = labels(&h.services, assumed, &latest.hostname);
            changed = true;
        }
        if changed {
            out.push(|| Change::PutServer(agent.clone()));
        }
        if touched.tunnels {
            let want = if assumed { &self.proxies } else { &h.observed };
            for p in h.tunnels.difference(want) {
                out.push(|| Change::DeleteTunnel(tunnel_name(name, p)));
            }
            for p in want.difference(&h.tunnels) {
                out.push(|| Change::PutTunnel(tunnel(name, p)));
            }
            h.tunnels = want.clone();
        }
    }

    /// Every agent and tunnel, for a resync.
    pub fn snapshot(&self) -> (Vec<Server>, Vec<Tunnel>) {
        let mut agents = Vec::with_capacity(self.hosts.len());
        let mut tunnels = Vec::new();
        for (name, h) in &self.hosts {
            if let Some(a) = &h.sent {
                agents.push(a.clone());
            }
            tunnels.extend(h.tunnels.iter().map(|p| tunnel(name, p)));
        }
        (agents, tunnels)
    }
}

/// The host's hostname, from its latest service.
const HOSTNAME_LABEL: &str = "teleport.dev/hostname";

fn labels(
    services: &BTreeMap<(AgentService, String), Beat>,
    assumed: bool,
    hostname: &str,
) -> BTreeMap<String, String> {
    let names: BTreeSet<&str> = services.keys().map(|(s, _)| s.as_str()).collect();
    let mut labels = BTreeMap::new();
    labels.insert(
        SERVICES_LABEL.to_string(),
        names.into_iter().collect::<Vec<_>>().join(","),
    );
    let mode = if assumed {
        TUNNELS_ASSUMED
    } else {
        TUNNELS_OBSERVED
    };
    labels.insert(TUNNELS_LABEL.to_string(), mode.to_string());
    if !hostname.is_empty() {
        labels.insert(HOSTNAME_LABEL.to_string(), hostname.to_string());
    }
    labels
}

#[cfg(test)]
mod tests {
    use super::*;

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
            ttl: Duration::from_secs(60),
            proxies: proxies.iter().map(|p| p.to_string()).collect(),
        }
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
    fn a_host_lives_while_any_service_does_and_goes_with_the_last() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        h.put_service(
            beat(AgentService::Node, "host-1", "host-1", 100, &["p1"]),
            &mut out,
        );
        h.put_service(
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
        assert_eq!(a.labels[SERVICES_LABEL], "app_server,node");
        assert_eq!(a.labels[TUNNELS_LABEL], TUNNELS_OBSERVED);
        out.clear();
        h.delete_service(AgentService::AppServer, "grafana", None, &mut out);
        let Some(Change::PutServer(a)) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(a.expires, Ts(100_000_000), "an expiry may move back");
        assert_eq!(a.labels[SERVICES_LABEL], "node");
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
        h.put_service(
            beat(AgentService::AppServer, "grafana", "host-1", 100, &[]),
            &mut out,
        );
        h.put_service(
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

    #[test]
    fn agent_mesh_hosts_assume_a_tunnel_to_every_proxy_and_peering_hosts_do_not() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        h.put_proxy("p1", &mut out);
        h.put_service(beat(AgentService::Node, "mesh", "mesh", 100, &[]), &mut out);
        h.put_service(
            beat(AgentService::Node, "peer", "peer", 100, &["p1"]),
            &mut out,
        );
        out.clear();
        h.put_proxy("p2", &mut out);
        assert_eq!(puts(&out), ["put tunnel_connection mesh/p2"]);
        out.clear();
        h.delete_proxy("p1", &mut out);
        assert_eq!(puts(&out), ["delete tunnel_connection mesh/p1"]);
        let (agents, tunnels) = h.snapshot();
        let mesh = agents
            .iter()
            .find(|a| a.name == "mesh")
            .map(|a| a.labels[TUNNELS_LABEL].clone());
        assert_eq!(mesh.as_deref(), Some(TUNNELS_ASSUMED));
        let mut names: Vec<_> = tunnels.into_iter().map(|t| t.name).collect();
        names.sort();
        assert_eq!(names, ["mesh/p2", "peer/p1"]);
    }

    #[test]
    fn proxy_ids_moving_moves_the_tunnels_and_auth_attachment_updates_the_agent() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        h.put_service(beat(AgentService::Node, "a", "a", 100, &["p1"]), &mut out);
        out.clear();
        h.put_service(beat(AgentService::Node, "a", "a", 100, &["p2"]), &mut out);
        assert_eq!(
            puts(&out),
            [
                "delete tunnel_connection a/p1",
                "put tunnel_connection a/p2"
            ]
        );
        out.clear();
        h.set_auth(
            HashMap::from([("a".to_string(), "auth-1".to_string())]),
            &mut out,
        );
        let Some(Change::PutServer(a)) = out.first() else {
            panic!("{out:?}")
        };
        assert_eq!(a.auth_server, "auth-1");
        out.clear();
        h.set_auth(
            HashMap::from([("a".to_string(), "auth-1".to_string())]),
            &mut out,
        );
        assert!(out.is_empty(), "nothing changed: {out:?}");
    }

    #[test]
    fn the_same_heartbeat_twice_sends_nothing() {
        let mut h = Hosts::default();
        let mut out = Vec::new();
        let b = beat(AgentService::DbServer, "pg", "host-9", 100, &["p1"]);
        h.put_service(b.clone(), &mut out);
        out.clear();
        h.put_service(b, &mut out);
        assert!(out.is_empty());
    }
}
