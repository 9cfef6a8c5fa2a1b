//! The outbox's order on PostgreSQL, where several transactions write
//! it at once (the leader's batch writer, its window teller, the storm
//! guard's pauses, and every replica's API): each webhook gets every
//! event once, in id order, none skipped. The design that holds it is a
//! transaction-scoped advisory lock every outbox writer takes before its
//! first event (`store::outbox::OUTBOX_LOCK`), so ids commit in order and
//! a cursor `id > last` never passes over one still to come.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::Clock;
use lifeline::domain::Kind;
use lifeline::store::outbox;
use lifeline_sim::receiver::{Answer, Receiver};
use serde_json::json;

use crate::notify::{cluster, delivered, secret_file, written};
use crate::support::{self, Cluster, Store, ADMIN};

/// Every event in the outbox, paged.
async fn every_event(db: &lifeline::store::Db) -> Vec<outbox::Event> {
    let mut out: Vec<outbox::Event> = Vec::new();
    loop {
        let after = out.last().map_or(0, |e| e.id);
        let page = outbox::after(db, after, 1000).await.expect("events read");
        if page.is_empty() {
            return out;
        }
        out.extend(page);
    }
}

/// Two replicas on one database, both configured with the same two
/// webhooks (only the leader delivers). 500 maintenance windows are
/// declared and ended through both replicas' APIs at once, 16 requests in
/// flight, while a proxy stops and comes back again and again (incidents
/// open and resolve in the batch writer's transactions); the receiver
/// answers each request after a random wait. Each webhook then holds
/// every event the outbox holds, each once, in id order.
#[tokio::test(start_paused = true)]
async fn every_event_reaches_each_webhook_once_in_order_while_two_replicas_write() {
    let Some(store) = Store::postgres("notify_concurrent").await else {
        return;
    };
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    rx.answer(Answer::Slow(Duration::from_millis(400)));
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let hooks = vec![
        support::webhook("one", rx.url("/one"), &secret),
        support::webhook("two", rx.url("/two"), &secret),
    ];
    let mut c = Cluster::six_legacy()
        .store(store)
        .config(move |cfg| {
            cfg.storage.replica = Some("replica-a".into());
            cfg.notify.webhooks = hooks;
            // Virtual time runs ahead of requests waiting on the
            // database: the listeners must not time them out.
            cfg.server.http_request_timeout = Duration::from_secs(3600);
            cfg.server.http_idle_timeout = Duration::from_secs(3600);
        })
        .start()
        .await;
    c.ready().await;
    c.advance_until("replica-a leads", Duration::from_secs(30), || async {
        c.ll().leadership.borrow().leading
    })
    .await;
    let mut cfg_b = c.cfg.clone();
    cfg_b.storage.replica = Some("replica-b".into());
    let b = Lifeline::start_tuned(
        &cfg_b,
        c.clock,
        Tuning {
            waits: lifeline::store::Waits::patient(Duration::from_secs(24 * 3600)),
            ..Tuning::default()
        },
    )
    .await
    .expect("a second replica starts on the same database");
    c.other_watchers.push(b.stats.clone());

    // 500 windows, each declared then ended, through either replica.
    let bases = [c.ll().base_url(), b.base_url()];
    // A connection per request: the listeners close idle ones as virtual
    // time jumps, which a pooled client would race.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("a client");
    let until = c
        .clock
        .now()
        .saturating_add(Duration::from_secs(3600))
        .rfc3339();
    let windows = tokio::spawn(async move {
        futures::stream::iter(0..500usize)
            .map(|i| {
                let base = bases[i % 2].clone();
                let ender = bases[(i / 2) % 2].clone();
                let http = http.clone();
                let until = until.clone();
                async move {
                    let body = json!({"targets": [format!("agent/none-{i}")], "until": until,
                                      "reason": format!("window {i}")});
                    let made = http
                        .post(format!("{base}/api/v1/maintenance"))
                        .bearer_auth(ADMIN)
                        .json(&body)
                        .send()
                        .await
                        .expect("declared");
                    let status = made.status().as_u16();
                    let v: serde_json::Value = made.json().await.expect("json");
                    assert_eq!(status, 201, "window {i} declared: {v}");
                    let id = v["id"].as_i64().expect("an id");
                    // Once its start is likely told, half are ended (the
                    // leader tells it) and half deleted (the API's own
                    // transaction tells it, on either replica).
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    let ended = if i % 4 < 2 {
                        http.post(format!("{ender}/api/v1/maintenance/{id}/end"))
                    } else {
                        http.delete(format!("{ender}/api/v1/maintenance/{id}"))
                    }
                    .bearer_auth(ADMIN)
                    .send()
                    .await
                    .expect("ended");
                    let status = ended.status().as_u16();
                    let text = ended.text().await.unwrap_or_default();
                    assert_eq!(status, 200, "window {id} ended: {text}");
                }
            })
            .buffer_unordered(16)
            .collect::<Vec<()>>()
            .await
    });
    // And a slow writer of its own (as another replica's transaction
    // would be): under the outbox lock, an event, a pause, then commit.
    let lifeline::store::Db::Postgres(pg) = c.ll().db.clone() else {
        panic!("a PostgreSQL store")
    };
    let slow_at = c.clock.now().as_micros();
    let slow = tokio::spawn(async move {
        for k in 0..40u64 {
            let mut tx = pg.pool.begin().await.expect("a transaction");
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(outbox::OUTBOX_LOCK)
                .execute(&mut *tx)
                .await
                .expect("the outbox lock");
            let body = json!({"reconnects_paused": true, "restarts_paused": false,
                              "reason": format!("slow writer {k}"), "stranded_in_window": 0, "agents": 6});
            sqlx::query("INSERT INTO notify_events (at_us, kind, incident_id, body) VALUES ($1, 'restarts.paused', NULL, $2)")
                .bind(slow_at)
                .bind(body.to_string())
                .execute(&mut *tx)
                .await
                .expect("an event");
            support::real_sleep(Duration::from_millis(20 + 13 * (k % 7))).await;
            tx.commit().await.expect("committed");
        }
    });
    // Meanwhile proxy-1 stops and comes back, again and again. Virtual
    // time moves a quarter second per 20 ms of real time, so requests
    // waiting on the database are not outrun by their own deadlines.
    let running = &c;
    let step = |steps: u32| async move {
        for _ in 0..steps {
            running.advance(Duration::from_millis(250)).await;
            support::real_sleep(Duration::from_millis(20)).await;
        }
    };
    let mut round = 0;
    while !windows.is_finished() || !slow.is_finished() || round < 2 {
        round += 1;
        // Past its 10 s TTL: its agents are degraded, an incident opens.
        c.sim.pause_heartbeats("proxy-1").await;
        step(48).await;
        c.sim.resume_heartbeats(Kind::Proxy, "proxy-1").await;
        step(16).await;
        assert!(round < 500, "the windows were not all declared and ended");
    }
    windows.await.expect("every window declared and ended");
    slow.await.expect("the slow writer's events written");

    let db = c.ll().db.clone();
    c.advance_until(
        "every event delivered to both webhooks",
        Duration::from_secs(600),
        || async {
            let events = every_event(&db).await;
            let got = rx.got();
            ["/one", "/two"].iter().all(|p| {
                let mine: Vec<_> = got.iter().filter(|r| r.path == *p).cloned().collect();
                delivered(&mine).len() >= events.len()
            })
        },
    )
    .await;
    let events = every_event(&db).await;
    let kinds: BTreeMap<String, usize> = events.iter().fold(BTreeMap::new(), |mut m, e| {
        *m.entry(e.kind.clone()).or_default() += 1;
        m
    });
    // Each window told started is told ended, once (a window deleted
    // before its start was told is told neither).
    let windows_told = |kind: &str| -> Vec<i64> {
        let mut ids: Vec<i64> = events
            .iter()
            .filter(|e| e.kind == kind)
            .filter_map(|e| match e.notice().expect("a notice").about {
                lifeline::domain::About::Window(w) => Some(w.id),
                _ => None,
            })
            .collect();
        ids.sort_unstable();
        ids
    };
    let started = windows_told("maintenance.started");
    assert_eq!(started, windows_told("maintenance.ended"));
    assert!(started.len() >= 250, "{kinds:?}");
    assert_eq!(kinds.get("restarts.paused"), Some(&40), "{kinds:?}");
    assert!(
        kinds.contains_key("incident.opened") && kinds.contains_key("incident.resolved"),
        "{kinds:?} after {round} rounds"
    );
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    for p in ["/one", "/two"] {
        let mine: Vec<_> = rx.got().into_iter().filter(|r| r.path == p).collect();
        assert_eq!(
            delivered(&mine),
            ids,
            "{p}: every event once, in id order, none missing"
        );
    }
    b.shutdown().await;
    c.shutdown().await;
}

/// On PostgreSQL, a transaction that took an event id and has not
/// committed (another replica's, writing the outbox under its lock) holds
/// back every later event: the telling of a window declared meanwhile
/// waits for it, so a webhook that reads the window's event has already
/// been able to read the earlier one, and both are delivered. (Without
/// the lock the window's higher id commits first, the webhook moves past
/// it, and the earlier event, committed a moment later, is never
/// delivered.)
#[tokio::test(start_paused = true)]
async fn an_event_committed_after_a_later_one_is_never_skipped_on_postgres() {
    let Some(store) = Store::postgres("notify_order").await else {
        return;
    };
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let c = cluster(store, dir.path(), vec![("oncall", rx.url("/hook"))]).await;
    let lifeline::store::Db::Postgres(pool) = c.ll().db.clone() else {
        panic!("a PostgreSQL store")
    };
    // Another writer's transaction: the lock, an event, no commit yet.
    let mut other = pool.begin().await.expect("a transaction");
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(outbox::OUTBOX_LOCK)
        .execute(&mut *other)
        .await
        .expect("the outbox lock");
    let body = r#"{"window":{"id":0,"targets":["proxy/proxy-9"],"from":"2026-11-29T02:00:00Z","until":"2026-11-29T03:00:00Z","reason":"another replica","created_by":"b","created_at":"2026-11-29T01:00:00Z","ended_by":null,"ended_at":null,"deleted_at":null,"status":"active"}}"#;
    let earlier: i64 = sqlx::query_scalar(
        "INSERT INTO notify_events (at_us, kind, incident_id, body) \
         VALUES ($1, 'maintenance.started', NULL, $2) RETURNING id",
    )
    .bind(c.clock.now().as_micros())
    .bind(body)
    .fetch_one(&mut *other)
    .await
    .expect("an event");
    // Meanwhile an operator declares a window.
    let until = c
        .clock
        .now()
        .saturating_add(Duration::from_secs(600))
        .rfc3339();
    let req = c
        .http
        .post(format!("{}/api/v1/maintenance", c.ll().base_url()))
        .bearer_auth(support::ADMIN)
        .header("content-type", "application/json")
        .body(
            serde_json::json!({"targets": ["proxy/proxy-1"], "until": until, "reason": "patch"})
                .to_string(),
        );
    let declared = tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) });
    // The webhook has every chance to read what is visible.
    c.advance(Duration::from_secs(10)).await;
    other.commit().await.expect("the other writer commits");
    let status = support::real_timeout(Duration::from_secs(10), declared)
        .await
        .expect("the window is declared once the other commits")
        .expect("joined")
        .expect("answered");
    assert_eq!(status, 201);
    // The window is told as it starts (by the teller's own transaction).
    c.advance_until("the window is told", Duration::from_secs(30), || async {
        written(&c)
            .await
            .iter()
            .any(|e| e.id != earlier && e.kind == "maintenance.started")
    })
    .await;
    let ids: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
    assert!(ids.contains(&earlier), "{ids:?}");
    c.advance_until(
        "every event delivered, the earlier one too",
        Duration::from_secs(60),
        || async {
            let got = delivered(&rx.got());
            ids.iter().all(|id| got.contains(id))
        },
    )
    .await;
    let got = delivered(&rx.got());
    assert!(
        got.windows(2).all(|w| w[0] < w[1]),
        "in order, each once: {got:?}"
    );
    c.shutdown().await;
}

/// A window's row held by another transaction for longer than the
/// connections' `lock_timeout` (2 s): ending it answers 503 `busy` (try
/// again), not 500 `internal`, and once the other commits the same
/// request ends it.
#[tokio::test(start_paused = true)]
async fn a_window_locked_past_lock_timeout_is_busy_not_internal() {
    let Some(store) = Store::postgres("window_lock_busy").await else {
        return;
    };
    // Virtual time runs on while the request waits on the database: the
    // listener must not time it out first.
    let c = Cluster::six_legacy()
        .store(store)
        .config(|cfg| cfg.server.http_request_timeout = Duration::from_secs(3600))
        .start()
        .await;
    c.ready().await;
    let until = c
        .clock
        .now()
        .saturating_add(Duration::from_secs(600))
        .rfc3339();
    let body = json!({"targets": ["proxy/proxy-1"], "until": until, "reason": "patch"});
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    let id = w["id"].as_i64().expect("an id");
    let lifeline::store::Db::Postgres(pg) = c.ll().db.clone() else {
        panic!("a PostgreSQL store")
    };
    let mut other = pg.pool.begin().await.expect("a transaction");
    sqlx::query("SELECT id FROM maintenance_windows WHERE id = $1 FOR UPDATE")
        .bind(id)
        .execute(&mut *other)
        .await
        .expect("the row held");
    let end = || {
        let req = c
            .http
            .post(format!("{}/api/v1/maintenance/{id}/end", c.ll().base_url()))
            .bearer_auth(ADMIN);
        async move {
            let r = req.send().await.expect("answered");
            let status = r.status().as_u16();
            (
                status,
                r.json::<serde_json::Value>().await.unwrap_or_default(),
            )
        }
    };
    // The holder stays busy (an idle one is cut off after 2 s by
    // `idle_in_transaction_session_timeout`) while the end waits.
    let (slept, answered) = tokio::join!(
        sqlx::query("SELECT pg_sleep(4)").execute(&mut *other),
        support::real_timeout(Duration::from_secs(20), end()),
    );
    slept.expect("the holder slept");
    let (status, e) = answered.expect("answered once the lock wait timed out");
    assert_eq!(status, 503, "{e}");
    assert_eq!(e["error"]["code"], "busy", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("lock") && m.contains("try again")),
        "{e}"
    );
    other.rollback().await.expect("released");
    let (status, e) = end().await;
    assert_eq!(status, 200, "{e}");
    c.shutdown().await;
}
