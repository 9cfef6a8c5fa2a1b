//! The builder: a simulated cluster and a real Lifeline around it.

use super::*;
use std::sync::Arc;
use std::time::Duration;

use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::Clock;
use lifeline::config::{Config, SignalsConfig};
use lifeline::domain::Kind;
use lifeline_sim::{AuthFlavor, SimAgent, SimCluster, SimSpec};

type SignalsEdit = Box<dyn FnOnce(&mut SignalsConfig)>;
type ConfigEdit = Box<dyn FnOnce(&mut Config)>;

pub struct Cluster {
    spec: SimSpec,
    grace: Duration,
    max_message_bytes: usize,
    waits: lifeline::store::Waits,
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
    /// The wall time the clock starts at (default: now).
    starting_at: Option<lifeline::clock::Ts>,
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
            waits: lifeline::store::Waits::patient(Duration::from_secs(24 * 3600)),
            spans: Arc::default(),
            lb_policy: String::new(),
            signals: Vec::new(),
            configs: Vec::new(),
            sim_agents: None,
            desired_tunnels: None,
            tls: None,
            store: Store::Sqlite,
            starting_at: None,
        }
    }

    /// Starts the clock at `wall` instead of now: a database made at
    /// another time opens as it was then, with nothing aged out by
    /// retention in the meantime.
    pub fn starting_at(mut self, wall: lifeline::clock::Ts) -> Self {
        self.starting_at = Some(wall);
        self
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
    pub fn teleport(mut self, t: lifeline_sim::TeleportSpec) -> Self {
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

    /// The store's waits of a running Lifeline (for tests on the wall
    /// clock).
    pub fn production_waits(mut self) -> Self {
        self.waits = lifeline::store::Waits::PRODUCTION;
        self
    }
    pub fn waits(mut self, waits: lifeline::store::Waits) -> Self {
        self.waits = waits;
        self
    }
    pub fn max_message_bytes(mut self, n: usize) -> Self {
        self.max_message_bytes = n;
        self
    }

    pub async fn start(self) -> Running {
        logs();
        let anchor = hold_clock();
        let clock = match self.starting_at {
            Some(wall) => Clock::starting_at(wall),
            None => Clock::manual(),
        };
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
            waits: self.waits,
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
