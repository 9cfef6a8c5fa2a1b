//! A replica cut off from PostgreSQL by a partition that leaves its
//! sockets open (a dropped route: nothing is refused, nothing answers),
//! through a TCP relay inside the test that stops forwarding for 20 s and
//! then resumes: the leader steps down and the other replica takes over,
//! and once the relay forwards again the cut-off replica is ready within
//! 10 s, whether it led when cut off or followed. And the store's own
//! bounds behind such a relay: a query that gets no answer is given up at
//! its deadline, its connection closed rather than handed out again, and
//! a connection attempt gives up at the acquire timeout. Real time, a real
//! PostgreSQL.

// A real database behind a real relay: the wall clock, never a paused one.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::support::{self, Cluster};

/// Forwards connections to `upstream` while not paused; paused, it reads
/// and writes nothing, and every socket stays open.
struct Relay {
    port: u16,
    paused: watch::Sender<bool>,
}

impl Relay {
    async fn start(upstream: String) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("relay binds");
        let port = listener.local_addr().expect("addr").port();
        let (paused, _) = watch::channel(false);
        let p = paused.clone();
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                let Ok(up) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pipe(dr, uw, p.subscribe()));
                tokio::spawn(pipe(ur, dw, p.subscribe()));
            }
        });
        Relay { port, paused }
    }

    fn pause(&self, on: bool) {
        self.paused.send_replace(on);
    }
}

async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut paused: watch::Receiver<bool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            },
            // Paused while waiting to read: stop reading at once.
            _ = paused.wait_for(|p| *p) => continue,
        };
        if paused.wait_for(|p| !*p).await.is_err() {
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

/// `url` with its host and port replaced by the relay's.
fn through(url: &str, relay: &Relay) -> String {
    let (base_url, rest) = url.rsplit_once('@').expect("user@host:port/db");
    let (_, db) = rest.split_once('/').expect("host:port/db");
    format!("{base_url}@127.0.0.1:{}/{db}", relay.port)
}

fn upstream(url: &str) -> String {
    let (_, rest) = url.rsplit_once('@').expect("user@host:port/db");
    rest.split_once('/').expect("host:port/db").0.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_without_an_answer_is_given_up_and_its_connection_closed() {
    use lifeline::store::{self, Waits};
    use std::sync::atomic::Ordering;
    let Some(url) = support::fresh_postgres("query_deadline").await else {
        return;
    };
    let relay = Relay::start(upstream(&url)).await;
    let engine = store::Engine::Postgres(lifeline::config::DbUrl::new(through(&url, &relay)));
    let waits = Waits {
        acquire: Duration::from_secs(2),
        query: Duration::from_secs(1),
    };
    let db = store::open(&engine, waits).await.expect("the store opens");
    let store::Db::Postgres(pg) = &db else {
        panic!("a PostgreSQL store")
    };
    store::settings::all(&db)
        .await
        .expect("answered before the partition");
    let closed_before = store::CONNECTIONS_CLOSED_SILENT.load(Ordering::Relaxed);

    // A query in flight when the route drops: it is given up at its
    // deadline, and its connection, taken back by the pool, does not
    // answer its ping and is closed rather than handed out again.
    let pool = pg.pool.clone();
    let in_flight = tokio::spawn(async move {
        store::bounded(
            Duration::from_secs(1),
            sqlx::query("SELECT pg_sleep(3)").execute(&pool),
        )
        .await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    relay.pause(true);
    let e = in_flight
        .await
        .expect("the query's task")
        .expect_err("no answer through a silent route");
    assert!(
        e.to_string()
            .contains("no answer from the database within 1s"),
        "the error says why: {e}"
    );
    let began = Instant::now();
    while store::CONNECTIONS_CLOSED_SILENT.load(Ordering::Relaxed) == closed_before {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the silent connection was never closed (pool size {})",
            pg.size()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A store query while the route is down says why within its deadline.
    let began = Instant::now();
    let e = store::settings::all(&db)
        .await
        .expect_err("no answer through a silent route");
    let took = began.elapsed();
    assert!(
        e.to_string()
            .contains("no answer from the database within 1s"),
        "the error says why: {e}"
    );
    assert!(
        took < Duration::from_secs(3),
        "given up at its deadline, not after {took:?}"
    );
    // A new store's first connection attempt gives up at the acquire
    // timeout and says so.
    let began = Instant::now();
    let e = store::open(&engine, waits)
        .await
        .expect_err("no connection through a silent route");
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "the connection attempt has a deadline ({:?})",
        began.elapsed()
    );
    assert!(e.to_string().contains("no answer within"), "{e}");

    relay.pause(false);
    let began = Instant::now();
    store::settings::all(&db)
        .await
        .expect("answered again once the route is back");
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "answered at once on a new connection ({:?})",
        began.elapsed()
    );
    db.close().await;
}

/// The replica's `/readyz` status.
async fn readyz(http: &reqwest::Client, base: &str) -> u16 {
    match http
        .get(format!("{base}/readyz"))
        .timeout(Duration::from_secs(1))
        .send()
        .await
    {
        Ok(r) => r.status().as_u16(),
        Err(_) => 0,
    }
}

/// How long until `base` answers `/readyz` 200, at most `within`.
async fn ready_after(http: &reqwest::Client, base: &str, within: Duration) -> Option<Duration> {
    let began = Instant::now();
    while began.elapsed() < within {
        if readyz(http, base).await == 200 {
            return Some(began.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_ready_again_within_10_s_after_a_partition_heals() {
    let Some(url) = support::fresh_postgres("partition").await else {
        return;
    };
    let (base_url, rest) = url.rsplit_once('@').expect("user@host:port/db");
    let (hostport, db) = rest.split_once('/').expect("host:port/db");
    let relay = Relay::start(hostport.to_string()).await;
    let via_relay = format!("{base_url}@127.0.0.1:{}/{db}", relay.port);
    let c = Cluster::new()
        .agents(3)
        .store(support::Store::Postgres(via_relay))
        .production_waits()
        .config(|cfg| {
            cfg.storage.replica = Some("replica-a".into());
            cfg.storage.leader_lease = Duration::from_secs(2);
        })
        .start()
        .await;
    let mut cfg_b = c.cfg.clone();
    cfg_b.storage.replica = Some("replica-b".into());
    cfg_b.storage.url = Some(lifeline::config::DbUrl::new(url.clone()));
    let b = lifeline::app::Lifeline::start(&cfg_b, c.clock)
        .await
        .expect("replica-b starts");
    let a_base = c.ll().base_url();
    let http = reqwest::Client::new();
    assert!(
        ready_after(&http, &a_base, Duration::from_secs(20))
            .await
            .is_some(),
        "replica-a ready before the partition"
    );
    let leads = |l: &lifeline::app::Lifeline| l.leadership.borrow().leading;
    assert!(leads(c.ll()), "replica-a leads first");
    for role in ["leader", "follower"] {
        relay.pause(true);
        tokio::time::sleep(Duration::from_secs(20)).await;
        if role == "leader" {
            assert!(leads(&b), "replica-b took over while replica-a was cut off");
        }
        relay.pause(false);
        let took = ready_after(&http, &a_base, Duration::from_secs(10)).await;
        eprintln!("cut off as {role}: ready again after {took:?}");
        if took.is_none() {
            let body = http
                .get(format!("{a_base}/readyz"))
                .timeout(Duration::from_secs(2))
                .send()
                .await
                .map(|r| r.text());
            let body = match body {
                Ok(t) => t.await.unwrap_or_default(),
                Err(e) => e.to_string(),
            };
            let pool = match &c.ll().db {
                lifeline::store::Db::Postgres(p) => {
                    format!("pool size {} idle {}", p.size(), p.num_idle())
                }
                _ => String::new(),
            };
            panic!("replica-a, cut off as {role}, not ready within 10 s of the partition healing ({pool}): {body}");
        }
    }
    b.shutdown().await;
    c.shutdown().await;
}
