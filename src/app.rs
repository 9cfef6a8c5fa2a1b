//! Starts and stops one Lifeline: store → fleet → HTTP and gRPC listeners →
//! ingest. Used by `lifeline serve`, `lifeline demo`, the tests and the
//! benchmarks alike, so they all run the same thing.

mod error;
pub mod fds;
pub mod memory;
mod running;
mod tuning;

pub use error::StartError;
pub use running::Lifeline;
pub use tuning::Tuning;

use std::sync::Arc;

use tracing::info;

use crate::access::Access;
use crate::clock::Clock;
use crate::config::Config;
use crate::fleet::{self, board::Board};
use crate::http;
use crate::ingest::connect::Dialers;
use crate::replica;
use crate::settings::Settings;
use crate::signals::dispatch::Dispatch;
use crate::signals::{self, hub::Hub, hub::HubConfig, reconnect};
use crate::stats::Stats;
use crate::store::health::StoreHealth;
use crate::store::{self, StoreError};
use crate::supervise::Runtime;
use crate::tls;
use error::bind;

impl Lifeline {
    pub async fn start(cfg: &Config, clock: Clock) -> Result<Lifeline, StartError> {
        Self::start_tuned(cfg, clock, Tuning::default()).await
    }

    /// Builds every room in the order of the data flow, each from the
    /// shared runtime: the store, the fleet, the hub, the replicas, the
    /// automatic signals, the listeners, then ingest. A start that fails
    /// part way stops what it had started, as on shutdown: its tasks end
    /// with the shutdown token already cancelled, so none is reported as
    /// a failure after the cause was told.
    pub async fn start_tuned(
        cfg: &Config,
        clock: Clock,
        tuning: Tuning,
    ) -> Result<Lifeline, StartError> {
        let shutdown = tokio_util::sync::CancellationToken::new();
        let started = Self::start_under(cfg, clock, tuning, shutdown.clone()).await;
        if started.is_err() {
            shutdown.cancel();
        }
        started
    }

    async fn start_under(
        cfg: &Config,
        clock: Clock,
        tuning: Tuning,
        shutdown: tokio_util::sync::CancellationToken,
    ) -> Result<Lifeline, StartError> {
        cfg.validate()?;
        let engine = cfg.storage.engine()?;
        let (cfg, descriptors) = &fds::planned(cfg, store::descriptors(&engine));
        let mut rt = Runtime::under(clock, Arc::new(Stats::default()), shutdown);
        let _ = rt.stats.descriptors.set(descriptors.clone());
        // Identity and CA files first: a bad one stops start-up before
        // anything listens.
        let dialers = Dialers::for_cluster(&cfg.cluster, clock.now(), &rt.stats)?;
        let server_tls = tls::ServerTls::start(&cfg.server, &mut rt)?;
        let db = store::open(&engine, tuning.waits).await?;
        let cluster = cfg.cluster.cluster();
        let adopted = store::clusters::adopt(&db, &cluster)
            .await
            .map_err(StoreError::Query)?;
        if adopted > 0 {
            info!(%cluster, rows = adopted, "rows stored before clusters were named are now this cluster's");
        }
        let loaded = store::read::load(&db, &cluster)
            .await
            .map_err(StoreError::Query)?;
        let settings = Arc::new(Settings::start(db.clone(), cfg, clock).await?);
        let store_health = Arc::new(StoreHealth::default());
        let writer =
            store::writer::start(&db, &cluster, &store_health, tuning.writer_depth, &mut rt);
        let (http_listener, http_addr) = bind("HTTP", cfg.server.listen).await?;
        let (grpc_listener, grpc_addr) = bind("gRPC", cfg.server.grpc_listen).await?;
        let admin = match cfg.server.admin_listen {
            Some(a) => Some(bind("admin", a).await?),
            None => None,
        };
        let admin_addr = admin.as_ref().map(|(_, a)| *a);
        let replica = replica::ReplicaConfig::new(cfg, http_addr, grpc_addr);
        // Alone on SQLite it always leads; among replicas it follows until
        // the lease says otherwise.
        let standing = replica::Standing::new(&db, &replica.name, replica.lease, clock);
        let leadership = standing.leadership.clone();
        // Its files are read now: a bad one stops start-up before ingest.
        crate::notify::start(cfg, &db, leadership.clone(), &mut rt)?;
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
        let maintenance = crate::maintenance::Maintenance::start(
            db.clone(),
            fleet.clone(),
            leadership.clone(),
            &mut rt,
        )
        .await;
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
            maintenance: maintenance.clone(),
        };
        let departure = standing.start(replica, rooms, &mut rt).await?;
        let keys = match &cfg.access.session_secret_file {
            Some(path) => crate::access::SigningKeys::from_secret_file(path)?,
            None => crate::access::SigningKeys {
                session: store::keys::shared_key(&db, "session", clock.now()).await?,
                csrf: store::keys::shared_key(&db, "csrf", clock.now()).await?,
            },
        };
        let access = Access::start(&cfg.access, clock, &keys)?;
        let restarts = cfg.signals.max_restarts_in_flight;
        let dispatch = Dispatch::new(
            hub.clone(),
            fleet.clone(),
            access.clone(),
            rt.stats.clone(),
            restarts,
        );
        reconnect::start(&cfg.signals, &dispatch, &fleet, &mut rt);
        crate::notify::tell_pauses(
            &db,
            leadership.clone(),
            dispatch.guard().subscribe(),
            &mut rt,
        );
        let rooms = http::Rooms {
            fleet: fleet.clone(),
            db: db.clone(),
            dispatch: dispatch.clone(),
            access: access.clone(),
            settings: settings.clone(),
            store_health: store_health.clone(),
            spans: tuning.spans.clone(),
            maintenance,
            keys,
        };
        http::start(
            cfg,
            (http_listener, http_addr),
            admin,
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
        crate::ingest::start(cfg, dialers, &fleet, &mut rt)?;
        let policy = move || live.retention_policy();
        let prune_every = cfg.storage.prune_interval;
        store::retention::start(&db, leadership.clone(), policy, prune_every, &mut rt);
        rt.spawn_upkeep();
        info!(%http_addr, %grpc_addr, admin_addr = ?admin_addr, cluster = %cfg.cluster.addr, db = %engine, engine = engine.name(), "Lifeline started");
        Ok(Lifeline {
            http_addr,
            grpc_addr,
            admin_addr,
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
            reread: rt.reread,
        })
    }
}
