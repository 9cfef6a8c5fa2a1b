//! The store room: SQLite history and last known state.
//!
//! Owns: the database file, its schema (`migrations/`), the single writer task
//! and the read queries the API uses. Receives `WriteBatch`es from the fleet
//! over a bounded channel and commits each in one transaction; nobody else
//! writes. Must not touch: current state (the fleet owns it) or the network.
//! The ingest path never waits on a commit: the fleet keeps a pending batch
//! and hands it over whenever the writer has room.

pub mod batch;
pub mod health;
pub mod read;
pub mod settings;
pub mod signals;
pub mod writer;

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::SqlitePool;

pub use batch::{EpisodeOp, EventRow, HealthRow, WriteBatch};
pub use writer::WriterHandle;

/// How long anyone waits for a database connection: a reader stuck behind
/// a busy writer gets a clear 503 after this; the writer retries on its
/// own schedule.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the directory for {path}: {source}")]
    Dir {
        path: String,
        source: std::io::Error,
    },
    #[error("cannot open database {path}: {source}")]
    Open { path: String, source: sqlx::Error },
    #[error("database {path} is locked by another process (is another Lifeline running on it?)")]
    Locked { path: String },
    #[error("cannot migrate database {path}: {source}")]
    Migrate {
        path: String,
        source: sqlx::migrate::MigrateError,
    },
    #[error("database query failed: {0}")]
    Query(#[from] sqlx::Error),
    #[error("the store writer has stopped")]
    WriterGone,
}

fn is_locked(e: &sqlx::Error) -> bool {
    let text = e.to_string();
    text.contains("database is locked") || text.contains("SQLITE_BUSY")
}

/// Opens (creating if needed) the database in WAL mode and migrates it.
/// Opens (creating if needed) and migrates the database at `path`; a caller
/// waits at most `acquire_timeout` for a connection ([`ACQUIRE_TIMEOUT`]
/// unless a test on a paused clock needs otherwise).
pub async fn open(path: &Path, acquire_timeout: Duration) -> Result<SqlitePool, StoreError> {
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
        // Index pages of 100k resources fit; the default 2 MiB does not.
        .pragma("cache_size", "-65536")
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
        .max_connections(4)
        .acquire_timeout(acquire_timeout)
        .connect_with(opts)
        .await
        .map_err(open_error)?;
    // Taking the write lock once proves nobody else holds it.
    sqlx::query("BEGIN IMMEDIATE; COMMIT;")
        .execute(&pool)
        .await
        .map_err(open_error)?;
    sqlx::migrate!("./migrations/sqlite")
        .run(&pool)
        .await
        .map_err(|source| StoreError::Migrate {
            path: shown.clone(),
            source,
        })?;
    Ok(pool)
}
