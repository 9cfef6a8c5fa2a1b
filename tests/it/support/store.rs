//! Which engine a test's store is on, and rows and SQL on either engine.

use std::sync::atomic::Ordering;

/// Which engine a test's Lifeline keeps its store on.
#[derive(Clone, Debug)]
pub enum Store {
    /// A file in the test's temp dir.
    Sqlite,
    /// A fresh database on the test PostgreSQL server: its URL.
    Postgres(String),
}

impl Store {
    /// A fresh PostgreSQL database for `test`; `None` (the test is
    /// skipped) without a server, except under `CI=true` (see
    /// [`fresh_postgres`]).
    pub async fn postgres(test: &str) -> Option<Store> {
        fresh_postgres(test).await.map(Store::Postgres)
    }

    /// The engine to open: the SQLite file at `file`, or the database.
    pub fn engine(&self, file: &std::path::Path) -> lifeline::store::Engine {
        match self {
            Store::Sqlite => lifeline::store::Engine::Sqlite(file.to_path_buf()),
            Store::Postgres(url) => {
                lifeline::store::Engine::Postgres(lifeline::config::DbUrl::new(url.clone()))
            }
        }
    }

    /// The store itself, migrated, without a Lifeline around it: a file in
    /// `dir`, or the database.
    pub async fn open(&self, dir: &std::path::Path) -> lifeline::store::Db {
        lifeline::store::open(
            &self.engine(&dir.join("lifeline.db")),
            lifeline::store::Waits::PRODUCTION,
        )
        .await
        .expect("the store opens")
    }
}

/// A row of the signal audit as the API would have written it, for
/// `agent-00001`, at `created`.
pub fn signal_row(
    id: i64,
    created: lifeline::Ts,
    outcome: lifeline::domain::Outcome,
) -> lifeline::store::signals::SignalRecord {
    lifeline::store::signals::SignalRecord {
        id,
        cluster: "default".into(),
        kind: lifeline::domain::SignalKind::Reconnect,
        agent: "agent-00001".into(),
        proxy: String::new(),
        reason: "test".into(),
        requested_by: "api".into(),
        created,
        delivered: None,
        acked: None,
        outcome,
        detail: String::new(),
        latency_ms: None,
        restart: false,
        deadline: None,
    }
}

/// The test PostgreSQL server's URL (`LIFELINE_TEST_POSTGRES_URL`, which
/// `.ci/postgres start` exports); `None`, said on stderr, without one,
/// except under `CI=true`, where that is a failure.
pub fn postgres_server(test: &str) -> Option<String> {
    let url = std::env::var("LIFELINE_TEST_POSTGRES_URL")
        .ok()
        .filter(|u| !u.is_empty());
    if url.is_none() {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "{test}: CI=true but LIFELINE_TEST_POSTGRES_URL is not set (eval \"$(.ci/postgres start)\")"
        );
        eprintln!("SKIPPED {test}: no PostgreSQL (eval \"$(.ci/postgres start)\" to run it)");
    }
    url
}

/// A fresh, empty database on the test PostgreSQL server
/// (`LIFELINE_TEST_POSTGRES_URL`, which `.ci/postgres start` exports): its
/// URL. Without a server the test is skipped, said on stderr, except under
/// `CI=true`, where that is a failure.
pub async fn fresh_postgres(test: &str) -> Option<String> {
    use sqlx::Connection;
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let admin = postgres_server(test)?;
    // What makes it unique first: PostgreSQL cuts names at 63 bytes.
    let mut name = format!(
        "t_{}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        test.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
    );
    name.truncate(63);
    let mut conn = sqlx::PgConnection::connect(&admin)
        .await
        .unwrap_or_else(|e| panic!("{test}: cannot reach {admin}: {e}"));
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
        .execute(&mut conn)
        .await
        .expect("database created");
    let base = admin.rsplit_once('/').map_or(admin.as_str(), |(b, _)| b);
    Some(format!("{base}/{name}"))
}

/// `sql` (one number, e.g. a `COUNT(*)`) on either engine.
pub async fn sql_i64(db: &lifeline::store::Db, sql: &'static str) -> i64 {
    use lifeline::store::Db;
    let n = match db {
        Db::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await,
        Db::Postgres(p) => sqlx::query_scalar(sql).fetch_one(&p.pool).await,
    };
    n.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// Runs `sql` (no result) on either engine.
pub async fn sql_exec(db: &lifeline::store::Db, sql: &'static str) {
    use lifeline::store::Db;
    let r = match db {
        Db::Sqlite(p) => sqlx::query(sql).execute(p).await.map(drop),
        Db::Postgres(p) => sqlx::query(sql).execute(&p.pool).await.map(drop),
    };
    r.unwrap_or_else(|e| panic!("{sql}: {e}"))
}
