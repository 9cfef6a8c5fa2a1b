//! Simulated agents that follow Lifeline's contract, over real gRPC.
//!
//! Each agent holds `AgentSignals.Connect` open to Lifeline and:
//! - tracks proxies from Discovery with each proxy's TTL (a *legacy* agent
//!   ignores TTLs and keeps Teleport's 3-minute default expiry, so it stays
//!   on a dead proxy until told);
//! - moves a tunnel off a proxy whose expiry passed, on its own;
//! - obeys Reconnect: opens a tunnel to a live proxy it is not on *before*
//!   closing the old one, reports, then acks; obeys CloseTunnel (never its
//!   last tunnel);
//! - follows `teleport_pick_healthy` for its auth connection: asks Lifeline's
//!   `GetServiceConfig`; in reconnect mode watches its auth server's health,
//!   and on NOT_SERVING opens a backup connection to another auth server
//!   (backoff 1 s..16 s, up to 50 % jitter), switches once it is healthy,
//!   and leaves streams already open on the old connection to finish; if the
//!   old server recovers first, the backup is dropped.
//!
//! Tunnels live in the simulated cluster's records when one is given (what
//! a real proxy would record), and always in the agent's own reports.
//!
//! Several Lifeline replicas ([`Lifelines`]) are reached as a layer-4 load
//! balancer hands them out: agents are spread over them, and an agent whose
//! stream breaks or cannot open tries the next replica (`upstream`). The
//! auth connection's policy is followed in `auth_conn`.

// Simulated agents are the cluster, not Lifeline: they keep their own
// proxy expiries on tokio's clock, as a real agent does.
#![allow(clippy::disallowed_methods)]

mod acting;
mod auth_conn;
mod upstream;

pub use upstream::{join_request, lifeline_channel, LifelineAddr, Lifelines, Upstream};

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::{Channel, Endpoint};
use tracing::debug;

use super::cluster::SimCluster;
use super::wire;
use lifeline::proto::health::health_client::HealthClient;
use lifeline::proto::health::HealthCheckRequest;
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::agent_signals_client::AgentSignalsClient;

/// What a legacy agent assumes a proxy lives without hearing of it again.
pub const LEGACY_EXPIRY: Duration = Duration::from_secs(180);

#[derive(Clone, Debug)]
pub struct AgentOptions {
    pub legacy: bool,
    pub desired_tunnels: u32,
    /// How often the agent looks at its proxies' expiries.
    pub check_every: Duration,
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub seed: u64,
    /// Presented on `AgentSignals.Connect` (the cluster's join token).
    pub join_token: String,
    /// A Teleport agent with a sidecar beside it: the stream is the
    /// sidecar's (restart-only, no discovery), and a Reconnect restarts
    /// the agent, which takes this long and comes back with fresh tunnels
    /// to live proxies, a serving auth server and a heartbeat.
    pub sidecar: Option<Duration>,
}

impl Default for AgentOptions {
    fn default() -> Self {
        AgentOptions {
            legacy: false,
            desired_tunnels: 2,
            check_every: Duration::from_secs(1),
            backoff_base: Duration::from_secs(1),
            backoff_cap: Duration::from_secs(16),
            seed: 1,
            join_token: super::cluster::SIM_JOIN_TOKEN.to_string(),
            sidecar: None,
        }
    }
}

/// What an agent did, in order; tests read it.
#[derive(Clone, Debug, PartialEq)]
pub enum AgentEvent {
    Connected,
    Disconnected,
    Discovery {
        full: bool,
        proxies: Vec<(String, Duration)>,
    },
    Opened(String),
    Closed(String),
    Acked {
        id: u64,
        ok: bool,
    },
    /// Moved its auth connection.
    AuthSwitched {
        from: String,
        to: String,
    },
    /// The old auth server recovered before the backup was ready.
    BackupDropped(String),
}

#[derive(Default)]
struct Shared {
    tunnels: BTreeSet<String>,
    auth: String,
    /// proxy → when the agent stops believing it is alive.
    known: HashMap<String, Instant>,
    events: Vec<AgentEvent>,
    connected: bool,
}

/// A running simulated agent.
#[derive(Clone)]
pub struct SimAgent {
    pub name: String,
    shared: Arc<Mutex<Shared>>,
    changed: Arc<Notify>,
    report: Arc<Notify>,
    stop: CancellationToken,
}

fn lock(m: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// An RPC stream the agent holds open on an auth connection.
pub struct OpenStream {
    pub auth: String,
    open: Arc<AtomicBool>,
    stop: CancellationToken,
}

impl OpenStream {
    pub fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
    /// Finishes the stream (the work it carried is done).
    pub fn finish(&self) {
        self.stop.cancel();
    }
}

/// A simulated agent continues the trace a control signal carries, as a
/// real agent would, exporting through the global OpenTelemetry provider
/// (service `lifeline-sim-agent`; a no-op unless export is configured).
fn continue_trace(s: &pb::Signal, agent: &str) -> Option<opentelemetry::global::BoxedSpan> {
    use opentelemetry::trace::{SpanKind, Tracer};
    let name = match &s.kind {
        Some(pb::signal::Kind::Reconnect(_)) => "agent.reconnect",
        Some(pb::signal::Kind::CloseTunnel(_)) => "agent.close_tunnel",
        _ => return None,
    };
    let parent = wire::trace_parent(&s.trace_context)?;
    let tracer = opentelemetry::global::tracer(wire::SERVICE);
    Some(
        tracer
            .span_builder(name)
            .with_kind(SpanKind::Consumer)
            .with_attributes([
                opentelemetry::KeyValue::new("agent", agent.to_string()),
                opentelemetry::KeyValue::new("signal.id", s.id as i64),
            ])
            .start_with_context(&tracer, &parent),
    )
}

impl SimAgent {
    /// Starts an agent with the tunnels and auth server it has now.
    /// `lifeline` is the channel to Lifeline's gRPC port (shared by many
    /// agents if wanted), or to each replica; `cluster` is where its tunnels
    /// are recorded.
    pub fn start(
        name: String,
        opts: AgentOptions,
        lifeline: impl Into<Upstream>,
        cluster: Option<SimCluster>,
        tunnels: Vec<String>,
        auth: String,
        parent: &CancellationToken,
    ) -> SimAgent {
        let agent = SimAgent {
            name,
            shared: Arc::new(Mutex::new(Shared {
                tunnels: tunnels.into_iter().collect(),
                auth,
                ..Shared::default()
            })),
            changed: Arc::new(Notify::new()),
            report: Arc::new(Notify::new()),
            stop: parent.child_token(),
        };
        let a = agent.clone();
        let lifeline = lifeline.into();
        let first = lifeline.current().clone();
        let (opts2, cl2) = (opts.clone(), cluster.clone());
        tokio::spawn(async move { a.signals_loop(opts2, lifeline, cl2).await });
        if let Some(c) = cluster {
            if !c.auth_servers().is_empty() {
                let a = agent.clone();
                tokio::spawn(async move { a.auth_loop(opts, first, c).await });
            }
        }
        agent
    }

    /// Starts one agent per cluster agent, multiplexed over
    /// `per_connection` agents per HTTP/2 connection to Lifeline (agent `i`
    /// starts on replica `i mod n` when there are several).
    pub async fn start_for_cluster(
        cluster: &SimCluster,
        lifeline: impl Into<Lifelines>,
        legacy_share: f64,
        per_connection: usize,
        parent: &CancellationToken,
    ) -> Result<Vec<SimAgent>, tonic::transport::Error> {
        let desired = cluster.spec().tunnels_per_agent as u32;
        Self::start_for_cluster_wanting(
            cluster,
            lifeline,
            legacy_share,
            per_connection,
            desired,
            parent,
        )
        .await
    }

    /// As `start_for_cluster`, with agents that want `desired_tunnels`
    /// (fewer than they hold makes them candidates for graceful closing).
    pub async fn start_for_cluster_wanting(
        cluster: &SimCluster,
        lifeline: impl Into<Lifelines>,
        legacy_share: f64,
        per_connection: usize,
        desired_tunnels: u32,
        parent: &CancellationToken,
    ) -> Result<Vec<SimAgent>, tonic::transport::Error> {
        Self::start_each(
            cluster,
            lifeline.into(),
            per_connection,
            parent,
            |_, rng| {
                Some(AgentOptions {
                    legacy: rng.random_bool(legacy_share.clamp(0.0, 1.0)),
                    desired_tunnels,
                    ..AgentOptions::default()
                })
            },
        )
        .await
    }

    /// Teleport agents as they are: none speaks `AgentSignals`, and a
    /// `share` of hosts run a sidecar beside theirs whose restart takes
    /// `restart` (see [`AgentOptions::sidecar`]). Only the sidecars connect.
    pub async fn start_sidecars(
        cluster: &SimCluster,
        lifeline: impl Into<Lifelines>,
        share: f64,
        restart: Duration,
        parent: &CancellationToken,
    ) -> Result<Vec<SimAgent>, tonic::transport::Error> {
        let desired = cluster.spec().tunnels_per_agent as u32;
        Self::start_each(cluster, lifeline.into(), 100, parent, |_, rng| {
            rng.random_bool(share.clamp(0.0, 1.0))
                .then(|| AgentOptions {
                    desired_tunnels: desired,
                    sidecar: Some(restart),
                    ..AgentOptions::default()
                })
        })
        .await
    }

    /// One agent per cluster agent that `options` gives options for,
    /// `per_connection` to an HTTP/2 connection (agent `i` on replica
    /// `i mod n`).
    async fn start_each(
        cluster: &SimCluster,
        lifeline: Lifelines,
        per_connection: usize,
        parent: &CancellationToken,
        mut options: impl FnMut(usize, &mut rand::rngs::SmallRng) -> Option<AgentOptions>,
    ) -> Result<Vec<SimAgent>, tonic::transport::Error> {
        let n = cluster.spec().agents;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(cluster.spec().seed ^ 0xa6e7);
        let mut out = Vec::with_capacity(n);
        let mut channels: Option<Arc<[Channel]>> = None;
        for i in 0..n {
            if i % per_connection.max(1) == 0 {
                let each = lifeline.0.iter().cloned().map(lifeline_channel);
                channels = Some(each.collect::<Result<Vec<_>, _>>()?.into());
            }
            let Some(chs) = channels.clone().filter(|c| !c.is_empty()) else {
                break;
            };
            let Some(opts) = options(i, &mut rng) else {
                continue;
            };
            let ch = Upstream::starting_at(chs, i);
            let name = super::cluster::agent_name(i);
            let tunnels = cluster.agent_proxies(&name).await;
            let auth = cluster.agent_auth(&name).await.unwrap_or_default();
            let opts = AgentOptions {
                seed: cluster.spec().seed.wrapping_add(i as u64),
                join_token: cluster.spec().join_token.clone(),
                ..opts
            };
            out.push(SimAgent::start(
                name,
                opts,
                ch,
                Some(cluster.clone()),
                tunnels,
                auth,
                parent,
            ));
        }
        Ok(out)
    }

    pub fn stop(&self) {
        self.stop.cancel();
    }

    pub fn events(&self) -> Vec<AgentEvent> {
        lock(&self.shared).events.clone()
    }

    pub fn tunnels(&self) -> Vec<String> {
        lock(&self.shared).tunnels.iter().cloned().collect()
    }

    pub fn auth(&self) -> String {
        lock(&self.shared).auth.clone()
    }

    pub fn is_connected(&self) -> bool {
        lock(&self.shared).connected
    }

    /// Waits until the agent's state satisfies `f` (re-checked on every
    /// change). Time moves only as the caller moves it.
    pub async fn wait_for(&self, f: impl Fn(&SimAgent) -> bool) {
        loop {
            let n = self.changed.notified();
            if f(self) {
                return;
            }
            n.await;
        }
    }

    fn record(&self, e: AgentEvent) {
        lock(&self.shared).events.push(e);
        self.changed.notify_waiters();
    }

    /// Opens a long-lived stream (a health Watch) on the current auth
    /// connection, standing for a session the agent is serving.
    pub fn open_auth_stream(&self, cluster: &SimCluster) -> Option<OpenStream> {
        let auth = self.auth();
        let addr = cluster
            .auth_servers()
            .into_iter()
            .find(|(n, _)| *n == auth)?
            .1;
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .ok()?
            .connect_lazy();
        let open = Arc::new(AtomicBool::new(true));
        let stop = self.stop.child_token();
        let (o, s) = (open.clone(), stop.clone());
        tokio::spawn(async move {
            let mut client = HealthClient::new(channel);
            if let Ok(resp) = client
                .watch(HealthCheckRequest {
                    service: String::new(),
                })
                .await
            {
                let mut stream = resp.into_inner();
                loop {
                    tokio::select! {
                        _ = s.cancelled() => break,
                        m = stream.message() => match m {
                            Ok(Some(_)) => {}
                            _ => break,
                        },
                    }
                }
            }
            o.store(false, Ordering::SeqCst);
        });
        Some(OpenStream { auth, open, stop })
    }

    fn report_msg(&self) -> pb::AgentMessage {
        let s = lock(&self.shared);
        pb::AgentMessage::tunnels(s.tunnels.iter().cloned().collect(), s.auth.clone())
    }

    async fn signals_loop(
        self,
        opts: AgentOptions,
        mut upstream: Upstream,
        cluster: Option<SimCluster>,
    ) {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(opts.seed);
        let mut attempt = 0u32;
        loop {
            let channel = upstream.current().clone();
            let (tx, rx) = mpsc::channel(16);
            let hello = match opts.sidecar {
                // Like lifeline-agent, it says how long its restart may
                // take before the ack: the restart and a margin.
                Some(restart) => pb::AgentMessage::hello_restart_only(
                    &self.name,
                    "sim-sidecar",
                    "simulated graceful restart",
                    false,
                    restart.saturating_add(std::time::Duration::from_secs(30)),
                ),
                None => pb::AgentMessage::hello(&self.name, "sim", opts.desired_tunnels),
            };
            let _ = tx.send(hello).await;
            let _ = tx.send(self.report_for(&opts)).await;
            let mut client = AgentSignalsClient::new(channel.clone());
            let resp = tokio::select! {
                _ = self.stop.cancelled() => return,
                r = client.connect(join_request(ReceiverStream::new(rx), &opts.join_token)) => r,
            };
            match resp {
                Ok(resp) => {
                    attempt = 0;
                    lock(&self.shared).connected = true;
                    self.record(AgentEvent::Connected);
                    let mut inbound = resp.into_inner();
                    let mut tick = tokio::time::interval(opts.check_every);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    loop {
                        tokio::select! {
                            _ = self.stop.cancelled() => return,
                            m = inbound.message() => match m {
                                Ok(Some(s)) => self.on_signal(s, &opts, &cluster, &tx).await,
                                Ok(None) => break,
                                Err(e) => {
                                    debug!(agent = %self.name, error = %e, "signal stream broke");
                                    break;
                                }
                            },
                            _ = tick.tick() => self.check(&cluster, &tx).await,
                            _ = self.report.notified() => {
                                let _ = tx.send(self.report_msg()).await;
                            }
                        }
                    }
                    lock(&self.shared).connected = false;
                    self.record(AgentEvent::Disconnected);
                }
                Err(e) => debug!(agent = %self.name, error = %e, "cannot open the signal stream"),
            }
            upstream.next();
            let d = wire::backoff(opts.backoff_base, opts.backoff_cap, attempt, &mut rng);
            attempt = attempt.saturating_add(1);
            tokio::select! {
                _ = self.stop.cancelled() => return,
                _ = tokio::time::sleep(d) => {}
            }
        }
    }
}
