//! Hostile input and faults: times past year 9999, NULs and control
//! characters, rows a database refuses. Nothing crashes, nothing wedges,
//! one bad row never blocks the rows around it, on either engine.

use crate::support;
use std::sync::Arc;
use std::time::Duration;

use lifeline::domain::{AgentState, HistoryEvent, Kind, Labels, Outcome, Server, Subject};
use lifeline::domain::{EpisodeChange, HistoryEntry};
use lifeline::proto::v1 as pb;
use lifeline::store::signals::SignalUpdate;
use lifeline::store::writer::{self, WriterOptions};
use lifeline::store::WriteBatch;
use lifeline::{Clock, Ts};
use support::Cluster;

fn put(s: pb::Server) -> pb::Event {
    pb::Event {
        r#type: pb::EventType::Put as i32,
        resource: Some(pb::event::Resource::Server(s)),
    }
}

on_both_engines! {
/// A resource whose expiry lies past year 9999 is refused (and listed
/// again at every start without harm); a name with a NUL is refused; a
/// NUL in free text is replaced. Lifeline stays ready and its writer keeps
/// committing, across a restart.
#[tokio::test(start_paused = true)]
async fn far_future_expiries_and_nuls_from_the_cluster_neither_crash_nor_wedge(store) {
    let mut c = Cluster::new().store(store).quiet().start().await;
    c.ready().await;
    let good = c.sim.get_server(Kind::Proxy, "proxy-1").await.unwrap();
    // Stored in the simulator: listed again at every resync.
    let mut far = good.clone();
    far.name = "proxy-far".into();
    far.expires = Some(prost_types::Timestamp { seconds: 300_000_000_000, nanos: 0 });
    c.sim.put_server(far).await;
    let mut nul_name = good.clone();
    nul_name.name = "proxy\0evil".into();
    c.sim.inject(put(nul_name));
    let mut nul_text = good.clone();
    nul_text.version = "17.0\0-evil".into();
    nul_text.labels.insert("team".into(), "ops\0\u{1b}[2J".into());
    c.sim.inject(put(nul_text));
    c.quiesce().await;

    let s = c.summary().await;
    let r = &s["ingest"]["rejected"];
    assert_eq!(r["bad_timestamp"], 1, "{r}");
    assert_eq!(r["control_character"], 1, "{r}");
    assert_eq!(c.get("/readyz").await.0, 200);
    let p = c.ok("/api/v1/proxies/proxy-1").await;
    assert_eq!(p["version"], "17.0\u{FFFD}-evil", "{p}");
    c.flush().await;
    let ev = c.ok("/api/v1/events?event=rejected").await;
    let details: Vec<String> = support::strs(&ev["items"], "detail");
    assert!(details.iter().any(|d| d.contains("U+0000")), "{details:?}");
    assert!(details.iter().all(|d| !d.contains('\0')), "{details:?}");

    // The far-future resource is listed again at start: no crash loop.
    c.restart_lifeline().await;
    c.advance_until("ready after restart", Duration::from_secs(120), || async {
        c.get("/readyz").await.0 == 200
    })
    .await;
    assert!(c.ll().stats.rejected[lifeline::domain::RejectCode::BadTimestamp as usize]
        .load(std::sync::atomic::Ordering::Relaxed) >= 1);
    assert!(!c.ll().store_health.is_failing());
    c.shutdown().await;
}
}

fn server(kind: Kind, name: &str, version: &str) -> Server {
    Server {
        kind,
        name: name.into(),
        addr: String::new(),
        version: version.into(),
        group_id: String::new(),
        group_generation: 0,
        expires: Ts(1_000_000_000),
        ttl: Duration::from_secs(60),
        labels: Labels::default(),
        auth_server: String::new(),
    }
}

/// The store's writer on `db`, running, with its counters and health.
fn spawn_writer(
    db: &lifeline::store::Db,
) -> (
    writer::WriterHandle,
    Arc<lifeline::stats::Stats>,
    Arc<lifeline::store::health::StoreHealth>,
) {
    let stats = Arc::new(lifeline::stats::Stats::default());
    let health = Arc::new(lifeline::store::health::StoreHealth::default());
    let (handle, run) = writer::writer(
        db.clone(),
        WriterOptions {
            cluster: "default".into(),
            stats: stats.clone(),
            health: health.clone(),
            clock: Clock::system(),
            depth: 4,
            stop: tokio_util::sync::CancellationToken::new(),
        },
    );
    tokio::spawn(run);
    (handle, stats, health)
}

fn open_episode(id: i64, agent: &str) -> EpisodeChange {
    EpisodeChange::Open {
        id,
        agent: agent.into(),
        state: AgentState::Stranded,
        reasons: "no_live_tunnel".into(),
        cause: None,
        started: Ts(1_000_000),
        incident: None,
    }
}

fn event(name: &str) -> HistoryEntry {
    HistoryEntry {
        at: Ts(2_000_000),
        kind: Subject::Proxy,
        name: name.into(),
        event: HistoryEvent::Heartbeat,
        expires: None,
        ttl_us: None,
        detail: String::new(),
    }
}

on_both_engines! {
/// A row the database refuses for what it holds (an episode id already
/// taken, on every engine; a NUL in text, on PostgreSQL) is set aside and
/// recorded as rejected; the rest of its batch and every later batch are
/// committed, without waiting out a backoff.
#[tokio::test]
async fn a_poison_row_is_set_aside_and_the_rest_of_its_batch_committed(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let (handle, stats, health) = spawn_writer(&db);

    let mut first = WriteBatch::default();
    first.episodes.push(open_episode(7, "agent-1"));
    handle.send(first).await.unwrap();

    let mut b = WriteBatch::default();
    b.put_server(&server(Kind::Proxy, "p1", "17.0"));
    b.put_server(&server(Kind::Proxy, "p2", "17.0\0-rc"));
    b.put_server(&server(Kind::Proxy, "p3", "17.0"));
    b.event(event("p1"), 100);
    b.event(event("p3"), 100);
    b.episodes.push(open_episode(7, "agent-1"));
    b.episodes.push(open_episode(8, "agent-2"));
    handle.send(b).await.unwrap();
    let mut after = WriteBatch::default();
    after.episodes.push(open_episode(9, "agent-3"));
    handle.send(after).await.unwrap();
    support::bounded("the writer flushes past the poison rows", handle.flush())
        .await
        .unwrap();

    let pg = db.engine_name() == "postgres";
    let refused = stats.store_rows_refused.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, if pg { 2 } else { 1 }, "the repeated episode id, and the NUL on PostgreSQL");
    assert_eq!(support::sql_i64(&db, "SELECT COUNT(*) FROM episodes WHERE id IN (7, 8, 9)").await, 3);
    assert_eq!(support::sql_i64(&db, "SELECT COUNT(*) FROM episodes WHERE id = 7").await, 1);
    let servers = support::sql_i64(&db, "SELECT COUNT(*) FROM resources").await;
    assert_eq!(servers, if pg { 2 } else { 3 });
    assert_eq!(
        support::sql_i64(&db, "SELECT COUNT(*) FROM events WHERE event = 'heartbeat'").await,
        2
    );
    let rejected = support::sql_i64(
        &db,
        "SELECT COUNT(*) FROM events WHERE event = 'rejected' AND detail LIKE 'the database refused this %'",
    )
    .await;
    assert_eq!(rejected as u64, refused, "each refusal is history of its own");
    assert!(!health.is_failing());
}
}

on_both_engines! {
/// A batch of history large enough that PostgreSQL takes it by `COPY`
/// (and SQLite in many statements), with one row the database refuses (a
/// NUL, on PostgreSQL) in the middle: every other row is committed with
/// the values written, NULLs kept, and the refused one recorded.
#[tokio::test]
async fn a_poison_row_in_a_bulk_batch_never_blocks_its_neighbours(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let (handle, stats, health) = spawn_writer(&db);

    const ROWS: i64 = 40_000; // above the size from which PostgreSQL copies
    let mut b = WriteBatch::default();
    for i in 0..ROWS {
        let mut e = event(&format!("agent-{i:05}"));
        e.at = Ts(2_000_000 + i);
        e.kind = Subject::Agent;
        if i % 2 == 0 {
            e.expires = Some(Ts(9_000_000 + i));
            e.ttl_us = Some(30_000_000);
        }
        if i == ROWS / 2 {
            e.detail = "half\0way".into();
        }
        b.event(e, usize::MAX);
    }
    handle.send(b).await.unwrap();
    support::bounded("the writer commits the bulk batch", handle.flush())
        .await
        .unwrap();

    let pg = db.engine_name() == "postgres";
    let refused = stats.store_rows_refused.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, u64::from(pg), "the NUL, on PostgreSQL only");
    let heartbeats =
        support::sql_i64(&db, "SELECT COUNT(*) FROM events WHERE event = 'heartbeat'").await;
    assert_eq!(heartbeats, if pg { ROWS - 1 } else { ROWS });
    assert_eq!(
        support::sql_i64(
            &db,
            "SELECT COUNT(*) FROM events WHERE name = 'agent-00002' AND kind = 'agent' \
             AND at_us = 2000002 AND expires_us = 9000002 AND ttl_us = 30000000 AND detail = ''"
        )
        .await,
        1,
        "a row's values as written"
    );
    assert_eq!(
        support::sql_i64(
            &db,
            "SELECT COUNT(*) FROM events WHERE name = 'agent-00003' \
             AND expires_us IS NULL AND ttl_us IS NULL"
        )
        .await,
        1,
        "NULLs kept"
    );
    assert!(!health.is_failing());
}
}

on_both_engines! {
/// An ack detail the database refuses (a NUL, on PostgreSQL) does not
/// block the signal audit: each outcome is still recorded, the refused
/// detail replaced by the refusal.
#[tokio::test]
async fn a_refused_ack_detail_never_blocks_the_signal_audit(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let rows = [
        support::signal_row(1, Ts(1_000_000), Outcome::Delivered),
        support::signal_row(2, Ts(1_000_000), Outcome::Delivered),
    ];
    lifeline::store::signals::insert(&db, &rows).await.unwrap();
    let ack = |id, detail: &str| SignalUpdate::Outcome {
        id,
        at: Ts(2_000_000),
        outcome: Outcome::Failed,
        detail: detail.into(),
        acked: true,
        latency_us: Some(1000),
    };
    let updates = [ack(1, "bad\0detail"), ack(2, "fine")];
    let pg = db.engine_name() == "postgres";
    if pg {
        let e = lifeline::store::signals::update(&db, &updates).await.unwrap_err();
        assert!(lifeline::store::is_permanent(&e), "{e}");
    }
    let refused = lifeline::store::signals::update_isolating(&db, &updates)
        .await
        .unwrap();
    assert_eq!(refused, u64::from(pg));
    assert_eq!(
        support::sql_i64(&db, "SELECT COUNT(*) FROM signals WHERE outcome = 'failed'").await,
        2
    );
}
}

/// `n` arbitrary bytes, the same for the same seed.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..n).map(|_| rng.random()).collect()
}

on_both_engines! {
/// Arbitrary bytes in every text field of a resource: validation either
/// refuses it with a code or the store takes it whole, in one batch.
#[tokio::test]
async fn arbitrary_bytes_in_every_text_field_are_refused_or_stored(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let limits = lifeline::ingest::validate::Limits {
        default_ttl: Duration::from_secs(60),
        max_expired_age: Duration::from_secs(3600),
        max_ttl: Duration::from_secs(86_400),
    };
    let now = Ts(1_800_000_000_000_000);
    let text = |seed: u64| String::from_utf8_lossy(&bytes(seed, (seed % 40) as usize)).into_owned();
    let mut b = WriteBatch::default();
    let (mut taken, mut refused) = (0, 0);
    for i in 0..400u64 {
        let p = pb::Server {
            kind: "agent".into(),
            name: if i % 2 == 0 { format!("a{i}") } else { format!("a{i}{}", text(i)) },
            addr: text(i + 1000),
            version: text(i + 2000),
            group_id: text(i + 3000),
            group_generation: i,
            expires: Some(lifeline::proto::to_timestamp(now.saturating_add(Duration::from_secs(30)))),
            ttl: None,
            labels: [(text(i + 4000), text(i + 5000))].into_iter().collect(),
            auth_server: if i % 3 == 0 { text(i + 6000) } else { String::new() },
        };
        match lifeline::ingest::validate::server(p, now, &limits) {
            Ok(s) => {
                taken += 1;
                b.put_server(&s);
            }
            Err(r) => {
                refused += 1;
                assert!(!r.to_string().contains('\0'), "{r}");
            }
        }
    }
    assert!(taken > 100 && refused > 0, "{taken} taken, {refused} refused");
    assert_eq!(
        writer::commit(&db, &"default".into(), &b).await.unwrap(),
        writer::Committed::Written
    );
    let stored = support::sql_i64(&db, "SELECT COUNT(*) FROM resources").await;
    assert_eq!(stored, b.servers.len() as i64);
}
}

on_both_engines! {
/// Dropped history is a visible gap: the batch that carries the count of
/// rows dropped while the database refused writes writes a `gap` row that
/// says how many.
#[tokio::test]
async fn dropped_history_leaves_a_visible_gap(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let (handle, _, _) = spawn_writer(&db);
    let mut b = WriteBatch::default();
    for i in 0..5 {
        b.event(event(&format!("p{i}")), 2);
    }
    assert_eq!(b.dropped_events, 3);
    handle.send(b).await.unwrap();
    support::bounded("the writer flushes", handle.flush()).await.unwrap();
    assert_eq!(
        support::sql_i64(
            &db,
            "SELECT count(*) FROM events WHERE event = 'gap' AND kind = 'store' \
             AND detail LIKE '3 history rows were dropped%'"
        )
        .await,
        1
    );
    assert_eq!(support::sql_i64(&db, "SELECT count(*) FROM events WHERE event = 'heartbeat'").await, 2);
}
}

on_both_engines! {
/// A filter naming something with a NUL or another control character is
/// an empty answer, not a database error (PostgreSQL refuses a NUL), and a
/// reconnect naming such a proxy finds no such proxy.
#[tokio::test(start_paused = true)]
async fn filters_with_control_characters_find_nothing(store) {
    let c = Cluster::new().store(store).quiet().start().await;
    c.ready().await;
    for path in [
        "/api/v1/events?name=p%00x",
        "/api/v1/episodes?cause_resource=%03x",
        "/api/v1/signals?agent=a%00b",
        "/api/v1/agents?proxy=m%14x",
    ] {
        let (status, body) = c.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["items"].as_array().map(Vec::len), Some(0), "{path}: {body}");
    }
    let (status, body) = c.post("/api/v1/reconnects", "{\"proxy\": \"p\\u0000\"}").await;
    assert_eq!(status, 404, "{body}");
    c.shutdown().await;
}
}

on_both_engines! {
/// Guards the write of plain heartbeats: a row whose expiry alone moved
/// is updated in place on PostgreSQL (only its expiry and TTL move: a
/// version the row carries is not written) and upserted whole on SQLite;
/// where none is stored (one the database refused before, say) it is
/// written whole on both, the rows around it kept. On PostgreSQL the
/// current state and the history go in two transactions at once: a flush
/// answers once both are committed.
#[tokio::test]
async fn a_heartbeats_expiry_lands_on_the_stored_row_or_writes_it_whole(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let in_place = matches!(db, lifeline::store::Db::Postgres(_));
    let (w, stats, health) = spawn_writer(&db);
    let mut first = WriteBatch::default();
    first.put_server(&server(Kind::Proxy, "p1", "17.0"));
    first.event(event("p1"), 100);
    w.send(first).await.unwrap();

    // Every row of this piece is stored: no row is written whole.
    let mut beat = server(Kind::Proxy, "p1", "17.9");
    beat.expires = Ts(5_000_000);
    beat.ttl = Duration::from_secs(90);
    let mut only = WriteBatch::default();
    only.put_row(beat, true);
    only.event(event("p1"), 100);
    w.send(only).await.unwrap();
    w.flush().await.unwrap();
    let stored = |sql| support::sql_i64(&db, sql);
    assert_eq!(stored("SELECT expires_us FROM resources WHERE name = 'p1'").await, 5_000_000);
    assert_eq!(stored("SELECT ttl_us FROM resources WHERE name = 'p1'").await, 90_000_000);
    assert_eq!(
        stored("SELECT COUNT(*) FROM resources WHERE name = 'p1' AND version = '17.0'").await,
        i64::from(in_place),
        "PostgreSQL moved the expiry alone; SQLite wrote the row whole"
    );

    let mut unseen = server(Kind::Proxy, "p2", "17.1");
    unseen.expires = Ts(6_000_000);
    let mut next = WriteBatch::default();
    next.put_row(unseen, true);
    next.put_server(&server(Kind::Proxy, "p3", "17.2"));
    for n in ["p2", "p3"] {
        next.event(event(n), 100);
    }
    w.send(next).await.unwrap();
    w.flush().await.unwrap();
    assert_eq!(
        stored("SELECT expires_us FROM resources WHERE name = 'p2'").await,
        6_000_000,
        "written whole where none was stored"
    );
    assert_eq!(stored("SELECT COUNT(*) FROM resources WHERE version LIKE '17.%'").await, 3);
    assert_eq!(stored("SELECT COUNT(*) FROM events").await, 4);
    assert_eq!(stats.store_errors.load(std::sync::atomic::Ordering::Relaxed), 0);
    assert!(!health.is_failing());
}
}

on_both_engines! {
/// Guards a large snapshot, which PostgreSQL writes as two halves at once
/// on two connections: every row lands once with its values; one the
/// database refuses (a NUL, on PostgreSQL) is set aside and recorded
/// without holding back the rest of its half; the next snapshot of the
/// same rows moves every expiry, writing the refused one whole; a flush
/// answers after all of it.
#[tokio::test]
async fn a_large_snapshot_lands_whole_around_a_poison_row(store) {
    let dir = tempfile::tempdir().unwrap();
    let db = store.open(dir.path()).await;
    let (w, stats, health) = spawn_writer(&db);
    let rows = writer::STATE_HALVES_FROM + 1_000;
    let agent = |i: usize| server(Kind::Agent, &format!("agent-{i:06}"), "17.0");
    let mut snapshot = WriteBatch::default();
    for i in 0..rows {
        let mut s = agent(i);
        if i == rows / 2 {
            s.version = "17\0".into();
        }
        snapshot.put_server(&s);
    }
    for i in 0..2_000 {
        snapshot.put_tunnel(&lifeline::domain::Tunnel {
            name: format!("tunnel-{i:06}"),
            agent: format!("agent-{i:06}"),
            proxy: "proxy-1".into(),
            last_heartbeat: Some(Ts(1_000_000)),
            expires: Some(Ts(2_000_000 + i as i64)),
        });
    }
    w.send(snapshot).await.unwrap();
    let mut moved = WriteBatch::default();
    for i in 0..rows {
        let mut s = agent(i);
        s.expires = Ts(2_000_000_000 + i as i64);
        moved.put_row(s, true);
    }
    w.send(moved).await.unwrap();
    support::bounded("the writer commits both snapshots", w.flush())
        .await
        .unwrap();

    let pg = db.engine_name() == "postgres";
    let refused = stats.store_rows_refused.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(refused, u64::from(pg), "the NUL, on PostgreSQL only");
    assert_eq!(
        stats.store_batches.load(std::sync::atomic::Ordering::Relaxed),
        if pg { 4 } else { 2 },
        "each snapshot two transactions on PostgreSQL, one on SQLite"
    );
    let stored = |sql| support::sql_i64(&db, sql);
    assert_eq!(
        stored("SELECT COUNT(*) FROM resources WHERE kind = 'agent' AND expires_us >= 2000000000")
            .await,
        rows as i64,
        "every row once, its expiry moved"
    );
    assert_eq!(
        stored(
            "SELECT COUNT(*) FROM resources WHERE name = 'agent-000007' \
             AND expires_us = 2000000007 AND ttl_us = 60000000 AND version = '17.0'"
        )
        .await,
        1,
        "a row's values as written"
    );
    assert_eq!(stored("SELECT COUNT(*) FROM tunnels").await, 2_000);
    assert_eq!(
        stored("SELECT COUNT(*) FROM tunnels WHERE name = 'tunnel-001999' AND expires_us = 2001999")
            .await,
        1
    );
    assert_eq!(
        stored("SELECT COUNT(*) FROM events WHERE event = 'rejected'").await as u64,
        refused,
        "the refusal is history of its own"
    );
    assert!(!health.is_failing());
}
}
