//! SQLite: history and episodes survive a restart; the last known state is
//! served (as stale) before the upstream resyncs; a locked database is a
//! clear start-up error.

mod support;

use std::str::FromStr;
use std::time::Duration;

use lifeline::model::Kind;
use lifeline::{Clock, Config, Lifeline};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::ConnectOptions;
use support::{ids, Cluster};

/// Guards persistence: a restart on the same database keeps the open
/// episodes (same ids), the history, and shows last known state while stale.
#[tokio::test(start_paused = true)]
async fn restart_on_the_same_database_keeps_episodes_and_history() {
    let mut c = Cluster::new().start().await;
    c.ready().await;
    c.sim.pause_heartbeats("proxy-1").await;
    c.sim.pause_heartbeats("proxy-2").await;
    let last = c
        .expires(Kind::Proxy, "proxy-1")
        .await
        .max(c.expires(Kind::Proxy, "proxy-2").await);
    c.advance_to(last).await;
    c.flush().await;
    let before = c.ok("/api/v1/episodes?open=true&state=stranded").await;
    let before_ids = ids(&before["items"]);
    assert_eq!(before_ids.len(), 2);
    let history = c.ok("/api/v1/events?event=expired").await;
    assert_eq!(history["items"].as_array().unwrap().len(), 2);

    // The cluster is unreachable while Lifeline restarts.
    c.sim.set_accepting(false);
    c.sim.kill_streams();
    c.restart_lifeline().await;

    let s = c.summary().await;
    assert_eq!(s["agents"]["total"], 6, "last known state loaded: {s}");
    assert_eq!(s["agents"]["stranded"], 2, "{s}");
    assert_eq!(s["watcher"]["kinds"]["proxy"]["state"], "stale", "{s}");
    assert_eq!(c.get("/readyz").await.0, 503);
    let after = c.ok("/api/v1/episodes?open=true&state=stranded").await;
    assert_eq!(after["items"], before["items"], "episodes survive");
    let history = c.ok("/api/v1/events?event=expired").await;
    assert_eq!(
        history["items"].as_array().unwrap().len(),
        2,
        "history survives"
    );

    // The cluster returns; the same episodes continue, none reopen.
    c.sim.set_accepting(true);
    c.advance_until("ready after restart", Duration::from_secs(120), || async {
        c.get("/readyz").await.0 == 200
    })
    .await;
    assert_eq!(
        c.agents_in("stranded").await,
        vec!["agent-00001", "agent-00004"]
    );
    c.flush().await;
    let open = c.ok("/api/v1/episodes?open=true&state=stranded").await;
    let now_ids = ids(&open["items"]);
    assert_eq!(now_ids, before_ids);
    c.shutdown().await;
}

/// Guards the locked-database case: start-up fails with a message that says
/// the database is locked, instead of hanging or panicking.
#[tokio::test]
async fn locked_database_is_a_clear_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let mut holder = SqliteConnectOptions::from_str("sqlite:")
        .unwrap()
        .filename(&path)
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::query("PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE hold (x); ")
        .execute(&mut holder)
        .await
        .unwrap();

    let mut cfg = Config::default();
    cfg.server.listen = "127.0.0.1:0".into();
    cfg.server.grpc_listen = "127.0.0.1:0".into();
    cfg.storage.path = path.clone();
    let err = match Lifeline::start(&cfg, Clock::system()).await {
        Ok(_) => panic!("start-up must fail on a locked database"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("locked"), "{err}");
    assert!(err.contains("locked.db"), "names the file: {err}");
    drop(holder);
}

/// Guards retention: history older than the retention is pruned.
#[tokio::test]
async fn pruning_removes_history_past_retention() {
    let dir = tempfile::tempdir().unwrap();
    let db = lifeline::store::open(&dir.path().join("p.db"))
        .await
        .unwrap();
    let mut b = lifeline::store::WriteBatch::default();
    for (i, at) in [1_000_000i64, 2_000_000, 3_000_000].iter().enumerate() {
        b.event(
            lifeline::store::EventRow {
                at: lifeline::Ts(*at),
                kind: "proxy",
                name: format!("p{i}"),
                event: "heartbeat",
                expires: None,
                ttl_us: None,
                detail: String::new(),
            },
            100,
        );
    }
    lifeline::store::writer::commit(&db, &b).await.unwrap();
    let n = lifeline::store::writer::prune(&db, lifeline::Ts(2_500_000))
        .await
        .unwrap();
    assert_eq!(n, 2);
    let left: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM events")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(left, 1);
}
