//! A database made by an earlier release opens under this one with every
//! row there and the pages showing it. The fixture
//! (`tests/fixtures/schema-17.db`, schema version 17) is a SQLite file a
//! demo wrote in two minutes of chaos, with maintenance windows (over,
//! active, scheduled and deleted), manual and automatic signals, a dynamic
//! setting, incidents and their episodes and history; how it was made is
//! `tests/fixtures/make-schema-db.sh`. It is opened on a copy, with the
//! clock at the moment it was written, so that nothing has aged out.

use std::collections::BTreeMap;

use serde_json::Value;
use sqlx::{Connection, Row};

use crate::support::{self, Cluster};

const FIXTURE: &str = "tests/fixtures/schema-17.db";

/// Tables whose rows are the process's own, not history: they may be
/// rewritten by the release that opens the file.
const OWN: [&str; 5] = [
    "agent_streams",
    "leader_lease",
    "replicas",
    "id_high_water",
    "samples",
];

async fn rows(path: &std::path::Path) -> (BTreeMap<String, i64>, i64) {
    let url = format!("sqlite://{}", path.display());
    let mut db = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("the fixture opens");
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx%' ORDER BY name",
    )
    .fetch_all(&mut db)
    .await
    .expect("tables");
    let mut out = BTreeMap::new();
    for t in tables {
        // A table name the file's own catalogue gave, quoted.
        let n: i64 = sqlx::query(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM \"{t}\"")))
            .fetch_one(&mut db)
            .await
            .expect("a count")
            .get(0);
        out.insert(t, n);
    }
    let last: i64 = sqlx::query_scalar("SELECT max(at_us) FROM events")
        .fetch_one(&mut db)
        .await
        .expect("the last event");
    db.close().await.expect("closed");
    (out, last)
}

fn ids(v: &Value) -> Vec<i64> {
    v["items"]
        .as_array()
        .map(|a| a.iter().filter_map(|i| i["id"].as_i64()).collect())
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn a_database_made_by_the_schema_17_release_opens_with_every_row_and_page() {
    let dir = tempfile::tempdir().expect("dir");
    let db = dir.path().join("upgraded.db");
    std::fs::copy(support::repo().join(FIXTURE), &db).expect("the fixture copied");
    let (before, last_us) = rows(&db).await;
    assert_eq!(before["incidents"], 21, "{before:?}");
    // The demo's shape: the same names resync onto the same rows.
    let path = db.clone();
    let c = Cluster::new()
        .agents(40)
        .proxies(3)
        .starting_at(lifeline::clock::Ts::from_micros(last_us + 60_000_000))
        .config(move |cfg| {
            cfg.storage.path = path;
            cfg.cluster.name = "prod-eu".into();
        })
        .start()
        .await;
    c.ready().await;
    c.flush().await;

    // Every incident, newest first, each with its episodes.
    let incidents = c.ok("/api/v1/incidents?limit=100").await;
    let got = ids(&incidents);
    assert!(
        (1..=21).all(|id| got.contains(&id)),
        "every incident of the file: {got:?}"
    );
    let one = c.ok("/api/v1/incidents/1").await;
    assert!(
        one["title"].as_str().is_some_and(|t| !t.is_empty()),
        "{one}"
    );
    // Every signal, the three manual ones by who asked.
    let signals = c.ok("/api/v1/signals?limit=1000").await;
    let got = ids(&signals);
    assert!(got.len() >= 59, "{}", got.len());
    let manual = signals["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|s| s["requested_by"] == "api:demo")
        .count();
    assert_eq!(manual, 3, "{signals}");
    // The four windows, each as it stood.
    let windows = c.ok("/api/v1/maintenance?limit=100").await;
    let mut status: Vec<(i64, String)> = windows["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|w| {
            (
                w["id"].as_i64().unwrap_or(0),
                w["status"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    status.sort();
    assert_eq!(
        status,
        [
            (1, "over".to_string()),
            (2, "active".to_string()),
            (3, "scheduled".to_string()),
            (4, "deleted".to_string()),
        ],
        "{windows}"
    );
    // The setting set through the API, with its origin.
    let retention = c.ok("/api/v1/settings/retention").await;
    assert_eq!(
        (&retention["value"], &retention["origin"]),
        (&Value::from("45d"), &Value::from("dynamic")),
        "{retention}"
    );
    // The pages show it.
    let (status, page) = c.get_text("/incidents").await;
    assert_eq!(status, 200);
    let title = one["title"].as_str().unwrap_or_default();
    assert!(
        page.contains(
            &title
                .replace('&', "&amp;")
                .replace('<', "&lt;")
                .replace('>', "&gt;")
        ),
        "the incidents page shows {title:?}"
    );
    let (status, page) = c.get_text("/maintenance").await;
    assert_eq!(status, 200);
    assert!(page.contains("patch night"), "the maintenance page");

    // No row of history is lost: each table holds at least what it held.
    let ll_db = c.cfg.storage.path.clone();
    c.shutdown().await;
    let (after, _) = rows(&ll_db).await;
    for (table, n) in &before {
        if OWN.contains(&table.as_str()) {
            continue;
        }
        let m = after.get(table).copied().unwrap_or(0);
        assert!(m >= *n, "{table}: {n} rows before, {m} after");
    }
    // Every row is the configured cluster's, none is left unnamed, and
    // what the API lists says so.
    let url = format!("sqlite://{}", ll_db.display());
    let mut file = sqlx::SqliteConnection::connect(&url).await.expect("opens");
    for table in lifeline::store::clusters::TABLES {
        let other: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {table} WHERE cluster <> 'prod-eu'"
        )))
        .fetch_one(&mut file)
        .await
        .expect("a count");
        assert_eq!(other, 0, "{table}: rows of another cluster");
    }
    let unassigned: i64 = sqlx::query_scalar("SELECT count(*) FROM unassigned_rows")
        .fetch_one(&mut file)
        .await
        .expect("a count");
    assert_eq!(unassigned, 0, "the rows were named once");
    for list in [&incidents, &signals] {
        for i in list["items"].as_array().expect("items") {
            assert_eq!(i["cluster"], "prod-eu", "{i}");
        }
    }
}
