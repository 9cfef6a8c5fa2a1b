//! Shared helpers: a builder that starts a simulated cluster and a real
//! Lifeline (real gRPC, real HTTP, a real SQLite file in a temp dir or a
//! fresh database on a real PostgreSQL), and small HTTP helpers.
//!
//! Time: tests run with tokio's clock paused (`start_paused = true`) and the
//! builder holds a blocking task for the whole test, which stops tokio from
//! auto-advancing the clock whenever the runtime looks idle (it would, while
//! loopback TCP or a SQLite commit is still in flight on another thread).
//! So virtual time moves only by `advance`/`advance_to`; every TTL and expiry
//! instant is exact. Waiting for messages to cross real sockets is bounded in
//! real time (`eventually`, `quiesce`) and never a sleep.

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::{Clock, Ts};
use lifeline::config::{Config, SignalsConfig};
use lifeline::model::Kind;
use lifeline::sim::{AuthFlavor, SimAgent, SimCluster, SimSpec};
use serde_json::Value;
use tempfile::TempDir;

/// The agent [`Running::strand_two`] strands (with agent-00005).
pub const STRANDED: &str = "agent-00001";

/// API tokens every test Lifeline admits: all roles, read+update, read.
pub const ADMIN: &str = "test-admin-token";
pub const UPDATER: &str = "test-updater-token";
pub const READER: &str = "test-reader-token";

/// The `[access]` tokens for [`ADMIN`], [`UPDATER`] and [`READER`], and
/// the simulated agents' join token.
pub fn test_access(cfg: &mut Config) {
    use lifeline::access::hash_hex;
    use lifeline::config::{Role, TokenConfig};
    let t = |name: &str, token: &str, roles: &[Role]| TokenConfig {
        name: name.into(),
        sha256: hash_hex(token),
        roles: roles.to_vec(),
    };
    cfg.access.tokens = vec![
        t("admin", ADMIN, Role::ALL),
        t("updater", UPDATER, &[Role::Read, Role::Update]),
        t("reader", READER, &[Role::Read]),
    ];
    cfg.access.join_tokens = vec![hash_hex(lifeline::sim::SIM_JOIN_TOKEN).into()];
}

type SignalsEdit = Box<dyn FnOnce(&mut SignalsConfig)>;
type ConfigEdit = Box<dyn FnOnce(&mut Config)>;

pub struct Cluster {
    spec: SimSpec,
    grace: Duration,
    max_message_bytes: usize,
    acquire_timeout: Duration,
    spans: Arc<lifeline::telemetry::SpanCounters>,
    lb_policy: String,
    signals: Vec<SignalsEdit>,
    configs: Vec<ConfigEdit>,
    /// Start a simulated agent per cluster agent, this share legacy.
    sim_agents: Option<f64>,
    desired_tunnels: Option<u32>,
    /// Serve TLS; `Some(true)`: agents need a client certificate too.
    tls: Option<bool>,
    store: Store,
}

/// Which engine a test's Lifeline keeps its store on.
#[derive(Clone, Debug)]
pub enum Store {
    /// A file in the test's temp dir.
    Sqlite,
    /// A fresh database on the test PostgreSQL server: its URL.
    Postgres(String),
}

impl Store {
    /// A fresh PostgreSQL database for `test`; `None` (the test is
    /// skipped) without a server, except under `CI=true` (see
    /// [`fresh_postgres`]).
    pub async fn postgres(test: &str) -> Option<Store> {
        fresh_postgres(test).await.map(Store::Postgres)
    }

    /// The engine to open: the SQLite file at `file`, or the database.
    pub fn engine(&self, file: &std::path::Path) -> lifeline::store::Engine {
        match self {
            Store::Sqlite => lifeline::store::Engine::Sqlite(file.to_path_buf()),
            Store::Postgres(url) => {
                lifeline::store::Engine::Postgres(lifeline::config::DbUrl::new(url.clone()))
            }
        }
    }

    /// The store itself, migrated, without a Lifeline around it: a file in
    /// `dir`, or the database.
    pub async fn open(&self, dir: &std::path::Path) -> lifeline::store::Db {
        lifeline::store::open(
            &self.engine(&dir.join("lifeline.db")),
            lifeline::store::ACQUIRE_TIMEOUT,
        )
        .await
        .expect("the store opens")
    }
}

/// A row of the signal audit as the API would have written it, for
/// `agent-00001`, at `created`.
pub fn signal_row(
    id: i64,
    created: lifeline::Ts,
    outcome: lifeline::model::Outcome,
) -> lifeline::store::signals::SignalRecord {
    lifeline::store::signals::SignalRecord {
        id,
        kind: lifeline::model::SignalKind::Reconnect,
        agent: "agent-00001".into(),
        proxy: String::new(),
        reason: "test".into(),
        requested_by: "api".into(),
        created,
        delivered: None,
        acked: None,
        outcome,
        detail: String::new(),
        latency_ms: None,
    }
}

/// One test body, two tests: `<name>::sqlite` and `<name>::postgres`. The
/// body gets a [`Store`] to give [`Cluster::store`] (or to open itself).
/// ```ignore
/// on_both_engines! {
///     #[tokio::test(start_paused = true)]
///     async fn history_survives(store) { ... }
/// }
/// ```
#[allow(unused_macros)]
macro_rules! on_both_engines {
    ($(#[doc = $doc:literal])* #[tokio::test $(($($arg:tt)*))?] async fn $name:ident($store:ident) $body:block) => {
        $(#[doc = $doc])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            async fn run($store: $crate::support::Store) $body
            #[tokio::test $(($($arg)*))?]
            async fn sqlite() {
                run($crate::support::Store::Sqlite).await
            }
            #[tokio::test $(($($arg)*))?]
            async fn postgres() {
                // Connecting is real I/O: keep a paused clock from jumping.
                let _hold = $crate::support::hold_clock();
                let test = concat!(module_path!(), "::", stringify!($name));
                if let Some(store) = $crate::support::Store::postgres(test).await {
                    run(store).await
                }
            }
        }
    };
}

/// A TLS test's certificates: a CA made for the test, Lifeline's
/// certificate and key files it signed, and an agent's client certificate.
pub struct TestTls {
    pub ca: lifeline::sim::pki::Ca,
    pub ca_file: std::path::PathBuf,
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub agent: lifeline::sim::pki::Issued,
}

impl TestTls {
    fn make(dir: &std::path::Path) -> TestTls {
        let ca = lifeline::sim::pki::Ca::new("test CA").expect("CA");
        let server = ca.issue("lifeline", &["localhost"]).expect("server cert");
        let agent = ca.issue("agent", &[]).expect("agent cert");
        let (ca_file, cert, key) = (dir.join("ca.pem"), dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&ca_file, ca.pem()).expect("write CA");
        std::fs::write(&cert, &server.cert_pem).expect("write cert");
        std::fs::write(&key, &server.key_pem).expect("write key");
        TestTls {
            ca,
            ca_file,
            cert,
            key,
            agent,
        }
    }

    /// An HTTPS client that trusts the test CA.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .add_root_certificate(
                reqwest::Certificate::from_pem(self.ca.pem().as_bytes()).expect("CA pem"),
            )
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("client")
    }

    /// Where agents reach `grpc` over TLS, with the agent's certificate
    /// or none.
    pub fn agent_addr(
        &self,
        grpc: std::net::SocketAddr,
        with_cert: bool,
    ) -> lifeline::sim::agent::LifelineAddr {
        let client =
            with_cert.then_some((self.agent.cert_pem.as_str(), self.agent.key_pem.as_str()));
        lifeline::sim::agent::LifelineAddr::tls(grpc, self.ca.pem(), client)
    }
}

/// `Cluster::new().agents(6).proxies(3).start().await`
impl Cluster {
    pub fn new() -> Self {
        Cluster {
            spec: SimSpec {
                agents: 6,
                proxies: 3,
                auth_servers: 2,
                ttl: Duration::from_secs(10),
                agent_ttl: Duration::from_secs(10),
                ..SimSpec::default()
            },
            grace: Duration::from_secs(5),
            max_message_bytes: 4 * 1024 * 1024,
            // Virtual time outruns real threads here: a connection that
            // takes a few real milliseconds must not time out on it.
            acquire_timeout: Duration::from_secs(24 * 3600),
            spans: Arc::default(),
            lb_policy: String::new(),
            signals: Vec::new(),
            configs: Vec::new(),
            sim_agents: None,
            desired_tunnels: None,
            tls: None,
            store: Store::Sqlite,
        }
    }

    /// Lifeline stores on `store` (SQLite in the temp dir by default).
    pub fn store(mut self, store: Store) -> Self {
        self.store = store;
        self
    }

    /// Lifeline serves HTTP and gRPC over TLS with a CA made for the test;
    /// with `agent_client_ca`, agents need a certificate it signed.
    pub fn tls(mut self, agent_client_ca: bool) -> Self {
        self.tls = Some(agent_client_ca);
        self
    }

    /// The simulated cluster serves `ClusterEvents` over TLS.
    pub fn cluster_tls(mut self) -> Self {
        self.spec.tls = true;
        self
    }
    /// 6 legacy simulated agents, each on both of 2 proxies that announce
    /// the same expiry, and agents that never expire: with
    /// [`Running::strand_everyone`], one instant strands every agent (the
    /// storm guard's case).
    pub fn storm() -> Self {
        Cluster::new()
            .agents(6)
            .proxies(2)
            .quiet()
            .ttl(Duration::from_secs(10))
            .agent_ttl(Duration::from_secs(3600))
            .sim_agents(1.0)
    }

    /// A [`Cluster::six_legacy`] with automatic reconnects off, ready, with
    /// agent-00001 and agent-00005 stranded ([`Running::strand_two`]): where
    /// every manual-reconnect test starts.
    pub async fn two_stranded_by_hand() -> Running {
        Cluster::two_stranded_by_hand_on(Store::Sqlite).await
    }

    /// [`Cluster::two_stranded_by_hand`] on `store`.
    pub async fn two_stranded_by_hand_on(store: Store) -> Running {
        let c = Cluster::six_legacy()
            .store(store)
            .signals(|s| s.auto_reconnect = false)
            .start()
            .await;
        c.ready().await;
        c.strand_two().await;
        c
    }

    pub fn agents(mut self, n: usize) -> Self {
        self.spec.agents = n;
        self
    }
    pub fn proxies(mut self, n: usize) -> Self {
        self.spec.proxies = n;
        self
    }
    pub fn auth_servers(mut self, n: usize) -> Self {
        self.spec.auth_servers = n;
        self
    }
    pub fn ttl(mut self, d: Duration) -> Self {
        self.spec.ttl = d;
        self.spec.agent_ttl = d;
        self
    }
    pub fn agent_ttl(mut self, d: Duration) -> Self {
        self.spec.agent_ttl = d;
        self
    }
    /// No heartbeat loops: the test drives every event.
    pub fn quiet(mut self) -> Self {
        self.spec.heartbeats = false;
        self
    }
    pub fn reject(mut self, k: Kind) -> Self {
        self.spec.rejected_kinds.push(k);
        self
    }
    /// The simulator plays Teleport's Auth API over mutual TLS and Lifeline
    /// uses the `teleport` source with the identity file it writes.
    pub fn teleport(mut self, t: lifeline::sim::TeleportSpec) -> Self {
        self.spec.teleport = Some(t);
        self
    }
    pub fn legacy_init(mut self) -> Self {
        self.spec.legacy_init = true;
        self
    }
    pub fn check_only_auth(mut self) -> Self {
        self.spec.auth_flavor = AuthFlavor::CheckOnly;
        self
    }
    /// Auth servers that do not serve `grpc.health.v1` at all.
    pub fn auth_without_health(mut self) -> Self {
        self.spec.auth_flavor = AuthFlavor::NoHealth;
        self
    }
    pub fn unknown_grace(mut self, d: Duration) -> Self {
        self.grace = d;
        self
    }
    /// `signals.grpc_client_lb_policy`, RFD JSON form.
    pub fn lb_policy(mut self, json: &str) -> Self {
        self.lb_policy = json.to_string();
        self
    }
    /// Changes `[signals]` settings.
    pub fn signals(mut self, f: impl FnOnce(&mut SignalsConfig) + 'static) -> Self {
        self.signals.push(Box::new(f));
        self
    }
    /// Connects a simulated agent for every cluster agent; `legacy_share`
    /// of them ignore discovery TTLs.
    /// Any other change to Lifeline's config.
    pub fn config(mut self, f: impl FnOnce(&mut Config) + 'static) -> Self {
        self.configs.push(Box::new(f));
        self
    }

    /// 6 legacy simulated agents on 4 proxies, TTL 10 s: agent i tunnels to
    /// proxies i%4 and (i+1)%4, so [`Running::strand_two`] strands
    /// [`STRANDED`] and agent-00005, and only a signal moves them.
    pub fn six_legacy() -> Self {
        Cluster::new()
            .agents(6)
            .proxies(4)
            .ttl(Duration::from_secs(10))
            .sim_agents(1.0)
    }

    /// Starts a simulated agent per cluster agent, this share legacy.
    pub fn sim_agents(mut self, legacy_share: f64) -> Self {
        self.sim_agents = Some(legacy_share);
        self
    }
    /// Simulated agents want this many tunnels (default: what they hold).
    pub fn desired_tunnels(mut self, n: u32) -> Self {
        self.desired_tunnels = Some(n);
        self
    }
    /// Readers and writers wait at most Lifeline's own 2 s for a database
    /// connection (for a test that runs out of them on purpose).
    /// `/metrics` shows this trace pipeline's counters.
    pub fn spans(mut self, counters: Arc<lifeline::telemetry::SpanCounters>) -> Self {
        self.spans = counters;
        self
    }

    pub fn production_acquire_timeout(mut self) -> Self {
        self.acquire_timeout = lifeline::store::ACQUIRE_TIMEOUT;
        self
    }
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }

    pub async fn start(self) -> Running {
        logs();
        let anchor = hold_clock();
        let clock = Clock::manual();
        let sim = SimCluster::start(self.spec, clock)
            .await
            .expect("simulated cluster starts");
        let dir = tempfile::tempdir().expect("temp dir");
        let mut cfg = Config::default();
        cfg.server.listen = ([127, 0, 0, 1], 0).into();
        cfg.server.grpc_listen = ([127, 0, 0, 1], 0).into();
        cfg.cluster.addr = sim.uri();
        if let Some(pki) = sim.pki().filter(|_| sim.spec().tls) {
            let ca = dir.path().join("cluster-ca.pem");
            std::fs::write(&ca, pki.ca_pem()).expect("cluster CA written");
            cfg.cluster.ca_file = Some(ca);
        }
        let tls = self.tls.map(|client_ca| {
            let t = TestTls::make(dir.path());
            cfg.server.tls_cert = Some(t.cert.clone());
            cfg.server.tls_key = Some(t.key.clone());
            if client_ca {
                cfg.server.agent_client_ca = Some(t.ca_file.clone());
            }
            t
        });
        if sim.spec().teleport.is_some() {
            let identity = dir.path().join("identity");
            sim.write_identity(&identity)
                .expect("identity file written");
            cfg.cluster.source = lifeline::config::SourceKind::Teleport;
            cfg.cluster.addr = sim.addr().to_string();
            cfg.cluster.identity_file = Some(identity);
            cfg.cluster.instances_poll = Duration::from_secs(1);
            let routing = sim.spec().teleport.as_ref().is_some_and(|t| t.tls_routing);
            if let Some(pki) = sim.pki().filter(|_| routing) {
                let web_ca = dir.path().join("proxy-ca.pem");
                std::fs::write(&web_ca, pki.web_ca_pem()).expect("proxy CA written");
                cfg.cluster.proxy_ca_file = Some(web_ca);
            }
        }
        cfg.cluster.max_message_bytes = self.max_message_bytes;
        cfg.storage.path = dir.path().join("lifeline.db");
        if let Store::Postgres(url) = &self.store {
            cfg.storage.url = Some(lifeline::config::DbUrl::new(url.clone()));
            // The lease's deadline is in the database's (real) clock and
            // this test's clock only moves when it advances: the longest
            // lease keeps the one replica leading however the two drift.
            cfg.storage.leader_lease = Duration::from_secs(300);
        }
        cfg.health.unknown_grace = self.grace;
        cfg.health.poll_interval = Duration::from_secs(1);
        cfg.signals.grpc_client_lb_policy = self.lb_policy;
        // The clock jumps when a test advances it: no ping could be
        // answered in time.
        cfg.server.grpc_keepalive = None;
        test_access(&mut cfg);
        for f in self.signals {
            f(&mut cfg.signals);
        }
        for f in self.configs {
            f(&mut cfg);
        }
        let tuning = Tuning {
            change_capacity: 65_536,
            acquire_timeout: self.acquire_timeout,
            spans: self.spans,
            ..Tuning::default()
        };
        let ll = Lifeline::start_tuned(&cfg, clock, tuning.clone())
            .await
            .expect("lifeline starts");
        let to = match &tls {
            Some(t) => t.agent_addr(ll.grpc_addr, true),
            None => ll.grpc_addr.into(),
        };
        let agents = match self.sim_agents {
            Some(share) => SimAgent::start_for_cluster_wanting(
                &sim,
                to,
                share,
                1000,
                self.desired_tunnels
                    .unwrap_or(sim.spec().tunnels_per_agent as u32),
                &ll.shutdown_token(),
            )
            .await
            .expect("simulated agents start"),
            None => Vec::new(),
        };
        Running {
            sim,
            other_watchers: Vec::new(),
            agents,
            ll: Some(ll),
            cfg,
            tuning,
            clock,
            _dir: dir,
            http: tls.as_ref().map(TestTls::client).unwrap_or_default(),
            tls,
            _anchor: anchor,
        }
    }
}

pub struct Running {
    pub sim: SimCluster,
    /// The counters of other Lifelines watching the simulator (replicas a
    /// test starts beside this one): its count of events sent covers theirs.
    pub other_watchers: Vec<Arc<lifeline::stats::Stats>>,
    pub agents: Vec<SimAgent>,
    ll: Option<Lifeline>,
    pub cfg: Config,
    tuning: Tuning,
    pub clock: Clock,
    _dir: TempDir,
    pub http: reqwest::Client,
    /// With [`Cluster::tls`]: the test's CA and certificate files.
    pub tls: Option<TestTls>,
    _anchor: std::sync::mpsc::Sender<()>,
}

impl Running {
    pub fn ll(&self) -> &Lifeline {
        self.ll.as_ref().expect("lifeline running")
    }

    /// Waits until Lifeline is ready, every auth server's health is known
    /// and every simulated agent is connected.
    pub async fn ready(&self) {
        real_timeout(REAL_WAIT, self.ll().fleet.wait_ready())
            .await
            .expect("Lifeline ready in time")
            .expect("fleet alive");
        // Every auth server has reported its first health.
        self.eventually("auth health known", || async {
            let auths = self.ok("/api/v1/auth-servers").await;
            auths["items"].as_array().is_some_and(|a| {
                a.iter()
                    .all(|x| x["health"] != "UNKNOWN" && x["health"] != "NEVER_REACHED")
            })
        })
        .await;
        // Every simulated agent holds its signal stream open.
        let n = self.agents.len();
        self.eventually("every simulated agent connected", || async {
            self.ll().hub.connected() == n && self.agents.iter().all(|a| a.is_connected())
        })
        .await;
    }

    /// Waits until Lifeline has consumed every event the simulator sent, and
    /// the fleet has applied them (a read is a barrier: it runs after every
    /// earlier command, with due timers fired).
    pub async fn quiesce(&self) {
        let ll = self.ll();
        let consumed = || {
            std::iter::once(&ll.stats)
                .chain(&self.other_watchers)
                .map(|s| s.session_events.load(Ordering::SeqCst))
                .sum::<u64>()
        };
        let caught_up = real_timeout(REAL_WAIT, async {
            // Nothing more arrives while the stream is down.
            while ll.fleet.readiness().ready
                && (!self.sim.stream_caught_up() || consumed() < self.sim.delivered())
            {
                tokio::task::yield_now().await;
            }
        })
        .await;
        assert!(
            caught_up.is_some(),
            "Lifeline consumed {} of the {} events the simulator sent within {REAL_WAIT:?}",
            consumed(),
            self.sim.delivered()
        );
        bounded("the fleet to settle", ll.fleet.settled())
            .await
            .expect("fleet alive");
    }

    /// Moves virtual time forward by `d`, in small steps so heartbeats and
    /// expiries happen in order, letting the pipeline settle after each.
    pub async fn advance(&self, d: Duration) {
        let step = Duration::from_millis(250);
        let mut left = d;
        while !left.is_zero() {
            let s = left.min(step);
            tokio::time::advance(s).await;
            self.quiesce().await;
            left -= s;
        }
    }

    /// The named proxies stop heartbeating; returns once the last of them
    /// has expired (virtual time) and what that caused has crossed the
    /// sockets.
    pub async fn stop_proxies(&self, names: &[&str]) {
        let mut last = self.clock.now();
        for p in names {
            self.sim.pause_heartbeats(p).await;
            last = last.max(self.expires(Kind::Proxy, p).await);
        }
        self.advance_to(last).await;
        self.quiesce().await;
    }

    /// In a [`Cluster::six_legacy`]: stops proxy-1 and proxy-2, so
    /// agent-00001 and agent-00005 lose every live tunnel; the rest keep one.
    pub async fn strand_two(&self) {
        self.stop_proxies(&["proxy-1", "proxy-2"]).await;
    }

    /// An agent's state as the API reports it.
    pub async fn state(&self, agent: &str) -> String {
        self.ok(&format!("/api/v1/agents/{agent}")).await["state"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }

    /// In a [`Cluster::storm`]: both proxies expire together, then 5 s pass.
    pub async fn strand_everyone(&self) {
        let e = self.expires(Kind::Proxy, "proxy-1").await;
        self.advance_to(e).await;
        self.advance(Duration::from_secs(5)).await;
    }

    /// Moves virtual time until just past wall time `t` (1 ms: tokio's timer
    /// granularity), landing exactly there.
    pub async fn advance_to(&self, t: Ts) {
        let target = t.saturating_add(Duration::from_millis(1));
        let now = self.clock.now();
        let gap = target.since(now);
        if gap > Duration::from_millis(250) {
            self.advance(gap - Duration::from_millis(250)).await;
        }
        let rest = target.since(self.clock.now());
        tokio::time::advance(rest).await;
        self.quiesce().await;
    }

    /// Advances virtual time in steps until `cond` holds (at most `max`).
    pub async fn advance_until<F, Fut>(&self, what: &str, max: Duration, mut cond: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let mut spent = Duration::ZERO;
        while !cond().await {
            assert!(
                spent < max,
                "not true within {max:?} of virtual time: {what}"
            );
            self.advance(Duration::from_millis(250)).await;
            spent += Duration::from_millis(250);
        }
    }

    /// Polls `cond` until true; panics after a real-time bound. Between
    /// polls it waits for the next real-time tick, never blocking a thread.
    pub async fn eventually<F, Fut>(&self, what: &str, mut cond: F)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = bool>,
    {
        let deadline = std::time::Instant::now() + REAL_WAIT;
        loop {
            if cond().await {
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "not true within {REAL_WAIT:?}: {what}"
            );
            real_sleep(Duration::from_millis(1)).await;
        }
    }

    /// Waits until every write so far is committed.
    pub async fn flush(&self) {
        bounded("every write to commit", self.ll().fleet.flush())
            .await
            .expect("fleet alive");
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let (status, text) = self.get_text(path).await;
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A GET that sees everything the fleet has applied so far: it first
    /// lets the fleet settle, which publishes the read model the dashboard
    /// and `/metrics` serve (on its own the fleet publishes at most every
    /// 250 ms of its clock, and a paused test clock may not get there).
    pub async fn get_text(&self, path: &str) -> (u16, String) {
        bounded("the fleet to settle", self.ll().fleet.settled())
            .await
            .expect("fleet alive");
        let url = format!("{}{}", self.ll().base_url(), path);
        let resp = bounded(&format!("GET {path}"), self.http.get(&url).send())
            .await
            .expect("HTTP request");
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    }

    pub async fn ok(&self, path: &str) -> Value {
        let (status, body) = self.get(path).await;
        assert_eq!(status, 200, "GET {path} → {status}: {body}");
        body
    }

    /// POST as [`ADMIN`].
    pub async fn post(&self, path: &str, body: &str) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, Some(ADMIN), Some(body))
            .await
    }

    /// Any method, with a bearer token (or none) and a JSON body (or none).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<&str>,
    ) -> (u16, Value) {
        let url = format!("{}{}", self.ll().base_url(), path);
        let mut req = self.http.request(method, &url);
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let resp = bounded("an HTTP call", req.send())
            .await
            .expect("HTTP request");
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    pub fn agent(&self, name: &str) -> &SimAgent {
        self.agents
            .iter()
            .find(|a| a.name == name)
            .expect("simulated agent exists")
    }

    pub async fn summary(&self) -> Value {
        self.ok("/api/v1/summary").await
    }

    /// Names of agents in `state`, sorted.
    pub async fn agents_in(&self, state: &str) -> Vec<String> {
        let body = self
            .ok(&format!("/api/v1/agents?state={state}&limit=1000"))
            .await;
        names(&body["items"])
    }

    /// The announced expiry of a simulated server.
    pub async fn expires(&self, kind: Kind, name: &str) -> Ts {
        let s = self
            .sim
            .get_server(kind, name)
            .await
            .expect("server exists");
        let e = s.expires.expect("has expires");
        Ts(e.seconds * 1_000_000 + i64::from(e.nanos / 1000))
    }

    pub async fn stop_lifeline(&mut self) {
        if let Some(ll) = self.ll.take() {
            ll.shutdown().await;
        }
    }

    /// Starts a new Lifeline on the same database.
    pub async fn restart_lifeline(&mut self) {
        self.stop_lifeline().await;
        let ll = Lifeline::start_tuned(&self.cfg, self.clock, self.tuning.clone())
            .await
            .expect("lifeline restarts");
        self.ll = Some(ll);
    }

    pub async fn shutdown(mut self) {
        for a in &self.agents {
            a.stop();
        }
        self.stop_lifeline().await;
        self.sim.shutdown();
    }
}

/// Runs the `lifeline` binary against `c` (`--server` appended) as
/// [`UPDATER`] (`LIFELINE_TOKEN`; a `--token` in `args` wins): exit code,
/// stdout, stderr.
pub async fn cli(c: &Running, args: &[&str]) -> (i32, String, String) {
    let out = real_timeout(
        REAL_WAIT,
        tokio::process::Command::new(env!("CARGO_BIN_EXE_lifeline"))
            .args(args)
            .args(["--server", &c.ll().base_url()])
            .env_remove("RUST_LOG")
            .env("LIFELINE_TOKEN", UPDATER)
            .output(),
    )
    .await
    .expect("CLI finished in time")
    .expect("CLI runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub fn names(items: &Value) -> Vec<String> {
    let mut v: Vec<String> = items
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|i| i["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// `items[*][key]` as strings, in the API's order.
pub fn strs(items: &Value, key: &str) -> Vec<String> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .map(|i| i[key].as_str().expect("a string field").to_string())
        .collect()
}

/// `items[*]["id"]`, in the API's order.
pub fn ids(items: &Value) -> Vec<i64> {
    items
        .as_array()
        .expect("an array")
        .iter()
        .map(|i| i["id"].as_i64().expect("an integer id"))
        .collect()
}

/// Parses an API timestamp.
pub fn ts(v: &Value) -> Ts {
    Ts::parse_rfc3339(v.as_str().expect("timestamp string")).expect("RFC 3339")
}

/// Logs to the test's output when `RUST_LOG` is set.
pub fn logs() {
    if let Ok(f) = std::env::var("RUST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new(f))
            .with_test_writer()
            .try_init();
    }
}

/// How long a test waits, in real time, for something to cross real sockets.
pub const REAL_WAIT: Duration = Duration::from_secs(20);

/// Keeps tokio from auto-advancing a paused clock: a running blocking task
/// inhibits auto-advance. Dropping the sender ends it.
pub fn hold_clock() -> std::sync::mpsc::Sender<()> {
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    tokio::task::spawn_blocking(move || {
        let _ = rx.recv();
    });
    tx
}

/// Real-time ticks, one per millisecond, from one thread for the whole
/// process: how async code waits in real time while tokio's clock is
/// paused, without a blocking sleep or a thread per wait.
fn real_ticks() -> tokio::sync::watch::Receiver<u64> {
    static TICKS: std::sync::OnceLock<tokio::sync::watch::Receiver<u64>> =
        std::sync::OnceLock::new();
    TICKS
        .get_or_init(|| {
            let (tx, rx) = tokio::sync::watch::channel(0u64);
            std::thread::Builder::new()
                .name("real-time ticks".into())
                .spawn(move || {
                    let mut n = 0u64;
                    // Ends with the process: the static keeps a receiver.
                    while tx.send(n).is_ok() {
                        std::thread::sleep(Duration::from_millis(1));
                        n += 1;
                    }
                })
                .expect("tick thread starts");
            rx
        })
        .clone()
}

/// Waits at least `d` of real time (the tokio clock is paused in tests).
pub async fn real_sleep(d: Duration) {
    let deadline = std::time::Instant::now() + d;
    let mut ticks = real_ticks();
    while std::time::Instant::now() < deadline {
        if ticks.changed().await.is_err() {
            return;
        }
    }
}

/// `f`, or a panic naming `what` after [`REAL_WAIT`] of real time: no
/// wait in a test hangs it.
pub async fn bounded<F: std::future::Future>(what: &str, f: F) -> F::Output {
    match real_timeout(REAL_WAIT, f).await {
        Some(v) => v,
        None => panic!("no answer within {REAL_WAIT:?} of real time: {what}"),
    }
}

/// A timeout in real time (the tokio clock is paused in tests).
pub async fn real_timeout<F: std::future::Future>(d: Duration, f: F) -> Option<F::Output> {
    tokio::select! {
        v = f => Some(v),
        _ = real_sleep(d) => None,
    }
}

/// The test PostgreSQL server's URL (`LIFELINE_TEST_POSTGRES_URL`, which
/// `.ci/postgres start` exports); `None`, said on stderr, without one,
/// except under `CI=true`, where that is a failure.
pub fn postgres_server(test: &str) -> Option<String> {
    let url = std::env::var("LIFELINE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: CI=true but LIFELINE_TEST_POSTGRES_URL is not set (eval \"$(.ci/postgres start)\")"
        );
        eprintln!("SKIPPED {test}: no PostgreSQL (eval \"$(.ci/postgres start)\" to run it)");
    }
    url
}

/// A fresh, empty database on the test PostgreSQL server
/// (`LIFELINE_TEST_POSTGRES_URL`, which `.ci/postgres start` exports): its
/// URL. Without a server the test is skipped, said on stderr, except under
/// `CI=true`, where that is a failure.
pub async fn fresh_postgres(test: &str) -> Option<String> {
    use sqlx::Connection;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let admin = postgres_server(test)?;
    // What makes it unique first: PostgreSQL cuts names at 63 bytes.
    let mut name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        test.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
    );
    name.truncate(63);
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("{test}: cannot reach {admin}: {e}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await
        .expect("database created");
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    Some(format!("{base}/{name}"))
}

/// `sql` (one number, e.g. a `COUNT(*)`) on either engine.
pub async fn sql_i64(db: &lifeline::store::Db, sql: &'static str) -> i64 {
    use lifeline::store::Db;
    let n = match db {
        Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        Db::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await,
    };
    n.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs `sql` (no result) on either engine.
pub async fn sql_exec(db: &lifeline::store::Db, sql: &'static str) {
    use lifeline::store::Db;
    let r = match db {
        Db::Sqlite(p) => sqlx::query(sql).execute(p).await.map(drop),
        Db::Postgres(p) => sqlx::query(sql).execute(p).await.map(drop),
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The sign-in page's CSRF cookie (`name=value`) and form token, as a
/// browser would get them before posting `/signin`.
pub async fn signin_csrf(client: &reqwest::Client, base: &str) -> (String, String) {
    let page = bounded(
        "the sign-in page",
        client.get(format!("{base}/signin?next=/agents")).send(),
    )
    .await
    .expect("sign-in page");
    let cookie = page.headers()["set-cookie"]
        .to_str()
        .expect("cookie")
        .split(';')
        .next()
        .expect("pair")
        .to_string();
    let html = page.text().await.expect("html");
    let at = html.find("name=\"csrf\" value=\"").expect("CSRF field") + 19;
    let csrf = html[at..at + html[at..].find('"').expect("end")].to_string();
    (cookie, csrf)
}

/// The CSRF token of a dashboard page fetched with `cookies` (the form
/// token a signed-in browser's pages carry).
pub async fn page_csrf(client: &reqwest::Client, base: &str, cookies: &str) -> String {
    let html = bounded(
        "a dashboard page",
        client
            .get(format!("{base}/agents"))
            .header("cookie", cookies)
            .send(),
    )
    .await
    .expect("page")
    .text()
    .await
    .expect("html");
    let at = html.find("name=\"csrf\" value=\"").expect("CSRF field") + 19;
    html[at..at + html[at..].find('"').expect("end")].to_string()
}
