//! The fleet's shell: the one task that owns the [`Model`] and every
//! channel around it. It feeds the model commands in order and the time,
//! sleeps until the next expiry, and carries out what each step produced:
//! writes go to the outbox and on to the store (never waiting on a
//! commit), state changes to the broadcast, proxy records to the board,
//! readiness and the auth servers to watch to their `watch` channels,
//! counters to the metrics; the read model is published at a pace.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::{debug, debug_span, warn};

use super::board::Board;
use super::handle::{Command, FleetHandle, Query, Reply, MAX_QUEUED_READS};
use super::model::{BoardOp, Changes, Effects, Model, Readiness, Rules, Tally};
use super::outbox::Outbox;
use super::published::{Published, MAX_AGE, PUBLISH_EVERY};
use crate::clock::{Clock, Ts};
use crate::domain::{ClusterName, Loaded};
use crate::stats::Stats;
use crate::store::writer::WriterMsg;
use crate::store::{Fence, WriterHandle};

/// Commands applied per wake-up before timers and classification run.
const DRAIN: usize = 256;

struct FleetOptions {
    /// The cluster whose resources it holds.
    cluster: ClusterName,
    clock: Clock,
    rules: Rules,
    command_queue: usize,
    /// Capacity of the state-change broadcast (slow subscribers lag, never block).
    change_capacity: usize,
    static_auth: Vec<(String, String)>,
    /// Where proxy expiries are published for discovery.
    board: Arc<Board>,
    /// Whether its batches are written: `Sole` on a database of its own,
    /// `Follower` among replicas until the lease says it leads.
    fence: Fence,
}

/// Builds the fleet from the configuration and the loaded state, and
/// starts its shell on `rt` (a critical task).
pub fn start(
    cfg: &crate::config::Config,
    change_capacity: usize,
    board: Arc<Board>,
    fence: Fence,
    loaded: Loaded,
    writer: WriterHandle,
    rt: &mut crate::supervise::Runtime,
) -> FleetHandle {
    let opts = FleetOptions {
        cluster: cfg.cluster.cluster(),
        clock: rt.clock,
        rules: Rules {
            unknown_grace: cfg.health.unknown_grace,
            max_pending_events: cfg.storage.max_pending_events,
        },
        command_queue: cfg.fleet.command_queue,
        change_capacity,
        static_auth: cfg.static_auth(),
        board,
        fence,
    };
    let (handle, task) = spawn(opts, loaded, rt.stats.clone(), writer, rt.shutdown.clone());
    rt.tasks.critical("fleet", task);
    handle
}

/// Builds the model from the loaded state and starts the shell's task.
fn spawn(
    opts: FleetOptions,
    loaded: Loaded,
    stats: Arc<Stats>,
    writer: WriterHandle,
    shutdown: CancellationToken,
) -> (FleetHandle, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(opts.command_queue.max(1));
    let now = opts.clock.now();
    let mut model = Model::new(opts.cluster.clone(), opts.rules, now);
    model.load(loaded);
    for (name, addr) in &opts.static_auth {
        model.add_static_auth(name, addr);
    }
    let mut shell = Shell::new(model, &opts, stats);
    shell.carry_out();
    shell.publish();
    let handle = FleetHandle {
        cluster: opts.cluster.clone(),
        tx,
        clock: opts.clock,
        published: shell.published.subscribe(),
        readiness: shell.readiness.subscribe(),
        changes: shell.changes.clone(),
        auth_targets: shell.auth_targets.subscribe(),
        read_timeout: None,
        reads: Arc::new(tokio::sync::Semaphore::new(MAX_QUEUED_READS)),
    };
    let task = tokio::spawn(shell.run(rx, writer, shutdown));
    (handle, task)
}

/// The model and what carries out its effects.
pub(super) struct Shell {
    model: Model,
    clock: Clock,
    stats: Arc<Stats>,
    outbox: Outbox,
    changes: broadcast::Sender<Changes>,
    readiness: watch::Sender<Readiness>,
    auth_targets: watch::Sender<BTreeMap<String, String>>,
    board: Arc<Board>,
    published: watch::Sender<Arc<Published>>,
    pacer: Pacer,
}

impl Shell {
    fn new(model: Model, opts: &FleetOptions, stats: Arc<Stats>) -> Shell {
        let now = model.now();
        let (changes, _) = broadcast::channel(opts.change_capacity.max(16));
        Shell {
            outbox: Outbox::new(opts.fence.clone(), opts.rules.max_pending_events, now),
            readiness: watch::Sender::new(model.readiness_now()),
            auth_targets: watch::Sender::new(BTreeMap::new()),
            published: watch::Sender::new(Arc::new(Published::empty(now))),
            pacer: Pacer::new(now),
            model,
            clock: opts.clock,
            stats,
            changes,
            board: opts.board.clone(),
        }
    }

    async fn run(
        mut self,
        mut rx: mpsc::Receiver<Command>,
        writer: WriterHandle,
        shutdown: CancellationToken,
    ) {
        // Flush requests wait until their writes have been handed over, so
        // the marker reaches the writer after them (batches stay in order).
        let mut flush_waiters: Vec<Reply<()>> = Vec::new();
        loop {
            let deadline = [
                self.model.next_deadline(),
                self.outbox.state_due_at(),
                self.pacer.due_at(),
            ]
            .into_iter()
            .flatten()
            .min()
            .map(|t| self.clock.instant_at(t));
            // Writes wait for room in the writer's channel (event-driven: no
            // polling timer), while commands and expiries keep being served.
            let now = self.clock.now();
            let want_store = self.outbox.has_due(now)
                || (!flush_waiters.is_empty() && self.outbox.has_pending());
            tokio::select! {
                _ = shutdown.cancelled() => break,
                cmd = rx.recv() => {
                    let Some(cmd) = cmd else { break };
                    let span = debug_span!("fleet.apply");
                    let _g = span.enter();
                    flush_waiters.extend(self.handle(cmd));
                    for _ in 0..DRAIN {
                        // Keep the writer busy: it takes a batch whenever it
                        // has room; otherwise writes keep coalescing here.
                        self.hand_over(&writer);
                        match rx.try_recv() {
                            Ok(cmd) => flush_waiters.extend(self.handle(cmd)),
                            Err(_) => break,
                        }
                    }
                }
                _ = async { if let Some(d) = deadline { tokio::time::sleep_until(d).await } }, if deadline.is_some() => {}
                permit = writer.reserve(), if want_store => {
                    if let Ok(permit) = permit {
                        let now = self.clock.now();
                        let batch = if flush_waiters.is_empty() {
                            self.outbox.take_due(now)
                        } else {
                            self.outbox.take_pending(now)
                        };
                        permit.send(WriterMsg::Batch(Box::new(batch)));
                    }
                }
            }
            self.step();
            self.publish_if_due();
            if flush_waiters.is_empty() {
                self.hand_over(&writer);
            } else if self.outbox.has_pending() {
                let batch = Box::new(self.outbox.take_pending(self.model.now()));
                if let Err(back) = writer.try_send(batch) {
                    self.outbox.restore(*back);
                }
            }
            self.outbox.count(&self.stats);
            if !self.outbox.has_pending() && !flush_waiters.is_empty() {
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
        self.step();
        let batch = self.outbox.take_pending(self.model.now());
        if !batch.is_empty() && writer.send(batch).await.is_err() {
            warn!("store writer gone at shutdown; last writes lost");
        }
    }

    /// Tells the model the time, fires its due timers, classifies what
    /// they and the commands changed, and carries out the effects.
    pub(super) fn step(&mut self) {
        self.model.at(self.clock.now());
        self.lend();
        if self.model.fire_due() > 0 {
            self.pacer.touched = true;
        }
        // Classification time, for the log.
        let started = crate::clock::Stopwatch::start();
        self.model.settle();
        let changes = self.carry_out();
        // Once per pass: heartbeats that arrived together wake the agent
        // streams once.
        self.board.publish();
        if changes > 1000 {
            let us = started.elapsed().as_micros() as u64;
            debug!(changes, us, "classified");
        }
    }

    /// Applies one command; returns a flush request to answer later.
    fn handle(&mut self, cmd: Command) -> Option<Reply<()>> {
        self.model.at(self.clock.now());
        // A flush waits for the gathered rows: they stay with the outbox.
        // (Lending twice before taking back is harmless: the model gives
        // the second batch back.)
        if !matches!(cmd, Command::Flush(_)) {
            self.lend();
        }
        let m = &mut self.model;
        match cmd {
            Command::Apply(batch) => m.apply(batch),
            Command::Resync(r) => {
                let generation = r.generation;
                let _s = debug_span!("fleet.resync", generation).entered();
                // Resync duration, for the log.
                let started = crate::clock::Stopwatch::start();
                m.resync(r);
                tracing::debug!(
                    ms = started.elapsed().as_millis() as u64,
                    "resync replaced; classifying every agent"
                );
                m.settle();
                self.carry_out();
                self.board.publish();
                // Rare and a turning point (the first view of the cluster,
                // or the end of staleness): readers see it at once.
                self.publish();
                tracing::info!(
                    agents = self.model.sizes().agents,
                    ms = started.elapsed().as_millis() as u64,
                    "resync applied and classified"
                );
                return None;
            }
            Command::WatchDown { generation, error } => {
                m.watch_down(generation, &error);
                self.carry_out();
                self.publish();
                return None;
            }
            Command::Health(u) => m.health(u),
            Command::Windows(w) => m.set_windows(w),
            Command::Link { agent, link } => m.link(&agent, link),
            Command::Report {
                agent,
                proxies,
                auth_server,
            } => m.report(&agent, proxies, auth_server),
            Command::PeerReport { agent, report } => m.peer_report(&agent, report),
            Command::Signaled { signals, at } => {
                for (agent, id) in signals {
                    m.signaled(&agent, id, at);
                }
            }
            Command::Lead {
                fence,
                open,
                next_episode,
                incidents,
                reply,
            } => {
                // What was made before (as a follower) is not written; the
                // model writes the state in full under the new fence.
                self.step();
                self.outbox.lead(fence);
                self.lend();
                let adopted = self.model.lead(open, next_episode, incidents);
                self.carry_out();
                let _ = reply.send(adopted);
                return None;
            }
            Command::Follow(reply) => {
                self.step();
                self.outbox.follow();
                let _ = reply.send(());
                return None;
            }
            Command::Query(q) => {
                self.step();
                self.answer(q);
                return None;
            }
            Command::Flush(done) => return Some(done),
        }
        self.pacer.touched = true;
        self.carry_out();
        None
    }

    /// Answers a question on settled state.
    fn answer(&mut self, q: Query) {
        match q.answer(&self.model) {
            Some(Query::Settled(reply)) => {
                if self.pacer.touched {
                    self.publish();
                }
                let _ = reply.send(self.model.now());
            }
            Some(Query::Publish(reply)) => {
                self.publish();
                let _ = reply.send(());
            }
            _ => {}
        }
    }

    /// Lends the model the rows gathered so far, so that a step coalesces
    /// its own into them in place (one map insert per row, not a second
    /// pass to merge them); `carry_out` takes them back.
    fn lend(&mut self) {
        let rows = self.outbox.lend();
        if let Some(refused) = self.model.lend_writes(rows) {
            self.outbox.put_back(refused);
        }
    }

    /// Carries out what the model produced; returns how many state
    /// changes it broadcast.
    pub(super) fn carry_out(&mut self) -> usize {
        let Effects {
            writes,
            mut changes,
            detections,
            board,
            readiness,
            auth_targets,
            tally,
            replaced,
        } = self.model.take_effects();
        if !replaced.0.is_empty() {
            crate::supervise::drop_elsewhere(replaced);
        }
        let n = changes.len();
        if n > 0 {
            // Classified when the pass ended: what detection latency counts.
            let classified = self.clock.now();
            for c in &mut changes {
                c.detected_at = classified;
            }
            for since in detections {
                let latency = classified.since(since).as_secs_f64();
                self.stats.hist.detection.record(latency);
            }
            self.pacer.touched = true;
            let _ = self.changes.send(Arc::new(changes));
        }
        self.outbox.absorb(writes);
        if !board.is_empty() {
            let now = self.model.now();
            for op in board {
                match op {
                    BoardOp::Put(s) => self.board.put(&s, now),
                    BoardOp::Remove(name) => self.board.remove(&name, now),
                    BoardOp::Replace(list) => self.board.replace(list.iter(), now),
                }
            }
        }
        if let Some(r) = readiness {
            self.readiness.send_replace(r);
        }
        if let Some(targets) = auth_targets {
            self.auth_targets.send_if_modified(|cur| {
                let changed = *cur != targets;
                if changed {
                    *cur = targets;
                }
                changed
            });
        }
        if tally != Tally::default() {
            count(&self.stats, &tally);
        }
        n
    }

    fn hand_over(&mut self, writer: &WriterHandle) {
        let now = self.model.now();
        if !self.outbox.has_due(now) || !writer.has_room() {
            return;
        }
        let batch = Box::new(self.outbox.take_due(now));
        if let Err(back) = writer.try_send(batch) {
            self.outbox.restore(*back);
        }
    }

    /// Publishes when the pacer says it is due (see [`Pacer::due`]).
    pub(super) fn publish_if_due(&mut self) {
        let now = self.model.now();
        let unhealthy = self.model.unhealthy_count();
        if self.pacer.due(now, self.model.next_deadline(), unhealthy) {
            self.publish();
        }
    }

    /// Publishes the read model now.
    pub(super) fn publish(&mut self) {
        // What a publish costs, to schedule the next.
        let started = crate::clock::Stopwatch::start();
        let generation = self.published.borrow().summary.generation + 1;
        let p = Arc::new(Published::of(&self.model, generation));
        self.published.send_replace(p);
        let unhealthy = self.model.unhealthy_count();
        self.pacer
            .published(self.model.now(), started.elapsed(), unhealthy);
    }
}

/// Adds what the model counted to the process's metrics.
fn count(stats: &Stats, t: &Tally) {
    Stats::add(&stats.events_applied, t.events_applied);
    for (kind, ops) in t.ingested.iter().enumerate() {
        for (op, n) in ops.iter().enumerate() {
            if *n > 0 {
                Stats::add(&stats.ingested[kind][op], *n);
            }
        }
    }
    Stats::add(&stats.heartbeats, t.heartbeats);
    Stats::add(&stats.timers_fired, t.timers_fired);
    Stats::add(&stats.state_changes, t.state_changes);
    Stats::add(&stats.agent_messages_rejected, t.agent_messages_rejected);
}

/// When the read model is published on its own: after something changed,
/// at most every [`PUBLISH_EVERY`], and never in the way of a due expiry.
#[derive(Debug)]
pub(super) struct Pacer {
    /// Changed since the last publish.
    pub(super) touched: bool,
    published_at: Ts,
    /// A publish was put off until this timer fired.
    not_before: Ts,
    /// What the last publish took (real time).
    pub(super) cost: Duration,
    /// How many agents were unhealthy at the last publish.
    unhealthy: usize,
}

impl Pacer {
    fn new(now: Ts) -> Pacer {
        Pacer {
            touched: true,
            published_at: now,
            not_before: Ts(0),
            cost: Duration::ZERO,
            unhealthy: 0,
        }
    }

    /// When the next publish of its own is due, if anything changed.
    pub(super) fn due_at(&self) -> Option<Ts> {
        self.touched.then(|| {
            self.published_at
                .saturating_add(PUBLISH_EVERY)
                .max(self.not_before)
        })
    }

    /// True when something changed and the last publish is
    /// [`PUBLISH_EVERY`] old. A publish walks the unhealthy agents, so it
    /// never makes a due expiry wait: it goes in a gap before the next timer
    /// at least twice as long as it is expected to take (the last publish's
    /// time, scaled by how much the unhealthy agents grew since), or after
    /// that timer (unless it is [`MAX_AGE`] overdue).
    fn due(&mut self, now: Ts, next_timer: Option<Ts>, unhealthy: usize) -> bool {
        match self.due_at() {
            Some(due) if now >= due => {}
            _ => return false,
        }
        let grown = (unhealthy + 1) as f64 / (self.unhealthy + 1) as f64;
        let expected = self.cost.mul_f64(grown.max(1.0));
        let slack = (expected * 2).max(Duration::from_millis(1));
        let overdue = now.since(self.published_at.saturating_add(PUBLISH_EVERY)) >= MAX_AGE;
        match next_timer {
            Some(timer) if timer.since(now) < slack && !overdue => {
                self.not_before = timer;
                false
            }
            _ => true,
        }
    }

    fn published(&mut self, now: Ts, cost: Duration, unhealthy: usize) {
        self.touched = false;
        self.published_at = now;
        self.cost = cost;
        self.unhealthy = unhealthy;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{AgentState, Change, Kind};
    use crate::fleet::model::fixture::{at, ready, server};
    use crate::fleet::model::Ingested;

    /// A shell around `model` on a manual clock at the model's time.
    fn shell(model: Model) -> Shell {
        let opts = FleetOptions {
            cluster: ClusterName::new("default"),
            clock: Clock::starting_at(model.now()),
            rules: *model.rules(),
            command_queue: 16,
            change_capacity: 16,
            static_auth: Vec::new(),
            board: Board::new(64, Ts(0)),
            fence: Fence::Sole,
        };
        let mut s = Shell::new(model, &opts, Arc::new(Stats::default()));
        s.carry_out();
        s
    }

    /// Moves the manual clock to `t` and lets the shell step.
    async fn advance(s: &mut Shell, t: Ts) {
        tokio::time::advance(t.since(s.clock.now())).await;
        s.step();
    }

    fn put(s: &mut Shell, kind: Kind, name: &str, expires: Ts) {
        let change = Change::PutServer(server(kind, name, expires));
        s.model.apply(vec![Ingested::Change(change)]);
        s.carry_out();
    }

    #[tokio::test(start_paused = true)]
    async fn a_step_carries_out_every_effect() {
        let mut s = shell(ready(&[("p1", 10), ("p2", 3600)], &["a1", "a2"]));
        assert!(s.readiness.borrow().ready, "the resync's readiness");
        assert_eq!(s.board.proxy_count(), 2, "the listing's proxies");
        assert!(s.outbox.has_pending(), "the listing's rows wait");
        let mut changes = s.changes.subscribe();
        // p1 expires and p2 lapses later: both agents end stranded, each
        // change is broadcast once, and detection is measured.
        advance(&mut s, at(10)).await;
        let got = changes.try_recv().expect("a pass's changes");
        assert!(got.iter().all(|c| c.to == AgentState::Degraded));
        put(&mut s, Kind::Proxy, "p2", at(20));
        advance(&mut s, at(20)).await;
        let got = changes.try_recv().expect("the second pass");
        assert!(got.iter().all(|c| c.to == AgentState::Stranded));
        assert_eq!(got.len(), 2);
        let st = s.stats.snapshot();
        assert_eq!(st.timers_fired, 2);
        assert_eq!(st.state_changes, 4);
        assert_eq!(st.heartbeats, 1);
        // Two agents left healthy, each measured once (the degraded pass).
        let rendered = s.stats.hist.render();
        let count = format!("{}_count 2", crate::stats::metric::DETECTION);
        assert!(rendered.contains(&count), "{rendered}");
        let waiting = s.outbox.take_pending(s.model.now());
        assert!(waiting.episodes.len() >= 2, "episodes opened");
        // An auth server that names its health address is one to watch.
        let mut auth = server(Kind::AuthServer, "auth-2", at(3600));
        auth.addr = "10.0.0.2:3025".into();
        s.model
            .apply(vec![Ingested::Change(Change::PutServer(auth))]);
        s.carry_out();
        let targets = s.auth_targets.borrow().clone();
        assert_eq!(
            targets.get("auth-2").map(String::as_str),
            Some("10.0.0.2:3025")
        );
    }

    /// Guards the lending of rows: across commands, each step's rows are
    /// gathered in place and in order; a flush leaves them with the outbox
    /// (it waits for them); a follower keeps none.
    #[tokio::test(start_paused = true)]
    async fn lent_rows_come_back_in_order_and_a_follower_keeps_none() {
        let mut s = shell(ready(&[("p1", 10)], &["a1"]));
        s.outbox.take_pending(s.model.now());
        let heartbeat = |expires| {
            let change = Change::PutServer(server(Kind::Proxy, "p1", expires));
            Command::Apply(vec![Ingested::Change(change)])
        };
        assert!(s.handle(heartbeat(at(20))).is_none());
        assert!(s.handle(heartbeat(at(30))).is_none());
        let (tx, _rx) = tokio::sync::oneshot::channel();
        assert!(s.handle(Command::Flush(tx)).is_some());
        assert!(s.outbox.has_pending(), "the rows wait in the outbox");
        let batch = s.outbox.take_pending(s.model.now());
        let expiries: Vec<Option<Ts>> = batch.events.iter().map(|e| e.expires).collect();
        assert_eq!(expiries, vec![Some(at(20)), Some(at(30))]);
        let p1 = &batch.servers[&(Kind::Proxy, "p1".to_string())];
        assert_eq!(p1.server().map(|p| p.expires), Some(at(30)), "coalesced");

        let (tx, _rx) = tokio::sync::oneshot::channel();
        s.handle(Command::Follow(tx));
        s.handle(heartbeat(at(40)));
        assert!(!s.outbox.has_pending(), "a follower keeps nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn publishes_what_changed_at_most_every_interval_and_when_asked() {
        let mut s = shell(ready(&[("p1", 10), ("p2", 3600)], &["a1", "a2"]));
        let rx = s.published.subscribe();
        s.publish();
        assert_eq!(rx.borrow().counts().healthy, 2);
        assert_eq!(s.pacer.due_at(), None, "nothing changed since");

        // p1 expires: its agents stay on p2, so they are degraded. The last
        // publish is long past, so this one is due at once.
        advance(&mut s, at(10)).await;
        assert_eq!(s.pacer.due_at(), Some(at(0).saturating_add(PUBLISH_EVERY)));
        s.publish_if_due();
        let p = rx.borrow().clone();
        assert_eq!(p.counts().degraded, 2);
        assert_eq!(p.summary.proxies.expired, 1);
        assert_eq!(p.at(), at(10));
        assert_eq!(p.proxies.len(), 2);
        assert_eq!(p.summary.proxies.live, 1);

        // Another change right after waits out the interval.
        s.pacer.touched = true;
        let due = s.pacer.due_at().expect("a change is waiting");
        assert_eq!(due, at(10).saturating_add(PUBLISH_EVERY));
        s.publish_if_due();
        assert_eq!(rx.borrow().at(), at(10), "not yet due");
        advance(&mut s, due).await;
        s.publish_if_due();
        assert_eq!(rx.borrow().at(), due);

        // A `settled` query publishes at once.
        advance(&mut s, at(3600)).await;
        let (tx, mut answer) = tokio::sync::oneshot::channel();
        s.answer(Query::Settled(tx));
        assert_eq!(answer.try_recv().ok(), Some(at(3600)));
        let p = rx.borrow().clone();
        assert_eq!(p.counts().stranded, 2);
        assert_eq!(p.stranded.items.len(), 2);
        assert_eq!(p.soonest.1, 3, "two proxies and one auth server");
        assert_eq!(p.summary.root_causes.len(), 1);
        assert_eq!(s.pacer.due_at(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_publish_waits_for_an_expiry_due_right_after_it() {
        // p2 expires 0.5 ms after p1: too close to publish between them.
        let mut s = shell(ready(&[("p1", 10), ("p2", 3600)], &["a1"]));
        let timer = at(10).saturating_add(Duration::from_micros(500));
        put(&mut s, Kind::Proxy, "p2", timer);
        let rx = s.published.subscribe();
        let before = at(10).saturating_sub(Duration::from_millis(300));
        advance(&mut s, before).await;
        s.publish();
        // p1 expires; the publish is due, but p2's expiry is 0.5 ms away.
        advance(&mut s, at(10)).await;
        s.publish_if_due();
        assert_eq!(rx.borrow().at(), before, "put off");
        assert_eq!(s.pacer.due_at(), Some(timer));
        advance(&mut s, timer).await;
        s.publish_if_due();
        assert_eq!(rx.borrow().at(), timer);
        assert_eq!(rx.borrow().summary.proxies.expired, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_expected_cost_grows_with_the_unhealthy_agents() {
        // p2 expires 2 ms after p1, which strands a1..a3.
        let mut s = shell(ready(&[("p1", 10), ("p2", 3600)], &["a1", "a2", "a3"]));
        let timer = at(10).saturating_add(Duration::from_millis(2));
        put(&mut s, Kind::Proxy, "p2", timer);
        let before = at(10).saturating_sub(Duration::from_millis(300));
        advance(&mut s, before).await;
        s.publish();
        // The last publish took 0.4 ms over no unhealthy agent: unscaled, a
        // 2 ms gap would do; with three now, it is expected to take 1.6 ms.
        s.pacer.cost = Duration::from_micros(400);
        advance(&mut s, at(10)).await;
        assert_eq!(s.model.unhealthy_count(), 3);
        s.publish_if_due();
        assert_eq!(s.published.borrow().at(), before, "put off");
        assert_eq!(s.pacer.due_at(), Some(timer));
    }
}
