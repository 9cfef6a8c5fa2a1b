//! A running Lifeline: the handles of its rooms, and how it stops.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::clock::Clock;
use crate::fleet::FleetHandle;
use crate::replica;
use crate::settings::Settings;
use crate::signals::dispatch::Dispatch;
use crate::signals::hub::Hub;
use crate::stats::Stats;
use crate::store::health::StoreHealth;
use crate::store::{Db, Leadership};
use crate::supervise::{FailureWatch, Tasks};

/// A running Lifeline.
pub struct Lifeline {
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    /// The admin listener's (`server.admin_listen`): probes and metrics.
    pub admin_addr: Option<SocketAddr>,
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
    pub(super) departure: Option<replica::Departure>,
    pub(super) shutdown: CancellationToken,
    pub(super) tasks: Tasks,
    pub(super) reread: Arc<watch::Sender<u64>>,
}

impl Lifeline {
    /// `http://` or `https://` and the HTTP address.
    pub fn base_url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.http_addr)
    }

    /// Reads the TLS certificate and the cluster identity again now, as
    /// their watches do every few seconds anyway (`SIGHUP`, systemd's
    /// `ExecReload`). A file that changed and is wrong is refused and
    /// logged; the previous one stays in use.
    pub fn reread_files(&self) {
        self.reread.send_modify(|n| *n = n.wrapping_add(1));
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
