//! The simulated cluster: state, heartbeats, and the `ClusterEvents` server
//! (in `cluster_events`; or, with `SimSpec::teleport`, Teleport's Auth API
//! in `teleport`).

mod cluster_events;
mod controls;
mod teleport;

pub use teleport::{write_private, DeleteShape, SimService, TeleportSpec};

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::net::TcpListener;
use tokio::sync::{broadcast, watch, Mutex};
use tokio_util::sync::CancellationToken;
use tonic_health::ServingStatus;
use tracing::info;

use super::auth::{AuthFlavor, SimAuth};
use super::pki::SimPki;
use super::wire::{duration as to_duration, timestamp as to_timestamp};
use lifeline::clock::{Clock, Ts};
use lifeline::domain::Kind;
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::cluster_events_server::ClusterEventsServer;

/// The shape of a simulated cluster.
#[derive(Clone, Debug)]
pub struct SimSpec {
    pub agents: usize,
    pub proxies: usize,
    pub auth_servers: usize,
    /// Announce TTL of proxies and auth servers.
    pub ttl: Duration,
    /// Announce TTL of agents.
    pub agent_ttl: Duration,
    pub tunnels_per_agent: usize,
    pub seed: u64,
    /// Run heartbeat loops (off for benchmarks that drive events themselves).
    pub heartbeats: bool,
    /// Kinds the source rejects (reported on INIT).
    pub rejected_kinds: Vec<Kind>,
    /// Send INIT without a WatchStatus, like an older source.
    pub legacy_init: bool,
    pub auth_flavor: AuthFlavor,
    /// Events buffered per watcher before it is cut off as too slow.
    pub event_buffer: usize,
    /// Where to serve ClusterEvents (`127.0.0.1:0` for any port).
    pub listen: SocketAddr,
    /// Largest message the source will send.
    pub max_message_bytes: usize,
    /// The join token simulated agents present to Lifeline.
    pub join_token: String,
    /// Serve Teleport's Auth API over mutual TLS instead of ClusterEvents.
    pub teleport: Option<TeleportSpec>,
    /// Serve ClusterEvents over TLS (a server certificate only, for
    /// `localhost` and 127.0.0.1; `pki().ca_pem()` is what to trust).
    pub tls: bool,
    /// `TCP_NODELAY` on the plaintext listener, as Teleport's Go servers
    /// have. The benchmarks' cluster process sets it. The tests run with
    /// the kernel's default: their clock moves in steps that wait for the
    /// cluster's events, not for the auth servers' health streams, which
    /// keep Nagle's algorithm, so a faster event stream lets the clock
    /// outrun a health change still on its way. (With it on everywhere,
    /// proxies a test stops together can expire at one instant, and an
    /// incidents test then picks an incident whose agents' episodes all
    /// name the other: the book, Limits.)
    pub nodelay: bool,
}

/// The simulated cluster's join token unless a spec says otherwise (the
/// demo makes a random one). Its hash goes in `access.join_tokens`.
pub const SIM_JOIN_TOKEN: &str = "sim-join-token";

impl Default for SimSpec {
    fn default() -> Self {
        SimSpec {
            agents: 20,
            proxies: 3,
            auth_servers: 2,
            ttl: Duration::from_secs(30),
            agent_ttl: Duration::from_secs(30),
            tunnels_per_agent: 2,
            seed: 1,
            heartbeats: true,
            rejected_kinds: Vec::new(),
            legacy_init: false,
            auth_flavor: AuthFlavor::Standard,
            event_buffer: 65_536,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            max_message_bytes: 64 * 1024 * 1024,
            join_token: SIM_JOIN_TOKEN.to_string(),
            tls: false,
            nodelay: false,
            teleport: None,
        }
    }
}

pub fn proxy_name(i: usize) -> String {
    format!("proxy-{}", i + 1)
}

pub fn auth_name(i: usize) -> String {
    format!("auth-{}", i + 1)
}

pub fn agent_name(i: usize) -> String {
    format!("agent-{:05}", i + 1)
}

#[derive(Default)]
struct State {
    servers: BTreeMap<(Kind, String), pb::Server>,
    /// Written through `put_tunnel` and `remove_tunnel` only, which keep
    /// `tunnel_proxies` in step.
    tunnels: BTreeMap<String, pb::TunnelConnection>,
    /// Each agent's tunnels by proxy, counted (Teleport's `ProxyIDs` come
    /// from here on every node heartbeat, so no scan of every tunnel).
    /// In name order, so a listing walks it beside the agents.
    tunnel_proxies: BTreeMap<String, BTreeMap<String, usize>>,
    paused: HashSet<String>,
    auth_status: HashMap<String, ServingStatus>,
    /// Teleport app, database and Kubernetes services: (kind, host,
    /// name) → expires.
    services: BTreeMap<(teleport::SimService, String, String), Ts>,
}

impl State {
    fn put_tunnel(&mut self, t: pb::TunnelConnection) {
        *self
            .tunnel_proxies
            .entry(t.agent.clone())
            .or_default()
            .entry(t.proxy.clone())
            .or_default() += 1;
        if let Some(old) = self.tunnels.insert(t.name.clone(), t) {
            self.unindex(&old);
        }
    }

    fn remove_tunnel(&mut self, name: &str) -> Option<pb::TunnelConnection> {
        let t = self.tunnels.remove(name)?;
        self.unindex(&t);
        Some(t)
    }

    fn unindex(&mut self, old: &pb::TunnelConnection) {
        let Some(proxies) = self.tunnel_proxies.get_mut(&old.agent) else {
            return;
        };
        if let Some(n) = proxies.get_mut(&old.proxy) {
            *n -= 1;
            if *n == 0 {
                proxies.remove(&old.proxy);
            }
        }
        if proxies.is_empty() {
            self.tunnel_proxies.remove(&old.agent);
        }
    }

    /// The proxies an agent's tunnels go to, sorted.
    fn proxies_of(&self, agent: &str) -> Vec<String> {
        self.tunnel_proxies
            .get(agent)
            .map(|p| p.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// [`State::proxies_of`] for agents asked for in name order after
    /// `after`: a walk beside them, not a lookup each (those lookups, a
    /// cache miss or two each, were a fifth of a large listing's CPU).
    fn proxies_in_order(&self, after: &str) -> impl FnMut(&str) -> Vec<String> + '_ {
        let mut walk = self
            .tunnel_proxies
            .range::<str, _>((std::ops::Bound::Excluded(after), std::ops::Bound::Unbounded))
            .peekable();
        move |agent| {
            while walk.next_if(|(k, _)| k.as_str() < agent).is_some() {}
            match walk.peek() {
                Some((k, p)) if k.as_str() == agent => p.keys().cloned().collect(),
                _ => Vec::new(),
            }
        }
    }
}

struct Inner {
    clock: Clock,
    spec: SimSpec,
    state: Mutex<State>,
    /// Events are shared, not copied, per stream: with one watch stream
    /// (the usual case) it takes each event without copying it.
    events: broadcast::Sender<Arc<pb::Event>>,
    accepting: AtomicBool,
    rejected: std::sync::RwLock<Vec<Kind>>,
    kill: watch::Sender<u64>,
    /// Events handed to watch streams (INIT excluded).
    delivered: std::sync::atomic::AtomicU64,
    /// Events emitted since the simulator started.
    emitted: std::sync::atomic::AtomicU64,
    /// `emitted` when the newest watch stream subscribed, and how many
    /// events that stream has taken (handed over or filtered out) since.
    stream_base: std::sync::atomic::AtomicU64,
    taken: std::sync::atomic::AtomicU64,
    /// Connections that came through the proxy's connection upgrade.
    upgrades: Arc<super::serve::Upgrades>,
    auths: Vec<SimAuth>,
    stop: CancellationToken,
    /// Teleport-only events (app services, raw injections).
    teleport_events: broadcast::Sender<Arc<lifeline::proto::teleport::auth::Event>>,
    pki: Option<Box<SimPki>>,
}

/// What one watch stream listens to.
struct Subscription {
    events: broadcast::Receiver<Arc<pb::Event>>,
    teleport: broadcast::Receiver<Arc<lifeline::proto::teleport::auth::Event>>,
    kill: watch::Receiver<u64>,
}

impl Inner {
    /// A new watch stream's subscriptions, its counts reset (one watcher at
    /// a time in tests: counted per stream).
    fn subscribe(&self) -> Subscription {
        self.delivered.store(0, Ordering::SeqCst);
        self.taken.store(0, Ordering::SeqCst);
        let events = self.events.subscribe();
        let teleport = self.teleport_events.subscribe();
        // After subscribing: an event emitted in between is both counted
        // here and received, so `taken` can only run ahead of it.
        self.stream_base
            .store(self.emitted.load(Ordering::SeqCst), Ordering::SeqCst);
        let mut kill = self.kill.subscribe();
        kill.borrow_and_update();
        Subscription {
            events,
            teleport,
            kill,
        }
    }

    /// Emits one event to every open watch stream.
    fn emit(&self, ev: pb::Event) {
        self.emitted.fetch_add(1, Ordering::SeqCst);
        let _ = self.events.send(Arc::new(ev));
    }
}

/// A running simulated cluster. Cheap to clone.
#[derive(Clone)]
pub struct SimCluster {
    inner: Arc<Inner>,
    addr: SocketAddr,
}

impl SimCluster {
    pub async fn start(spec: SimSpec, clock: Clock) -> std::io::Result<SimCluster> {
        let stop = CancellationToken::new();
        let pki = match (&spec.teleport, spec.tls) {
            (Some(t), _) => Some(Box::new(
                SimPki::new(&t.cluster_name, clock).map_err(std::io::Error::other)?,
            )),
            (None, true) => Some(Box::new(
                SimPki::new("sim.lifeline", clock).map_err(std::io::Error::other)?,
            )),
            (None, false) => None,
        };
        // Auth servers serve health over the cluster's mutual TLS, ALPN h2.
        let health_tls = match pki.as_ref().filter(|_| spec.teleport.is_some()) {
            Some(p) => Some(
                p.server_config(vec![b"h2".to_vec()])
                    .map_err(std::io::Error::other)?,
            ),
            None => None,
        };
        let mut auths = Vec::new();
        for i in 0..spec.auth_servers {
            auths.push(
                SimAuth::start(auth_name(i), spec.auth_flavor, health_tls.clone(), &stop).await?,
            );
        }
        let st = State::at_start(&spec, &auths, clock.now());
        let (events, _) = broadcast::channel(spec.event_buffer.max(16));
        let (teleport_events, _) = broadcast::channel(spec.event_buffer.max(16));
        let (kill, _) = watch::channel(0u64);
        let listener = TcpListener::bind(spec.listen).await?;
        let addr = listener.local_addr()?;
        let inner = Arc::new(Inner {
            clock,
            rejected: std::sync::RwLock::new(spec.rejected_kinds.clone()),
            spec,
            state: Mutex::new(st),
            events,
            accepting: AtomicBool::new(true),
            kill,
            delivered: std::sync::atomic::AtomicU64::new(0),
            emitted: std::sync::atomic::AtomicU64::new(0),
            stream_base: std::sync::atomic::AtomicU64::new(0),
            taken: std::sync::atomic::AtomicU64::new(0),
            upgrades: Arc::default(),
            auths,
            stop,
            teleport_events,
            pki,
        });
        serve(&inner, listener)?;
        let sim = SimCluster { inner, addr };
        if sim.inner.spec.heartbeats {
            sim.start_heartbeats().await;
        }
        info!(%addr, agents = sim.inner.spec.agents, proxies = sim.inner.spec.proxies, auth_servers = sim.inner.spec.auth_servers, "simulated cluster up");
        Ok(sim)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn uri(&self) -> String {
        let scheme = if self.inner.spec.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    pub fn spec(&self) -> &SimSpec {
        &self.inner.spec
    }

    pub fn clock(&self) -> Clock {
        self.inner.clock
    }

    pub fn auth_addr(&self, name: &str) -> Option<SocketAddr> {
        self.inner
            .auths
            .iter()
            .find(|a| a.name == name)
            .map(|a| a.addr)
    }

    pub fn shutdown(&self) {
        self.inner.stop.cancel();
    }
}

/// Up to `page` of `items` for a paged listing, and the key the next page
/// starts after (empty when these are the last).
fn page_of<T>(
    items: impl Iterator<Item = T>,
    page: usize,
    key: impl Fn(&T) -> String,
) -> (Vec<T>, String) {
    let mut items = items;
    let out: Vec<T> = items.by_ref().take(page).collect();
    let next = match items.next() {
        Some(_) => out.last().map(key).unwrap_or_default(),
        None => String::new(),
    };
    (out, next)
}

/// TTL/2 + random(TTL/10), as Teleport heartbeats.
pub fn heartbeat_interval(ttl: Duration, rng: &mut impl Rng) -> Duration {
    let jitter_us = (ttl.as_micros() / 10) as u64;
    ttl / 2 + Duration::from_micros(rng.random_range(0..=jitter_us))
}

pub fn server(
    kind: Kind,
    name: &str,
    addr: &str,
    auth: &str,
    ttl: Duration,
    now: Ts,
) -> pb::Server {
    pb::Server {
        kind: kind.as_str().to_string(),
        name: name.to_string(),
        addr: addr.to_string(),
        version: "17.0.0".to_string(),
        group_id: if kind == Kind::Proxy {
            "proxy-group".into()
        } else {
            String::new()
        },
        group_generation: 1,
        expires: Some(to_timestamp(now.saturating_add(ttl))),
        ttl: Some(to_duration(ttl)),
        labels: Default::default(),
        auth_server: auth.to_string(),
    }
}

pub fn put_server(s: pb::Server) -> pb::Event {
    pb::Event {
        r#type: pb::EventType::Put as i32,
        resource: Some(pb::event::Resource::Server(s)),
    }
}

impl State {
    /// The cluster as `spec` starts it: every auth server serving, every
    /// resource fresh at `now`, each agent's tunnels to its proxies.
    fn at_start(spec: &SimSpec, auths: &[SimAuth], now: Ts) -> State {
        let mut st = State::default();
        for a in auths {
            let s = server(
                Kind::AuthServer,
                &a.name,
                &a.addr.to_string(),
                "",
                spec.ttl,
                now,
            );
            st.servers.insert((Kind::AuthServer, a.name.clone()), s);
            st.auth_status
                .insert(a.name.clone(), ServingStatus::Serving);
        }
        for i in 0..spec.proxies {
            let name = proxy_name(i);
            // Proxies have no listener in the simulator; the address is nominal.
            let addr = format!("127.0.0.1:{}", 30_000 + i);
            let s = server(Kind::Proxy, &name, &addr, "", spec.ttl, now);
            st.servers.insert((Kind::Proxy, name), s);
        }
        for i in 0..spec.agents {
            let name = agent_name(i);
            let auth = if spec.auth_servers > 0 {
                auth_name(i % spec.auth_servers)
            } else {
                String::new()
            };
            let s = server(Kind::Agent, &name, "", &auth, spec.agent_ttl, now);
            st.servers.insert((Kind::Agent, name.clone()), s);
            for j in 0..spec.tunnels_per_agent.min(spec.proxies) {
                let proxy = proxy_name((i + j) % spec.proxies);
                let t = pb::TunnelConnection {
                    name: format!("{name}.{proxy}"),
                    agent: name.clone(),
                    proxy,
                    last_heartbeat: Some(to_timestamp(now)),
                    expires: None,
                };
                st.put_tunnel(t);
            }
        }
        st
    }
}

/// Serves the cluster on `listener`: Teleport's Auth API (mutual TLS, and
/// a proxy's TLS routing when asked) or the `ClusterEvents` protocol.
fn serve(inner: &Arc<Inner>, listener: TcpListener) -> std::io::Result<()> {
    let stop2 = inner.stop.clone();
    match (&inner.spec.teleport, &inner.pki) {
        (Some(t), Some(pki)) => {
            let auth = pki
                .server_config(vec![b"h2".to_vec(), b"http/1.1".to_vec()])
                .map_err(std::io::Error::other)?;
            let front = if t.tls_routing {
                // A proxy's TLS routing to Auth, written here from
                // Teleport's rule rather than Lifeline's.
                let auth_alpn = format!(
                    "teleport-auth@{}.{}",
                    hex::encode(t.cluster_name.as_bytes()),
                    super::pki::AUTH_SERVER_NAME
                )
                .into_bytes();
                let web = pki
                    .web_config(vec![
                        b"http/1.1".to_vec(),
                        b"teleport-reversetunnel".to_vec(),
                    ])
                    .map_err(std::io::Error::other)?;
                let balancer = if t.behind_balancer {
                    Some(
                        pki.web_config(vec![b"h2".to_vec(), b"http/1.1".to_vec()])
                            .map_err(std::io::Error::other)?,
                    )
                } else {
                    None
                };
                super::serve::Front::Routing {
                    auth,
                    web,
                    balancer,
                    auth_alpn,
                    upgrades: inner.upgrades.clone(),
                }
            } else {
                super::serve::Front::Direct(auth)
            };
            let (router, http) = teleport::routers(inner.clone());
            tokio::spawn(super::serve::serve(
                router,
                listener,
                Some(front),
                Some(http),
                stop2,
                true,
            ));
        }
        (_, pki) => {
            let tls = match pki {
                Some(p) => Some(
                    p.server_only_config(vec![b"h2".to_vec()])
                        .map_err(std::io::Error::other)?,
                ),
                None => None,
            };
            let svc = ClusterEventsServer::new(cluster_events::Service {
                inner: inner.clone(),
            })
            .max_encoding_message_size(inner.spec.max_message_bytes)
            .max_decoding_message_size(inner.spec.max_message_bytes);
            let router = tonic::transport::Server::builder().add_service(svc);
            tokio::spawn(super::serve::serve(
                router,
                listener,
                tls.map(super::serve::Front::Direct),
                None,
                stop2,
                inner.spec.nodelay,
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tunnel(agent: &str, proxy: &str) -> pb::TunnelConnection {
        pb::TunnelConnection {
            name: format!("{agent}.{proxy}"),
            agent: agent.into(),
            proxy: proxy.into(),
            last_heartbeat: None,
            expires: None,
        }
    }

    #[test]
    fn proxies_walked_in_order_are_the_proxies_looked_up() {
        let mut st = State::default();
        for (agent, proxy) in [("a2", "p2"), ("a2", "p1"), ("a4", "p1"), ("a5", "p3")] {
            st.put_tunnel(tunnel(agent, proxy));
        }
        // The last tunnel of a5 goes: a5 holds none.
        st.remove_tunnel("a5.p3");
        let agents = ["a1", "a2", "a3", "a4", "a5", "a6"];
        for after in ["", "a1", "a2", "a3"] {
            let mut walk = st.proxies_in_order(after);
            for agent in agents.iter().filter(|a| **a > after) {
                assert_eq!(walk(agent), st.proxies_of(agent), "{agent} after {after:?}");
            }
        }
        let mut walk = st.proxies_in_order("");
        assert_eq!(walk("a2"), ["p1", "p2"]);
        assert!(walk("a3").is_empty());
        assert_eq!(walk("a4"), ["p1"]);
        assert!(walk("a5").is_empty());
    }
}
