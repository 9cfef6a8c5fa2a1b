//! The database failing under load, on PostgreSQL: every Lifeline
//! connection cut again and again while the simulated cluster flaps, then
//! the server restarted. Nothing audited is lost, no episode is left open
//! wrongly, and Lifeline is ready again soon after the database returns.

use std::collections::BTreeSet;
use std::time::Duration;

use lifeline::domain::Kind;
use lifeline::stats::PendingRows;
use reqwest::Method;
use serde_json::Value;

use crate::support::{self, real_sleep, Cluster, Store, ADMIN};

/// A PostgreSQL server of the test's own (it is restarted), from
/// `.ci/postgres`; stopped and removed on drop.
struct OwnServer {
    url: String,
    dir: String,
}

/// `.ci/postgres <args>`: what it printed, once it succeeded (a failure
/// panics with its stderr, except where `must` is false: the clean-up).
fn ci_postgres(args: &[&str], must: bool) -> String {
    let script = crate::support::repo().join(".ci/postgres");
    let out = std::process::Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .expect(".ci/postgres runs");
    assert!(
        out.status.success() || !must,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

impl OwnServer {
    fn start() -> Option<OwnServer> {
        // Skipped (or, under CI=true, failed) like every PostgreSQL test.
        support::postgres_server("faults")?;
        let text = ci_postgres(&["start"], true);
        let var = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .map(str::to_string)
                .expect("start prints it")
        };
        Some(OwnServer {
            url: var("LIFELINE_TEST_POSTGRES_URL"),
            dir: var("LIFELINE_TEST_POSTGRES_DIR"),
        })
    }

    fn restart(&self) {
        ci_postgres(&["restart", &self.dir], true);
    }
}

impl Drop for OwnServer {
    fn drop(&mut self) {
        ci_postgres(&["stop", &self.dir], false);
    }
}

/// Cuts every connection Lifeline holds, every 100 ms of real time, until
/// `stop`; returns how many it cut.
async fn cut_connections(url: String, stop: tokio_util::sync::CancellationToken) -> i64 {
    use sqlx::Connection;
    let mut cut = 0;
    let mut conn: Option<sqlx::PgConnection> = None;
    while !stop.is_cancelled() {
        if conn.is_none() {
            conn = sqlx::PgConnection::connect(&url).await.ok();
        }
        if let Some(c) = conn.as_mut() {
            let n: Result<i64, _> = sqlx::query_scalar(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                 WHERE application_name = 'lifeline' AND pid <> pg_backend_pid()",
            )
            .fetch_one(&mut *c)
            .await;
            match n {
                Ok(n) => cut += n,
                Err(_) => conn = None,
            }
        }
        real_sleep(Duration::from_millis(100)).await;
    }
    cut
}

/// The most rows seen waiting for the store, by kind.
#[derive(Debug, Default)]
struct Pending {
    rows: [u64; 4],
}

impl Pending {
    fn sample(&mut self, stats: &lifeline::stats::Stats) {
        for &k in PendingRows::ALL {
            let n = stats.store_pending[k as usize].load(std::sync::atomic::Ordering::Relaxed);
            self.rows[k as usize] = self.rows[k as usize].max(n);
        }
    }
}

/// This process's peak resident set (Linux's `VmHWM`), in bytes.
fn peak_resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

#[tokio::test(start_paused = true)]
async fn connections_cut_under_load_and_a_restart_lose_nothing() {
    let Some(server) = OwnServer::start() else {
        return;
    };
    let c = Cluster::new()
        .agents(200)
        .proxies(4)
        .sim_agents(0.2)
        .quiet()
        .store(Store::Postgres(server.url.clone()))
        // The smallest allowed: the bound is reached, not only promised.
        .config(|cfg| cfg.storage.max_pending_events = 1000)
        .start()
        .await;
    c.ready().await;
    let db = c.ll().db.clone();
    let mut peak = Pending::default();

    let stop = tokio_util::sync::CancellationToken::new();
    let cutter = tokio::spawn(cut_connections(server.url.clone(), stop.clone()));
    let mut signals: BTreeSet<i64> = BTreeSet::new();
    let mut settings = 0usize;
    // Real seconds of cutting; virtual time runs a few times faster, so
    // proxies expire and come back and agents strand and recover.
    // The length of the fault, in real time.
    let cutting = lifeline::clock::Stopwatch::start();
    let mut round = 0u32;
    while cutting.elapsed() < Duration::from_secs(30) {
        round += 1;
        match round % 40 {
            1 => c.sim.pause_heartbeats("proxy-1").await,
            21 => c.sim.resume_heartbeats(Kind::Proxy, "proxy-1").await,
            _ => {}
        }
        if round % 5 == 0 {
            let agent = format!("agent-{:05}", round % 200);
            let (status, body) = c
                .call(
                    Method::POST,
                    &format!("/api/v1/agents/{agent}/reconnect"),
                    Some(ADMIN),
                    Some("{}"),
                )
                .await;
            if status == 202 {
                signals.insert(body["id"].as_i64().expect("an id"));
            }
        }
        if round % 7 == 0 {
            let share = if round % 2 == 0 { 0.4 } else { 0.6 };
            let (status, _) = c
                .call(
                    Method::PUT,
                    "/api/v1/settings/storm_share?force=true",
                    Some(ADMIN),
                    Some(&format!("{{\"value\":{share}}}")),
                )
                .await;
            if status == 200 {
                settings += 1;
            }
        }
        c.advance(Duration::from_millis(500)).await;
        real_sleep(Duration::from_millis(50)).await;
        peak.sample(&c.ll().stats);
    }
    stop.cancel();
    let cut = cutter.await.expect("the cutter");
    assert!(cut > 10, "connections were cut: {cut}");
    c.sim.resume_heartbeats(Kind::Proxy, "proxy-1").await;
    // From here on virtual time moves only by this test's own steps. The
    // reconnect after the restart is real I/O, and a paused clock left to
    // auto-advance meanwhile runs on by as much as the machine is slow:
    // the bound below is on Lifeline's time, not on the machine's load.
    let _hold = support::hold_clock();

    // And the server itself goes away and comes back.
    server.restart();
    let back = c.clock.now();
    // Ready again within a lease as deployed (the harness's own lease is
    // longer, for its drifting clock). Reconnecting is real I/O: virtual
    // time moves in steps of 100 ms, each after 50 ms of real time.
    let lease = lifeline::Config::default().storage.leader_lease;
    while c.get("/readyz").await.0 != 200 {
        assert!(
            c.clock.now().since(back) <= lease,
            "not ready within a lease ({lease:?}) of the database's return"
        );
        c.advance(Duration::from_millis(100)).await;
        real_sleep(Duration::from_millis(50)).await;
        peak.sample(&c.ll().stats);
    }
    let ready_after = c.clock.now().since(back);
    assert!(
        ready_after <= lease,
        "ready {ready_after:?} after the database returned"
    );
    c.advance(Duration::from_secs(30)).await;
    c.flush().await;
    let st = &c.ll().stats;
    let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
    eprintln!(
        "faults: {cut} connections cut over {round} rounds; {} signals and {settings} settings changes accepted; \
         store errors {}, batches fenced {}, rows refused {}, history dropped {}; leader term {}; ready {ready_after:?} after the restart; \
         peak waiting rows {:?}; peak resident memory {} MiB",
        signals.len(),
        load(&st.store_errors),
        load(&st.store_batches_fenced),
        load(&st.store_rows_refused),
        load(&st.store_events_dropped),
        c.ll().leadership.borrow().term,
        peak.rows,
        peak_resident_bytes() >> 20,
    );
    // What waited for the store stayed within its documented bounds, and
    // the process (Lifeline, the simulator and this test) within 1 GiB.
    assert!(peak.rows[PendingRows::History as usize] <= 1000, "{peak:?}");
    assert!(
        peak.rows[PendingRows::Health as usize] <= lifeline::domain::MAX_PENDING_HEALTH as u64,
        "{peak:?}"
    );
    assert!(
        peak.rows[PendingRows::Episodes as usize] <= lifeline::domain::MAX_PENDING_EPISODES as u64,
        "{peak:?}"
    );
    assert!(
        peak.rows[PendingRows::State as usize] <= 2 * (200 + 4 + 4 + 400),
        "one row per resource at most: {peak:?}"
    );
    assert!(
        peak_resident_bytes() < 1 << 30,
        "{} MiB",
        peak_resident_bytes() >> 20
    );

    // Every signal the API answered for is in the audit.
    for id in &signals {
        let (status, row) = c.get(&format!("/api/v1/signals/{id}")).await;
        assert_eq!(status, 200, "signal {id} lost: {row}");
    }
    // Every accepted settings change is in the settings audit.
    let audited = support::sql_i64(
        &db,
        "SELECT count(*) FROM settings_audit WHERE name = 'storm_share'",
    )
    .await;
    assert!(
        audited as usize >= settings,
        "{settings} changes accepted, {audited} audited"
    );
    // Episodes: one open per agent at most, and open exactly for the
    // agents that are degraded or stranded now.
    let open_twice = support::sql_i64(
        &db,
        "SELECT count(*) FROM (SELECT agent FROM episodes WHERE ended_us IS NULL \
         GROUP BY agent HAVING count(*) > 1) t",
    )
    .await;
    assert_eq!(open_twice, 0, "an agent with two open episodes");
    let open: Value = c.ok("/api/v1/episodes?open=true&limit=1000").await;
    let open: BTreeSet<String> = support::strs(&open["items"], "agent").into_iter().collect();
    let mut unhealthy: BTreeSet<String> = c.agents_in("stranded").await.into_iter().collect();
    unhealthy.extend(c.agents_in("degraded").await);
    assert_eq!(open, unhealthy, "open episodes are the unhealthy agents'");
    assert!(!c.ll().store_health.is_failing());
    c.shutdown().await;
    drop(server);
}
