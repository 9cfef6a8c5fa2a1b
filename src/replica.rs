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
mod listen;
mod peers;
mod term;
mod upkeep;

pub use peers::Replicas;

use std::sync::Arc;
use std::time::Duration;

use crate::store::Pg;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, info_span, warn, Instrument};

use crate::clock::Clock;
use crate::fleet::FleetHandle;
use crate::settings::Settings;
use crate::signals::hub::Hub;
use crate::signals::peers::{Alone, Peers};
use crate::stats::Stats;
use crate::store::db_time::DbTime;
use crate::store::{Db, StoreError};
use crate::store::{Fence, Leadership};

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
        .or_else(|| std::env::var("HOSTNAME").ok());
    name_from(host.as_deref(), http.port())
}

/// `<host>:<port>`, at most `MAX_REPLICA_NAME` bytes, cut at a character
/// boundary (a hostname may be UTF-8: its 63rd byte may fall inside a
/// character); a host that is empty, has whitespace or control characters
/// is `lifeline`.
fn name_from(host: Option<&str>, port: u16) -> String {
    let host = host
        .map(str::trim)
        .filter(|h| !h.is_empty() && !h.chars().any(|c| c.is_whitespace() || c.is_control()))
        .unwrap_or("lifeline");
    let mut name = format!("{host}:{port}");
    let mut cut = name.len().min(crate::config::MAX_REPLICA_NAME);
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    name.truncate(cut);
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
/// How often the listening connection is probed (see [`listen::listen`]).
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
    lead: Option<(Pg, watch::Sender<Leadership>, DbTime)>,
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
            stats: rt.stats.clone(),
            clock: rt.clock,
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
    pub maintenance: Arc<crate::maintenance::Maintenance>,
}

/// Everything a replica runs besides what a sole process runs.
struct Parts {
    cfg: ReplicaConfig,
    pool: Pg,
    rooms: Rooms,
    leadership: watch::Sender<Leadership>,
    /// The database's clock, measured by the heartbeat.
    db_time: DbTime,
    stats: Arc<Stats>,
    clock: Clock,
}

/// What a replica does on its way out, once its last writes are in.
pub struct Departure {
    pool: Pg,
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
    let mut conn = p
        .pool
        .bounded(sqlx::PgConnection::connect_with(&p.pool.connect_options()))
        .await?;
    let give_up = p.clock.deadline_in(p.cfg.lease);
    while !p
        .pool
        .bounded(lease::hold_name(&mut conn, &p.cfg.name))
        .await?
    {
        if p.clock.instant() >= give_up {
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
        tokio::spawn(
            term::lease_loop(p.clone(), stop.clone()).instrument(info_span!("replica.lease")),
        ),
        tokio::spawn(
            listen::listen(p.clone(), stop.clone()).instrument(info_span!("replica.listen")),
        ),
        tokio::spawn(
            upkeep::streams(p.clone(), stop.clone()).instrument(info_span!("replica.streams")),
        ),
        tokio::spawn(upkeep::chores(p, stop).instrument(info_span!("replica.chores"))),
    ];
    Ok((tasks, departure))
}

#[cfg(test)]
mod name_tests {
    use super::name_from;
    use crate::config::MAX_REPLICA_NAME;

    #[test]
    fn a_long_non_ascii_hostname_is_cut_at_a_character_boundary() {
        // 70 bytes: 35 two-byte characters, so byte 63 falls inside one.
        let host = "é".repeat(35);
        assert_eq!(host.len(), 70);
        let name = name_from(Some(&host), 8080);
        assert!(name.len() <= MAX_REPLICA_NAME, "{name}");
        assert!(name.chars().all(|c| c == 'é'), "{name}");
        for cut in 0..4 {
            let host = format!("{}{}", "a".repeat(cut), "€".repeat(30));
            let name = name_from(Some(&host), 1);
            assert!(name.len() <= MAX_REPLICA_NAME && name.starts_with(&"a".repeat(cut)));
        }
        assert_eq!(name_from(Some("web-1\n"), 80), "web-1:80");
        assert_eq!(name_from(Some("a b"), 80), "lifeline:80");
        assert_eq!(name_from(Some("a\u{7}b"), 80), "lifeline:80");
        assert_eq!(name_from(None, 80), "lifeline:80");
    }
}
