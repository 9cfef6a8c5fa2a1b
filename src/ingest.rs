//! The ingest room: Lifeline's two upstream subscriptions.
//!
//! Owns: the `ClusterEvents.WatchEvents` client (generations, resyncs,
//! reconnect backoff) and one `grpc.health.v1.Health/Watch` client per auth
//! server. Validates every input (`validate`) and sends changes to the fleet
//! over its bounded channel (backpressure reaches the upstream through HTTP/2
//! flow control). Builds itself from the config ([`start`]; its dialers in
//! [`connect`]). Must not touch: fleet state or SQLite.

pub mod connect;
pub mod dial;
pub mod health;
pub mod teleport;
pub mod upgrade;
pub mod validate;
pub mod watcher;

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::config::{Config, ConfigError, SourceKind};
use crate::fleet::FleetHandle;
use crate::model::Kind;
use crate::stats::Stats;
use teleport::source::{Teleport, TeleportConfig};
use validate::Limits;

/// Starts the room from the config: the source's watcher (`lifeline` or
/// `teleport`, as `[cluster]` says, dialling through `dialers`) and the
/// auth servers' health watch (the `static_auth` ones and those the fleet
/// announces). Returns both tasks, for the caller to supervise.
#[allow(clippy::too_many_arguments)] // the shared runtime, passed in
pub fn start(
    cfg: &Config,
    dialers: connect::Dialers,
    static_auth: Vec<(String, String)>,
    clock: Clock,
    fleet: &FleetHandle,
    stats: &Arc<Stats>,
    shutdown: &CancellationToken,
) -> Result<(JoinHandle<()>, JoinHandle<()>), ConfigError> {
    let limits = Limits {
        default_ttl: cfg.fleet.default_ttl,
        max_expired_age: cfg.fleet.max_expired_age,
        max_ttl: cfg.fleet.max_ttl,
    };
    let backoff = Backoff::new(cfg.cluster.backoff_base, cfg.cluster.backoff_cap);
    let watcher_task = match cfg.cluster.source {
        SourceKind::Lifeline => {
            let wcfg = watcher::WatcherConfig {
                uri: cfg.cluster_uri()?,
                dialer: dialers.source,
                watcher_name: cfg.cluster.watcher_name.clone(),
                kinds: Kind::ALL.to_vec(),
                page_size: cfg.cluster.page_size,
                max_message_bytes: cfg.cluster.max_message_bytes,
                connect_timeout: cfg.cluster.connect_timeout,
                limits,
                ingest_span_every: cfg.telemetry.ingest_span_every,
            };
            let source = watcher::Lifeline {
                cfg: wcfg,
                clock,
                fleet: fleet.clone(),
                stats: stats.clone(),
            };
            tokio::spawn(watcher::run(
                source,
                backoff,
                fleet.clone(),
                stats.clone(),
                shutdown.clone(),
            ))
        }
        SourceKind::Teleport => {
            let tcfg = TeleportConfig {
                addr: cfg.cluster.addr.clone(),
                dialer: dialers.source,
                agent_kinds: cfg.cluster.agent_kinds.clone(),
                page_size: cfg.cluster.page_size,
                max_message_bytes: cfg.cluster.max_message_bytes,
                connect_timeout: cfg.cluster.connect_timeout,
                instances_poll: cfg.cluster.instances_poll,
                limits,
            };
            let source = Teleport::new(tcfg, clock, fleet.clone(), stats.clone());
            tokio::spawn(watcher::run(
                source,
                backoff,
                fleet.clone(),
                stats.clone(),
                shutdown.clone(),
            ))
        }
    };
    let hcfg = health::HealthWatchConfig {
        dialer: dialers.health,
        service: cfg.health.service.clone(),
        timeout: cfg.health.timeout,
        poll_interval: cfg.health.poll_interval,
        backoff: Backoff::new(cfg.health.backoff_base, cfg.health.backoff_cap),
    };
    let health_task = tokio::spawn(health::run(
        hcfg,
        static_auth,
        fleet.auth_targets(),
        fleet.clone(),
        stats.clone(),
        shutdown.clone(),
    ));
    Ok((watcher_task, health_task))
}
