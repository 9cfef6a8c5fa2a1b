//! What a test, the demo's chaos or a simulated agent does to a running
//! cluster: heartbeats paused and resumed, an auth server's health set or
//! stopped, streams killed or refused, servers and tunnels put and
//! deleted, proxies upgraded one by one, agents moved; and the counters
//! the tests read.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::SmallRng;
use rand::SeedableRng;
use tokio::sync::broadcast;
use tonic_health::ServingStatus;
use tracing::info;

use crate::wire::timestamp as to_timestamp;
use lifeline::domain::Kind;
use lifeline::proto::v1 as pb;

use super::{heartbeat_interval, put_server, SimCluster};

impl SimCluster {
    pub(super) async fn start_heartbeats(&self) {
        let keys: Vec<(Kind, String, Duration)> = {
            let st = self.inner.state.lock().await;
            st.servers
                .iter()
                .map(|((k, n), s)| {
                    let ttl = s
                        .ttl
                        .as_ref()
                        .map(lifeline::proto::std_duration)
                        .unwrap_or(self.inner.spec.ttl);
                    (*k, n.clone(), ttl)
                })
                .collect()
        };
        for (i, (kind, name, ttl)) in keys.into_iter().enumerate() {
            let seed = self.inner.spec.seed.wrapping_add(i as u64);
            self.heartbeat_from_now(kind, name, ttl, seed);
        }
    }

    /// Heartbeats `name` every TTL/2 (plus jitter) until the cluster stops
    /// or the server is gone.
    fn heartbeat_from_now(&self, kind: Kind, name: String, ttl: Duration, seed: u64) {
        let sim = self.clone();
        tokio::spawn(async move {
            let mut rng = SmallRng::seed_from_u64(seed);
            loop {
                let interval = heartbeat_interval(ttl, &mut rng);
                tokio::select! {
                    _ = sim.inner.stop.cancelled() => return,
                    _ = tokio::time::sleep(interval) => {}
                }
                if sim.get_server(kind, &name).await.is_none() {
                    return;
                }
                sim.heartbeat(kind, &name).await;
            }
        });
    }

    /// A rolling upgrade of `proxies`, one after another, as Teleport's
    /// goes: each is joined by `<name>-g<generation>`, its group's next
    /// generation, heartbeating from now, then leaves by its own delete
    /// (a graceful shutdown). Returns the new proxies' names.
    pub async fn rolling_upgrade(&self, proxies: &[&str]) -> Vec<String> {
        let mut out = Vec::with_capacity(proxies.len());
        for (i, old) in proxies.iter().enumerate() {
            let Some(o) = self.get_server(Kind::Proxy, old).await else {
                continue;
            };
            let generation = o.group_generation.saturating_add(1);
            let name = format!("{old}-g{generation}");
            let ttl = o
                .ttl
                .as_ref()
                .map(lifeline::proto::std_duration)
                .unwrap_or(self.inner.spec.ttl);
            let now = self.inner.clock.now();
            let new = pb::Server {
                name: name.clone(),
                group_generation: generation,
                expires: Some(to_timestamp(now.saturating_add(ttl))),
                ..o
            };
            self.put_server(new).await;
            let seed = self.inner.spec.seed.wrapping_add(10_000 + i as u64);
            self.heartbeat_from_now(Kind::Proxy, name.clone(), ttl, seed);
            self.delete_server(Kind::Proxy, old).await;
            info!(old, new = %name, generation, "proxy upgraded");
            out.push(name);
        }
        out
    }

    /// One heartbeat now: `expires = now + ttl`, published as a PUT. Skipped
    /// while paused, and for agents whose auth server is not serving (they
    /// cannot reach the backend).
    pub async fn heartbeat(&self, kind: Kind, name: &str) -> bool {
        let now = self.inner.clock.now();
        let mut st = self.inner.state.lock().await;
        if st.paused.contains(name) {
            return false;
        }
        let auth_down = match st.servers.get(&(kind, name.to_string())) {
            Some(s) if kind == Kind::Agent => {
                st.auth_status.get(&s.auth_server).copied() == Some(ServingStatus::NotServing)
            }
            Some(_) => false,
            None => return false,
        };
        if auth_down {
            return false;
        }
        let Some(s) = st.servers.get_mut(&(kind, name.to_string())) else {
            return false;
        };
        let ttl = s
            .ttl
            .as_ref()
            .map(lifeline::proto::std_duration)
            .unwrap_or(self.inner.spec.ttl);
        s.expires = Some(to_timestamp(now.saturating_add(ttl)));
        let ev = put_server(s.clone());
        drop(st);
        self.inner.emit(ev);
        true
    }

    /// Stops a resource's heartbeats (a hung proxy, say).
    pub async fn pause_heartbeats(&self, name: &str) {
        self.inner
            .state
            .lock()
            .await
            .paused
            .insert(name.to_string());
        info!(%name, "sim: heartbeats paused");
    }

    /// Resumes heartbeats, with one right away.
    pub async fn resume_heartbeats(&self, kind: Kind, name: &str) {
        self.inner.state.lock().await.paused.remove(name);
        info!(%name, "sim: heartbeats resumed");
        self.heartbeat(kind, name).await;
    }

    pub async fn set_auth_status(&self, name: &str, status: ServingStatus) {
        self.inner
            .state
            .lock()
            .await
            .auth_status
            .insert(name.to_string(), status);
        if let Some(a) = self.inner.auths.iter().find(|a| a.name == name) {
            a.set_status(status).await;
        }
        info!(%name, ?status, "sim: auth health set");
    }

    /// Crashes an auth server's health endpoint.
    pub fn stop_auth(&self, name: &str) {
        if let Some(a) = self.inner.auths.iter().find(|a| a.name == name) {
            a.stop();
        }
    }

    /// Ends every open watch stream with UNAVAILABLE.
    pub fn kill_streams(&self) {
        self.inner.kill.send_modify(|g| *g += 1);
        info!("sim: watch streams killed");
    }

    /// While false, new watches are refused with UNAVAILABLE.
    pub fn set_accepting(&self, on: bool) {
        self.inner.accepting.store(on, Ordering::SeqCst);
    }

    pub fn set_rejected_kinds(&self, kinds: Vec<Kind>) {
        if let Ok(mut r) = self.inner.rejected.write() {
            *r = kinds;
        }
    }

    /// Publishes a raw event without storing it (bad-input tests).
    pub fn inject(&self, ev: pb::Event) {
        self.inner.emit(ev);
    }

    /// Stores and publishes a server as given (no validation: tests use this
    /// to send what a buggy cluster would).
    pub async fn put_server(&self, s: pb::Server) {
        let kind = s.kind.parse::<Kind>().unwrap_or(Kind::Agent);
        self.inner
            .state
            .lock()
            .await
            .servers
            .insert((kind, s.name.clone()), s.clone());
        self.inner.emit(put_server(s));
    }

    pub async fn get_server(&self, kind: Kind, name: &str) -> Option<pb::Server> {
        self.inner
            .state
            .lock()
            .await
            .servers
            .get(&(kind, name.to_string()))
            .cloned()
    }

    pub async fn delete_server(&self, kind: Kind, name: &str) {
        let removed = self
            .inner
            .state
            .lock()
            .await
            .servers
            .remove(&(kind, name.to_string()));
        if let Some(s) = removed {
            self.inner.emit(pb::Event {
                r#type: pb::EventType::Delete as i32,
                resource: Some(pb::event::Resource::Server(s)),
            });
        }
    }

    /// Every auth server: name and health address.
    pub fn auth_servers(&self) -> Vec<(String, SocketAddr)> {
        self.inner
            .auths
            .iter()
            .map(|a| (a.name.clone(), a.addr))
            .collect()
    }

    /// The proxies an agent holds tunnels to, as the cluster records them.
    pub async fn agent_proxies(&self, agent: &str) -> Vec<String> {
        self.inner.state.lock().await.proxies_of(agent)
    }

    /// The auth server an agent is attached to.
    pub async fn agent_auth(&self, agent: &str) -> Option<String> {
        let st = self.inner.state.lock().await;
        st.servers
            .get(&(Kind::Agent, agent.to_string()))
            .map(|s| s.auth_server.clone())
    }

    /// What a restarted agent finds: the proxies still heartbeating, and
    /// an auth server that serves (`None`: none does).
    pub async fn live_for_restart(&self) -> (Vec<String>, Option<String>) {
        let st = self.inner.state.lock().await;
        let proxies = st
            .servers
            .keys()
            .filter(|(k, n)| *k == Kind::Proxy && !st.paused.contains(n))
            .map(|(_, n)| n.clone())
            .collect();
        let auth = self
            .inner
            .auths
            .iter()
            .map(|a| &a.name)
            .find(|n| {
                !st.paused.contains(*n)
                    && st.auth_status.get(*n).copied() != Some(ServingStatus::NotServing)
            })
            .cloned();
        (proxies, auth)
    }

    /// The agent moved to another auth server: its record says so at once.
    pub async fn set_agent_auth(&self, agent: &str, auth: &str) {
        let mut st = self.inner.state.lock().await;
        let Some(s) = st.servers.get_mut(&(Kind::Agent, agent.to_string())) else {
            return;
        };
        s.auth_server = auth.to_string();
        let ev = put_server(s.clone());
        drop(st);
        self.inner.emit(ev);
    }

    pub async fn put_tunnel(&self, t: pb::TunnelConnection) {
        self.inner.state.lock().await.put_tunnel(t.clone());
        self.inner.emit(pb::Event {
            r#type: pb::EventType::Put as i32,
            resource: Some(pb::event::Resource::Tunnel(t)),
        });
    }

    pub async fn delete_tunnel(&self, name: &str) {
        let removed = self.inner.state.lock().await.remove_tunnel(name);
        if let Some(t) = removed {
            self.inner.emit(pb::Event {
                r#type: pb::EventType::Delete as i32,
                resource: Some(pb::event::Resource::Tunnel(t)),
            });
        }
    }

    /// The broadcast behind every watch stream. The ingest benchmark sends
    /// pre-built events through it; a watcher that falls more than
    /// `event_buffer` behind is cut off (and resyncs), so size it for bursts.
    pub fn sender(&self) -> broadcast::Sender<Arc<pb::Event>> {
        self.inner.events.clone()
    }

    /// Events handed to the newest watch stream (INIT excluded).
    pub fn delivered(&self) -> u64 {
        self.inner.delivered.load(Ordering::SeqCst)
    }

    /// Connections that reached the Auth through the proxy's connection
    /// upgrade.
    pub fn upgrades(&self) -> u64 {
        self.inner.upgrades.connections.load(Ordering::SeqCst)
    }

    /// Pongs the upgraded connections' clients sent back to the proxy's
    /// pings (`alpn-ping`).
    pub fn upgrade_pongs(&self) -> u64 {
        self.inner.upgrades.pongs.load(Ordering::SeqCst)
    }

    /// True when the newest watch stream has taken every event emitted
    /// since it opened: [`Self::delivered`] will not grow without a new one.
    pub fn stream_caught_up(&self) -> bool {
        let i = &self.inner;
        let due = i.emitted.load(Ordering::SeqCst) - i.stream_base.load(Ordering::SeqCst);
        i.taken.load(Ordering::SeqCst) >= due
    }
}
