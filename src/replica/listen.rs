//! The listening connection: signals other replicas relay to this one,
//! settings and maintenance windows they changed, and making up for whatever was missed while it
//! could not hear.

use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::lease;
use super::{Parts, CATCH_UP_LIMIT, MAKE_UP_EVERY, PROBE_EVERY};
use crate::backoff::Backoff;
use crate::settings::Settings;
use crate::signals::peers::Inbound;
use crate::stats::Stats;
use crate::store::lease::SETTINGS_CHANNEL;
use crate::store::signals as audit;

/// Listens for signals to deliver and settings that changed. Missed
/// notifications are made up for (see [`make_up`]) each time it listens
/// again and at least every [`MAKE_UP_EVERY`] besides. Every [`PROBE_EVERY`] it
/// sends itself a probe through the database; a probe not heard back by
/// the next one means the connection is dead without having said so (a
/// peer gone silent, a black-holed route): it is dropped and made again.
pub(super) async fn listen(p: Arc<Parts>, stop: CancellationToken) {
    let backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(5));
    let mut attempt = 0u32;
    // A connection of its own, outside the pool that requests and writes
    // draw from, which it would otherwise hold for good. A connection
    // found silent is left behind with its pool (whatever still waits on
    // it ends when its socket does), and a new pool dials afresh.
    let fresh = || {
        PgPoolOptions::new()
            .max_connections(1)
            .idle_timeout(None)
            .max_lifetime(None)
            .connect_lazy_with((*p.pool.connect_options()).clone())
    };
    let mut own = fresh();
    loop {
        let mut listener = match listener(&own).await {
            Ok(l) => l,
            Err(e) => {
                warn!(error = %e, "cannot listen for notifications; retrying");
                attempt += 1;
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff.delay(attempt)) => continue,
                }
            }
        };
        attempt = 0;
        make_up(&p).await;
        let mut probe = tokio::time::interval(PROBE_EVERY);
        probe.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let every = (p.cfg.ack_timeout / 3).clamp(Duration::from_secs(1), MAKE_UP_EVERY);
        let mut periodic = tokio::time::interval(every);
        periodic.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        periodic.reset();
        // A probe sent and not heard back yet.
        let mut unanswered = false;
        'heard: loop {
            // One receive in flight across the other arms: never dropped
            // half-read.
            let n = {
                let recv = listener.try_recv();
                tokio::pin!(recv);
                loop {
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        n = &mut recv => break n,
                        _ = probe.tick() => {
                            if unanswered {
                                Stats::inc(&p.stats.listen_probes_lost);
                                warn!("the listening connection did not hear its own probe: listening again on a new one");
                                own = fresh();
                                break 'heard;
                            }
                            match lease::notify_probe(&p.pool, &p.cfg.name).await {
                                Ok(()) => unanswered = true,
                                Err(e) => debug!(error = %e, "cannot send the listener its probe"),
                            }
                        }
                        _ = periodic.tick() => make_up(&p).await,
                    }
                }
            };
            match n {
                Ok(Some(n)) if n.channel() == lease::PROBE_CHANNEL => {
                    if n.payload() == p.cfg.name {
                        unanswered = false;
                    }
                }
                Ok(Some(n)) => dispatch(&p, n.channel(), n.payload()).await,
                // The connection was lost and made again: what was sent
                // meanwhile is gone.
                Ok(None) => {
                    unanswered = false;
                    make_up(&p).await
                }
                Err(e) => {
                    warn!(error = %e, "notifications lost; listening again");
                    break;
                }
            }
        }
    }
}

/// Makes up for notifications this replica may have missed, once it
/// listens again: every setting is read, and signals still pending for
/// agents whose streams it holds are delivered (their notification was
/// sent while it could not hear). Runs after `LISTEN`, so a notification
/// is either heard or found here.
async fn make_up(p: &Parts) {
    p.rooms.settings.reload_all().await;
    p.rooms.maintenance.reload().await;
    let since = p.db_time.now().saturating_sub(p.cfg.ack_timeout);
    let found = match audit::pending_for_streams_of(&p.pool, &p.cfg.name, since, CATCH_UP_LIMIT)
        .await
    {
        Ok(found) => found,
        Err(e) => {
            warn!(error = %e, "cannot look for signals missed while not listening: they time out");
            return;
        }
    };
    let hub = &p.rooms.hub;
    // Only agents still here: the others' signals are the sweep's.
    let here: Vec<_> = found
        .into_iter()
        .filter(|s| hub.is_connected(&s.agent))
        .collect();
    let n = hub.deliver_recorded(here).await;
    if n > 0 {
        Stats::add(&p.stats.signals_caught_up, n as u64);
        info!(
            signals = n,
            "signals whose notification was missed are delivered"
        );
    }
}

/// A listener on every channel.
async fn listener(pool: &PgPool) -> Result<PgListener, sqlx::Error> {
    let mut l = PgListener::connect_with(pool).await?;
    l.listen_all([
        lease::SIGNALS_CHANNEL,
        SETTINGS_CHANNEL,
        crate::store::maintenance::CHANNEL,
        lease::PROBE_CHANNEL,
    ])
    .await?;
    Ok(l)
}

async fn dispatch(p: &Parts, channel: &str, payload: &str) {
    if channel == lease::SIGNALS_CHANNEL {
        match lease::parse_signals(payload) {
            Some((replica, ids)) if replica == p.cfg.name => {
                // The hub delivers them in its own time; the listener goes
                // back to listening.
                if p.rooms
                    .hub
                    .inbound()
                    .send(Inbound::Relayed(ids))
                    .await
                    .is_err()
                {
                    warn!("the hub is gone: relayed signals time out");
                }
            }
            Some(_) => {}
            None => warn!(payload, "a signals notification that does not parse"),
        }
    } else if channel == crate::store::maintenance::CHANNEL {
        p.rooms.maintenance.reload().await;
        info!(
            window = payload,
            "maintenance windows changed on another replica: read again"
        );
    } else if channel == SETTINGS_CHANNEL {
        match Settings::name(payload) {
            Ok(name) => match p.rooms.settings.reload(name).await {
                Ok(()) => info!(
                    setting = payload,
                    "setting changed on another replica: applied"
                ),
                Err(e) => {
                    warn!(setting = payload, error = %e, "cannot apply a setting another replica changed")
                }
            },
            Err(_) => warn!(
                setting = payload,
                "another replica changed a setting this one does not know"
            ),
        }
    }
}
