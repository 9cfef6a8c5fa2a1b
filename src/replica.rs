//! The replica room: this process among several Lifelines on one
//! PostgreSQL database. Every replica watches the cluster and classifies
//! on its own; this room decides which one acts.
//!
//! Owns: the leader lease loop (take, renew, step down before the lease
//! ends when the database cannot be reached, give it up at shutdown), this
//! replica's heartbeat, the record of which agent streams it holds, the
//! notifications that wake it (signals to deliver, settings that changed),
//! and the leader's chores (signals nobody will answer, replicas long
//! gone). Publishes [`Leadership`] for everyone else to read.
//!
//! Must not touch: history rows (the store's writer writes them, fenced by
//! the term this room hands the fleet), agent streams (the hub's) or
//! signal rules (the signals room's). On SQLite there is nothing to do:
//! the process is alone and always leads ([`Standing`]).

pub mod lease;
mod peers;

pub use peers::Replicas;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::{PgListener, PgPoolOptions};
use sqlx::PgPool;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::backoff::Backoff;
use crate::clock::{Clock, Ts};
use crate::fleet::FleetHandle;
use crate::settings::Settings;
use crate::signals::hub::Hub;
use crate::signals::peers::{Alone, Inbound, Peers};
use crate::stats::Stats;
use crate::store::db_time::DbTime;
use crate::store::lease::SETTINGS_CHANNEL;
use crate::store::read;
use crate::store::signals as audit;
use crate::store::{Db, StoreError};
use crate::store::{Fence, Leadership};
use lease::Attempt;

/// What the room needs to know about this replica.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    pub name: String,
    pub lease: Duration,
    /// Shown to operators (and to other replicas' dashboards).
    pub http_addr: String,
    pub grpc_addr: String,
    /// A signal unanswered this long after it was made is over.
    pub ack_timeout: Duration,
}

impl ReplicaConfig {
    /// `[storage]`'s replica settings for a process listening on these
    /// addresses; unnamed, it is `<hostname>:<HTTP port>`.
    pub fn new(
        cfg: &crate::config::Config,
        http: std::net::SocketAddr,
        grpc: std::net::SocketAddr,
    ) -> ReplicaConfig {
        ReplicaConfig {
            name: cfg
                .storage
                .replica
                .clone()
                .unwrap_or_else(|| default_name(http)),
            lease: cfg.storage.leader_lease,
            http_addr: http.to_string(),
            grpc_addr: grpc.to_string(),
            ack_timeout: cfg.signals.ack_timeout,
        }
    }
}

/// `<hostname>:<HTTP port>`: what a replica is called unless named.
fn default_name(http: std::net::SocketAddr) -> String {
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

/// How often the leader renews, as a share of the lease: four renewals
/// may fail before it steps down.
const RENEW_SHARE: u32 = 5;
/// How often the agent streams this replica holds are written down.
const STREAMS_EVERY: Duration = Duration::from_millis(250);
/// How often the others' streams are read (the leader's reach).
const REMOTE_EVERY: Duration = Duration::from_secs(1);
/// How often the leader's chores run.
const CHORES_EVERY: Duration = Duration::from_secs(5);
/// Replicas silent this long leave the registry.
const FORGET_REPLICAS_AFTER: Duration = Duration::from_secs(24 * 3600);
/// Unanswered signals timed out per chore round.
const SWEEP_LIMIT: i64 = 1000;
/// Missed signals delivered each time the listener is back.
const CATCH_UP_LIMIT: i64 = 1000;
/// How often the listening connection is probed (see [`listen`]).
const PROBE_EVERY: Duration = Duration::from_secs(10);
/// The longest time between two reads of pending signals and settings
/// while the listener seems well (a notification can be lost without the
/// connection failing); a third of `signals.ack_timeout` when shorter, so
/// that a signal whose notification was lost is delivered before its
/// deadline.
const MAKE_UP_EVERY: Duration = Duration::from_secs(10);

/// What this process is on its database, decided once at start: alone
/// (SQLite: it always leads, with nothing to fence or relay) or one replica
/// among several (PostgreSQL: it follows until the lease says otherwise).
/// The other rooms read what they need from it; [`Standing::start`] runs
/// the replica's loops, if any.
pub struct Standing {
    /// What the fleet stamps its batches with at start.
    pub fence: Fence,
    pub leadership: watch::Receiver<Leadership>,
    /// The other replicas, as the hub sees them ([`Alone`] on SQLite).
    pub peers: Arc<dyn Peers>,
    /// The lease loop's side, among replicas, and the database's clock.
    lead: Option<(PgPool, watch::Sender<Leadership>, DbTime)>,
}

impl Standing {
    pub fn new(db: &Db, name: &str, lease: Duration, clock: Clock) -> Standing {
        let now = clock.now();
        match db {
            Db::Sqlite(_) => {
                let (_, leadership) = watch::channel(Leadership::sole(name, now));
                Standing {
                    fence: Fence::Sole,
                    leadership,
                    peers: Arc::new(Alone(clock)),
                    lead: None,
                }
            }
            Db::Postgres(pool) => {
                let (tx, leadership) = watch::channel(Leadership::follower(name, now));
                let db_time = DbTime::new(clock);
                Standing {
                    fence: Fence::Follower,
                    leadership,
                    peers: Arc::new(Replicas {
                        me: name.into(),
                        pool: pool.clone(),
                        lease,
                        db_time: db_time.clone(),
                    }),
                    lead: Some((pool.clone(), tx, db_time)),
                }
            }
        }
    }

    /// Records this replica and starts its loops; alone on its database
    /// there is nothing to start.
    pub async fn start(
        self,
        cfg: ReplicaConfig,
        rooms: Rooms,
        rt: &mut crate::supervise::Runtime,
    ) -> Result<Option<Departure>, StoreError> {
        let Some((pool, leadership, db_time)) = self.lead else {
            return Ok(None);
        };
        let p = Parts {
            cfg,
            pool,
            rooms,
            leadership,
            db_time,
        };
        let (tasks, departure) = start(p, rt.shutdown.clone()).await?;
        for t in tasks {
            rt.tasks.critical("replica", t);
        }
        Ok(Some(departure))
    }
}

/// The rooms a replica's loops hand their findings to.
pub struct Rooms {
    pub db: Db,
    pub fleet: FleetHandle,
    pub hub: Arc<Hub>,
    pub settings: Arc<Settings>,
    pub stats: Arc<Stats>,
    pub clock: Clock,
}

/// Everything a replica runs besides what a sole process runs.
struct Parts {
    cfg: ReplicaConfig,
    pool: PgPool,
    rooms: Rooms,
    leadership: watch::Sender<Leadership>,
    /// The database's clock, measured by the heartbeat.
    db_time: DbTime,
}

/// What a replica does on its way out, once its last writes are in.
pub struct Departure {
    pool: PgPool,
    name: String,
    leadership: watch::Receiver<Leadership>,
}

impl Departure {
    /// Gives the lease up (the others need not wait for it to lapse) and
    /// forgets this replica's agent streams.
    pub async fn leave(self) {
        let (leading, term) = {
            let l = self.leadership.borrow();
            (l.leading, l.term)
        };
        if leading {
            match lease::release(&self.pool, &self.name, term).await {
                Ok(()) => info!(term, "leader lease given up at shutdown"),
                Err(e) => {
                    warn!(term, error = %e, "cannot give the lease up at shutdown: it lapses on its own")
                }
            }
        }
        if let Err(e) = lease::leave(&self.pool, &self.name).await {
            warn!(error = %e, "cannot record this replica leaving: its heartbeat goes stale on its own");
        }
    }
}

/// Holds this replica's name on a connection of its own until `stop`
/// (or until the process dies, which ends the session): two live
/// processes with one name would both pass the fence as the same leader.
/// A predecessor whose session is still closing gets a lease to finish.
async fn hold_name(p: &Parts, stop: CancellationToken) -> Result<(), StoreError> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect_with(&p.pool.connect_options()).await?;
    let give_up = p.rooms.clock.deadline_in(p.cfg.lease);
    while !lease::hold_name(&mut conn, &p.cfg.name).await? {
        if p.rooms.clock.instant() >= give_up {
            let _ = conn.close().await;
            return Err(StoreError::ReplicaNameTaken {
                name: p.cfg.name.clone(),
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::spawn(async move {
        stop.cancelled().await;
        let _ = conn.close().await;
    });
    Ok(())
}

async fn start(
    p: Parts,
    stop: CancellationToken,
) -> Result<(Vec<JoinHandle<()>>, Departure), StoreError> {
    hold_name(&p, stop.clone()).await?;
    lease::register(&p.pool, &p.cfg.name, &p.cfg.http_addr, &p.cfg.grpc_addr).await?;
    info!(replica = %p.cfg.name, lease = ?p.cfg.lease, "replica registered; following until the lease says otherwise");
    let departure = Departure {
        pool: p.pool.clone(),
        name: p.cfg.name.clone(),
        leadership: p.leadership.subscribe(),
    };
    let p = Arc::new(p);
    let tasks = vec![
        tokio::spawn(lease_loop(p.clone(), stop.clone()).instrument(info_span!("replica.lease"))),
        tokio::spawn(listen(p.clone(), stop.clone()).instrument(info_span!("replica.listen"))),
        tokio::spawn(streams(p.clone(), stop.clone()).instrument(info_span!("replica.streams"))),
        tokio::spawn(chores(p, stop).instrument(info_span!("replica.chores"))),
    ];
    Ok((tasks, departure))
}

/// Where the lease loop stands.
struct Lease {
    /// The term this replica leads in, if it does.
    term: Option<i64>,
    /// Monotonic instant past which it must not act as leader without a
    /// renewal: a wall clock step cannot stretch it, and a process paused
    /// (SIGSTOP, a VM freeze) finds it passed when it wakes.
    valid_until: Instant,
    /// Consecutive failures to reach the database (for the log).
    failures: u32,
}

async fn lease_loop(p: Arc<Parts>, stop: CancellationToken) {
    let cfg = &p.cfg;
    let renew_every = cfg.lease / RENEW_SHARE;
    let mono = || p.rooms.clock.instant();
    let mut st = Lease {
        term: None,
        valid_until: mono(),
        failures: 0,
    };
    loop {
        let started = mono();
        // Validity first: a leader that slept past it (paused, starved)
        // stops acting before anything else, and whatever it takes next
        // is a new tenure.
        if st.term.is_some() && started >= st.valid_until {
            step_down(
                &p,
                &mut st,
                "its validity ran out before it could renew (was it paused?)",
            );
        }
        // A leader waits for an answer no longer than it may still lead.
        let budget = match st.term {
            Some(_) => renew_every
                .min(st.valid_until.saturating_duration_since(started))
                .max(Duration::from_millis(10)),
            None => renew_every,
        };
        let attempt = tokio::time::timeout(
            budget,
            lease::try_lead(&p.pool, &cfg.name, cfg.lease, st.term),
        )
        .await;
        let wait = match attempt {
            Ok(Ok(Attempt::Ours(t))) => {
                st.failures = 0;
                // The database's deadline is `lease` after it ran the
                // statement, which was after `started`: stepping down a
                // renewal early leaves the lease ours until then.
                st.valid_until = started + (cfg.lease - renew_every);
                let valid_until = st.valid_until;
                // Moved without waking anyone: only who leads is news.
                p.leadership.send_if_modified(|l| {
                    l.valid_until = Some(valid_until);
                    false
                });
                if st.term != Some(t.term) {
                    take_lead(&p, &mut st, t.term).await;
                }
                renew_every
            }
            Ok(Ok(Attempt::Theirs(held))) => {
                st.failures = 0;
                step_down(&p, &mut st, "another replica holds the lease");
                set_leader(&p, Some(held.holder.clone()), held.term);
                // Look again just after it would lapse, or at the usual pace.
                let left = Duration::from_micros(
                    held.deadline_us.saturating_sub(held.now_us).max(0) as u64,
                );
                left.saturating_add(Duration::from_millis(20))
                    .min(renew_every)
            }
            Ok(Ok(Attempt::Nobody)) => Duration::from_millis(50),
            Ok(Err(e)) => {
                unreachable(&p, &mut st, &e.to_string());
                renew_every / 2
            }
            Err(_) => {
                unreachable(&p, &mut st, &format!("no answer within {budget:?}"));
                renew_every / 2
            }
        };
        if st.failures > 0 && st.term.is_some() && mono() >= st.valid_until {
            step_down(&p, &mut st, "the lease could not be renewed before it ends");
        }
        // A leader that cannot renew wakes exactly when it must step down.
        let wait = match st.term {
            Some(_) => wait.min(st.valid_until.saturating_duration_since(mono())),
            None => wait,
        };
        tokio::select! {
            _ = stop.cancelled() => break,
            _ = tokio::time::sleep(wait) => {}
        }
    }
    // The lease stays held until the last writes are in: see `Departure`.
}

/// This replica holds the lease in a new term: the fleet goes on from the
/// database's open episodes, then the others may see it lead.
async fn take_lead(p: &Parts, st: &mut Lease, term: i64) {
    let (open, next) = match read::open_episodes(&p.rooms.db).await {
        Ok(v) => v,
        Err(e) => {
            // Not leading yet: the next renewal tries again.
            warn!(term, error = %e, "holding the lease but cannot read the open episodes; not leading yet");
            return;
        }
    };
    let fence = Fence::Leader {
        replica: p.cfg.name.as_str().into(),
        term,
    };
    if p.rooms.fleet.lead(fence, open, next).await.is_err() {
        return;
    }
    st.term = Some(term);
    info!(
        term,
        "this replica leads: it writes history and sends automatic signals"
    );
    let now = p.rooms.clock.now();
    let valid_until = st.valid_until;
    p.leadership.send_modify(|l| {
        l.leader = Some(p.cfg.name.clone());
        l.term = term;
        l.leading = true;
        l.valid_until = Some(valid_until);
        l.since = Some(now);
    });
}

fn step_down(p: &Parts, st: &mut Lease, why: &str) {
    let Some(term) = st.term.take() else {
        return;
    };
    warn!(term, why, "this replica no longer leads");
    let fleet = p.rooms.fleet.clone();
    // The fleet stops stamping batches as the leader's; the database's
    // fence already refuses them.
    tokio::spawn(async move {
        let _ = fleet.follow().await;
    });
    let now = p.rooms.clock.now();
    p.leadership.send_modify(|l| {
        l.leading = false;
        l.valid_until = None;
        l.since = Some(now);
        if l.leader.as_deref() == Some(p.cfg.name.as_str()) {
            l.leader = None;
        }
    });
}

fn set_leader(p: &Parts, leader: Option<String>, term: i64) {
    p.leadership.send_if_modified(|l| {
        let changed = l.leader != leader || l.term != term;
        l.leader = leader;
        l.term = term;
        changed
    });
}

fn unreachable(p: &Parts, st: &mut Lease, error: &str) {
    st.failures += 1;
    if st.failures == 1 {
        warn!(
            error,
            leading = st.term.is_some(),
            "cannot reach the database for the leader lease"
        );
    } else {
        debug!(
            error,
            failures = st.failures,
            "still cannot reach the database for the lease"
        );
    }
    if st.term.is_none() {
        set_leader(p, None, 0);
    }
}

/// Listens for signals to deliver and settings that changed. Missed
/// notifications are made up for (see [`make_up`]) each time it listens
/// again and at least every [`MAKE_UP_EVERY`] besides. Every [`PROBE_EVERY`] it
/// sends itself a probe through the database; a probe not heard back by
/// the next one means the connection is dead without having said so (a
/// peer gone silent, a black-holed route): it is dropped and made again.
async fn listen(p: Arc<Parts>, stop: CancellationToken) {
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
                                Stats::inc(&p.rooms.stats.listen_probes_lost);
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
        Stats::add(&p.rooms.stats.signals_caught_up, n as u64);
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

/// Writes down which agent streams this replica holds (the others read it
/// to relay signals), and reads which the others hold.
async fn streams(p: Arc<Parts>, stop: CancellationToken) {
    let hub = &p.rooms.hub;
    let mut written: HashSet<String> = HashSet::new();
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
            let now: HashSet<String> = hub.connected_agents().into_iter().collect();
            let opened: Vec<String> = now.difference(&written).cloned().collect();
            let closed: Vec<String> = written.difference(&now).cloned().collect();
            let mut ok = true;
            if !opened.is_empty() {
                match lease::claim_streams(&p.pool, &p.cfg.name, &opened, p.rooms.clock.now()).await
                {
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
        let t = p.rooms.clock.now();
        if t.since(last_remote) >= REMOTE_EVERY {
            last_remote = t;
            match lease::remote_streams(&p.pool, &p.cfg.name, p.cfg.lease).await {
                Ok(remote) => hub.set_remote(remote),
                Err(e) => debug!(error = %e, "cannot read the other replicas' streams; next round"),
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
    if !p.rooms.clock.is_wall() {
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
    p.rooms
        .stats
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
async fn chores(p: Arc<Parts>, stop: CancellationToken) {
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
        let now = p.rooms.clock.now();
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
        match lease::sweep_unanswered(&p.pool, before, SWEEP_LIMIT).await {
            Ok(0) => {}
            Ok(n) => {
                Stats::add(&p.rooms.stats.signals_swept, n);
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
