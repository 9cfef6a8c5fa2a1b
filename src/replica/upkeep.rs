//! A replica's routine: which agent streams it holds (and the others
//! hold), its heartbeat and the database's clock, and the leader's chores.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::lease;
use super::{
    Parts, CHORES_EVERY, FORGET_REPLICAS_AFTER, REMOTE_EVERY, RENEW_SHARE, STREAMS_EVERY,
    SWEEP_LIMIT,
};
use crate::clock::Ts;
use crate::stats::Stats;

/// Writes down which agent streams this replica holds (the others read it
/// to relay signals), and reads which the others hold.
pub(super) async fn streams(p: Arc<Parts>, stop: CancellationToken) {
    let hub = &p.rooms.hub;
    // Agent → what its peer is, as last written.
    let mut written: HashMap<String, crate::signals::peers::PeerKind> = HashMap::new();
    // The hub's streams as last written in full (`None`: write again).
    let mut in_sync: Option<u64> = None;
    let mut last_remote = Ts::ZERO;
    let mut tick = tokio::time::interval(STREAMS_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let version = hub.streams_version();
        if in_sync != Some(version) {
            let now = hub.connected_peers();
            // New, or back with other capabilities (a sidecar in place of
            // an agent): written again.
            let opened: Vec<(String, crate::signals::peers::PeerKind)> = now
                .iter()
                .filter(|(a, r)| written.get(*a) != Some(*r))
                .map(|(a, r)| (a.clone(), *r))
                .collect();
            let closed: Vec<String> = written
                .keys()
                .filter(|a| !now.contains_key(*a))
                .cloned()
                .collect();
            let mut ok = true;
            if !opened.is_empty() {
                match lease::claim_streams(&p.pool, &p.cfg.name, &opened, p.clock.now()).await {
                    Ok(()) => written.extend(opened),
                    Err(e) => {
                        ok = false;
                        debug!(error = %e, agents = opened.len(), "cannot record agent streams; next round")
                    }
                }
            }
            if !closed.is_empty() {
                match lease::release_streams(&p.pool, &p.cfg.name, &closed).await {
                    Ok(()) => {
                        for a in &closed {
                            written.remove(a);
                        }
                    }
                    Err(e) => {
                        ok = false;
                        debug!(error = %e, agents = closed.len(), "cannot forget agent streams; next round")
                    }
                }
            }
            in_sync = ok.then_some(version);
        }
        let t = p.clock.now();
        if t.since(last_remote) >= REMOTE_EVERY {
            last_remote = t;
            match lease::remote_streams(&p.pool, &p.cfg.name, p.cfg.lease).await {
                Ok(remote) => hub.set_remote(remote),
                Err(e) => debug!(error = %e, "cannot read the other replicas' streams; next round"),
            }
            if let Err(e) = hub.refresh_restarts().await {
                debug!(error = %e, "cannot read the restarts the replicas asked for; next round");
            }
        }
    }
}

/// Past this, a replica's clock is said to be off the database's.
const SKEW_WARNING: Duration = Duration::from_secs(1);

/// Measures how far this replica's wall clock is from the database's
/// (`lifeline_clock_offset_seconds`); says so when it passes
/// [`SKEW_WARNING`] and when it is back within it. On a manual clock
/// (tests) the offset stays 0: its time is the test's own.
async fn measure_db_time(p: &Parts, skewed: &mut bool) {
    if !p.clock.is_wall() {
        return;
    }
    let offset = match p.db_time.measure(&p.pool).await {
        Ok(Some(offset)) => offset,
        Ok(None) => return,
        Err(e) => {
            debug!(error = %e, "cannot read the database's clock; next round");
            return;
        }
    };
    p.stats
        .clock_offset_us
        .store(offset, std::sync::atomic::Ordering::Relaxed);
    let off = offset.unsigned_abs() > SKEW_WARNING.as_micros() as u64;
    if off != *skewed {
        *skewed = off;
        let seconds = offset as f64 / 1e6;
        if off {
            warn!(seconds, "this replica's clock is off the database's (database minus replica); signal times follow the database's, but check NTP");
        } else {
            info!(
                seconds,
                "this replica's clock agrees with the database's again"
            );
        }
    }
}

/// The heartbeat, and the leader's chores: signals nobody will answer
/// time out; replicas silent for a day leave the registry.
pub(super) async fn chores(p: Arc<Parts>, stop: CancellationToken) {
    let beat = p.cfg.lease / RENEW_SHARE;
    let mut last_chores = Ts::ZERO;
    let mut skewed = false;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(beat) => {}
        }
        if let Err(e) = lease::heartbeat(&p.pool, &p.cfg.name).await {
            debug!(error = %e, "heartbeat not recorded; next round");
        }
        measure_db_time(&p, &mut skewed).await;
        let now = p.clock.now();
        if !p.rooms.hub.leads() || now.since(last_chores) < CHORES_EVERY {
            continue;
        }
        last_chores = now;
        // Well after every replica's own deadline for it has passed, on
        // the clock the audit's times follow.
        let before = p
            .db_time
            .now()
            .saturating_sub(p.cfg.ack_timeout + p.cfg.lease);
        let grace = (p.db_time.now(), p.cfg.lease);
        match lease::sweep_unanswered(&p.pool, before, grace, SWEEP_LIMIT).await {
            Ok(0) => {}
            Ok(n) => {
                Stats::add(&p.stats.signals_swept, n);
                info!(
                    signals = n,
                    "signals no replica answered for are recorded as timed out"
                );
            }
            Err(e) => debug!(error = %e, "cannot sweep unanswered signals; next round"),
        }
        if let Err(e) = lease::forget_replicas(&p.pool, FORGET_REPLICAS_AFTER).await {
            debug!(error = %e, "cannot forget old replicas; next round");
        }
    }
}
