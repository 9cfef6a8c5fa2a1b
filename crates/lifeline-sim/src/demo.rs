//! `lifeline demo`: the service plus a simulated cluster, over real gRPC on
//! loopback, with chaos in a loop. Nothing to configure.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tracing::info;

use crate::agent::LifelineAddr;
use crate::pki::Ca;
use crate::{chaos, write_private, AuthFlavor, SimAgent, SimCluster, SimSpec, TeleportSpec};
use lifeline::access;
use lifeline::app::{Lifeline, StartError, Tuning};
use lifeline::clock::Clock;
use lifeline::config::{AccessConfig, Config, NotifyConfig, Role, SourceKind, TokenConfig};
use lifeline::domain::LbPolicy;
use lifeline::telemetry::SpanCounters;

#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub listen: SocketAddr,
    pub grpc_listen: SocketAddr,
    pub agents: usize,
    pub proxies: usize,
    pub auth_servers: usize,
    pub ttl: Duration,
    /// None: no chaos.
    pub chaos_period: Option<Duration>,
    pub seed: u64,
    pub db: PathBuf,
    /// Share of simulated agents that ignore discovery TTLs.
    pub legacy_share: f64,
    pub auto_reconnect: bool,
    /// The API token (all roles) the dashboard signs in with.
    pub token: String,
    /// The counters of the trace exporter this process uses.
    pub spans: Arc<SpanCounters>,
    /// Which protocol the simulated cluster speaks: `ClusterEvents`, or
    /// Teleport's Auth API over mutual TLS (the identity file is written
    /// next to the database).
    pub source: SourceKind,
    /// Serve HTTP and gRPC over TLS with a throwaway CA made for this run
    /// (written beside the database); the simulated agents present client
    /// certificates it signed.
    pub tls: bool,
    /// With the Teleport source, the Teleport major version the simulated
    /// Auth plays: before 18 it serves no `grpc.health.v1`, starts its
    /// watch with an INIT that carries no WatchStatus, and refuses the
    /// whole watch for a kind its role cannot read.
    pub teleport_version: u32,
    /// Whom to tell (`[notify]` of `--config`): none by default.
    pub notify: NotifyConfig,
    /// `[access]` of `--config`: its tokens and settings, beside the
    /// demo's own token and its agents' join token.
    pub access: Option<AccessConfig>,
}

/// The first Teleport major version whose Auth serves `grpc.health.v1`.
pub const TELEPORT_HEALTH_SINCE: u32 = 18;

#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    #[error("cannot start the simulated cluster: {0}")]
    Sim(std::io::Error),
    #[error(transparent)]
    Start(#[from] StartError),
    #[error("cannot connect the simulated agents: {0}")]
    Agents(tonic::transport::Error),
    #[error("cannot make the demo's certificates: {0}")]
    Tls(String),
}

/// A running demo.
pub struct Demo {
    pub lifeline: Lifeline,
    pub sim: SimCluster,
    pub agents: Vec<SimAgent>,
    /// With `tls`: the throwaway CA's certificate, to trust.
    pub ca_file: Option<PathBuf>,
}

/// The demo's throwaway TLS: a CA, Lifeline's certificate for
/// `localhost` and 127.0.0.1, and the agents' client certificate.
struct DemoTls {
    ca_file: PathBuf,
    ca_pem: String,
    agent_cert: String,
    agent_key: String,
}

/// Where the demo writes its certificates: `<db>.tls/`.
pub fn tls_dir(db: &std::path::Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".tls");
    PathBuf::from(p)
}

fn demo_tls(cfg: &mut Config, db: &std::path::Path) -> Result<DemoTls, DemoError> {
    let err = |e: &dyn std::fmt::Display| DemoError::Tls(e.to_string());
    let dir = tls_dir(db);
    std::fs::create_dir_all(&dir).map_err(|e| err(&e))?;
    let ca = Ca::new("Lifeline demo CA (throwaway)").map_err(|e| err(&e))?;
    let server = ca
        .issue("lifeline demo", &["localhost"])
        .map_err(|e| err(&e))?;
    let agent = ca.issue("demo agent", &[]).map_err(|e| err(&e))?;
    let (ca_file, cert, key) = (dir.join("ca.pem"), dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&ca_file, ca.pem()).map_err(|e| err(&e))?;
    std::fs::write(&cert, &server.cert_pem).map_err(|e| err(&e))?;
    write_private(&key, &server.key_pem).map_err(|e| err(&e))?;
    cfg.server.tls_cert = Some(cert);
    cfg.server.tls_key = Some(key);
    cfg.server.agent_client_ca = Some(ca_file.clone());
    Ok(DemoTls {
        ca_file,
        ca_pem: ca.pem().to_string(),
        agent_cert: agent.cert_pem,
        agent_key: agent.key_pem,
    })
}

/// Points `cfg` at `sim`: its `ClusterEvents` URI (over TLS, trusting
/// the CA it writes beside `identity`), or, when it plays Teleport, its
/// Auth address with an identity file it writes at `identity`. The demo, the tests and the benchmarks all watch a
/// simulator this way.
/// With `--source teleport`: the share of hosts that run a sidecar, and
/// how long a simulated graceful restart takes.
pub const SIDECAR_SHARE: f64 = 0.5;
pub const SIDECAR_RESTART: Duration = Duration::from_secs(3);

pub fn watch_sim(
    cfg: &mut Config,
    sim: &SimCluster,
    identity: &std::path::Path,
) -> std::io::Result<()> {
    if sim.spec().teleport.is_none() {
        cfg.cluster.addr = sim.uri();
        if let Some(pki) = sim.pki().filter(|_| sim.spec().tls) {
            let mut ca = identity.as_os_str().to_owned();
            ca.push(".ca.pem");
            std::fs::write(&ca, pki.ca_pem())?;
            cfg.cluster.ca_file = Some(PathBuf::from(ca));
        }
        return Ok(());
    }
    sim.write_identity(identity)?;
    cfg.cluster.source = SourceKind::Teleport;
    cfg.cluster.addr = sim.addr().to_string();
    cfg.cluster.identity_file = Some(identity.to_path_buf());
    Ok(())
}

/// Where the demo writes the simulated cluster's identity file.
pub fn identity_path(db: &std::path::Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push(".identity");
    PathBuf::from(p)
}

impl Demo {
    pub async fn start(o: &DemoOptions, clock: Clock) -> Result<Demo, DemoError> {
        let older = o.source == SourceKind::Teleport && o.teleport_version < TELEPORT_HEALTH_SINCE;
        let sim = SimCluster::start(
            SimSpec {
                agents: o.agents,
                proxies: o.proxies,
                auth_servers: o.auth_servers,
                ttl: o.ttl,
                agent_ttl: o.ttl,
                seed: o.seed,
                // Fresh per run: nothing outside this process can join.
                join_token: access::generate(),
                teleport: (o.source == SourceKind::Teleport).then(|| TeleportSpec {
                    // Registered OpenSSH hosts: counted, not agents.
                    agentless_nodes: 2,
                    whole_watch_denied: older,
                    // Machine ID's renewal, quickened: a 15-minute
                    // certificate written every 5 minutes.
                    identity_renewal: Some((Duration::from_secs(300), Duration::from_secs(900))),
                    ..TeleportSpec::default()
                }),
                auth_flavor: if older {
                    AuthFlavor::NoHealth
                } else {
                    AuthFlavor::Standard
                },
                legacy_init: older,
                ..SimSpec::default()
            },
            clock,
        )
        .await
        .map_err(DemoError::Sim)?;
        let mut cfg = Config::default();
        cfg.server.listen = o.listen;
        cfg.server.grpc_listen = o.grpc_listen;
        watch_sim(&mut cfg, &sim, &identity_path(&o.db)).map_err(DemoError::Sim)?;
        // The simulator's GetInstances answers at once; poll it often.
        cfg.cluster.instances_poll = o.ttl.min(Duration::from_secs(10));
        cfg.storage.path = o.db.clone();
        // Demo TTLs are short; so is the grace for an unknown auth server.
        cfg.health.unknown_grace = o.ttl.min(Duration::from_secs(30));
        // Agents follow teleport_pick_healthy in reconnect mode: they move
        // off a NOT_SERVING auth server by themselves.
        cfg.signals.grpc_client_lb_policy = LbPolicy::reconnect().to_json();
        cfg.signals.auto_reconnect = o.auto_reconnect;
        if let Some(a) = &o.access {
            cfg.access = a.clone();
        }
        cfg.access
            .join_tokens
            .push(access::hash_hex(&sim.spec().join_token).into());
        cfg.access.tokens.push(TokenConfig {
            name: "demo".into(),
            sha256: access::hash_hex(&o.token),
            roles: Role::ALL.to_vec(),
        });
        cfg.notify = o.notify.clone();
        let tls = if o.tls {
            Some(demo_tls(&mut cfg, &o.db)?)
        } else {
            None
        };
        let tuning = Tuning {
            spans: o.spans.clone(),
            ..Tuning::default()
        };
        let lifeline = Lifeline::start_tuned(&cfg, clock, tuning).await?;
        let to = match &tls {
            Some(t) => LifelineAddr::tls(
                lifeline.grpc_addr,
                &t.ca_pem,
                Some((&t.agent_cert, &t.agent_key)),
            ),
            None => lifeline.grpc_addr.into(),
        };
        let stop = lifeline.shutdown_token();
        // Teleport's agents speak no AgentSignals: on a Teleport cluster
        // only some hosts' sidecars hold a stream, and act by restarting.
        let agents = match o.source {
            SourceKind::Teleport => {
                SimAgent::start_sidecars(&sim, to, SIDECAR_SHARE, SIDECAR_RESTART, &stop).await
            }
            SourceKind::Lifeline => {
                SimAgent::start_for_cluster(&sim, to, o.legacy_share, 100, &stop).await
            }
        }
        .map_err(DemoError::Agents)?;
        if let Some(period) = o.chaos_period {
            tokio::spawn(chaos::run(sim.clone(), period, lifeline.shutdown_token()));
        }
        Ok(Demo {
            lifeline,
            sim,
            agents,
            ca_file: tls.map(|t| t.ca_file),
        })
    }

    pub async fn shutdown(self) {
        for a in &self.agents {
            a.stop();
        }
        self.lifeline.shutdown().await;
        self.sim.shutdown();
        info!("demo stopped");
    }
}
