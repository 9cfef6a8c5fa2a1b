//! The store room: history and last known state, on SQLite (one file, the
//! default) or PostgreSQL (shared by several replicas).
//!
//! Owns: the database, its schema (`migrations/<engine>/`), the writer
//! task and the read queries the API uses. Receives `WriteBatch`es from the
//! fleet over a bounded channel and commits each in one transaction (on
//! PostgreSQL, its current state and its history in two, at once); nobody
//! else writes. Must not touch: current state (the fleet owns it) or the network.
//! The ingest path never waits on a commit: the fleet keeps a pending batch
//! and hands it over whenever the writer has room.

pub mod batch;
mod bulk;
pub mod clusters;
mod commit;
pub mod db_time;
pub mod health;
pub mod incidents;
pub mod keys;
pub mod lease;
pub mod maintenance;
pub mod outbox;
pub mod read;
pub mod retention;
pub mod settings;
pub mod signals;
pub mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Connection;
use sqlx::{PgPool, SqlitePool};

pub use crate::config::Engine;
pub use batch::WriteBatch;
pub use lease::{Fence, Leadership};
pub use writer::WriterHandle;

/// How long anyone waits for a database connection: a reader stuck behind
/// a busy writer gets a clear 503 after this; the writer retries on its
/// own schedule.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

/// The server's own bound on one statement (`statement_timeout`).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a PostgreSQL query may go unanswered before the client gives
/// up on it: a little past the server's own `statement_timeout`, so that a
/// server that can still speak says why first, and only a silent one (a
/// dropped route, a peer gone) is cut off here.
pub const QUERY_DEADLINE: Duration = Duration::from_secs(65);

/// How long a connection returned to the pool may take to answer a ping
/// before it is closed instead: a query abandoned at its deadline leaves
/// its connection waiting on the same silent socket.
const RELEASE_PING: Duration = Duration::from_secs(2);

/// How long the store waits: for a connection, and (PostgreSQL) for a
/// query's answer. On a paused test clock a real thread's or socket's few
/// milliseconds can span seconds of virtual time, so tests lengthen both.
#[derive(Clone, Copy, Debug)]
pub struct Waits {
    pub acquire: Duration,
    pub query: Duration,
}

impl Waits {
    /// What a running Lifeline waits.
    pub const PRODUCTION: Waits = Waits {
        acquire: ACQUIRE_TIMEOUT,
        query: QUERY_DEADLINE,
    };

    /// Both waits `d`: for tests on a paused clock.
    pub const fn patient(d: Duration) -> Waits {
        Waits {
            acquire: d,
            query: d,
        }
    }
}

/// Connections to a PostgreSQL server per replica: the writer, the signal
/// audit, settings, the lease, the notification listener and API readers.
const PG_CONNECTIONS: u32 = 10;
/// SQLite's pool: one writer and readers.
pub const SQLITE_CONNECTIONS: u32 = 4;
/// SQLite's page cache, per connection, in KiB (`PRAGMA cache_size` with
/// a negative value counts KiB): the index pages of 100 k resources fit;
/// the default 2 MiB does not. The memory budget counts it for every
/// connection.
pub const SQLITE_CACHE_KIB: u32 = 65_536;

/// The file descriptors the store holds at most on `engine`: its pool's
/// connections (SQLite's each hold the database, its WAL and shared
/// memory).
pub fn descriptors(engine: &Engine) -> u64 {
    match engine {
        Engine::Postgres(_) => u64::from(PG_CONNECTIONS),
        Engine::Sqlite(_) => u64::from(SQLITE_CONNECTIONS) * 3,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory for {path}: {source}")]
    Dir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot open database {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("cannot open database {path}: no answer within {after:?}")]
    NoAnswer { path: String, after: Duration },
    #[error("database {path} is locked by another process (is another Lifeline running on it?)")]
    Locked { path: String },
    #[error("cannot migrate database {path}: {source}")]
    Migrate {
        path: String,
        source: sqlx::migrate::MigrateError,
    },
    #[error("database {path} was migrated by a newer Lifeline (schema {version}); this release knows schema {ours}: run the newer release on it, or a copy made before")]
    Newer {
        path: String,
        version: i64,
        ours: i64,
    },
    #[error("database {path} is at schema {applied} and this release changes it to schema {newest}, which the replicas still running on it ({replicas}) cannot write: stop them, then start this release (a rolling upgrade across a schema change is refused, never half-applied)")]
    UpgradeWhileLive {
        path: String,
        applied: i64,
        newest: i64,
        replicas: String,
    },
    #[error("another live Lifeline runs as replica {name:?} on this database: give each replica a name of its own (storage.replica, LIFELINE_REPLICA)")]
    ReplicaNameTaken { name: String },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("the store writer has stopped")]
    WriterGone,
}

/// The store's database: one pool on one engine. Every query is written
/// once and compiled for both engines through [`on_pool!`]; the rooms
/// outside only pass a `Db` around.
#[derive(Clone, Debug)]
pub enum Db {
    Sqlite(SqlitePool),
    Postgres(Pg),
}

/// A PostgreSQL pool and how long its queries may go unanswered. SQLite
/// needs no such bound: its file is local and its locks wait at most its
/// busy timeout.
#[derive(Clone, Debug)]
pub struct Pg {
    pub pool: PgPool,
    pub deadline: Duration,
}

impl std::ops::Deref for Pg {
    type Target = PgPool;
    fn deref(&self) -> &PgPool {
        &self.pool
    }
}

impl Pg {
    /// Runs `fut` on this pool's deadline (see [`bounded`]).
    pub async fn bounded<T, E: From<sqlx::Error>>(
        &self,
        fut: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        bounded(self.deadline, fut).await
    }
}

/// `fut`, or an I/O `TimedOut` error once `deadline` has passed without
/// its answer. The abandoned query's connection is closed when the pool
/// takes it back (see [`RELEASE_PING`]), never handed out again on a socket
/// that does not answer.
pub async fn bounded<T, E: From<sqlx::Error>>(
    deadline: Duration,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, E> {
    match tokio::time::timeout(deadline, fut).await {
        Ok(r) => r,
        Err(_) => {
            QUERIES_TIMED_OUT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Err(E::from(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no answer from the database within {deadline:?}"),
            ))))
        }
    }
}

/// PostgreSQL queries given up at their deadline, since start.
pub static QUERIES_TIMED_OUT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
/// Connections closed because they did not answer when taken back.
pub static CONNECTIONS_CLOSED_SILENT: std::sync::atomic::AtomicU64 =
    std::sync::atomic::AtomicU64::new(0);

/// Runs `$body` with `$pool` bound to the engine's own pool type: the same
/// text (placeholders `$1`, `$2`, … in order, which both engines read) is
/// compiled once per engine, with no dynamic dispatch on the hot path. On
/// PostgreSQL the whole body runs on the pool's deadline ([`bounded`]).
/// Exported for the benches, which write their seed rows the same way.
#[macro_export]
macro_rules! on_pool {
    ($db:expr, $pool:ident => $body:expr) => {
        match $db {
            $crate::store::Db::Sqlite($pool) => $body,
            $crate::store::Db::Postgres(pg) => {
                let $pool = &pg.pool;
                pg.bounded(async { $body }).await
            }
        }
    };
}
pub use crate::on_pool;

impl Db {
    /// `sqlite` or `postgres`.
    pub fn engine_name(&self) -> &'static str {
        match self {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// Closes every connection (waits for those in use).
    pub async fn close(&self) {
        match self {
            Db::Sqlite(pool) => pool.close().await,
            Db::Postgres(pg) => pg.pool.close().await,
        }
    }
}

/// `open`'s condition on `ended_us` (episodes and incidents alike): only
/// the open ones, only the ended ones, or both.
fn push_open<DB: sqlx::Database>(q: &mut sqlx::QueryBuilder<DB>, open: Option<bool>) {
    match open {
        Some(true) => q.push(" AND ended_us IS NULL"),
        Some(false) => q.push(" AND ended_us IS NOT NULL"),
        None => q,
    };
}

/// True when the database refused a statement for what it holds, so that
/// trying it again can never succeed: PostgreSQL's data exceptions (class
/// 22: a NUL in text, a number out of range) and integrity violations
/// (class 23), SQLite's constraint, type-mismatch, too-big and range
/// errors, and a value the driver cannot encode. Everything else (a lost
/// connection, a lock, a full disk, a timeout) is transient.
pub fn is_permanent(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Encode(_) => true,
        sqlx::Error::Database(d) => {
            if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
                .is_some()
            {
                let code = d.code().unwrap_or_default();
                return code.starts_with("22") || code.starts_with("23");
            }
            // SQLite: the extended result code; its low byte is the primary.
            d.code()
                .and_then(|c| c.parse::<u32>().ok())
                .is_some_and(|c| matches!(c & 0xff, 18 | 19 | 20 | 25))
        }
        _ => false,
    }
}

fn is_locked(e: &sqlx::Error) -> bool {
    let text = e.to_string();
    text.contains("database is locked") || text.contains("SQLITE_BUSY")
}

/// Opens (creating a missing SQLite file) and migrates the database;
/// a caller waits at most `waits.acquire` for a connection and (on
/// PostgreSQL) `waits.query` for an answer ([`Waits::PRODUCTION`] unless a
/// test on a paused clock needs otherwise).
pub async fn open(engine: &Engine, waits: Waits) -> Result<Db, StoreError> {
    let acquire_timeout = waits.acquire;
    match engine {
        Engine::Sqlite(path) => open_sqlite(path, acquire_timeout).await.map(Db::Sqlite),
        Engine::Postgres(url) => {
            let shown = url.to_string();
            let open_error = |source| StoreError::Open {
                path: shown.clone(),
                source,
            };
            // A write stuck behind someone else's lock fails (and is
            // retried, and reported) instead of hanging unseen. A
            // transaction left open ends soon: a replica cut off from the
            // server mid-transaction would otherwise keep the leader lease
            // row locked (its writes check their term under a share lock)
            // and hold its successor back.
            let statement_timeout = format!("{}s", STATEMENT_TIMEOUT.as_secs());
            let opts = PgConnectOptions::from_str(url.expose())
                .map_err(open_error)?
                .application_name("lifeline")
                .options([
                    ("lock_timeout", "2s"),
                    ("statement_timeout", statement_timeout.as_str()),
                    ("idle_in_transaction_session_timeout", "2s"),
                ]);
            if let Some(why) = unverified_transport(url.expose()) {
                tracing::warn!(db = %shown, "{why}");
            }
            // One connection first: if the server cannot be reached, its
            // own error says why (the pool would only say it timed out).
            let first = tokio::time::timeout(acquire_timeout, PgConnection::connect_with(&opts))
                .await
                .map_err(|_| StoreError::NoAnswer {
                    path: shown.clone(),
                    after: acquire_timeout,
                })?
                .map_err(open_error)?;
            let _ = first.close().await;
            // Taken back after its query was abandoned, a connection on a
            // silent socket would answer sqlx's own ping never: pinged here
            // first, on a deadline, it is closed instead.
            let ping = RELEASE_PING.max(acquire_timeout);
            let pool = PgPoolOptions::new()
                .max_connections(PG_CONNECTIONS)
                .acquire_timeout(acquire_timeout)
                .after_release(move |conn, _| {
                    Box::pin(async move {
                        match tokio::time::timeout(ping, conn.ping()).await {
                            Ok(r) => r.map(|()| true),
                            Err(_) => {
                                CONNECTIONS_CLOSED_SILENT
                                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                tracing::warn!(
                                    "closing a database connection that did not answer within {ping:?}"
                                );
                                Err(sqlx::Error::Io(std::io::ErrorKind::TimedOut.into()))
                            }
                        }
                    })
                })
                .connect_with(opts)
                .await
                .map_err(open_error)?;
            let migrator = sqlx::migrate!("./migrations/postgres");
            if let Some(refusal) = schema_change_under_live_replicas(&pool, &migrator)
                .await
                .map_err(open_error)?
            {
                let (applied, replicas) = refusal;
                return Err(StoreError::UpgradeWhileLive {
                    path: shown,
                    applied,
                    newest: newest_schema(&migrator),
                    replicas: replicas.join(", "),
                });
            }
            migrator
                .run(&pool)
                .await
                .map_err(|source| migrate_error(&shown, &migrator, source))?;
            Ok(Db::Postgres(Pg {
                pool,
                deadline: waits.query,
            }))
        }
    }
}

/// The schema version this release migrates to.
fn newest_schema(m: &sqlx::migrate::Migrator) -> i64 {
    m.iter().map(|m| m.version).max().unwrap_or(0)
}

/// A migration that failed, named: one a newer release applied says so.
fn migrate_error(
    path: &str,
    m: &sqlx::migrate::Migrator,
    source: sqlx::migrate::MigrateError,
) -> StoreError {
    match source {
        sqlx::migrate::MigrateError::VersionMissing(version) => StoreError::Newer {
            path: path.to_string(),
            version,
            ours: newest_schema(m),
        },
        source => StoreError::Migrate {
            path: path.to_string(),
            source,
        },
    }
}

/// Whether migrating now would change the schema under replicas that
/// still run (each holds its name's advisory lock for as long as it
/// lives, see `lease::hold_name`): the schema version applied and those
/// replicas' names, or `None` when nothing is to be applied or nobody
/// else is live. Those replicas run an earlier release: they would fail
/// every write against the new keys.
async fn schema_change_under_live_replicas(
    pool: &PgPool,
    m: &sqlx::migrate::Migrator,
) -> Result<Option<(i64, Vec<String>)>, sqlx::Error> {
    let tables: (Option<String>, Option<String>) = sqlx::query_as(
        "SELECT to_regclass('_sqlx_migrations')::text, to_regclass('replicas')::text",
    )
    .fetch_one(pool)
    .await?;
    let (Some(_), Some(_)) = tables else {
        return Ok(None);
    };
    let applied: Option<i64> =
        sqlx::query_scalar("SELECT max(version) FROM _sqlx_migrations WHERE success")
            .fetch_one(pool)
            .await?;
    let applied = applied.unwrap_or(0);
    if applied >= newest_schema(m) {
        return Ok(None);
    }
    let live: Vec<String> = sqlx::query_scalar(
        "SELECT r.id FROM replicas r WHERE EXISTS (SELECT 1 FROM pg_locks l \
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 \
             AND ((l.classid::bigint << 32) | l.objid::bigint) \
                 = hashtextextended('lifeline-replica:' || r.id, 0)) \
         ORDER BY r.id",
    )
    .fetch_all(pool)
    .await?;
    Ok((!live.is_empty()).then_some((applied, live)))
}

/// Why bytes to the PostgreSQL server at `url` could be read or changed on
/// the way, or `None`: the server is on this machine (loopback or a Unix
/// socket), or `sslmode` is `verify-ca` or `verify-full`.
fn unverified_transport(url: &str) -> Option<String> {
    let u = url::Url::parse(url).ok()?;
    let mode = u
        .query_pairs()
        .find(|(k, _)| k == "sslmode")
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| "prefer".into());
    let socket = u
        .query_pairs()
        .any(|(k, v)| k == "host" && v.starts_with('/'));
    let local = match u.host() {
        None => true,
        // postgres:// is not a "special" scheme: an IPv4 host is a name.
        Some(url::Host::Domain(d)) => {
            d == "localhost"
                || d.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
    };
    if socket || local || matches!(mode.as_str(), "verify-ca" | "verify-full") {
        return None;
    }
    Some(format!(
        "storage.url leaves this machine with sslmode={mode}: the connection may be unencrypted or its server unverified; \
         add sslmode=verify-full (and sslrootcert=<CA file> for a private CA)"
    ))
}

/// Opens (creating if needed) the SQLite file in WAL mode and migrates it.
async fn open_sqlite(path: &Path, acquire_timeout: Duration) -> Result<SqlitePool, StoreError> {
    let shown = path.display().to_string();
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Dir {
            path: shown.clone(),
            source,
        })?;
    }
    let opts = SqliteConnectOptions::from_str("sqlite:")
        .map_err(|source| StoreError::Open {
            path: shown.clone(),
            source,
        })?
        .filename(path)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Normal)
        .busy_timeout(Duration::from_secs(2))
        .pragma("cache_size", format!("-{SQLITE_CACHE_KIB}"))
        .pragma("temp_store", "memory")
        .foreign_keys(false);
    let open_error = |source: sqlx::Error| {
        if is_locked(&source) {
            StoreError::Locked {
                path: shown.clone(),
            }
        } else {
            StoreError::Open {
                path: shown.clone(),
                source,
            }
        }
    };
    let pool = SqlitePoolOptions::new()
        .max_connections(SQLITE_CONNECTIONS)
        .acquire_timeout(acquire_timeout)
        .connect_with(opts)
        .await
        .map_err(open_error)?;
    // Taking the write lock once proves nobody else holds it.
    sqlx::query("BEGIN IMMEDIATE; COMMIT;")
        .execute(&pool)
        .await
        .map_err(open_error)?;
    let migrator = sqlx::migrate!("./migrations/sqlite");
    migrator
        .run(&pool)
        .await
        .map_err(|source| migrate_error(&shown, &migrator, source))?;
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::unverified_transport;

    #[test]
    fn a_remote_server_without_verified_tls_is_named() {
        for local in [
            "postgres://l@127.0.0.1:5432/db",
            "postgres://l@localhost/db",
            "postgres://l@[::1]/db",
            "postgres:///db?host=/run/postgresql",
            "postgres://l@db.internal/db?sslmode=verify-full",
            "postgres://l@db.internal/db?sslmode=verify-ca&sslrootcert=/ca.pem",
        ] {
            assert_eq!(unverified_transport(local), None, "{local}");
        }
        for (remote, mode) in [
            ("postgres://l@db.internal/db", "prefer"),
            ("postgres://l@10.0.0.5/db?sslmode=require", "require"),
            ("postgres://l@db.internal/db?sslmode=disable", "disable"),
        ] {
            let why = unverified_transport(remote).unwrap_or_default();
            assert!(
                why.contains(&format!("sslmode={mode}")) && why.contains("verify-full"),
                "{why}"
            );
        }
    }
}
