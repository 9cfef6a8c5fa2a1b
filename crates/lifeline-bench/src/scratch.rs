//! Where benchmark legs keep their data: a scratch directory for SQLite
//! files and identities, and a database of its own on a PostgreSQL server.
//! Both are removed when the leg or the run is done; nothing here measures.

use std::path::PathBuf;

use super::BenchError;
use lifeline::clock::Ts;
use lifeline::config::DbUrl;

/// A scratch directory removed on drop.
pub(super) struct Scratch(PathBuf);

impl Scratch {
    pub(super) fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "lifeline-bench-{name}-{}-{}",
            std::process::id(),
            Ts::from_system(std::time::SystemTime::now()).as_micros()
        ));
        let _ = std::fs::create_dir_all(&p);
        Scratch(p)
    }
    pub(super) fn db(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
    /// Removes a finished leg's files: `name` and what SQLite and the leg
    /// kept beside it, so a run of many large legs holds one leg's files
    /// at a time.
    pub(super) fn remove(&self, name: &str) {
        for suffix in ["", "-wal", "-shm", "-journal", ".identity"] {
            let path = self.0.join(format!("{name}{suffix}"));
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    tracing::debug!(file = %path.display(), error = %e, "a bench leg's file stays until the run ends");
                }
                _ => {}
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A database of its own for one benchmark leg, created on a PostgreSQL
/// server and dropped by [`PgScratch::remove`].
pub(super) struct PgScratch {
    server: DbUrl,
    name: String,
    pub(super) url: DbUrl,
}

impl PgScratch {
    pub(super) async fn create(server: &DbUrl, leg: &str) -> Result<PgScratch, BenchError> {
        use sqlx::Connection;
        let name = format!(
            "lifeline_bench_{leg}_{}_{}",
            std::process::id(),
            Ts::from_system(std::time::SystemTime::now()).as_micros()
        );
        let mut url = url::Url::parse(server.expose())
            .map_err(|_| BenchError::Unavailable("--postgres is not a postgres:// URL"))?;
        url.set_path(&name);
        let mut conn = sqlx::PgConnection::connect(server.expose()).await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut conn)
            .await?;
        conn.close().await?;
        Ok(PgScratch {
            server: server.clone(),
            name,
            url: DbUrl::new(url.to_string()),
        })
    }

    /// Drops the database; a failure is only logged (the leg's figure
    /// stands).
    pub(super) async fn remove(self) {
        use sqlx::Connection;
        let dropped = async {
            let mut conn = sqlx::PgConnection::connect(self.server.expose()).await?;
            sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.name
            )))
            .execute(&mut conn)
            .await?;
            conn.close().await
        };
        if let Err(e) = dropped.await {
            tracing::warn!(database = %self.name, error = %e, "cannot drop the benchmark's database");
        }
    }
}
