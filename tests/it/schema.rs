//! The store's two schemas, SQLite's (`migrations/sqlite`) and
//! PostgreSQL's (`migrations/postgres`), each applied to a real database:
//! the same tables, columns (name, order, type, nullability), primary keys
//! and indexes, so that neither engine can drift from the other; and the
//! enums the store writes, stored by name in text columns on both.

use std::collections::BTreeMap;

use sqlx::{Connection, Row};

use crate::support::fresh_postgres;

/// A column: name, type as both engines mean it, nullable, in the key.
type Column = (String, &'static str, bool, bool);
/// Table → columns in order; and every index by name.
type Schema = (BTreeMap<String, Vec<Column>>, Vec<String>);

fn kind_of(declared: &str) -> &'static str {
    match declared.to_ascii_lowercase().as_str() {
        "integer" | "bigint" => "int64",
        "text" => "text",
        other => panic!("a column type outside the shared set: {other}"),
    }
}

async fn sqlite_schema() -> Schema {
    let dir = tempfile::tempdir().expect("temp dir");
    let engine = lifeline::store::Engine::Sqlite(dir.path().join("s.db"));
    let lifeline::store::Db::Sqlite(pool) =
        lifeline::store::open(&engine, lifeline::store::Waits::PRODUCTION)
            .await
            .expect("SQLite opens and migrates")
    else {
        panic!("a SQLite path opens SQLite")
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%' ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .expect("tables");
    let mut out = BTreeMap::new();
    for t in tables {
        let rows = sqlx::query(
            "SELECT name, type, \"notnull\", pk FROM pragma_table_info(?) ORDER BY cid",
        )
        .bind(&t)
        .fetch_all(&pool)
        .await
        .expect("columns");
        let cols = rows
            .iter()
            .map(|r| {
                let pk: i64 = r.get("pk");
                let notnull: i64 = r.get("notnull");
                // SQLite lets a primary key hold NULL unless it says not to;
                // Lifeline never writes one, and PostgreSQL refuses it.
                (
                    r.get::<String, _>("name"),
                    kind_of(&r.get::<String, _>("type")),
                    notnull == 0 && pk == 0,
                    pk > 0,
                )
            })
            .collect();
        out.insert(t, cols);
    }
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .expect("indexes");
    (out, indexes)
}

async fn postgres_schema(url: &str) -> Schema {
    let mut conn = sqlx::PgConnection::connect(url).await.expect("connects");
    let migrator = sqlx::migrate::Migrator::new(crate::support::repo().join("migrations/postgres"))
        .await
        .expect("the PostgreSQL migrations read");
    migrator.run(&mut conn).await.expect("PostgreSQL migrates");
    let rows = sqlx::query(
        "SELECT c.table_name::text AS t, c.column_name::text AS name, c.data_type::text AS ty, \
                c.is_nullable = 'YES' AS nullable, \
                EXISTS (SELECT 1 FROM information_schema.key_column_usage k \
                        JOIN information_schema.table_constraints tc \
                          ON tc.constraint_name = k.constraint_name AND tc.constraint_type = 'PRIMARY KEY' \
                        WHERE k.table_name = c.table_name AND k.column_name = c.column_name) AS pk \
         FROM information_schema.columns c \
         WHERE c.table_schema = 'public' AND c.table_name NOT LIKE '\\_sqlx%' \
         ORDER BY c.table_name, c.ordinal_position",
    )
    .fetch_all(&mut conn)
    .await
    .expect("columns");
    let mut out: BTreeMap<String, Vec<Column>> = BTreeMap::new();
    for r in &rows {
        out.entry(r.get("t")).or_default().push((
            r.get("name"),
            kind_of(&r.get::<String, _>("ty")),
            r.get("nullable"),
            r.get("pk"),
        ));
    }
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT indexname::text FROM pg_indexes WHERE schemaname = 'public' \
         AND indexname NOT LIKE '%_pkey' AND tablename NOT LIKE '\\_sqlx%' ORDER BY indexname",
    )
    .fetch_all(&mut conn)
    .await
    .expect("indexes");
    (out, indexes)
}

/// Guards "one store, two engines": both migration sets end in the same
/// schema.
#[tokio::test]
async fn sqlite_and_postgres_migrate_to_the_same_schema() {
    let Some(url) = fresh_postgres("schema_parity").await else {
        return;
    };
    let (lite_tables, lite_indexes) = sqlite_schema().await;
    let (pg_tables, pg_indexes) = postgres_schema(&url).await;
    assert_eq!(
        lite_tables.keys().collect::<Vec<_>>(),
        pg_tables.keys().collect::<Vec<_>>(),
        "tables"
    );
    assert!(lite_tables.len() >= 8, "{:?}", lite_tables.keys());
    for (t, cols) in &lite_tables {
        assert_eq!(cols, &pg_tables[t], "table {t}");
    }
    assert_eq!(lite_indexes, pg_indexes, "indexes");
}

/// Binds `values` into a text column and reads them back, on PostgreSQL.
async fn round_trip<T>(conn: &mut sqlx::PgConnection, values: &[T])
where
    T: for<'q> sqlx::Encode<'q, sqlx::Postgres>
        + for<'r> sqlx::Decode<'r, sqlx::Postgres>
        + sqlx::Type<sqlx::Postgres>
        + Copy
        + PartialEq
        + std::fmt::Debug
        + Send
        + Sync
        + Unpin
        + 'static,
{
    for &v in values {
        sqlx::query("INSERT INTO names (v) VALUES ($1)")
            .bind(v)
            .execute(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{v:?} binds as text: {e}"));
        let back: T = sqlx::query_scalar("SELECT v FROM names")
            .fetch_one(&mut *conn)
            .await
            .unwrap_or_else(|e| panic!("{v:?} reads back: {e}"));
        assert_eq!(back, v);
        sqlx::query("DELETE FROM names")
            .execute(&mut *conn)
            .await
            .expect("emptied");
    }
}

/// Guards the store's enums on PostgreSQL: each is stored by its name in a
/// text column, as on SQLite, and reads back as itself.
#[tokio::test]
async fn every_stored_enum_round_trips_through_postgres_text() {
    use lifeline::domain::*;
    let Some(url) = fresh_postgres("enum_text").await else {
        return;
    };
    let mut conn = sqlx::PgConnection::connect(&url).await.expect("connects");
    sqlx::query("CREATE TABLE names (v TEXT NOT NULL)")
        .execute(&mut conn)
        .await
        .expect("table");
    round_trip(&mut conn, Health::ALL).await;
    round_trip(&mut conn, HealthMode::ALL).await;
    round_trip(&mut conn, AgentState::ALL).await;
    round_trip(&mut conn, CauseKind::ALL).await;
    round_trip(&mut conn, HistoryEvent::ALL).await;
    round_trip(&mut conn, Subject::ALL).await;
    round_trip(&mut conn, EndReason::ALL).await;
    round_trip(&mut conn, Origin::ALL).await;
    round_trip(&mut conn, SettingAction::ALL).await;
    round_trip(&mut conn, SignalKind::ALL).await;
    round_trip(&mut conn, Outcome::ALL).await;
    let stored: String = {
        sqlx::query("INSERT INTO names (v) VALUES ($1)")
            .bind(Outcome::Undeliverable)
            .execute(&mut conn)
            .await
            .expect("insert");
        sqlx::query_scalar("SELECT v FROM names")
            .fetch_one(&mut conn)
            .await
            .expect("read")
    };
    assert_eq!(stored, "undeliverable", "stored by its wire name");
}
