//! Starts and stops one Lifeline: store → fleet → HTTP and gRPC listeners →
//! ingest. Used by `lifeline serve`, `lifeline demo`, the tests and the
//! benchmarks alike, so they all run the same thing.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::access::Access;
use crate::clock::Clock;
use crate::config::{Config, ConfigError};
use crate::fleet::{self, board::Board, FleetHandle};
use crate::http;
use crate::ingest::connect::{Dialers, DialersError};
use crate::replica;
use crate::settings::{Settings, SettingsError};
use crate::signals::dispatch::Dispatch;
use crate::signals::{self, hub::Hub, hub::HubConfig, reconnect};
use crate::stats::Stats;
use crate::store::health::StoreHealth;
use crate::store::{self, Db, Leadership, StoreError};
use crate::supervise::{FailureWatch, Runtime, Tasks};
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
    /// The one door of every signal.
    pub dispatch: Arc<Dispatch>,
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

    /// Builds every room in the order of the data flow, each from the
    /// shared runtime: the store, the fleet, the hub, the replicas, the
    /// automatic signals, the listeners, then ingest.
    pub async fn start_tuned(
        cfg: &Config,
        clock: Clock,
        tuning: Tuning,
    ) -> Result<Lifeline, StartError> {
        cfg.validate()?;
        let mut rt = Runtime::new(clock, Arc::new(Stats::default()));
        // Identity and CA files first: a bad one stops start-up before
        // anything listens.
        let dialers = Dialers::for_cluster(&cfg.cluster, clock.now(), &rt.stats)?;
        let server_tls = tls::ServerTls::load(&cfg.server, clock.now(), rt.stats.clone())?;
        let engine = cfg.storage.engine()?;
        let db = store::open(&engine, tuning.acquire_timeout).await?;
        let loaded = store::read::load(&db).await.map_err(StoreError::Query)?;
        let settings = Arc::new(Settings::start(db.clone(), cfg, clock).await?);
        let store_health = Arc::new(StoreHealth::default());
        let writer = store::writer::start(&db, &store_health, tuning.writer_depth, &mut rt);
        let (http_listener, http_addr) = bind("HTTP", cfg.server.listen).await?;
        let (grpc_listener, grpc_addr) = bind("gRPC", cfg.server.grpc_listen).await?;
        let replica = replica::ReplicaConfig::new(cfg, http_addr, grpc_addr);
        // Alone on SQLite it always leads; among replicas it follows until
        // the lease says otherwise.
        let standing = replica::Standing::new(&db, &replica.name, replica.lease, clock);
        let leadership = standing.leadership.clone();
        let board = Board::new(cfg.signals.discovery_backlog, clock.now());
        let fence = standing.fence.clone();
        let fleet = fleet::start(
            cfg,
            tuning.change_capacity,
            board.clone(),
            fence,
            loaded,
            writer,
            &mut rt,
        );
        let hub_cfg = HubConfig::new(&cfg.signals, standing.peers.clone(), leadership.clone());
        let live = settings.live();
        let hub = Hub::start(
            hub_cfg,
            live.clone(),
            board,
            fleet.clone(),
            db.clone(),
            store_health.clone(),
            &mut rt,
        )
        .await
        .map_err(StoreError::Query)?;
        let rooms = replica::Rooms {
            db: db.clone(),
            fleet: fleet.clone(),
            hub: hub.clone(),
            settings: settings.clone(),
            stats: rt.stats.clone(),
            clock,
        };
        let departure = standing.start(replica, rooms, &mut rt).await?;
        let access = Access::start(&cfg.access, clock);
        let dispatch = Dispatch::new(hub.clone(), fleet.clone(), access.clone(), rt.stats.clone());
        reconnect::start(&cfg.signals, &dispatch, &fleet, &mut rt);
        let rooms = http::Rooms {
            fleet: fleet.clone(),
            db: db.clone(),
            dispatch: dispatch.clone(),
            access: access.clone(),
            settings: settings.clone(),
            store_health: store_health.clone(),
            spans: tuning.spans.clone(),
        };
        http::start(
            cfg,
            http_listener,
            http_addr,
            server_tls.as_ref(),
            rooms,
            &mut rt,
        );
        let lb_policy = settings.lb_policy();
        signals::serve::start(
            &cfg.server,
            grpc_listener,
            server_tls.as_ref(),
            &hub,
            access,
            lb_policy,
            &mut rt,
        )
        .await;
        if let Some(t) = &server_tls {
            let reload =
                t.certs
                    .spawn_watch(cfg.server.tls_reload_interval, clock, rt.shutdown.clone());
            rt.tasks.track("tls reload", reload);
        }
        crate::ingest::start(cfg, dialers, &fleet, &mut rt)?;
        let policy = move || live.retention_policy();
        store::retention::start(
            &db,
            leadership.clone(),
            policy,
            cfg.storage.prune_interval,
            &mut rt,
        );
        rt.spawn_upkeep();
        info!(%http_addr, %grpc_addr, cluster = %cfg.cluster.addr, db = %engine, engine = engine.name(), "Lifeline started");
        Ok(Lifeline {
            http_addr,
            grpc_addr,
            tls: cfg.server.tls(),
            fleet,
            db,
            stats: rt.stats,
            clock,
            settings,
            hub,
            dispatch,
            store_health,
            leadership,
            departure,
            shutdown: rt.shutdown,
            tasks: rt.tasks,
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
