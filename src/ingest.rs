//! The ingest room: Lifeline's two upstream subscriptions.
//!
//! Owns: the `ClusterEvents.WatchEvents` client (generations, resyncs,
//! reconnect backoff) and one `grpc.health.v1.Health/Watch` client per auth
//! server. Validates every input (`validate`) and sends changes to the fleet
//! over its bounded channel (backpressure reaches the upstream through HTTP/2
//! flow control). Builds itself from the config ([`start`]; its dialers in
//! [`connect`]). Must not touch: fleet state or SQLite.

pub mod cluster_events;
pub mod connect;
pub mod dial;
pub mod health;
pub mod session;
pub mod teleport;
pub mod upgrade;
pub mod validate;
pub mod watcher;

use crate::backoff::Backoff;
use crate::config::{Config, ConfigError, SourceKind};
use crate::domain::Kind;
use crate::fleet::FleetHandle;
use crate::supervise::Runtime;
use teleport::source::{Teleport, TeleportConfig};
use tracing::{info_span, Instrument};
use validate::Limits;

/// Starts the room from the config on `rt`: the source's watcher
/// (`lifeline` or `teleport`, as `[cluster]` says, dialling through
/// `dialers`), the auth servers' health watch (the configured ones and
/// those the fleet announces), both critical, and the identity file's
/// renewal watch when it has one.
pub fn start(
    cfg: &Config,
    mut dialers: connect::Dialers,
    fleet: &FleetHandle,
    rt: &mut Runtime,
) -> Result<(), ConfigError> {
    let (clock, stats, shutdown) = (rt.clock, &rt.stats.clone(), &rt.shutdown.clone());
    if let Some(r) = dialers.renewal.take() {
        let watch = teleport::renew::watch(
            r,
            clock,
            stats.clone(),
            rt.reread.subscribe(),
            shutdown.clone(),
        );
        rt.spawn(
            "identity renewal",
            watch.instrument(info_span!("identity.watch")),
        );
    }
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
            let source = cluster_events::Lifeline {
                cfg: wcfg,
                clock,
                fleet: fleet.clone(),
                stats: stats.clone(),
            };
            spawn_watcher(source, backoff, fleet, rt)
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
            spawn_watcher(source, backoff, fleet, rt)
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
        cfg.static_auth(),
        fleet.auth_targets(),
        fleet.clone(),
        stats.clone(),
        shutdown.clone(),
    ));
    rt.tasks.critical("watcher", watcher_task);
    rt.tasks.critical("health watcher", health_task);
    Ok(())
}

/// Runs the watcher over `source`, whichever it is.
fn spawn_watcher(
    source: impl watcher::Source + 'static,
    backoff: Backoff,
    fleet: &FleetHandle,
    rt: &Runtime,
) -> tokio::task::JoinHandle<()> {
    let (stats, stop) = (rt.stats.clone(), rt.shutdown.clone());
    tokio::spawn(watcher::run(source, backoff, fleet.clone(), stats, stop))
}
