//! The store, on SQLite and on PostgreSQL: history and episodes survive a
//! restart; the last known state is served (as stale) before the upstream
//! resyncs; a database that refuses writes for a while loses nothing;
//! retention prunes; a database that cannot be used is a clear start-up
//! error.

use crate::support;
use std::str::FromStr;
use std::time::Duration;

use lifeline::domain::Kind;
use lifeline::{Clock, Config, Lifeline};
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::ConnectOptions;
use support::{ids, Cluster};

on_both_engines! {
/// Guards persistence: a restart on the same database keeps the open
/// episodes (same ids), the history, and shows last known state while stale.
#[tokio::test(start_paused = true)]
async fn restart_on_the_same_database_keeps_episodes_and_history(store) {
    let mut c = Cluster::new().store(store).start().await;
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
}

/// Another connection to the database at `path` that runs `sql` (a lock)
/// and holds it while it lives.
async fn lock(path: &std::path::Path, sql: &'static str) -> sqlx::SqliteConnection {
    let mut holder = SqliteConnectOptions::from_str("sqlite:")
        .unwrap()
        .filename(path)
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::raw_sql(sql).execute(&mut holder).await.unwrap();
    holder
}

/// Guards the locked-database case: start-up fails with a message that says
/// the database is locked, instead of hanging or panicking.
#[tokio::test]
async fn locked_database_is_a_clear_start_up_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("locked.db");
    let holder = lock(
        &path,
        "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; CREATE TABLE hold (x); ",
    )
    .await;

    let mut cfg = Config::default();
    cfg.server.listen = ([127, 0, 0, 1], 0).into();
    cfg.server.grpc_listen = ([127, 0, 0, 1], 0).into();
    cfg.storage.path = path.clone();
    let err = match Lifeline::start(&cfg, Clock::system()).await {
        Ok(_) => panic!("start-up must fail on a locked database"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("locked"), "{err}");
    assert!(err.contains("locked.db"), "names the file: {err}");
    drop(holder);
}

/// Guards the PostgreSQL case: a server that cannot be reached stops
/// start-up with a message that names it, never its password.
#[tokio::test]
async fn an_unreachable_postgres_is_a_clear_start_up_error_without_the_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut cfg = Config::default();
    cfg.server.listen = ([127, 0, 0, 1], 0).into();
    cfg.server.grpc_listen = ([127, 0, 0, 1], 0).into();
    cfg.storage.url = Some(lifeline::config::DbUrl::new(format!(
        "postgres://lifeline:hunter2@127.0.0.1:{port}/lifeline"
    )));
    let err = match Lifeline::start(&cfg, Clock::system()).await {
        Ok(_) => panic!("start-up must fail without a database"),
        Err(e) => format!("{e:#} {e:?}"),
    };
    assert!(
        err.contains(&format!(
            "postgres://lifeline:***@127.0.0.1:{port}/lifeline"
        )),
        "names the server: {err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

on_both_engines! {
/// Guards retention: history older than the retention is pruned, however
/// many rows and whatever their order of ids (a newer row between older
/// ones stays).
#[tokio::test]
async fn pruning_removes_history_past_retention(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let mut b = lifeline::store::WriteBatch::default();
    let old = std::iter::repeat_n(500_000i64, 12_000);
    let times: Vec<i64> = [1_000_000i64, 3_000_000, 2_000_000]
        .into_iter()
        .chain(old)
        .collect();
    for (i, at) in times.iter().enumerate() {
        b.event(
            lifeline::domain::HistoryEntry {
                at: lifeline::Ts(*at),
                kind: lifeline::domain::Subject::Proxy,
                name: format!("p{i}"),
                event: lifeline::domain::HistoryEvent::Heartbeat,
                expires: None,
                ttl_us: None,
                detail: String::new(),
            },
            100_000,
        );
    }
    lifeline::store::writer::commit(&db, &"default".into(), &b).await.unwrap();
    let n = lifeline::store::retention::prune(&db, lifeline::Ts(2_500_000))
        .await
        .unwrap();
    assert_eq!(n, 12_002);
    assert_eq!(support::sql_i64(&db, "SELECT COUNT(*) FROM events").await, 1);
    assert_eq!(
        support::sql_i64(&db, "SELECT MIN(at_us) FROM events").await,
        3_000_000
    );
}
}

on_both_engines! {
/// Guards the audit's retention on the store itself: rows answered (or
/// given up on) before the cut-off go; a signal still pending or delivered
/// stays however old it is, and so does anything newer.
#[tokio::test]
async fn audit_pruning_never_takes_a_signal_still_waiting_for_its_answer(store) {
    use lifeline::domain::Outcome;
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let row = |id, created, outcome| support::signal_row(id, lifeline::Ts(created), outcome);
    let old = 1_000_000;
    let rows = [
        row(1, old, Outcome::Acked),
        row(2, old, Outcome::Failed),
        row(3, old, Outcome::Timeout),
        row(4, old, Outcome::Undeliverable),
        row(5, old, Outcome::Pending),
        row(6, old, Outcome::Delivered),
        row(7, 3_000_000, Outcome::Acked),
    ];
    lifeline::store::signals::insert(&db, &rows).await.unwrap();
    let (signals, episodes, _) = lifeline::store::retention::prune_audit(&db, lifeline::Ts(2_000_000))
        .await
        .unwrap();
    assert_eq!((signals, episodes), (4, 0));
    let left = support::sql_i64(&db, "SELECT COUNT(*) FROM signals WHERE id IN (5, 6, 7)").await;
    assert_eq!(left, 3, "a pending signal, a delivered one and a newer one stay");
    assert_eq!(support::sql_i64(&db, "SELECT COUNT(*) FROM signals").await, 3);
}
}

/// Another session that blocks every write to the history tables (reads
/// go on) until [`WriteLock::release`]: SQLite's write lock (WAL), or
/// PostgreSQL table locks, which Lifeline's `lock_timeout` turns into
/// errors.
enum WriteLock {
    Sqlite(sqlx::SqliteConnection),
    Postgres(sqlx::PgConnection),
}

impl WriteLock {
    async fn take(store: &support::Store, path: &std::path::Path) -> WriteLock {
        use sqlx::Connection;
        match store {
            support::Store::Sqlite => WriteLock::Sqlite(lock(path, "BEGIN IMMEDIATE").await),
            support::Store::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
                sqlx::raw_sql(
                    "BEGIN; LOCK TABLE resources, tunnels, events, health_transitions, episodes IN EXCLUSIVE MODE",
                )
                .execute(&mut conn)
                .await
                .unwrap();
                WriteLock::Postgres(conn)
            }
        }
    }

    async fn release(self) {
        match self {
            WriteLock::Sqlite(mut c) => {
                sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
            }
            WriteLock::Postgres(mut c) => {
                sqlx::query("ROLLBACK").execute(&mut c).await.unwrap();
            }
        }
    }
}

on_both_engines! {
/// Guards "history never silently lost": while another session blocks
/// writes, the writer keeps current state and episode changes pending and
/// retries; `/readyz` and `/metrics` say the store is failing (reads still
/// answer); once the lock is gone every episode is in the database, opened
/// and closed, none lost.
#[tokio::test(start_paused = true)]
async fn a_database_that_refuses_writes_for_a_while_loses_no_episode(store) {
    let c = Cluster::new()
        .store(store.clone())
        .agents(6)
        .proxies(4)
        .ttl(Duration::from_secs(10))
        .start()
        .await;
    c.ready().await;
    c.flush().await;

    let holder = WriteLock::take(&store, &c.cfg.storage.path).await;

    // Two agents strand (episodes open) while the database refuses writes.
    c.strand_two().await;
    c.eventually("the store reports failing", || async {
        c.get("/readyz").await.0 == 503
    })
    .await;
    let (_, ready) = c.get("/readyz").await;
    assert!(ready["store_failing"]["error"].is_string(), "{ready}");
    assert!(
        ready["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("refuses writes")),
        "{ready}"
    );
    let (_, metrics) = c.get_text("/metrics").await;
    assert!(metrics.contains("lifeline_store_failing 1"), "{metrics}");
    // The live model still answers.
    assert_eq!(c.agents_in("stranded").await.len(), 2);
    // Time passes through several retries; the proxies heal, so the
    // episodes also close while the lock is held.
    c.advance(Duration::from_secs(5)).await;
    c.sim.resume_heartbeats(Kind::Proxy, "proxy-1").await;
    c.sim.resume_heartbeats(Kind::Proxy, "proxy-2").await;
    c.advance(Duration::from_secs(2)).await;
    assert_eq!(c.agents_in("stranded").await.len(), 0);

    holder.release().await;
    // The writer gets through on its next retry.
    for _ in 0..40 {
        if c.get("/readyz").await.0 == 200 {
            break;
        }
        c.advance(Duration::from_millis(500)).await;
    }
    assert_eq!(
        c.get("/readyz").await.0,
        200,
        "{}",
        c.get("/readyz").await.1
    );
    c.flush().await;
    let eps = c.ok("/api/v1/episodes?state=stranded").await;
    let items = eps["items"].as_array().expect("items");
    assert_eq!(items.len(), 2, "both episodes written: {eps}");
    assert!(
        items.iter().all(|e| e["ended_at"].is_string()),
        "and closed: {eps}"
    );
    let (_, metrics) = c.get_text("/metrics").await;
    assert!(metrics.contains("lifeline_store_failing 0"), "{metrics}");
    c.shutdown().await;
}
}

on_both_engines! {
/// Guards bounded history: past `storage.audit_retention` the running
/// service prunes the signal audit and closed episodes, but never an open
/// episode. Virtual time: an hour passes in two steps. (That pruning never
/// takes a pending signal is checked on the store itself, below: on
/// PostgreSQL the leader's sweep records an hour-old unanswered signal as
/// timed out first, as it should.)
#[tokio::test(start_paused = true)]
async fn audit_retention_prunes_closed_history_but_never_pending_or_open(store) {
    let c = Cluster::new()
        .store(store)
        .quiet()
        .agents(3)
        .proxies(2)
        .ttl(Duration::from_secs(10))
        .config(|cfg| {
            cfg.storage.audit_retention = Duration::from_secs(3600);
            cfg.storage.prune_interval = Duration::from_secs(60);
        })
        .start()
        .await;
    c.ready().await;
    // Nobody heartbeats: everything expires, every agent strands.
    c.advance(Duration::from_secs(11)).await;
    assert_eq!(c.agents_in("stranded").await.len(), 3);
    // All but agent-00003 heal: their episodes close; its stays open.
    for p in ["proxy-1", "proxy-2"] {
        c.sim.heartbeat(Kind::Proxy, p).await;
    }
    for a in ["agent-00001", "agent-00002"] {
        c.sim.heartbeat(Kind::Agent, a).await;
    }
    c.eventually("two agents healed", || async {
        c.agents_in("healthy").await.len() == 2
    })
    .await;
    c.flush().await;
    // An answered audit row from this moment.
    let now = c.clock.now();
    let db = c.ll().db.clone();
    lifeline::store::signals::insert(
        &db,
        &[support::signal_row(9001, now, lifeline::domain::Outcome::Acked)],
    )
    .await
    .unwrap();
    let count = |sql: &'static str| {
        let db = db.clone();
        async move { support::sql_i64(&db, sql).await }
    };
    let closed = count("SELECT COUNT(*) FROM episodes WHERE ended_us IS NOT NULL").await;
    assert!(closed >= 2, "closed episodes: {closed}");
    assert_eq!(
        count("SELECT COUNT(*) FROM episodes WHERE ended_us IS NULL").await,
        1
    );

    // An hour and some later, a prune pass runs.
    tokio::time::advance(Duration::from_secs(3600 + 120)).await;
    c.quiesce().await;
    tokio::time::advance(Duration::from_secs(61)).await;
    c.quiesce().await;
    // Within a few more passes, in virtual time: a pass cut short (a
    // statement that met a lock, or a change of leader after the hour's
    // jump) is made up by the next one, a minute later.
    c.advance_until("the answered signal pruned", Duration::from_secs(300), || async {
        count("SELECT COUNT(*) FROM signals WHERE id = 9001").await == 0
    })
    .await;
    c.advance_until("closed episodes pruned", Duration::from_secs(300), || async {
        count("SELECT COUNT(*) FROM episodes WHERE ended_us IS NOT NULL").await == 0
    })
    .await;
    let open = c.ok("/api/v1/episodes?open=true").await;
    assert!(
        open["items"]
            .as_array()
            .expect("items")
            .iter()
            .any(|e| e["agent"] == "agent-00003"),
        "the open episode stays: {open}"
    );
    c.shutdown().await;
}
}

/// Guards settings changes across replicas on PostgreSQL: a change holds
/// its lock from its first read, so another replica's change (its own
/// pool) waits for the commit instead of interleaving with it.
#[tokio::test]
async fn a_settings_change_on_postgres_waits_for_another_replicas() {
    use lifeline::domain::{Origin, SettingAction};
    use lifeline::store::settings::{begin_change, StoredSetting};
    let Some(url) = support::fresh_postgres("settings_change_lock").await else {
        return;
    };
    let store = support::Store::Postgres(url.clone());
    let a = store.open(std::path::Path::new("")).await;
    // The other replica's pool (store::open admits one Lifeline per
    // database).
    let b = lifeline::store::Db::Postgres(lifeline::store::Pg {
        pool: sqlx::PgPool::connect(&url).await.unwrap(),
        deadline: lifeline::store::QUERY_DEADLINE,
    });
    let mut first = begin_change(&a).await.unwrap();
    assert_eq!(first.get("retention").await.unwrap(), None);
    let second = tokio::spawn(async move {
        let mut tx = begin_change(&b).await.unwrap();
        tx.get("retention").await.unwrap()
    });
    support::real_sleep(Duration::from_millis(300)).await;
    assert!(!second.is_finished(), "the other replica's change got in");
    let new = StoredSetting {
        name: "retention".into(),
        value: "\"1h\"".into(),
        origin: Origin::Dynamic,
        updated_us: 1,
        updated_by: "a".into(),
    };
    first.put(&new, None, SettingAction::Create).await.unwrap();
    first.commit().await.unwrap();
    let seen = support::bounded("the second change", second).await.unwrap();
    assert_eq!(seen, Some(new), "it reads what the first committed");
}

on_both_engines! {
/// Incident ids never go back: with the newest incidents pruned and the
/// store opened again, the next id is still above every id handed out, so
/// an old postmortem's link never opens another incident.
#[tokio::test]
async fn pruning_the_newest_incidents_never_hands_their_ids_out_again(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    support::sql_exec(
        &db,
        "INSERT INTO incidents (id, cause, resource, started_us, ended_us, peak_stranded, peak_degraded, agents, signals, stranded_us) \
         VALUES (1, 'proxy_expired', 'p1', 1, 2, 1, 0, 1, 0, 0), (2, 'proxy_expired', 'p1', 3, 4, 1, 0, 1, 0, 0), \
                (3, 'proxy_expired', 'p2', 5, 6, 1, 0, 1, 0, 0), (4, 'proxy_expired', 'p3', 7, 8, 1, 0, 1, 0, 0)",
    )
    .await;
    support::sql_exec(&db, "DELETE FROM incidents WHERE id >= 2").await;
    db.close().await;
    let db = store.open(dir.path()).await;
    let (open, next) = lifeline::store::incidents::open(&db, &"default".into()).await.unwrap();
    assert!(open.is_empty());
    assert_eq!(next, 5, "above the pruned incident 4");
    support::sql_exec(&db, "DELETE FROM incidents").await;
    let (_, next) = lifeline::store::incidents::open(&db, &"default".into()).await.unwrap();
    assert_eq!(next, 5, "even with none left");
}
}
