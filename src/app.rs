//! Starts and stops one Lifeline: store → fleet → HTTP and gRPC listeners →
//! ingest. Used by `lifeline serve`, `lifeline demo`, the tests and the
//! benchmarks alike, so they all run the same thing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::store::Db;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::service::interceptor::InterceptedService;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::{info, info_span, warn, Instrument, Level};

use crate::access::Access;
use crate::clock::Clock;
use crate::config::{Config, ConfigError};
use crate::fleet::board::Board;
use crate::fleet::FleetHandle;
use crate::fleet::Rules;
use crate::fleet::{self, FleetOptions};
use crate::http::{self, AppState};
use crate::ingest::connect::{Dialers, DialersError};
use crate::ingest::teleport::renew;
use crate::replica;
use crate::settings::{Settings, SettingsError};
use crate::signals::hub::{Hub, HubConfig};
use crate::signals::reconnect::{self, Guard, ReconnectConfig};
use crate::signals::service_config;
use crate::stats::Stats;
use crate::store::health::StoreHealth;
use crate::store::writer::WriterOptions;
use crate::store::{self, Leadership, StoreError};
use crate::supervise::{FailureWatch, Tasks};
use crate::telemetry::SpanCounters;
use crate::tls;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("cannot load the dynamic settings: {0}")]
    Settings(#[from] SettingsError),
    #[error(transparent)]
    Dialers(#[from] DialersError),
    #[error("cannot listen for {what} on {addr}: {source}")]
    Bind {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl StartError {
    /// The configuration (or a file it names) is at fault, not the
    /// machine: the caller exits with EX_CONFIG.
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            StartError::Config(_)
                | StartError::Dialers(_)
                | StartError::Store(StoreError::ReplicaNameTaken { .. })
        )
    }
}

/// A running Lifeline.
pub struct Lifeline {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// Both listeners serve TLS (`server.tls_cert`).
    pub tls: bool,
    pub fleet: FleetHandle,
    pub db: Db,
    pub stats: Arc<Stats>,
    pub clock: Clock,
    /// The dynamic settings (RFD 0016); changes apply at once.
    pub settings: Arc<Settings>,
    /// Agent streams and audited signals.
    pub hub: Arc<Hub>,
    /// The storm guard's current state.
    pub guard: tokio::sync::watch::Receiver<Guard>,
    /// Whether the store takes writes.
    pub store_health: Arc<StoreHealth>,
    /// Who leads (always this process, alone on SQLite).
    pub leadership: watch::Receiver<Leadership>,
    departure: Option<replica::Departure>,
    shutdown: CancellationToken,
    tasks: Tasks,
}

/// Knobs that tests and benches set beyond the config file.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// Capacity of the state-change broadcast.
    pub change_capacity: usize,
    /// Batches that may wait for the store writer.
    pub writer_depth: usize,
    /// How long anyone waits for a database connection. On a paused test
    /// clock a real thread's few milliseconds can span seconds of virtual
    /// time, so tests lengthen it.
    pub acquire_timeout: Duration,
    /// The counters of the trace exporter this process sends spans
    /// through (all zero when it exports none); `/metrics` shows them.
    pub spans: Arc<SpanCounters>,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            change_capacity: 4096,
            writer_depth: 4,
            acquire_timeout: store::ACQUIRE_TIMEOUT,
            spans: Arc::default(),
        }
    }
}

/// A listener on `addr`, and the address it got (the port, when `addr`
/// asked for any).
async fn bind(
    what: &'static str,
    addr: SocketAddr,
) -> Result<(TcpListener, SocketAddr), StartError> {
    let err = |source| StartError::Bind { what, addr, source };
    let listener = TcpListener::bind(addr).await.map_err(err)?;
    let local = listener.local_addr().map_err(err)?;
    Ok((listener, local))
}

impl Lifeline {
    pub async fn start(cfg: &Config, clock: Clock) -> Result<Lifeline, StartError> {
        Self::start_tuned(cfg, clock, Tuning::default()).await
    }

    pub async fn start_tuned(
        cfg: &Config,
        clock: Clock,
        tuning: Tuning,
    ) -> Result<Lifeline, StartError> {
        cfg.validate()?;
        let stats = Arc::new(Stats::default());
        // Identity and CA files first: a bad one stops start-up before
        // anything listens.
        let mut dialers = Dialers::for_cluster(&cfg.cluster, clock.now(), &stats)?;
        let renewal = dialers.renewal.take();
        let server_tls = crate::tls::ServerTls::load(&cfg.server, clock.now(), stats.clone())?;
        let engine = cfg.storage.engine()?;
        let db = store::open(&engine, tuning.acquire_timeout).await?;
        let loaded = store::read::load(&db).await.map_err(StoreError::Query)?;
        let settings = Arc::new(Settings::start(db.clone(), cfg, clock).await?);
        let shutdown = CancellationToken::new();
        let store_health = Arc::new(StoreHealth::default());
        let (writer, writer_run) = store::writer::writer(
            db.clone(),
            WriterOptions {
                stats: stats.clone(),
                health: store_health.clone(),
                clock,
                depth: tuning.writer_depth,
                stop: shutdown.clone(),
            },
        );
        let writer_task = tokio::spawn(writer_run.instrument(info_span!("store.writer")));
        let mut supervised = Tasks::new(shutdown.clone());
        if let Some(r) = renewal {
            supervised.track(
                "identity renewal",
                tokio::spawn(
                    renew::watch(r, clock, stats.clone(), shutdown.clone())
                        .instrument(info_span!("identity.watch")),
                ),
            );
        }
        let (http_listener, http_addr) = bind("HTTP", cfg.server.listen).await?;
        let (grpc_listener, grpc_addr) = bind("gRPC", cfg.server.grpc_listen).await?;
        let replica_name = cfg
            .storage
            .replica
            .clone()
            .unwrap_or_else(|| default_replica_name(http_addr));
        // Alone on SQLite it always leads; among replicas it follows until
        // the lease says otherwise.
        let standing = replica::Standing::new(&db, &replica_name, cfg.storage.leader_lease, clock);
        let board = Board::new(cfg.signals.discovery_backlog, clock.now());
        let static_auth: Vec<(String, String)> = cfg
            .auth_servers
            .iter()
            .map(|a| (a.name.clone(), a.addr.clone()))
            .collect();
        let (fleet, fleet_task) = fleet::spawn(
            FleetOptions {
                clock,
                rules: Rules {
                    unknown_grace: cfg.health.unknown_grace,
                    max_pending_events: cfg.storage.max_pending_events,
                },
                command_queue: cfg.fleet.command_queue,
                change_capacity: tuning.change_capacity,
                static_auth: static_auth.clone(),
                board: board.clone(),
                fence: standing.fence.clone(),
            },
            loaded,
            stats.clone(),
            writer,
            shutdown.clone(),
        );

        let (hub, hub_tasks) = Hub::start(
            HubConfig::new(
                &cfg.signals,
                standing.relay.clone(),
                standing.leadership.clone(),
            ),
            settings.live(),
            clock,
            board,
            fleet.clone(),
            db.clone(),
            stats.clone(),
            store_health.clone(),
            shutdown.clone(),
        )
        .await
        .map_err(StoreError::Query)?;
        for t in hub_tasks {
            supervised.critical("hub", t);
        }
        let leadership = standing.leadership.clone();
        let departure = standing
            .start(
                replica::ReplicaConfig {
                    name: replica_name.clone(),
                    lease: cfg.storage.leader_lease,
                    http_addr: http_addr.to_string(),
                    grpc_addr: grpc_addr.to_string(),
                    ack_timeout: cfg.signals.ack_timeout,
                },
                replica::Rooms {
                    db: db.clone(),
                    fleet: fleet.clone(),
                    hub: hub.clone(),
                    settings: settings.clone(),
                    stats: stats.clone(),
                    clock,
                },
                shutdown.clone(),
            )
            .await?
            .map(|(tasks, departure)| {
                for t in tasks {
                    supervised.critical("replica", t);
                }
                departure
            });
        let (guard, more) = reconnect::spawn(
            ReconnectConfig::from(&cfg.signals),
            hub.clone(),
            fleet.clone(),
            clock,
            shutdown.clone(),
        );
        for t in more {
            supervised.track("reconnect loops", t);
        }

        let access = Arc::new(Access::new(&cfg.access, clock));
        if !access.has_tokens() {
            warn!(
                "no API tokens configured ([[access.tokens]]): the API and dashboard are read-only"
            );
        }
        if cfg.access.join_tokens.is_empty() {
            warn!(
                "no join tokens configured (access.join_tokens): no agent can connect for signals"
            );
        }
        let state = AppState {
            fleet: fleet.with_read_timeout(http::error::READ_TIMEOUT),
            ui: Arc::new(http::ui::UiShared::new(
                cfg.server.max_live_streams,
                cfg.server.max_live_streams_per_ip,
            )),
            access: access.clone(),
            settings: settings.clone(),
            probes: Arc::new(cfg.probes.clone()),
            http_close_unhealthy: cfg.server.http_close_unhealthy,
            max_body_bytes: cfg.server.max_body_bytes,
            shutdown: shutdown.clone(),
            db: db.clone(),
            stats: stats.clone(),
            hub: hub.clone(),
            guard: guard.clone(),
            failure: supervised.failure(),
            store_health: store_health.clone(),
            spans: tuning.spans.clone(),
            tls: server_tls.is_some(),
        };
        supervised.track("live overview", http::ui::live::spawn(state.clone()));
        let router = http::router(state);
        let http_task = tls::serve::http(
            http_listener,
            http_addr,
            server_tls.as_ref(),
            router,
            stats.clone(),
            shutdown.clone(),
        );
        supervised.critical("http server", http_task);
        if let Some(t) = &server_tls {
            supervised.track(
                "tls reload",
                t.certs
                    .spawn_watch(cfg.server.tls_reload_interval, clock, shutdown.clone()),
            );
        }

        let lb_policy_rx = settings.lb_policy();
        let (reporter, health_service) = tonic_health::server::health_reporter();
        // The service shares the statuses: SERVING stays after the
        // reporter is gone.
        reporter
            .set_service_status("", tonic_health::ServingStatus::Serving)
            .await;
        let grpc_hub = hub.clone();
        let client_cert = server_tls.as_ref().is_some_and(|t| t.agent_client_ca);
        let grpc_router = tonic::transport::Server::builder()
            // A connection gone silent is found and closed, so the agents'
            // streams on it end and their names are free again.
            .http2_keepalive_interval(cfg.server.grpc_keepalive)
            .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
            .max_concurrent_streams(GRPC_MAX_STREAMS_PER_CONNECTION)
            .layer(
                TraceLayer::new_for_grpc()
                    .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                    .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                    .on_failure(DefaultOnFailure::new().level(Level::DEBUG)),
            )
            .add_service(health_service)
            .add_service(service_config::Service::server(lb_policy_rx))
            .add_service(InterceptedService::new(
                grpc_hub.server(),
                crate::access::join_check(access, client_cert, stats.clone()),
            ));
        let grpc_task = tls::serve::grpc(
            grpc_listener,
            server_tls.as_ref(),
            grpc_router,
            cfg.server.grpc_max_connections,
            stats.clone(),
            shutdown.clone(),
        );
        supervised.critical("grpc server", grpc_task);

        let (watcher_task, health_task) =
            crate::ingest::start(cfg, dialers, static_auth, clock, &fleet, &stats, &shutdown)?;
        supervised.critical("watcher", watcher_task);
        supervised.critical("health watcher", health_task);
        supervised.track(
            "histogram upkeep",
            Stats::spawn_upkeep(stats.clone(), shutdown.clone()),
        );
        supervised.track(
            "clock steps",
            tokio::spawn(crate::clock::watch_steps(clock, shutdown.clone())),
        );
        supervised.track(
            "retention",
            tokio::spawn(store::retention::run(
                db.clone(),
                clock,
                leadership.clone(),
                {
                    let live = settings.live();
                    move || store::retention::Retention {
                        history: live.retention(),
                        audit: live.audit_retention(),
                    }
                },
                cfg.storage.prune_interval,
                shutdown.clone(),
            )),
        );

        // Joined last at shutdown: the fleet hands over its last writes, then
        // the writer drains them.
        supervised.critical("fleet", fleet_task);
        supervised.critical("store writer", writer_task);
        info!(%http_addr, %grpc_addr, cluster = %cfg.cluster.addr, db = %engine, engine = engine.name(), "Lifeline started");
        Ok(Lifeline {
            http_addr,
            grpc_addr,
            tls: cfg.server.tls(),
            fleet,
            db,
            stats,
            clock,
            settings,
            hub,
            guard,
            store_health,
            leadership,
            departure,
            shutdown,
            tasks: supervised,
        })
    }

    /// `http://` or `https://` and the HTTP address.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.http_addr)
    }

    /// A token that fires when Lifeline is shutting down.
    pub fn shutdown_token(&self) -> CancellationToken {
        self.shutdown.clone()
    }

    /// Resolves when a critical task stopped: the caller shuts down and
    /// exits non-zero.
    pub fn failed(&self) -> FailureWatch {
        self.tasks.failure()
    }

    /// Stops everything and commits the last writes.
    pub async fn shutdown(self) {
        self.shutdown.cancel();
        self.tasks.join().await;
        if let Some(d) = self.departure {
            d.leave().await;
        }
        self.db.close().await;
        info!("Lifeline stopped");
    }
}

/// `<hostname>:<HTTP port>`: what a replica is called unless named.
fn default_replica_name(http: SocketAddr) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty() && !h.contains(char::is_whitespace))
        .unwrap_or_else(|| "lifeline".into());
    let mut name = format!("{host}:{}", http.port());
    name.truncate(crate::config::MAX_REPLICA_NAME);
    name
}

/// Most streams one HTTP/2 connection may hold open: far above what one
/// agent needs (its signal stream, a health watch, a config call), and
/// room for a stream-balancing proxy that carries many agents on one
/// connection, while no single peer can open streams without end.
const GRPC_MAX_STREAMS_PER_CONNECTION: u32 = 1000;

/// How long a gRPC keepalive ping may go unanswered.
const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
