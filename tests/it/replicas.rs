//! Several Lifelines on one PostgreSQL database: the lease and its fence,
//! one writer of history, settings and signals shared through the
//! database, and a clean hand-over. (A leader killed outright is the
//! `failover` benchmark's, with real processes.)

use std::time::Duration;

use lifeline::app::Tuning;
use lifeline::domain::HistoryEntry;
use lifeline::replica::lease::{self, Attempt};
use lifeline::store::writer::{commit, Committed};
use lifeline::store::{Db, Fence, WriteBatch};
use lifeline::Lifeline;
use reqwest::Method;
use serde_json::Value;

use crate::support::{bounded, real_sleep, sql_i64, Cluster, Running, Store, ADMIN};

fn one_event() -> WriteBatch {
    let mut b = WriteBatch::default();
    b.event(
        HistoryEntry {
            at: lifeline::Ts(1),
            kind: lifeline::domain::Subject::Proxy,
            name: "p1".into(),
            event: lifeline::domain::HistoryEvent::Heartbeat,
            expires: None,
            ttl_us: None,
            detail: String::new(),
        },
        10,
    );
    b
}

/// A migrated store on a fresh PostgreSQL database of its own (`None`:
/// no server, the test is skipped).
async fn postgres_store(test: &str) -> Option<Db> {
    let store = Store::postgres(test).await?;
    Some(store.open(std::path::Path::new("unused-on-postgres")).await)
}

async fn lead(pool: &lifeline::store::Pg, who: &str, lease: Duration) -> Attempt {
    lease::try_lead(pool, who, lease, None)
        .await
        .expect("lease query")
}

async fn renew(pool: &lifeline::store::Pg, who: &str, lease: Duration, term: i64) -> Attempt {
    lease::try_lead(pool, who, lease, Some(term))
        .await
        .expect("lease query")
}

/// Guards the fence: once the lease changes hands, a batch made under the
/// old term is not written, whatever its maker believes; the new term's is.
/// A holder renewing a lapsed lease nobody took keeps its term.
#[tokio::test]
async fn a_batch_made_under_a_lease_that_moved_on_is_not_written() {
    let Some(db) = postgres_store("fence").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    let short = Duration::from_millis(200);
    let Attempt::Ours(a) = lead(pool, "a", short).await else {
        panic!("a free lease is taken")
    };
    assert!(matches!(lead(pool, "b", short).await, Attempt::Theirs(h) if h.holder == "a"));
    real_sleep(Duration::from_millis(250)).await;
    let Attempt::Ours(a_again) = renew(pool, "a", short, a.term).await else {
        panic!("a lapsed lease nobody took is still a's")
    };
    assert_eq!(a_again.term, a.term, "a renewal: the same tenure");
    real_sleep(Duration::from_millis(250)).await;
    let Attempt::Ours(b) = lead(pool, "b", Duration::from_secs(30)).await else {
        panic!("a lapsed lease is taken")
    };
    assert_eq!(b.term, a.term + 1, "a new holder, a new term");
    assert!(matches!(lead(pool, "a", short).await, Attempt::Theirs(h) if h.holder == "b"));

    let mut stale = one_event();
    stale.fence = Fence::Leader {
        replica: "a".into(),
        term: a.term,
    };
    assert_eq!(
        commit(&db, &"default".into(), &stale).await.unwrap(),
        Committed::Fenced
    );
    let mut follower = one_event();
    follower.fence = Fence::Follower;
    assert_eq!(
        commit(&db, &"default".into(), &follower).await.unwrap(),
        Committed::Fenced
    );
    assert_eq!(sql_i64(&db, "SELECT count(*) FROM events").await, 0);
    let mut current = one_event();
    current.fence = Fence::Leader {
        replica: "b".into(),
        term: b.term,
    };
    assert_eq!(
        commit(&db, &"default".into(), &current).await.unwrap(),
        Committed::Written
    );
    assert_eq!(sql_i64(&db, "SELECT count(*) FROM events").await, 1);
    db.close().await;
}

/// Guards "a new tenure, a new term": a replica that stopped leading and
/// takes its own lease again (lapsed or not) leads in the next term, so a
/// batch its earlier tenure queued is fenced instead of landing after the
/// new tenure read the database (where a repeated episode id would then
/// be refused). A renewal in a term that is no longer the row's fails.
#[tokio::test]
async fn taking_back_ones_own_lease_is_a_new_term_that_fences_the_old_one() {
    let Some(db) = postgres_store("retake").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    let lease = Duration::from_secs(30);
    let Attempt::Ours(first) = lead(pool, "a", lease).await else {
        panic!("a free lease is taken")
    };
    // Stepped down (say a renewal failed), then takes it back at once.
    let Attempt::Ours(second) = lead(pool, "a", lease).await else {
        panic!("its own lease is taken back")
    };
    assert_eq!(second.term, first.term + 1, "a new tenure");
    // And after it lapsed with nobody taking it.
    lease::release(pool, "a", second.term).await.unwrap();
    let Attempt::Ours(third) = lead(pool, "a", lease).await else {
        panic!("a lapsed lease is taken back")
    };
    assert_eq!(third.term, second.term + 1, "a new tenure");
    assert!(
        !matches!(renew(pool, "a", lease, first.term).await, Attempt::Ours(_)),
        "an old tenure cannot renew"
    );
    let mut queued = one_event();
    queued.fence = Fence::Leader {
        replica: "a".into(),
        term: second.term,
    };
    assert_eq!(
        commit(&db, &"default".into(), &queued).await.unwrap(),
        Committed::Fenced
    );
    queued.fence = Fence::Leader {
        replica: "a".into(),
        term: third.term,
    };
    assert_eq!(
        commit(&db, &"default".into(), &queued).await.unwrap(),
        Committed::Written
    );
    db.close().await;
}

/// Guards the leader against its own writer: a write transaction that
/// takes long (here: three seconds, made so by a trigger) does not hold
/// the lease row, so the lease is renewed meanwhile (a renewal waits at
/// most 2 s for a lock, then fails, and a leader that cannot renew steps
/// down). The fence is still checked, at the end.
#[tokio::test]
async fn a_long_write_does_not_keep_the_lease_from_being_renewed() {
    let Some(db) = postgres_store("long_write").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    sqlx::raw_sql(
        "CREATE FUNCTION slow_insert() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN PERFORM pg_sleep(3); RETURN NULL; END $$; \
         CREATE TRIGGER slow AFTER INSERT ON events FOR EACH STATEMENT EXECUTE FUNCTION slow_insert();",
    )
    .execute(&**pool)
    .await
    .expect("a slow trigger");
    let lease = Duration::from_secs(30);
    let Attempt::Ours(a) = lead(pool, "a", lease).await else {
        panic!("a free lease is taken")
    };
    let mut batch = one_event();
    batch.fence = Fence::Leader {
        replica: "a".into(),
        term: a.term,
    };
    let writing = tokio::spawn({
        let db = db.clone();
        async move { commit(&db, &"default".into(), &batch).await }
    });
    real_sleep(Duration::from_millis(500)).await;
    let renewed = lease::try_lead(pool, "a", lease, Some(a.term)).await;
    assert!(
        matches!(renewed, Ok(Attempt::Ours(ref t)) if t.term == a.term),
        "renewed during the long write: {renewed:?}"
    );
    assert_eq!(
        bounded("the slow write", writing).await.unwrap().unwrap(),
        Committed::Written
    );
    db.close().await;
}

async fn leadership_of(ll: &Lifeline) -> lifeline::store::Leadership {
    ll.leadership.borrow().clone()
}

async fn call(base: &str, method: Method, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new()
        .request(method, format!("{base}{path}"))
        .bearer_auth(ADMIN);
    if let Some(b) = body {
        req = req
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let resp = bounded("an HTTP call", req.send()).await.expect("HTTP");
    let status = resp.status().as_u16();
    let text = resp.text().await.unwrap_or_default();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// Waits, in real time, until `cond` holds.
async fn until<F: FnMut() -> Fut, Fut: std::future::Future<Output = bool>>(
    what: &str,
    mut cond: F,
) {
    bounded(what, async {
        while !cond().await {
            real_sleep(Duration::from_millis(20)).await;
        }
    })
    .await
}

/// The six-agent cluster on a PostgreSQL database of its own, its
/// Lifeline named `replica-a` (no automatic reconnects: signals here are
/// the test's), once it leads. `None`: no server, the test is skipped.
async fn replica_a(test: &str) -> Option<Running> {
    let store = Store::postgres(test).await?;
    let c = Cluster::six_legacy()
        .store(store)
        .config(|cfg| {
            cfg.storage.replica = Some("replica-a".into());
            cfg.signals.auto_reconnect = false;
        })
        .start()
        .await;
    until("replica-a leads", || async {
        leadership_of(c.ll()).await.leading
    })
    .await;
    Some(c)
}

/// A second replica, `replica-b`, on replica-a's database and clock.
async fn replica_b(a: &Running) -> Lifeline {
    let mut cfg_b = a.cfg.clone();
    cfg_b.storage.replica = Some("replica-b".into());
    Lifeline::start_tuned(
        &cfg_b,
        a.clock,
        Tuning {
            waits: lifeline::store::Waits::patient(Duration::from_secs(3600)),
            ..Tuning::default()
        },
    )
    .await
    .expect("a second replica starts on the same database")
}

/// replica-a, ready, once it has recorded the six agent streams it holds:
/// the set-up of the tests that record signals for those agents.
async fn replica_a_with_streams(test: &str) -> Option<(Running, Db)> {
    let c = replica_a(test).await?;
    c.ready().await;
    c.advance(Duration::from_secs(1)).await;
    let db = c.ll().db.clone();
    streams_recorded(&db).await;
    Some((c, db))
}

/// A signal for `agent` recorded as another replica would, pending, whose
/// notification is never sent: its id.
async fn record_unnotified(db: &Db, agent: &str, created: lifeline::Ts, reason: &str) -> i64 {
    let Db::Postgres(pool) = db else {
        panic!("a PostgreSQL store")
    };
    sqlx::query_scalar(
        "INSERT INTO signals (kind, agent, proxy, reason, requested_by, created_us, outcome) \
         VALUES ('reconnect', $1, '', $3, 'ui:elsewhere', $2, 'pending') \
         RETURNING id",
    )
    .bind(agent)
    .bind(created.as_micros())
    .bind(reason)
    .fetch_one(&**pool)
    .await
    .expect("a pending signal")
}

/// Waits (real time) until signal `id` is acked.
async fn until_acked(c: &Running, id: i64, what: &str) {
    let base = c.ll().base_url();
    until(what, || async {
        let (_, row) = call(&base, Method::GET, &format!("/api/v1/signals/{id}"), None).await;
        row["outcome"] == "acked"
    })
    .await;
}

/// Waits until replica-a has recorded that it holds all six agent streams.
async fn streams_recorded(db: &Db) {
    until("replica-a recorded the streams it holds", || async {
        sql_i64(
            db,
            "SELECT count(*) FROM agent_streams WHERE replica = 'replica-a'",
        )
        .await
            == 6
    })
    .await;
}

/// Guards "replicas that agree without talking to each other": the first
/// replica leads and the second follows; both classify the same stranded
/// agents but only the leader writes episodes; a setting changed on one
/// applies on the other; a manual reconnect asked of the follower reaches
/// an agent whose stream the leader holds, and its ack lands in the same
/// row; when the leader stops, the follower takes the lease and keeps the
/// open episodes, with no duplicate.
#[tokio::test(start_paused = true)]
async fn two_replicas_share_one_database_and_hand_over_cleanly() {
    let Some(mut c) = replica_a("two_replicas").await else {
        return;
    };
    let b = replica_b(&c).await;
    c.other_watchers.push(b.stats.clone());
    let base_b = b.base_url();
    until("replica-b sees replica-a lead", || async {
        leadership_of(&b).await.leader.as_deref() == Some("replica-a")
    })
    .await;
    assert!(!leadership_of(&b).await.leading);
    let (_, summary) = call(&base_b, Method::GET, "/api/v1/summary", None).await;
    assert_eq!(summary["leadership"]["replica"], "replica-b", "{summary}");
    assert_eq!(summary["leadership"]["leader"], "replica-a", "{summary}");
    let (_, page) = {
        let resp = bounded("the dashboard", reqwest::get(format!("{base_b}/")))
            .await
            .expect("page");
        (resp.status(), resp.text().await.unwrap_or_default())
    };
    assert!(
        page.contains("replica replica-b · leader replica-a"),
        "the dashboard says where you are"
    );
    let leader_gauge = |base: String| async move {
        let resp = bounded("metrics", reqwest::get(format!("{base}/metrics")))
            .await
            .expect("metrics");
        let text = resp.text().await.unwrap_or_default();
        text.lines()
            .find_map(|l| l.strip_prefix("lifeline_leader "))
            .map(str::to_string)
    };
    assert_eq!(leader_gauge(base_b.clone()).await.as_deref(), Some("0"));
    assert_eq!(leader_gauge(c.ll().base_url()).await.as_deref(), Some("1"));

    c.ready().await;
    c.strand_two().await;
    c.advance_until(
        "two agents stranded on the leader",
        Duration::from_secs(120),
        || async { c.agents_in("stranded").await.len() == 2 },
    )
    .await;
    until("the follower classified them too", || async {
        let (_, v) = call(&base_b, Method::GET, "/api/v1/agents?state=stranded", None).await;
        v["items"].as_array().map(Vec::len) == Some(2)
    })
    .await;
    c.flush().await;
    let db = c.ll().db.clone();
    let unhealthy =
        (c.agents_in("stranded").await.len() + c.agents_in("degraded").await.len()) as i64;
    assert_eq!(
        sql_i64(&db, "SELECT count(*) FROM episodes WHERE ended_us IS NULL").await,
        unhealthy,
        "one writer: each unhealthy agent has one open episode"
    );
    assert_eq!(
        sql_i64(&db, "SELECT count(*) FROM episodes").await,
        unhealthy
    );

    // A setting changed on the follower applies on the leader at once.
    let (status, body) = call(
        &base_b,
        Method::PUT,
        "/api/v1/settings/storm_share",
        Some(r#"{"value":0.75}"#),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    until("the leader applies the follower's change", || async {
        (c.ll().settings.live().storm_share() - 0.75).abs() < 1e-9
    })
    .await;

    // The agents' streams are on replica-a; the API call is on replica-b.
    c.advance(Duration::from_secs(1)).await;
    streams_recorded(&db).await;
    // Stranded by the two stopped proxies, and connected to replica-a.
    let agent = c.agents_in("stranded").await[0].clone();
    let (status, body) = call(
        &base_b,
        Method::POST,
        &format!("/api/v1/agents/{agent}/reconnect"),
        Some(r#"{"reason":"asked of the follower"}"#),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("signal id");
    until("the leader's agent acked the follower's signal", || async {
        let (_, row) = call(&base_b, Method::GET, &format!("/api/v1/signals/{id}"), None).await;
        row["outcome"] == "acked"
    })
    .await;

    // The leader stops: the follower takes the lease and the open
    // episodes, ids and all.
    c.flush().await;
    let before = (
        sql_i64(&db, "SELECT count(*) FROM episodes WHERE ended_us IS NULL").await,
        sql_i64(&db, "SELECT count(*) FROM episodes").await,
        sql_i64(
            &db,
            "SELECT CAST(sum(id) AS BIGINT) FROM episodes WHERE ended_us IS NULL",
        )
        .await,
    );
    c.stop_lifeline().await;
    // The follower looks at the lease again within a fifth of it.
    for _ in 0..61 {
        tokio::time::advance(Duration::from_secs(1)).await;
        tokio::task::yield_now().await;
    }
    until("replica-b leads", || async {
        leadership_of(&b).await.leading
    })
    .await;
    b.fleet.flush().await.expect("flush");
    let db_b = b.db.clone();
    let open = sql_i64(
        &db_b,
        "SELECT count(*) FROM episodes WHERE ended_us IS NULL",
    )
    .await;
    let total = sql_i64(&db_b, "SELECT count(*) FROM episodes").await;
    let after = sql_i64(
        &db_b,
        "SELECT CAST(sum(id) AS BIGINT) FROM episodes WHERE ended_us IS NULL",
    )
    .await;
    assert_eq!((open, total, after), before, "kept, not duplicated");
    assert_eq!(
        sql_i64(&db_b, "SELECT count(*) FROM signals").await,
        1,
        "one audit row for one signal"
    );
    b.shutdown().await;
    c.shutdown().await;
}

/// Guards the leader's sweep: signals nobody will answer (their replica
/// died holding them) become `timeout` once old enough, oldest first and
/// at most a page at a time; answered and recent ones are left alone. A
/// restart, whose ack waits for its agent to turn ready, is swept only
/// once its own deadline on the row has passed by the grace, however old
/// it is by the ordinary measure.
#[tokio::test]
async fn signals_nobody_will_answer_time_out_and_only_those() {
    let Some(db) = postgres_store("sweep").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    for (id, created, outcome, restart, deadline) in [
        (1, 100, "delivered", 0, Some(150)),
        (2, 200, "pending", 0, None),
        (3, 300, "acked", 0, None),
        (4, 5_000, "pending", 0, None),
        // A slow restart: old by the ordinary measure, its deadline ahead.
        (5, 50, "delivered", 1, Some(90_000)),
        // A restart whose deadline passed long ago.
        (6, 400, "delivered", 1, Some(1_000)),
    ] {
        sqlx::query(
            "INSERT INTO signals (id, kind, agent, proxy, reason, requested_by, created_us, outcome, restart, deadline_us) \
             VALUES ($1, 'reconnect', 'a1', '', 'test', 'auto', $2, $3, $4, $5)",
        )
        .bind(id as i64)
        .bind(created as i64)
        .bind(outcome)
        .bind(restart as i64)
        .bind(deadline.map(|d: i64| d))
        .execute(&**pool)
        .await
        .unwrap();
    }
    let before = lifeline::Ts(1_000);
    let grace = (lifeline::Ts(10_000), Duration::from_millis(5));
    assert_eq!(
        lease::sweep_unanswered(pool, before, grace, 1)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        lease::sweep_unanswered(pool, before, grace, 10)
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        lease::sweep_unanswered(pool, before, grace, 10)
            .await
            .unwrap(),
        0
    );
    let outcomes: Vec<(i64, String)> =
        sqlx::query_as("SELECT id, outcome FROM signals ORDER BY id")
            .fetch_all(&**pool)
            .await
            .unwrap();
    let want = [
        (1, "timeout"),
        (2, "timeout"),
        (3, "acked"),
        (4, "pending"),
        (5, "delivered"),
        (6, "timeout"),
    ];
    assert_eq!(
        outcomes,
        want.map(|(i, o)| (i, o.to_string())).to_vec(),
        "old unanswered ones time out, the rest stay"
    );
    db.close().await;
}

/// Guards the make-up after a lost `LISTEN` connection: a signal another
/// replica recorded for an agent here, whose notification this replica
/// never heard, is found and delivered once it listens again, and acked.
#[tokio::test(start_paused = true)]
async fn a_signal_whose_notification_was_missed_is_delivered_when_the_replica_listens_again() {
    let Some((c, db)) = replica_a_with_streams("missed_notification").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    let agent: String =
        sqlx::query_scalar("SELECT agent FROM agent_streams ORDER BY agent LIMIT 1")
            .fetch_one(&**pool)
            .await
            .expect("an agent stream");
    // Recorded elsewhere; the notification that should wake replica-a is
    // never sent, as if its connection had been down at the time.
    let id = record_unnotified(&db, &agent, c.clock.now(), "notification lost").await;
    // The listening connection drops; the listener comes back.
    let dropped: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%'",
    )
    .fetch_one(&**pool)
    .await
    .expect("terminate the listener");
    assert_eq!(dropped, 1, "one listening connection");
    until_acked(
        &c,
        id,
        "the agent acked the signal nobody woke its replica for",
    )
    .await;
    let caught_up = c
        .ll()
        .stats
        .signals_caught_up
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(caught_up, 1, "found by the make-up, once");
    c.shutdown().await;
}

/// Guards "delivered once": a row read twice before its first delivery's
/// outcome was written (a late notification and the make-up after a lost
/// `LISTEN` both read it `pending`) reaches the agent once. The row is
/// claimed in the database before it is sent.
#[tokio::test(start_paused = true)]
async fn a_signal_read_twice_is_delivered_once() {
    let Some((c, db)) = replica_a_with_streams("delivered_once").await else {
        return;
    };
    let agent = "agent-00001";
    let id = record_unnotified(&db, agent, c.clock.now(), "read twice").await;
    let snapshot = lifeline::store::signals::by_ids(&db, &[id])
        .await
        .expect("the row");
    assert_eq!(snapshot[0].outcome, lifeline::domain::Outcome::Pending);
    let hub = c.ll().hub.clone();
    assert_eq!(hub.deliver_recorded(snapshot.clone()).await, 1);
    until_acked(&c, id, "the agent acked").await;
    // The second reader's snapshot still says pending, and the ack has
    // left the hub's memory: only the database can tell.
    assert_eq!(hub.deliver_recorded(snapshot).await, 0, "delivered once");
    let acks = c
        .agent(agent)
        .events()
        .iter()
        .filter(|e| matches!(e, lifeline_sim::agent::AgentEvent::Acked { id: got, .. } if *got == id as u64))
        .count();
    assert_eq!(acks, 1, "the agent heard it once");
    c.shutdown().await;
}

/// Guards the fence on the leader's own signals: once another replica has
/// taken the lease, a replica that has not yet noticed records and sends
/// no automatic, periodic or graceful signal (the term is checked in the
/// transaction that records them). A manual one still goes out.
#[tokio::test(start_paused = true)]
async fn a_replica_whose_term_has_passed_sends_no_leaders_signal() {
    let Some(c) = replica_a("stale_leader").await else {
        return;
    };
    c.ready().await;
    let db = c.ll().db.clone();
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    // Another replica takes the lease; replica-a has not looked yet.
    sqlx::query("UPDATE leader_lease SET holder = 'replica-b', term = term + 1 WHERE id = 1")
        .execute(&**pool)
        .await
        .expect("the lease moves");
    assert!(c.ll().hub.leads(), "replica-a has not noticed yet");
    let req = |requested_by: &str| lifeline::signals::hub::SignalRequest {
        agent: "agent-00001".into(),
        ask: lifeline::signals::hub::Ask::Reconnect {
            proxy: String::new(),
        },
        reason: "test".into(),
        requested_by: requested_by.into(),
        trace: None,
    };
    let before = sql_i64(&db, "SELECT count(*) FROM signals").await;
    use lifeline::signals::dispatch::Origin;
    let e = c
        .ll()
        .dispatch
        .send(Origin::Periodic, vec![req("periodic")])
        .await
        .expect_err("fenced");
    assert!(
        matches!(e, lifeline::signals::hub::SendError::NotLeader),
        "{e}"
    );
    assert_eq!(
        sql_i64(&db, "SELECT count(*) FROM signals").await,
        before,
        "nothing recorded"
    );
    let done = c
        .ll()
        .dispatch
        .send(Origin::Manual, vec![req("api:admin")])
        .await
        .expect("manual");
    assert_eq!(done.sent.len(), 1, "{:?}", done.refused);
    c.shutdown().await;
}

/// Guards the periodic make-up: a signal recorded for an agent here whose
/// notification never came (the listener itself looked well) is found and
/// delivered within ten seconds (a third of the ack timeout), well before
/// its deadline, without waiting for the listener to fail.
#[tokio::test(start_paused = true)]
async fn a_lost_notification_is_made_up_for_without_a_reconnect() {
    let Some((c, db)) = replica_a_with_streams("periodic_make_up").await else {
        return;
    };
    let id = record_unnotified(&db, "agent-00002", c.clock.now(), "notification lost").await;
    c.advance(Duration::from_secs(11)).await;
    until_acked(&c, id, "the periodic make-up delivered it").await;
    c.shutdown().await;
}

/// Guards the replica name: two live processes with one name would both
/// pass the fence as the same leader, so the second `lifeline serve` is
/// refused at start (exit 78, naming the setting), and the name is free
/// again once the first has gone.
#[tokio::test]
async fn a_second_process_with_a_replica_name_in_use_is_refused() {
    let Some(url) = crate::support::fresh_postgres("replica_name").await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("twin.toml");
    std::fs::write(
        &config,
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\ngrpc_listen = \"127.0.0.1:0\"\n\
             [cluster]\naddr = \"127.0.0.1:9\"\n\
             [storage]\nurl = {url:?}\nreplica = \"twin\"\nleader_lease = \"1s\"\n"
        ),
    )
    .unwrap();
    let serve = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_lifeline"))
            .args(["serve", "--config"])
            .arg(&config)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("lifeline serve starts")
    };
    let mut first = serve();
    let store = Store::Postgres(url);
    let db = store.open(dir.path()).await;
    until("the first registered", || async {
        sql_i64(&db, "SELECT count(*) FROM replicas WHERE id = 'twin'").await == 1
    })
    .await;
    let second = serve();
    let out = bounded(
        "the second stops",
        tokio::task::spawn_blocking(move || second.wait_with_output()),
    )
    .await
    .unwrap()
    .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(
        err.contains("replica \"twin\"") && err.contains("storage.replica"),
        "{err}"
    );
    first.kill().unwrap();
    first.wait().unwrap();
    db.close().await;
}

/// Guards the listener's probe: a listening connection that goes silent
/// without closing (its server process stopped, as a black-holed route
/// looks) misses its probe and is made again, on a new backend.
#[tokio::test(start_paused = true)]
async fn a_listening_connection_gone_silent_is_found_and_made_again() {
    let Some(c) = replica_a("silent_listener").await else {
        return;
    };
    c.ready().await;
    let db = c.ll().db.clone();
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    let listener = "SELECT pid FROM pg_stat_activity \
         WHERE datname = current_database() AND query LIKE 'LISTEN%' ORDER BY backend_start DESC LIMIT 1";
    let silent: i32 = sqlx::query_scalar(listener)
        .fetch_one(&**pool)
        .await
        .expect("the listening backend");
    // Resumed however the test ends: a stopped backend holds up every
    // CREATE or DROP DATABASE on the server (they wait for it to answer).
    struct Resume(i32);
    impl Drop for Resume {
        fn drop(&mut self) {
            let _ = std::process::Command::new("kill")
                .args(["-CONT", &self.0.to_string()])
                .status();
        }
    }
    let stop = std::process::Command::new("kill")
        .args(["-STOP", &silent.to_string()])
        .status()
        .expect("kill runs");
    let resume = Resume(silent);
    assert!(stop.success(), "the backend stopped");
    let lost = || {
        c.ll()
            .stats
            .listen_probes_lost
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut rounds = 0;
    while lost() == 0 {
        rounds += 1;
        assert!(rounds < 400, "the silent listener was never noticed");
        c.advance(Duration::from_millis(250)).await;
        real_sleep(Duration::from_millis(5)).await;
    }
    until("listening again on another backend", || async {
        sqlx::query_scalar::<_, i32>(listener)
            .fetch_optional(&**pool)
            .await
            .ok()
            .flatten()
            .is_some_and(|pid| pid != silent)
    })
    .await;
    drop(resume);
    c.shutdown().await;
}

/// Guards "delivered once" on the direct path: a signal this replica
/// sends to an agent it holds is recorded already claimed, so the make-up
/// (which reads the `pending` rows of the agents held here) never finds
/// it, even between its ack and the ack's row being written.
#[tokio::test(start_paused = true)]
async fn a_signal_sent_to_an_agent_held_here_is_recorded_claimed() {
    let Some((c, db)) = replica_a_with_streams("claimed_at_insert").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    let done = c
        .ll()
        .dispatch
        .send(
            lifeline::signals::dispatch::Origin::Manual,
            vec![lifeline::signals::hub::SignalRequest {
                agent: "agent-00003".into(),
                ask: lifeline::signals::hub::Ask::Reconnect {
                    proxy: String::new(),
                },
                reason: "test".into(),
                requested_by: "api:admin".into(),
                trace: None,
            }],
        )
        .await
        .expect("sent");
    assert!(done.refused.is_empty(), "{:?}", done.refused);
    let id = done.sent[0].id;
    let found =
        lifeline::store::signals::pending_for_streams_of(pool, "replica-a", lifeline::Ts(0), 1000)
            .await
            .expect("the make-up's read");
    assert!(
        found.iter().all(|r| r.id != id),
        "the make-up would send it again: {found:?}"
    );
    until_acked(&c, id, "the agent acked").await;
    c.shutdown().await;
}

/// Guards the audit's one clock among replicas, at the clock itself (the
/// hub stamps through it): a wall clock an hour behind the database's is
/// measured so, and the times it gives follow the database's clock, not
/// its own.
#[tokio::test]
async fn db_time_measures_a_clock_off_the_databases_and_gives_the_databases_time() {
    use lifeline::store::db_time::DbTime;
    let Some(db) = postgres_store("dbtime").await else {
        return;
    };
    let Db::Postgres(pool) = &db else {
        panic!("a PostgreSQL store")
    };
    let hour = Duration::from_secs(3600);
    let wall = lifeline::Clock::system();
    let behind = DbTime::new(lifeline::Clock::starting_at(
        wall.now().saturating_sub(hour),
    ));
    assert_eq!(behind.offset_us(), 0, "nothing measured yet");
    let offset = behind
        .measure(pool)
        .await
        .unwrap()
        .expect("a round trip on loopback is quick");
    assert!(
        (offset - 3_600_000_000).abs() < 5_000_000,
        "an hour behind: {offset} µs"
    );
    let gap = behind.now().0 - wall.now().0;
    assert!(
        gap.abs() < 5_000_000,
        "stamps follow the database: {gap} µs off"
    );
    let same = DbTime::new(wall);
    same.measure(pool).await.unwrap();
    assert!(same.offset_us().abs() < 5_000_000, "{}", same.offset_us());
}

/// A sign-in on one replica holds on another: replica-b takes the
/// session cookie and the form tokens replica-a signed (one pair of keys,
/// made once in the shared store), so forms posted through a balancer to
/// any replica work.
#[tokio::test(start_paused = true)]
async fn a_sign_in_on_one_replica_holds_for_a_form_posted_to_another() {
    let Some(c) = replica_a("sessions").await else {
        return;
    };
    let b = replica_b(&c).await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let (base_a, base_b) = (c.ll().base_url(), b.base_url());
    let both = crate::support::signed_in(&client, &base_a, ADMIN).await;
    // replica-b knows who signed in on replica-a ...
    let page = crate::support::agents_page(&client, &base_b, &both).await;
    assert!(
        page.contains("<span>admin</span>"),
        "signed in on replica-b too"
    );
    // ... and takes a form replica-a's page carried.
    let token = crate::support::page_csrf(&client, &base_a, &both).await;
    let posted = bounded(
        "a form posted to replica-b",
        client
            .post(format!("{base_b}/signout"))
            .header("cookie", &both)
            .header("accept", "application/json")
            .form(&[("csrf", token.as_str())])
            .send(),
    )
    .await
    .expect("answer");
    let status = posted.status().as_u16();
    assert_eq!(status, 303, "{}", posted.text().await.unwrap_or_default());
    b.shutdown().await;
    c.shutdown().await;
}
