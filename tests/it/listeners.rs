//! Lifeline's own listeners under clients that hold on without speaking,
//! and under a file descriptor limit: the HTTP listener holds at most its
//! cap, closes a slow client within the header timeout and an idle one
//! within the idle timeout, and still answers a real request; a Lifeline
//! started under a low limit clamps its agent cap, refuses past it, counts
//! the refusals, and keeps its API and health watches. Real time, real
//! sockets.

// Real sockets against a real clock: what the server's timers do is
// measured on the wall clock, never on a paused one.
#![allow(clippy::disallowed_methods)]

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::Cluster;

/// Raises the descriptor limit to the hard one, and fails unless it holds
/// `n` (the test process holds both ends of every socket).
fn needs_descriptors(n: u64) {
    let (_, soft, _) = lifeline::app::fds::raise();
    assert!(
        soft.is_none_or(|s| s >= n),
        "this test needs {n} file descriptors; the limit is {soft:?}"
    );
}

/// The value of `series` (name and labels, as written) in a /metrics
/// text; 0 when absent.
fn series_value(metrics: &str, series: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0)
}

/// Whether the server has closed `s` (EOF or reset) within `within`.
async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            // An error page or a response: keep reading to the close.
            Ok(Ok(_)) => {}
        }
    }
}

/// 3000 sockets that never speak and 200 that send a header a byte a
/// second, against a cap of 500: never more than the cap held; a real API
/// request still answers within a second and an agent still connects over
/// gRPC; the slow ones are closed within the header timeout and a
/// kept-alive connection within the idle timeout; every closing counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_http_listener_holds_its_cap_and_closes_slow_and_idle_clients() {
    needs_descriptors(8_000);
    let c = Cluster::new()
        .agents(3)
        .config(|cfg| {
            cfg.server.max_http_connections = 500;
            cfg.server.http_header_timeout = Duration::from_secs(2);
            cfg.server.http_idle_timeout = Duration::from_secs(3);
        })
        .start()
        .await;
    let ll = c.ll();
    let addr = ll.http_addr;
    let held = || {
        ll.stats
            .http
            .open
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let most = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (most, stats) = (most.clone(), ll.stats.clone());
        tokio::spawn(async move {
            loop {
                let n = stats.http.open.load(std::sync::atomic::Ordering::Relaxed);
                most.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };

    let mut idle = Vec::new();
    for _ in 0..3000 {
        if let Ok(s) = TcpStream::connect(addr).await {
            idle.push(s);
        }
    }
    let mut slow = Vec::new();
    for _ in 0..200 {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        s.write_all(b"G").await.expect("first byte");
        slow.push(s);
    }
    // The slow ones go on, each on its own: one more header byte a second.
    let mut dribble = tokio::task::JoinSet::new();
    for mut s in slow {
        dribble.spawn(async move {
            let began = tokio::time::Instant::now();
            let mut buf = [0u8; 1024];
            for b in b"ET / HTTP/1.1\r\nHost: x\r\nX-Slow: yes\r\n" {
                if s.write_all(&[*b]).await.is_err() {
                    return (true, began.elapsed());
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(1)) => {}
                    r = s.read(&mut buf) => {
                        if matches!(r, Ok(0) | Err(_)) {
                            return (true, began.elapsed());
                        }
                    }
                }
            }
            (false, began.elapsed())
        });
    }

    // A real request gets in, within a second.
    let began = std::time::Instant::now();
    let r = reqwest::Client::new()
        .get(format!("{}/api/v1/summary", ll.base_url()))
        .timeout(Duration::from_secs(1))
        .send()
        .await
        .expect("the API answers under the flood");
    assert_eq!(r.status(), 200);
    assert!(began.elapsed() < Duration::from_secs(1));
    // An agent still connects over gRPC.
    let mut health = tonic_health::pb::health_client::HealthClient::new(
        tonic::transport::Endpoint::from_shared(format!("http://{}", ll.grpc_addr))
            .expect("endpoint")
            .connect()
            .await
            .expect("gRPC connects"),
    );
    let served = tokio::time::timeout(
        Duration::from_secs(1),
        health.check(tonic_health::pb::HealthCheckRequest::default()),
    )
    .await
    .expect("gRPC answers within 1 s")
    .expect("health");
    assert_eq!(served.into_inner().status, 1, "SERVING");

    // Every socket that never spoke is closed within the header timeout
    // (most were closed sooner, to make room).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut still = 0;
    for s in idle.iter_mut() {
        if !closed_within(s, Duration::from_millis(1)).await {
            still += 1;
        }
    }
    assert_eq!(still, 0, "none open after the header timeout");
    let slow = dribble.join_all().await;
    let late: Vec<_> = slow
        .iter()
        .filter(|(gone, took)| !*gone || *took > Duration::from_secs(4))
        .take(5)
        .collect();
    assert!(
        late.is_empty(),
        "every slowloris socket closed within the header timeout: {late:?}"
    );

    // A kept-alive connection that asked once, then went quiet: closed.
    let mut kept = TcpStream::connect(addr).await.expect("connect");
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("request");
    let mut buf = [0u8; 1024];
    let n = kept.read(&mut buf).await.expect("response");
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    assert!(
        closed_within(&mut kept, Duration::from_secs(4)).await,
        "closed within the idle timeout"
    );

    sampler.abort();
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    assert!(most <= 500, "at most the cap held at once: {most}");
    assert!(most >= 400, "the cap was reached: {most}");
    let (_, m) = c.get_text("/metrics").await;
    let total = |series: &str| series_value(&m, series);
    let refused = total(r#"lifeline_http_connections_refused_total{reason="at_limit"}"#)
        + total(r#"lifeline_http_connections_refused_total{reason="evicted"}"#);
    assert!(
        refused >= 2_500.0,
        "closings for the cap counted: {refused}\n{m}"
    );
    assert!(held() < 10, "the flood is gone: {}", held());
    c.shutdown().await;
}

/// Two free loopback ports.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    let b = std::net::TcpListener::bind("127.0.0.1:0").expect("port");
    (
        a.local_addr().expect("addr").port(),
        b.local_addr().expect("addr").port(),
    )
}

/// `lifeline demo` started under a soft and hard descriptor limit of 400
/// (set by the shell in the child, before exec): it plans its caps to
/// leave the reserve, takes agent connections up to its clamped cap,
/// closes the ones past it and counts them, and its API, `/readyz` and
/// auth health watches keep answering; no accept fails for want of a
/// descriptor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_a_low_descriptor_limit_the_agent_cap_is_clamped_and_the_api_answers() {
    let dir = tempfile::tempdir().expect("dir");
    let (http, grpc) = free_ports();
    let log = dir.path().join("demo.log");
    let script = format!(
        "ulimit -n 400 && exec \"$0\" demo --agents 20 --chaos-period 0 --listen 127.0.0.1:{http} --grpc-listen 127.0.0.1:{grpc} --db \"$1\" 2> \"$2\""
    );
    let mut child = tokio::process::Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_lifeline")])
        .arg(dir.path().join("demo.db"))
        .arg(&log)
        .stdout(std::process::Stdio::null())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("sh starts the demo");
    let base = format!("http://127.0.0.1:{http}");
    let client = reqwest::Client::new();
    let get = |path: &str| {
        let req = client
            .get(format!("{base}{path}"))
            .timeout(Duration::from_secs(1));
        async move {
            match req.send().await {
                Ok(r) => (r.status().as_u16(), r.text().await.unwrap_or_default()),
                Err(_) => (0, String::new()),
            }
        }
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let ready: serde_json::Value = loop {
        let (status, body) = get("/readyz").await;
        if status == 200 {
            break serde_json::from_str(&body).expect("readyz JSON");
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the demo was not ready within 60 s: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let d = &ready["descriptors"];
    assert_eq!(
        (d["soft_limit"].as_u64(), d["hard_limit"].as_u64()),
        (Some(400), Some(400)),
        "{ready}"
    );
    let cap = d["grpc_max_connections"].as_u64().expect("cap") as usize;
    assert!(
        cap + d["max_http_connections"].as_u64().unwrap_or(0) as usize + 256 <= 400,
        "{d}"
    );
    assert!(
        ready["problems"]
            .to_string()
            .contains("connection caps lowered"),
        "/readyz says so: {ready}"
    );
    assert!(
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .contains("connection caps lowered"),
        "the log says so"
    );

    // Agent connections up to the cap and past it.
    let mut held = Vec::new();
    for _ in 0..cap + 40 {
        if let Ok(s) = TcpStream::connect(("127.0.0.1", grpc)).await {
            held.push(s);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut open = 0;
    for s in held.iter_mut() {
        if !closed_within(s, Duration::from_millis(5)).await {
            open += 1;
        }
    }
    assert!(open <= cap, "at most the cap held: {open} of {cap}");
    assert!(
        open >= cap.saturating_sub(2),
        "up to the cap taken (the demo's own agents hold one): {open} of {cap}"
    );
    let (status, metrics) = get("/metrics").await;
    assert_eq!(status, 200, "the API answers with the agent cap full");
    let refused = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix("lifeline_grpc_connections_refused_total ")?
                .parse::<f64>()
                .ok()
        })
        .unwrap_or(0.0);
    assert!(refused >= 39.0, "the ones past the cap counted: {refused}");
    for path in ["/api/v1/summary", "/readyz"] {
        let began = std::time::Instant::now();
        assert_eq!(get(path).await.0, 200, "{path}");
        assert!(began.elapsed() < Duration::from_secs(1), "{path}");
    }
    let (_, auths) = get("/api/v1/auth-servers").await;
    let auths: serde_json::Value = serde_json::from_str(&auths).expect("JSON");
    assert!(
        auths["items"]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|x| x["health"] == "SERVING")),
        "the health watches keep answering: {auths}"
    );
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !said.contains("Too many open files"),
        "no accept or dial ran out: {said}"
    );
    let _ = child.kill().await;
}

/// One attacker's socket: from its own loopback address (so no
/// per-address limit helps), it opens `POST /signin` with a body of
/// 60 000 bytes and sends one body byte every 5 s; when closed, it opens
/// again at its next turn. Returns how many times it was closed.
async fn slow_sender(
    from: std::net::IpAddr,
    to: std::net::SocketAddr,
    until: tokio::time::Instant,
    offset: Duration,
) -> u32 {
    tokio::time::sleep(offset).await;
    let mut closed = 0;
    let mut turn = tokio::time::interval(Duration::from_secs(5));
    turn.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    'connect: while tokio::time::Instant::now() < until {
        turn.tick().await;
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        if sock.bind(std::net::SocketAddr::new(from, 0)).is_err() {
            continue;
        }
        let Ok(mut s) = sock.connect(to).await else {
            closed += 1;
            continue;
        };
        let head = "POST /signin HTTP/1.1\r\nHost: lifeline\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 60000\r\n\r\ncsrf=";
        if s.write_all(head.as_bytes()).await.is_err() {
            closed += 1;
            continue;
        }
        let mut buf = [0u8; 2048];
        while tokio::time::Instant::now() < until {
            tokio::select! {
                _ = turn.tick() => {
                    if s.write_all(b"a").await.is_err() {
                        closed += 1;
                        continue 'connect;
                    }
                }
                r = s.read(&mut buf) => {
                    if matches!(r, Ok(0) | Err(_)) {
                        closed += 1;
                        continue 'connect;
                    }
                }
            }
        }
    }
    closed
}

/// A socket that connects and never speaks; when closed, it connects
/// again at its next turn (every 5 s).
async fn silent(to: std::net::SocketAddr, until: tokio::time::Instant, offset: Duration) {
    tokio::time::sleep(offset).await;
    let mut turn = tokio::time::interval(Duration::from_secs(5));
    turn.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut buf = [0u8; 256];
    while tokio::time::Instant::now() < until {
        turn.tick().await;
        let Ok(mut s) = TcpStream::connect(to).await else {
            continue;
        };
        while tokio::time::Instant::now() < until {
            tokio::select! {
                _ = turn.tick() => {}
                r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { break },
            }
        }
    }
}

/// Sends `req`; a failure (not 200, or no answer within its timeout) is
/// added to `failures` as `what`. How long it took.
async fn answered_200(
    req: reqwest::RequestBuilder,
    what: &str,
    failures: &mut Vec<String>,
) -> Duration {
    let began = std::time::Instant::now();
    let r = req.send().await;
    let took = began.elapsed();
    match r {
        Ok(r) if r.status() == 200 => {}
        Ok(r) => failures.push(format!("{what} answered {}", r.status())),
        Err(e) => failures.push(format!("{what}: {e} after {took:?}")),
    }
    took
}

/// The lock-out attack, without a token: at the default cap (1 024),
/// 1 100 connections each sending a sign-in body one byte every 5 s, each
/// from its own address and opening again whenever closed, plus 3 000
/// sockets that never speak (also opening again). For 90 s, a request
/// with a token (`GET /api/v1/summary`, on a new connection each time)
/// answers within 2 s every second, and the admin listener's `/healthz`
/// within 100 ms; `/metrics` says which connections were closed and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_senders_and_silent_sockets_never_lock_out_the_api_or_the_admin_port() {
    needs_descriptors(12_000);
    let c = Cluster::new()
        .agents(3)
        .config(|cfg| {
            cfg.access.read_requires_token = true;
            cfg.server.admin_listen = Some("127.0.0.1:0".parse().expect("addr"));
        })
        .start()
        .await;
    let ll = c.ll();
    assert_eq!(
        ll.stats.descriptors.get().map(|d| d.max_http_connections),
        Some(1024),
        "the cap at its default"
    );
    let (addr, admin) = (ll.http_addr, ll.admin_addr.expect("the admin listener"));
    let run = Duration::from_secs(90);
    let until = tokio::time::Instant::now() + run;
    let mut attack = tokio::task::JoinSet::new();
    for i in 0..1_100u32 {
        // 127.1.x.y: a loopback address of its own.
        let from = std::net::IpAddr::from([127, 1, (i / 250) as u8, (i % 250 + 1) as u8]);
        let offset = Duration::from_millis(u64::from(i * 5_000 / 1_100));
        attack.spawn(slow_sender(from, addr, until, offset));
    }
    for i in 0..3_000u32 {
        let offset = Duration::from_millis(u64::from(i * 5_000 / 3_000));
        attack.spawn(async move {
            silent(addr, until, offset).await;
            0
        });
    }
    // Each second: the API on a new connection, with a token, and the
    // admin listener's /healthz.
    let api = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let mut slowest_api = Duration::ZERO;
    let mut slowest_admin = Duration::ZERO;
    let mut failures = Vec::new();
    let mut second = tokio::time::interval(Duration::from_secs(1));
    let mut asked = 0;
    while tokio::time::Instant::now() < until {
        second.tick().await;
        asked += 1;
        let summary = api
            .get(format!("http://{addr}/api/v1/summary"))
            .bearer_auth(crate::support::READER)
            .timeout(Duration::from_secs(2));
        let took = answered_200(summary, &format!("second {asked}: API"), &mut failures).await;
        slowest_api = slowest_api.max(took);
        let healthz = api
            .get(format!("http://{admin}/healthz"))
            .timeout(Duration::from_millis(100));
        let took = answered_200(healthz, &format!("second {asked}: admin"), &mut failures).await;
        slowest_admin = slowest_admin.max(took);
    }
    let closed: u32 = attack.join_all().await.into_iter().sum();
    assert!(
        failures.is_empty(),
        "every second answered ({} of {asked} did not; slowest API {slowest_api:?}, admin {slowest_admin:?}):\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(asked >= 85, "asked every second: {asked}");
    let (_, m) = c.get_text_as("/metrics", crate::support::READER).await;
    let total = |series: &str| series_value(&m, series);
    let too_slow = total(r#"lifeline_http_connections_closed_total{reason="too_slow"}"#);
    let evicted = total(r#"lifeline_http_connections_refused_total{reason="evicted"}"#);
    eprintln!(
        "lock-out run: {asked} s, slowest API {slowest_api:?}, slowest admin {slowest_admin:?}, slow senders closed {closed} times; closed by Lifeline: evicted {evicted}, too_slow {too_slow}, request_deadline {}, idle {}, at_limit {}",
        total(r#"lifeline_http_connections_closed_total{reason="request_deadline"}"#),
        total(r#"lifeline_http_connections_closed_total{reason="idle"}"#),
        total(r#"lifeline_http_connections_refused_total{reason="at_limit"}"#),
    );
    assert!(
        closed >= 1_100,
        "every slow sender was closed at least once: {closed}"
    );
    // Past the cap, each slow sender is closed to make room before its
    // floor closes it; either way it is counted with its reason.
    assert!(
        evicted + too_slow >= f64::from(closed),
        "every closing of a slow sender counted: evicted {evicted} + too_slow {too_slow} < {closed}\n{m}"
    );
    c.shutdown().await;
}

/// Opens `POST /signin` from `from` with a `Content-Length` of 60 000 and
/// `first` bytes of the body.
async fn sign_in_from(from: std::net::IpAddr, to: std::net::SocketAddr, first: &[u8]) -> TcpStream {
    let sock = tokio::net::TcpSocket::new_v4().expect("socket");
    sock.bind(std::net::SocketAddr::new(from, 0))
        .expect("bind a loopback address");
    let mut s = sock.connect(to).await.expect("connect");
    let head = "POST /signin HTTP/1.1\r\nHost: lifeline\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: 60000\r\n\r\n";
    s.write_all(head.as_bytes()).await.expect("headers");
    s.write_all(first).await.expect("body");
    s
}

/// Below the cap: a request whose body comes one byte a second is closed
/// as too slow just past the header timeout; one that keeps above the
/// floor but would take 30 s is closed at the request deadline; both are
/// counted by reason. A sign-in the per-address limit holds back is
/// answered 429 at once, its body never waited for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_below_the_floor_or_past_its_deadline_is_closed_and_counted() {
    let c = Cluster::new()
        .agents(1)
        .config(|cfg| {
            cfg.server.http_header_timeout = Duration::from_secs(2);
            cfg.server.http_request_timeout = Duration::from_secs(4);
            cfg.server.http_min_rate = 500;
        })
        .start()
        .await;
    let addr = c.ll().http_addr;
    let timed = |mut s: TcpStream, every: Duration, chunk: usize| async move {
        let began = std::time::Instant::now();
        let mut buf = [0u8; 4096];
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {
                    if s.write_all(&vec![b'a'; chunk]).await.is_err() {
                        return began.elapsed();
                    }
                }
                r = s.read(&mut buf) => if matches!(r, Ok(0) | Err(_)) { return began.elapsed() },
            }
            assert!(began.elapsed() < Duration::from_secs(20), "never closed");
        }
    };
    let slow = sign_in_from([127, 3, 0, 1].into(), addr, b"csrf=").await;
    let steady = sign_in_from([127, 3, 0, 2].into(), addr, b"csrf=").await;
    let (slow, steady) = tokio::join!(
        timed(slow, Duration::from_secs(1), 1),
        // 2 000 bytes a second: above the floor, 30 s for the whole body.
        timed(steady, Duration::from_millis(250), 500),
    );
    assert!(
        slow >= Duration::from_millis(1_900) && slow < Duration::from_millis(3_800),
        "one byte a second: closed just past the 2 s header timeout, after {slow:?}"
    );
    assert!(
        steady >= Duration::from_millis(3_900) && steady < Duration::from_millis(6_000),
        "above the floor, closed at the 4 s request deadline, after {steady:?}"
    );
    let m = c.get_text("/metrics").await.1;
    for reason in ["too_slow", "request_deadline"] {
        let series = format!(r#"lifeline_http_connections_closed_total{{reason="{reason}"}} 1"#);
        assert!(m.contains(&series), "{series} in\n{m}");
    }

    // The sign-in limit answers before the body: ten attempts, then the
    // eleventh (its body never sent) is refused at once.
    let from = std::net::IpAddr::from([127, 3, 0, 3]);
    for _ in 0..10 {
        // A whole (wrong) sign-in, answered before the next is sent.
        let sock = tokio::net::TcpSocket::new_v4().expect("socket");
        sock.bind(std::net::SocketAddr::new(from, 0)).expect("bind");
        let mut s = sock.connect(addr).await.expect("connect");
        let body = "csrf=x&token=y";
        let req = format!("POST /signin HTTP/1.1\r\nHost: lifeline\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
        s.write_all(req.as_bytes()).await.expect("request");
        let mut answer = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        assert!(
            answer.starts_with(b"HTTP/1.1 4"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
    }
    let began = std::time::Instant::now();
    let mut s = sign_in_from(from, addr, b"").await;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(4).any(|w| w == b"\r\n\r\n") {
        match tokio::time::timeout(Duration::from_millis(1500), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
            other => panic!("no answer within 1.5 s, body unsent: {other:?}"),
        }
    }
    let head = String::from_utf8_lossy(&got);
    assert!(head.starts_with("HTTP/1.1 429"), "{head}");
    assert!(head.to_ascii_lowercase().contains("retry-after:"), "{head}");
    assert!(began.elapsed() < Duration::from_millis(1500));
    c.shutdown().await;
}
