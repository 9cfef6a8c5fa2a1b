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
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// A service heartbeat (or any PUT of a service resource).
    pub fn put_service(&mut self, beat: Beat, out: &mut Vec<Change>) {
        let key = (beat.service, beat.name.clone());
        let host = beat.host.clone();
        self.host_of
            .entry(key.clone())
            .or_default()
            .insert(host.clone());
        self.hosts
            .entry(host.clone())
            .or_default()
            .services
            .insert(key, beat);
        self.refresh(&host, out);
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
            self.refresh(host, out);
        }
    }

    /// A proxy seen (PUT or listed): agent-mesh hosts assume a tunnel to it.
    pub fn put_proxy(&mut self, name: &str, out: &mut Vec<Change>) {
        if self.proxies.insert(name.to_string()) {
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
            self.refresh(&h, out);
        }
    }

    fn refresh_assumed(&mut self, out: &mut Vec<Change>) {
        let assumed: Vec<String> = self
            .hosts
            .iter()
            .filter(|(_, h)| h.services.values().all(|b| b.proxies.is_empty()))
            .map(|(n, _)| n.clone())
            .collect();
        for h in assumed {
            self.refresh(&h, out);
        }
    }

    /// Sends what changed of `host`'s agent and tunnels.
    fn refresh(&mut self, name: &str, out: &mut Vec<Change>) {
        let Some(h) = self.hosts.get_mut(name) else {
            return;
        };
        // The service whose heartbeat runs out last speaks for the host.
        let Some(latest) = h.services.values().max_by_key(|b| b.expires) else {
            return;
        };
        let observed: BTreeSet<String> = h
            .services
            .values()
            .flat_map(|b| b.proxies.iter().cloned())
            .collect();
        let assumed = observed.is_empty();
        let mut labels = BTreeMap::new();
        let services: BTreeSet<&str> = h.services.keys().map(|(s, _)| s.as_str()).collect();
        labels.insert(
            SERVICES_LABEL.to_string(),
            services.into_iter().collect::<Vec<_>>().join(","),
        );
        labels.insert(
            TUNNELS_LABEL.to_string(),
            if assumed {
                TUNNELS_ASSUMED
            } else {
                TUNNELS_OBSERVED
            }
            .to_string(),
        );
        if !latest.hostname.is_empty() {
            labels.insert("teleport.dev/hostname".to_string(), latest.hostname.clone());
        }
        let agent = Server {
            kind: Kind::Agent,
            name: name.to_string(),
            addr: String::new(),
            version: latest.version.clone(),
            group_id: String::new(),
            group_generation: 0,
            expires: latest.expires,
            ttl: latest.ttl,
            labels,
            auth_server: self.auth_of.get(name).cloned().unwrap_or_default(),
        };
        if h.sent.as_ref() != Some(&agent) {
            out.push(Change::PutServer(agent.clone()));
            h.sent = Some(agent);
        }
        let want = if assumed {
            self.proxies.clone()
        } else {
            observed
        };
        for p in h.tunnels.difference(&want) {
            out.push(Change::DeleteTunnel(tunnel_name(name, p)));
        }
        for p in want.difference(&h.tunnels) {
            out.push(Change::PutTunnel(tunnel(name, p)));
        }
        h.tunnels = want;
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

#[cfg(test)]
mod tests {
    use super::*;

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
