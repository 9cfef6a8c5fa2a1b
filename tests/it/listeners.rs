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
    // The test process holds both ends of every socket.
    let (_, soft, _) = lifeline::app::fds::raise();
    assert!(
        soft.is_none_or(|s| s >= 8_000),
        "this test needs 8000 file descriptors; the hard limit is {soft:?}"
    );
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
            .http_connections
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let most = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (most, stats) = (most.clone(), ll.stats.clone());
        tokio::spawn(async move {
            loop {
                let n = stats
                    .http_connections
                    .load(std::sync::atomic::Ordering::Relaxed);
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
    let total = |series: &str| {
        m.lines()
            .find_map(|l| {
                l.strip_prefix(series)?
                    .strip_prefix(' ')?
                    .parse::<f64>()
                    .ok()
            })
            .unwrap_or(0.0)
    };
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
