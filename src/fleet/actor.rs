//! The fleet actor: one task that owns `Fleet`, applies commands in order,
//! sleeps until the next expiry, and hands writes to the store without ever
//! waiting on a commit.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug_span, warn};

use super::state::{Fleet, Rules};
use super::{Command, FleetHandle};
use crate::clock::Clock;
use crate::stats::Stats;
use crate::store::read::Loaded;
use crate::store::writer::WriterMsg;
use crate::store::WriterHandle;

/// Commands applied per wake-up before timers and classification run.
const DRAIN: usize = 256;

pub struct FleetOptions {
    pub clock: Clock,
    pub rules: Rules,
    pub command_queue: usize,
    /// Capacity of the state-change broadcast (slow subscribers lag, never block).
    pub change_capacity: usize,
    pub static_auth: Vec<(String, String)>,
    /// Where proxy expiries are published for discovery.
    pub board: Arc<crate::fleet::board::Board>,
    /// Whether its batches are written: `Sole` on a database of its own,
    /// `Follower` among replicas until the lease says it leads.
    pub fence: crate::store::Fence,
}

/// Builds the fleet from the loaded state and starts its actor.
pub fn spawn(
    opts: FleetOptions,
    loaded: Loaded,
    stats: Arc<Stats>,
    writer: WriterHandle,
    shutdown: CancellationToken,
) -> (FleetHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(opts.command_queue.max(1));
    let (changes, _) = broadcast::channel(opts.change_capacity.max(16));
    let (ready_tx, ready_rx) = watch::channel(super::Readiness {
        ready: false,
        kinds: BTreeMap::new(),
    });
    let (targets_tx, targets_rx) = watch::channel(BTreeMap::new());
    let mut fleet = Fleet::new(
        opts.clock,
        opts.rules,
        stats,
        changes.clone(),
        ready_tx,
        targets_tx,
        opts.board,
    );
    fleet.fence = opts.fence;
    fleet.load(loaded);
    for (name, addr) in &opts.static_auth {
        fleet.add_static_auth(name, addr);
    }
    fleet.publish();
    let handle = FleetHandle {
        tx,
        clock: fleet.clock,
        published: fleet.published_watch(),
        readiness: ready_rx,
        changes,
        auth_targets: targets_rx,
        read_timeout: None,
        reads: std::sync::Arc::new(tokio::sync::Semaphore::new(super::MAX_QUEUED_READS)),
    };
    let task = tokio::spawn(run(fleet, rx, writer, shutdown));
    (handle, task)
}

async fn run(
    mut fleet: Fleet,
    mut rx: mpsc::Receiver<Command>,
    writer: WriterHandle,
    shutdown: CancellationToken,
) {
    // Flush requests wait until their writes have been handed over, so the
    // marker reaches the writer after them (batches stay in order).
    let mut flush_waiters: Vec<tokio::sync::oneshot::Sender<()>> = Vec::new();
    loop {
        let deadline = [
            fleet.next_deadline(),
            fleet.state_due_at(),
            fleet.publish_due_at(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|t| fleet.clock.instant_at(t));
        // Writes wait for room in the writer's channel (event-driven: no
        // polling timer), while commands and expiries keep being served.
        let want_store = fleet.has_due() || (!flush_waiters.is_empty() && fleet.has_pending());
        tokio::select! {
            _ = shutdown.cancelled() => break,
            cmd = rx.recv() => {
                let Some(cmd) = cmd else { break };
                let span = debug_span!("fleet.apply");
                let _g = span.enter();
                flush_waiters.extend(handle(&mut fleet, cmd));
                for _ in 0..DRAIN {
                    // Keep the writer busy: it takes a batch whenever it has
                    // room; otherwise writes keep coalescing here.
                    hand_over(&mut fleet, &writer);
                    match rx.try_recv() {
                        Ok(cmd) => flush_waiters.extend(handle(&mut fleet, cmd)),
                        Err(_) => break,
                    }
                }
            }
            _ = async { if let Some(d) = deadline { tokio::time::sleep_until(d).await } }, if deadline.is_some() => {}
            permit = writer.reserve(), if want_store => {
                if let Ok(permit) = permit {
                    let batch = if flush_waiters.is_empty() {
                        fleet.take_due()
                    } else {
                        fleet.take_pending()
                    };
                    permit.send(WriterMsg::Batch(Box::new(batch)));
                }
            }
        }
        fleet.fire_due();
        fleet.settle();
        fleet.publish_if_due();
        if flush_waiters.is_empty() {
            hand_over(&mut fleet, &writer);
        } else if fleet.has_pending() {
            let batch = Box::new(fleet.take_pending());
            if let Err(back) = writer.try_send(batch) {
                fleet.restore_pending(*back);
            }
        }
        fleet.count_pending();
        if !fleet.has_pending() && !flush_waiters.is_empty() {
            let waiters = std::mem::take(&mut flush_waiters);
            let writer = writer.clone();
            tokio::spawn(async move {
                let _ = writer.flush().await;
                for w in waiters {
                    let _ = w.send(());
                }
            });
        }
    }
    // Last writes on the way out.
    fleet.fire_due();
    fleet.settle();
    let batch = fleet.take_pending();
    if !batch.is_empty() && writer.send(batch).await.is_err() {
        warn!("store writer gone at shutdown; last writes lost");
    }
}

/// Applies one command; returns a flush request to answer later.
fn handle(fleet: &mut Fleet, cmd: Command) -> Option<tokio::sync::oneshot::Sender<()>> {
    if !matches!(cmd, Command::Read(_) | Command::Flush(_)) {
        fleet.touch();
    }
    match cmd {
        Command::Apply(batch) => fleet.apply(batch),
        Command::Resync(r) => {
            let _s = debug_span!("fleet.resync", generation = r.generation).entered();
            #[allow(clippy::disallowed_methods)] // resync duration, for the log
            let started = std::time::Instant::now();
            fleet.resync(r);
            fleet.settle();
            // Rare and a turning point (the first view of the cluster, or
            // the end of staleness): readers see it at once.
            fleet.publish();
            tracing::info!(
                agents = fleet.agents.len(),
                ms = started.elapsed().as_millis() as u64,
                "resync applied and classified"
            );
        }
        Command::WatchDown { generation, error } => {
            fleet.watch_down(generation, &error);
            fleet.publish();
        }
        Command::Health(u) => fleet.health(u),
        Command::Link { agent, link } => fleet.link(&agent, link),
        Command::Report {
            agent,
            proxies,
            auth_server,
        } => fleet.report(&agent, proxies, auth_server),
        Command::Signaled { signals, at } => {
            for (agent, id) in signals {
                fleet.signaled(&agent, id, at);
            }
        }
        Command::Read(f) => {
            fleet.fire_due();
            fleet.settle();
            f(fleet);
        }
        Command::Flush(done) => return Some(done),
    }
    None
}

fn hand_over(fleet: &mut Fleet, writer: &WriterHandle) {
    if !fleet.has_due() || !writer.has_room() {
        return;
    }
    let batch = Box::new(fleet.take_due());
    if let Err(back) = writer.try_send(batch) {
        fleet.restore_pending(*back);
    }
}
