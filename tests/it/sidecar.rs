//! `lifeline-agent`, the sidecar beside a Teleport agent: driven against a
//! real Lifeline (gRPC over TLS, its join token) and a stand-in Teleport
//! process (`tests/fixtures/standin-teleport.py`: a PID file, `/readyz`
//! with `{status, pid}`, and on SIGHUP a successor with a new PID that
//! turns ready after a delay). Real time: the stand-in is a real process.

use crate::support;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lifeline_agent::config::{FileConfig, List, Method};
use lifeline_agent::restart::{Restarter, Verdict};
use lifeline_agent::session;
use serde_json::Value;
use support::{Cluster, Running};
use tokio_util::sync::CancellationToken;

const HOST: &str = "agent-00001";

/// The stand-in Teleport process, stopped (whichever successor holds the
/// PID file) when the test ends.
struct Teleport {
    pid_file: PathBuf,
    log: PathBuf,
    port: u16,
    /// Its files; removed after the process is stopped.
    dir: tempfile::TempDir,
    /// The process the test started (its successors are their own).
    first: Option<std::process::Child>,
}

impl Teleport {
    fn start(successor_ready_after: f64, never_ready: bool) -> Teleport {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut t = Teleport {
            pid_file: dir.path().join("teleport.pid"),
            log: dir.path().join("teleport.log"),
            port,
            dir,
            first: None,
        };
        let script = support::repo().join("tests/fixtures/standin-teleport.py");
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(script)
            .args(["--pid-file", &t.pid_file.to_string_lossy()])
            .args(["--port", &port.to_string()])
            .args(["--log", &t.log.to_string_lossy()])
            .args([
                "--successor-ready-after",
                &successor_ready_after.to_string(),
            ]);
        if never_ready {
            cmd.arg("--successor-never-ready");
        }
        t.first = Some(cmd.spawn().expect("python3 runs the stand-in Teleport"));
        t
    }

    /// Started, and its PID file written.
    async fn started(successor_ready_after: f64, never_ready: bool) -> Teleport {
        let t = Teleport::start(successor_ready_after, never_ready);
        for _ in 0..500 {
            if t.pid().is_some() {
                return t;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the stand-in Teleport wrote no PID file within 5 s");
    }

    fn pid(&self) -> Option<u32> {
        std::fs::read_to_string(&self.pid_file)
            .ok()
            .and_then(|s| s.trim().parse().ok())
    }

    fn starts(&self) -> usize {
        std::fs::read_to_string(&self.log)
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn diag(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Teleport {
    fn drop(&mut self) {
        if let Some(pid) = self.pid() {
            let _ = std::process::Command::new("kill")
                .arg(pid.to_string())
                .status();
        }
        if let Some(mut first) = self.first.take() {
            // Gone after its restart, or stopped just now.
            let _ = first.kill();
            let _ = first.wait();
        }
    }
}

/// The interpreter the stand-in Teleport runs in: what its
/// `/proc/<pid>/exe` reads, so the sidecar's `teleport_bin` in these tests
/// (a real Teleport's is `teleport`).
fn standin_exe() -> PathBuf {
    static EXE: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    EXE.get_or_init(|| {
        let out = std::process::Command::new("python3")
            .args([
                "-c",
                "import os, sys; print(os.path.realpath(sys.executable))",
            ])
            .output()
            .expect("python3 runs");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// Another replica named `name` on `c`'s database, configured as `c` is.
async fn replica(c: &Running, name: &str) -> lifeline::app::Lifeline {
    let mut cfg = c.cfg.clone();
    cfg.storage.replica = Some(name.into());
    lifeline::app::Lifeline::start(&cfg, c.clock)
        .await
        .unwrap_or_else(|e| panic!("{name} starts on the same database: {e}"))
}

/// What any sidecar needs to join the running Lifeline: its gRPC address
/// over TLS, the CA, and the simulator's join token in a file under `dir`.
pub(crate) fn joining(c: &Running, dir: &Path) -> FileConfig {
    let tls = c.tls.as_ref().expect("the cluster serves TLS");
    let token = dir.join("join-token");
    std::fs::write(&token, format!("{}\n", lifeline_sim::SIM_JOIN_TOKEN)).expect("token file");
    FileConfig {
        lifeline: List::One(format!("https://localhost:{}", c.ll().grpc_addr.port())),
        ca_file: Some(tls.ca_file.clone()),
        token_file: Some(token),
        ..FileConfig::default()
    }
}

/// The sidecar's file configuration for the running Lifeline.
fn sidecar_file(c: &Running, t: &Teleport) -> FileConfig {
    FileConfig {
        host_id: Some(HOST.into()),
        restart: Method::Pidfile,
        pid_file: t.pid_file.clone(),
        teleport_bin: standin_exe(),
        diag_addr: Some(t.diag()),
        ready_timeout: Duration::from_secs(20),
        report_interval: Duration::from_millis(500),
        ..joining(c, t.dir())
    }
}

/// A stand-in Teleport (successor ready after 2 s) and its sidecar for
/// agent-00001 and agent-00002: the sidecars' stop tokens and the
/// stand-ins.
async fn two_sidecars(c: &Running) -> (Vec<CancellationToken>, Vec<Teleport>) {
    let mut stops = Vec::new();
    let mut teleports = Vec::new();
    for host in ["agent-00001", "agent-00002"] {
        let t = Teleport::started(2.0, false).await;
        let file = FileConfig {
            host_id: Some(host.into()),
            ..sidecar_file(c, &t)
        };
        let stop = CancellationToken::new();
        tokio::spawn(lifeline_agent::run(
            file.check().expect("checks"),
            stop.clone(),
        ));
        stops.push(stop);
        teleports.push(t);
    }
    (stops, teleports)
}

async fn until(c: &Running, what: &str, mut cond: impl FnMut() -> bool) {
    c.eventually(what, || {
        let v = cond();
        async move { v }
    })
    .await;
}

async fn outcome(c: &Running, id: i64, want: &str) -> Value {
    c.eventually(&format!("signal {id} {want}"), || async {
        c.ok(&format!("/api/v1/signals/{id}")).await["outcome"] == want
    })
    .await;
    c.ok(&format!("/api/v1/signals/{id}")).await
}

async fn reconnect(c: &Running) -> (u16, Value) {
    c.post(
        &format!("/api/v1/agents/{HOST}/reconnect"),
        r#"{"reason":"test"}"#,
    )
    .await
}

/// Starts a Lifeline (TLS on gRPC, manual reconnects every second) and a
/// stand-in Teleport, and the sidecar between them; waits until the
/// sidecar's stream is open.
async fn setup(
    successor_ready_after: f64,
    never_ready: bool,
    tweak: impl FnOnce(&mut FileConfig),
) -> (Running, Teleport, CancellationToken) {
    let c = Cluster::new()
        .agents(2)
        .tls(false)
        .config(|cfg| cfg.access.manual_reconnect_interval = Duration::from_secs(1))
        .start()
        .await;
    let t = Teleport::started(successor_ready_after, never_ready).await;
    let mut file = sidecar_file(&c, &t);
    tweak(&mut file);
    let cfg = file.check().expect("the sidecar's configuration checks");
    let stop = CancellationToken::new();
    tokio::spawn(lifeline_agent::run(cfg, stop.clone()));
    until(&c, "the sidecar's stream open", || {
        c.ll().hub.reachable(HOST)
    })
    .await;
    (c, t, stop)
}

/// A manual reconnect restarts the agent through its sidecar: SIGHUP to the
/// PID file's process, a successor with a new PID, acked once that one says
/// it is ready, with the readiness time in the audit; the agent's page says
/// how it is acted on and what the sidecar read. A second within the
/// cooldown is refused by the sidecar, and nothing is restarted.
#[tokio::test]
async fn a_reconnect_restarts_the_agent_through_its_sidecar() {
    let (c, t, stop) = setup(1.0, false, |_| {}).await;
    let before = t.pid().expect("pid");

    let (status, body) = reconnect(&c).await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("signal id");
    let row = outcome(&c, id, "acked").await;
    let detail = row["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("ready after"), "{row}");
    assert!(detail.contains(&format!("pid {before} →")), "{row}");
    let after = t.pid().expect("pid");
    assert_ne!(after, before, "a new process holds the PID file");
    assert_eq!(t.starts(), 2, "one restart");
    assert_eq!(row["restart"], true, "recorded as a restart: {row}");
    let (_, html) = c.get_text("/signals").await;
    assert!(
        html.contains("reconnect ↻ restart"),
        "the Signals page says so"
    );

    // The agent's page: the sidecar, its method, the last restart and what
    // the agent says of itself.
    c.eventually("the sidecar's report of the new process", || async {
        let (_, html) = c.get_text(&format!("/agents/{HOST}")).await;
        html.contains("SIGHUP to the PID in its PID file")
            && html.contains("last restart")
            && html.contains(&format!("(pid {after})"))
    })
    .await;

    // Within the cooldown: refused by the sidecar (not tried, so not a
    // failure), nothing restarted.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (status, body) = reconnect(&c).await;
    assert_eq!(status, 202, "{body}");
    let row = outcome(&c, body["id"].as_i64().expect("id"), "refused").await;
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("cooling down"),
        "{row}"
    );
    assert_eq!(t.starts(), 2, "no second restart");
    stop.cancel();
}

/// A successor that never turns ready: the ack says so (`ok=false`) once
/// `ready_timeout` has passed.
#[tokio::test]
async fn a_successor_that_never_turns_ready_fails_the_restart() {
    let (c, t, stop) = setup(0.0, true, |f| f.ready_timeout = Duration::from_secs(2)).await;
    let before = t.pid();

    let (status, body) = reconnect(&c).await;
    assert_eq!(status, 202, "{body}");
    let row = outcome(&c, body["id"].as_i64().expect("id"), "failed").await;
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("no new process was ready within 2s"),
        "{row}"
    );
    assert_ne!(
        t.pid(),
        before,
        "it was restarted, and the successor is not ready"
    );
    stop.cancel();
}

/// `restart = "systemd"` runs `systemctl reload <unit>` (a stub that
/// records its arguments stands in for systemctl, and restarts the
/// stand-in as the shipped unit's ExecReload does); a dry run only says
/// what it would do.
#[tokio::test]
async fn systemd_reloads_the_unit_and_a_dry_run_only_says_so() {
    let t = Teleport::started(0.5, false).await;
    let calls = t.dir().join("systemctl.calls");
    let stub = t.dir().join("systemctl");
    std::fs::write(
        &stub,
        format!(
            "#!/bin/sh\necho \"$@\" >> {}\nexec kill -HUP \"$(cat {})\"\n",
            calls.display(),
            t.pid_file.display()
        ),
    )
    .expect("stub");
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let base = FileConfig {
        lifeline: List::One("http://127.0.0.1:1".into()),
        host_id: Some(HOST.into()),
        restart: Method::Systemd,
        systemctl: stub.clone(),
        pid_file: t.pid_file.clone(),
        diag_addr: Some(t.diag()),
        ready_timeout: Duration::from_secs(20),
        ..FileConfig::default()
    };

    let dry = Restarter::new(
        &FileConfig {
            dry_run: true,
            ..base.clone()
        }
        .check()
        .expect("checks"),
    );
    let done = dry.restart("a test").await;
    assert_eq!(done.verdict, Verdict::Refused);
    assert!(
        done.detail.contains(&format!(
            "dry run: would restart the agent (systemd reload teleport.service, PID {})",
            t.pid().expect("pid")
        )),
        "{done:?}"
    );
    assert!(!calls.exists(), "a dry run runs nothing");

    let before = t.pid();
    let r = Restarter::new(&base.check().expect("checks"));
    // Two asks at once: one restarts, the other is refused without harm.
    let (one, two) = tokio::join!(r.restart("a test"), r.restart("the same, again"));
    let (done, other) = if one.ok() { (one, two) } else { (two, one) };
    assert!(done.ok(), "{done:?}");
    assert_eq!(other.verdict, Verdict::Refused, "{other:?}");
    assert_eq!(other.detail, "a restart is already in progress");
    assert_eq!(
        std::fs::read_to_string(&calls).expect("calls").trim(),
        "reload teleport.service"
    );
    assert_ne!(t.pid(), before);
    assert!(r.last().ready_after.is_some());
}

/// `signals.max_restarts_in_flight` holds the fleet's restarts: with a cap
/// of one, a second agent's restart is refused (429) while the first waits
/// for its agent, and goes once that one is ready. A sidecar gets no
/// discovery.
#[tokio::test]
async fn restarts_in_flight_are_capped_fleet_wide() {
    use lifeline::config::{Ratio, RestartLimit};
    let c = Cluster::new()
        .agents(2)
        .tls(false)
        .signals(|s| {
            s.max_restarts_in_flight = RestartLimit {
                share: Ratio::ONE,
                cap: 1,
            }
        })
        .start()
        .await;
    let (stops, teleports) = two_sidecars(&c).await;
    for host in ["agent-00001", "agent-00002"] {
        until(&c, "the sidecar's stream open", || {
            c.ll().hub.reachable(host)
        })
        .await;
    }
    let (status, first) = c.post("/api/v1/agents/agent-00001/reconnect", "{}").await;
    assert_eq!(status, 202, "{first}");
    let (status, body) = c.post("/api/v1/agents/agent-00002/reconnect", "{}").await;
    assert_eq!(status, 429, "{body}");
    assert_eq!(body["error"]["code"], "restarts_in_flight", "{body}");
    let (_, html) = c.get_text("/").await;
    assert!(
        html.contains("↻ 1/2</span> sidecars restarting their agent"),
        "the overview counts the restart in flight"
    );
    outcome(&c, first["id"].as_i64().expect("id"), "acked").await;
    let (status, body) = c.post("/api/v1/agents/agent-00002/reconnect", "{}").await;
    assert_eq!(status, 202, "{body}");
    outcome(&c, body["id"].as_i64().expect("id"), "acked").await;
    assert!(
        teleports.iter().all(|t| t.starts() == 2),
        "one restart each"
    );
    assert_eq!(
        c.ll()
            .stats
            .discovery_full
            .load(std::sync::atomic::Ordering::Relaxed),
        0,
        "a sidecar takes no discovery"
    );
    for s in stops {
        s.cancel();
    }
}

/// Guards the cap among replicas: a restart counts wherever the sidecar's
/// stream is held. Both sidecars hold their streams on replica-a and
/// replica-b is asked: the first restart is recorded as one (relayed to
/// replica-a), the second meets the cap, counted from the audit every
/// replica writes, until the first is acked; replica-b's overview counts
/// the sidecars the other replica holds.
#[tokio::test]
async fn restarts_in_flight_are_capped_across_replicas() {
    use lifeline::config::{Ratio, RestartLimit};
    let Some(store) = support::Store::postgres("restart_cap_replicas").await else {
        return;
    };
    let c = Cluster::new()
        .agents(2)
        .tls(false)
        .store(store)
        .config(|cfg| {
            cfg.storage.replica = Some("replica-a".into());
            cfg.signals.auto_reconnect = false;
            cfg.signals.max_restarts_in_flight = RestartLimit {
                share: Ratio::ONE,
                cap: 1,
            };
        })
        .start()
        .await;
    let (stops, teleports) = two_sidecars(&c).await;
    let db = c.ll().db.clone();
    c.eventually("replica-a recorded two sidecar streams", || async {
        support::sql_i64(
            &db,
            "SELECT count(*) FROM agent_streams WHERE replica = 'replica-a' AND restart_only = 1",
        )
        .await
            == 2
    })
    .await;
    let b = replica(&c, "replica-b").await;
    let get_b = |path: &'static str| {
        let req = c.http.get(format!("{}{path}", b.base_url()));
        async move {
            support::bounded("an HTTP call", req.send())
                .await
                .map_or(0, |r| r.status().as_u16())
        }
    };
    c.eventually("replica-b knows both agents", || async {
        get_b("/api/v1/agents/agent-00001").await == 200
            && get_b("/api/v1/agents/agent-00002").await == 200
    })
    .await;
    let on_b = |path: String| {
        let req = c
            .http
            .post(format!("{}{path}", b.base_url()))
            .bearer_auth(support::ADMIN)
            .header("content-type", "application/json")
            .body("{}");
        async move {
            let resp = support::bounded("an HTTP call", req.send())
                .await
                .expect("HTTP");
            let status = resp.status().as_u16();
            let body: Value = resp.json().await.unwrap_or(Value::Null);
            (status, body)
        }
    };
    let (status, first) = on_b("/api/v1/agents/agent-00001/reconnect".into()).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["restart"], true, "recorded as a restart: {first}");
    let (status, body) = on_b("/api/v1/agents/agent-00002/reconnect".into()).await;
    assert_eq!(
        status, 429,
        "the restart in flight on replica-a counts: {body}"
    );
    assert_eq!(body["error"]["code"], "restarts_in_flight", "{body}");
    let overview = || async {
        let resp = support::bounded(
            "the overview",
            c.http.get(format!("{}/", b.base_url())).send(),
        )
        .await
        .expect("page");
        resp.text().await.unwrap_or_default()
    };
    c.eventually("replica-b counts replica-a's sidecars", || async {
        overview()
            .await
            .contains("/2</span> sidecars restarting their agent")
    })
    .await;
    outcome(&c, first["id"].as_i64().expect("id"), "acked").await;
    let (status, body) = on_b("/api/v1/agents/agent-00002/reconnect".into()).await;
    assert_eq!(status, 202, "{body}");
    outcome(&c, body["id"].as_i64().expect("id"), "acked").await;
    assert!(
        teleports.iter().all(|t| t.starts() == 2),
        "one restart each"
    );
    b.shutdown().await;
    for s in stops {
        s.cancel();
    }
}

/// A wrong join token, or no CA for Lifeline's certificate: the stream is
/// refused with the reason, and the configuration names the field.
#[tokio::test]
async fn a_bad_join_token_or_certificate_fails_clearly() {
    let c = Cluster::new().agents(1).tls(false).start().await;
    let t = Teleport::start(0.1, false);
    let mut file = sidecar_file(&c, &t);
    let wrong = t.dir().join("wrong-token");
    std::fs::write(&wrong, "not-the-token").expect("token");
    file.token_file = Some(wrong);
    let cfg = file.clone().check().expect("checks");
    let addr = cfg.lifeline[0].clone();
    let err = session::once(&addr, &cfg).await.expect_err("refused");
    let text = err.to_string();
    assert!(text.contains("refused"), "{text}");
    assert!(
        !text.contains("not-the-token"),
        "the token never appears: {text}"
    );
    // The token file rotated in place: the next dial reads it again, with
    // no restart of the sidecar.
    std::fs::write(
        cfg.credentials.token_file.as_ref().expect("a token file"),
        format!("{}\n", lifeline_sim::SIM_JOIN_TOKEN),
    )
    .expect("rotate");
    session::once(&addr, &cfg)
        .await
        .expect("the rotated token is read at the next dial");

    // Lifeline's certificate from a CA the sidecar does not trust.
    let other = lifeline_sim::pki::Ca::new("another CA").expect("CA");
    let other_file = t.dir().join("other-ca.pem");
    std::fs::write(&other_file, other.pem()).expect("CA file");
    let cfg = FileConfig {
        ca_file: Some(other_file),
        ..sidecar_file(&c, &t)
    }
    .check()
    .expect("checks");
    let err = session::once(&addr, &cfg).await.expect_err("untrusted");
    assert!(err.to_string().contains("cannot connect"), "{err}");

    // Configuration faults name their field.
    let no_ca = FileConfig {
        ca_file: None,
        ..file.clone()
    };
    assert!(no_ca
        .check()
        .expect_err("no CA")
        .to_string()
        .starts_with("ca_file:"));
    let exec = FileConfig {
        restart: Method::Exec,
        ..file.clone()
    };
    assert!(exec
        .check()
        .expect_err("no command")
        .to_string()
        .starts_with("exec:"));
    let missing = FileConfig {
        host_id: None,
        teleport_data_dir: t.dir().join("nowhere"),
        ..file
    };
    let e = missing.check().expect_err("no host id").to_string();
    assert!(e.starts_with("host_id:") && e.contains("host_uuid"), "{e}");
    assert_eq!(lifeline_agent::EXIT_CONFIG, 78);
}

/// A manual reconnect, admitted once the manual rate limit lets it; the
/// signal's id.
async fn admitted(c: &Running) -> i64 {
    let sent = std::sync::Mutex::new(None);
    c.eventually("a manual reconnect admitted", || async {
        let (status, body) = reconnect(c).await;
        let id = body["id"].as_i64().filter(|_| status == 202);
        *sent.lock().expect("lock") = id;
        id.is_some()
    })
    .await;
    let id = *sent.lock().expect("lock");
    id.expect("id")
}

/// The sidecar's stream for HOST is open on `c`.
async fn stream_open(c: &Running) {
    until(c, "the sidecar's stream open", || {
        c.ll().hub.reachable(HOST)
    })
    .await;
}

/// Refusals are not failures: between real failures, a dry-run sidecar's
/// refusals neither pause automatic restarts nor break the run of
/// failures; only the third failure that was tried pauses them.
#[tokio::test]
async fn refusals_never_pause_restarts_only_tried_failures_do() {
    let (c, t, stop) = setup(0.0, true, |f| {
        f.ready_timeout = Duration::from_millis(500);
        f.cooldown = Duration::ZERO;
    })
    .await;
    for _ in 0..2 {
        outcome(&c, admitted(&c).await, "failed").await;
    }
    stop.cancel();
    until(&c, "the acting sidecar gone", || {
        !c.ll().hub.reachable(HOST)
    })
    .await;
    let dry = CancellationToken::new();
    let cfg = FileConfig {
        dry_run: true,
        ..sidecar_file(&c, &t)
    }
    .check()
    .expect("checks");
    tokio::spawn(lifeline_agent::run(cfg, dry.clone()));
    stream_open(&c).await;
    for _ in 0..3 {
        let row = outcome(&c, admitted(&c).await, "refused").await;
        assert!(
            row["detail"]
                .as_str()
                .unwrap_or_default()
                .starts_with("dry run: would restart"),
            "{row}"
        );
    }
    let summary = c.ok("/api/v1/summary").await;
    assert!(
        summary["signals"]["storm_guard"]["restarts_paused"].is_null(),
        "two failures and three refusals do not pause: {summary}"
    );
    assert!(
        summary["signals"]["refused"].as_u64().unwrap_or(0) >= 3,
        "{summary}"
    );
    let (_, html) = c.get_text(&format!("/agents/{HOST}")).await;
    assert!(html.contains("(dry run)"), "the agent page says so");
    let (_, html) = c.get_text("/signals?outcome=refused").await;
    assert!(
        html.contains("dry run: would restart"),
        "the Signals page lists them"
    );
    let metrics = c.get_text("/metrics").await.1;
    assert!(
        metrics.contains(r#"lifeline_signals_total{kind="reconnect",outcome="refused"} 3"#),
        "{metrics}"
    );
    dry.cancel();
    until(&c, "the dry-run sidecar gone", || {
        !c.ll().hub.reachable(HOST)
    })
    .await;
    let acting = CancellationToken::new();
    let cfg = FileConfig {
        ready_timeout: Duration::from_millis(500),
        cooldown: Duration::ZERO,
        ..sidecar_file(&c, &t)
    }
    .check()
    .expect("checks");
    tokio::spawn(lifeline_agent::run(cfg, acting.clone()));
    stream_open(&c).await;
    outcome(&c, admitted(&c).await, "failed").await;
    c.eventually(
        "the third failure tried pauses automatic restarts",
        || async {
            c.ok("/api/v1/summary").await["signals"]["storm_guard"]["restarts_paused"]
                .as_str()
                .is_some_and(|s| s.contains("the last 3 restarts did not bring their agents back"))
        },
    )
    .await;
    acting.cancel();
}

/// The PID file names a live process that is not Teleport (Teleport
/// crashed and its PID went to another): the sidecar refuses and says
/// what the process is; nothing is signalled.
#[tokio::test]
async fn a_pid_file_naming_another_process_is_refused_and_nothing_is_signalled() {
    let (c, t, stop) = setup(0.5, false, |f| f.teleport_bin = PathBuf::from("teleport")).await;
    let pid = t.pid().expect("pid");
    let row = outcome(&c, admitted(&c).await, "refused").await;
    let detail = row["detail"].as_str().unwrap_or_default();
    assert!(
        detail.starts_with(&format!("not restarting: PID {pid} is /"))
            && detail.ends_with(", not teleport"),
        "{row}"
    );
    assert_eq!(t.starts(), 1, "nothing restarted");
    assert_eq!(t.pid(), Some(pid), "the process still runs");
    stop.cancel();
}

/// A restart whose agent takes 90 s to turn ready (slow starts are common
/// on large clusters) is acked, not swept: with every timing at its
/// default, the leader's sweep of unanswered signals (every few seconds,
/// for signals older than `ack_timeout` plus the lease: 35 s) leaves a
/// restart until its own deadline on the row, `restart_ack_timeout`
/// (3 min), and the sidecar waits for its `ready_timeout` (2 min).
#[tokio::test]
// A real process's start, timed on the wall clock.
#[allow(clippy::disallowed_methods)]
async fn a_slow_restart_is_acked_not_swept_as_a_timeout() {
    let Some(store) = support::Store::postgres("slow_restart").await else {
        return;
    };
    let c = Cluster::new()
        .agents(2)
        .tls(false)
        .store(store)
        .config(|cfg| {
            // The harness lengthens these for paused clocks; here, the
            // defaults a running Lifeline has.
            let defaults = lifeline::config::Config::default();
            cfg.storage.leader_lease = defaults.storage.leader_lease;
            cfg.signals.ack_timeout = defaults.signals.ack_timeout;
            cfg.signals.restart_ack_timeout = defaults.signals.restart_ack_timeout;
            cfg.storage.replica = Some("replica-a".into());
            cfg.signals.auto_reconnect = false;
        })
        .start()
        .await;
    let defaults = lifeline::config::Config::default();
    let sweeps_after = defaults.signals.ack_timeout + defaults.storage.leader_lease;
    assert_eq!(sweeps_after, Duration::from_secs(35), "the default sweep");
    assert_eq!(c.cfg.signals.ack_timeout, defaults.signals.ack_timeout);
    assert_eq!(c.cfg.storage.leader_lease, defaults.storage.leader_lease);
    let t = Teleport::started(90.0, false).await;
    let stop = CancellationToken::new();
    let cfg = FileConfig {
        ready_timeout: FileConfig::default().ready_timeout,
        ..sidecar_file(&c, &t)
    }
    .check()
    .expect("checks");
    tokio::spawn(lifeline_agent::run(cfg, stop.clone()));
    stream_open(&c).await;
    let id = admitted(&c).await;
    let sent = std::time::Instant::now();
    let row = c.ok(&format!("/api/v1/signals/{id}")).await;
    let (created, deadline) = (&row["created"], &row["deadline"]);
    assert!(
        deadline.is_string() && deadline != created,
        "the row carries its own deadline: {row}"
    );
    // Well past the ordinary sweep's reach, still awaited.
    tokio::time::sleep(sweeps_after + Duration::from_secs(10)).await;
    let row = c.ok(&format!("/api/v1/signals/{id}")).await;
    assert_eq!(row["outcome"], "delivered", "not swept: {row}");
    let row = loop {
        let row = c.ok(&format!("/api/v1/signals/{id}")).await;
        if !matches!(row["outcome"].as_str(), Some("pending" | "delivered")) {
            break row;
        }
        assert!(
            sent.elapsed() < Duration::from_secs(150),
            "no answer 150 s after the restart: {row}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert_eq!(row["outcome"], "acked", "{row}");
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("ready after 9"),
        "{row}"
    );
    stop.cancel();
}

/// Three restarts in a row whose agent never turned ready pause automatic
/// restarts: the summary's storm guard and the overview say why.
#[tokio::test]
async fn failed_restarts_pause_automatic_ones_and_say_so() {
    let (c, _t, stop) = setup(0.0, true, |f| {
        f.ready_timeout = Duration::from_millis(500);
        f.cooldown = Duration::ZERO;
    })
    .await;
    for _ in 0..3 {
        // Once the manual rate limit (1 s here) lets it.
        let sent = std::sync::Mutex::new(None);
        c.eventually("a manual reconnect admitted", || async {
            let (status, body) = reconnect(&c).await;
            let id = body["id"].as_i64().filter(|_| status == 202);
            *sent.lock().expect("lock") = id;
            id.is_some()
        })
        .await;
        let id = sent.lock().expect("lock").expect("id");
        outcome(&c, id, "failed").await;
    }
    c.eventually("the summary says automatic restarts wait", || async {
        c.ok("/api/v1/summary").await["signals"]["storm_guard"]["restarts_paused"]
            .as_str()
            .is_some_and(|s| s.contains("the last 3 restarts did not bring their agents back"))
    })
    .await;
    let (_, html) = c.get_text("/").await;
    assert!(html.contains("Automatic restarts are paused"), "{html}");
    stop.cancel();
}

/// Without a diagnostic address, `teleport debug readyz` says when the
/// agent is ready (a stub `teleport` asks the stand-in's `/readyz`) and the
/// PID file tells the new process; `restart = "exec"` runs the operator's
/// command.
#[tokio::test]
async fn exec_and_teleport_debug_readyz_without_a_diag_address() {
    let t = Teleport::started(0.5, false).await;
    let teleport = t.dir().join("teleport");
    std::fs::write(
        &teleport,
        format!(
            "#!/bin/sh\n[ \"$1 $2\" = \"debug readyz\" ] || exit 2\nexec python3 -c \"import urllib.request; urllib.request.urlopen('http://{}/readyz', timeout=2); print('ok')\" 2>/dev/null\n",
            t.diag()
        ),
    )
    .expect("stub");
    std::fs::set_permissions(
        &teleport,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod");
    let cfg = FileConfig {
        lifeline: List::One("http://127.0.0.1:1".into()),
        host_id: Some(HOST.into()),
        restart: Method::Exec,
        exec: List::Many(vec![
            "sh".into(),
            "-c".into(),
            format!("kill -HUP \"$(cat {})\"", t.pid_file.display()),
        ]),
        pid_file: t.pid_file.clone(),
        diag_addr: None,
        teleport_bin: teleport,
        ready_timeout: Duration::from_secs(20),
        ..FileConfig::default()
    }
    .check()
    .expect("checks");
    let r = Restarter::new(&cfg);
    let seen = r.look().await;
    assert!(seen.ready, "{seen:?}");
    assert_eq!(seen.status, "ok");
    let before = t.pid();
    assert_eq!(seen.pid, before);
    let done = r.restart("a test").await;
    assert!(done.ok(), "{done:?}");
    assert!(done.detail.starts_with("restarted (exec sh -c"), "{done:?}");
    assert_ne!(t.pid(), before);
    assert_eq!(t.starts(), 2);
}

/// `lifeline reconnect --stranded` against `base`: its output.
async fn reconnect_stranded_cli(base: String, ca_file: Option<PathBuf>) -> String {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_lifeline"));
    cmd.args([
        "reconnect",
        "--stranded",
        "--reason",
        "race",
        "--wait",
        "1s",
    ])
    .args(["--server", &base, "--token", support::ADMIN])
    .stdin(std::process::Stdio::null())
    .kill_on_drop(true);
    if let Some(ca) = ca_file.filter(|_| base.starts_with("https")) {
        cmd.arg("--ca-file").arg(ca);
    }
    let out = cmd.output().await.expect("the CLI runs");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The cap holds under races: two replicas on one PostgreSQL database and
/// 300 agents, each with a (simulated) sidecar streaming to one of them.
/// Two of the three auth servers stop serving, stranding 200 agents; the
/// leader's automatic loop restarts them while each replica runs
/// `lifeline reconnect --stranded` twice over, at once. The restarts in
/// flight, sampled from the audit every 50 ms, never exceed the cap:
/// admission and recording are one transaction under an advisory lock,
/// not a count read before an await.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_restart_cap_holds_when_replicas_race() {
    use lifeline::config::{Ratio, RestartLimit};
    use lifeline_sim::agent::{LifelineAddr, Lifelines};
    use tonic_health::ServingStatus;
    const CAP: usize = 8;
    let Some(store) = support::Store::postgres("restart_cap_race").await else {
        return;
    };
    let c = Cluster::new()
        .agents(300)
        .auth_servers(3)
        .store(store)
        .config(|cfg| {
            cfg.storage.replica = Some("replica-a".into());
            cfg.signals.auto_reconnect = true;
            cfg.signals.storm_share = Ratio::ONE;
            cfg.signals.max_restarts_in_flight = RestartLimit {
                share: Ratio::ONE,
                cap: CAP,
            };
            cfg.access.manual_reconnect_interval = Duration::from_millis(1);
        })
        .start()
        .await;
    c.ready().await;
    let b = replica(&c, "replica-b").await;
    let stop = CancellationToken::new();
    let to = Lifelines(vec![
        LifelineAddr::from(c.ll().grpc_addr),
        LifelineAddr::from(b.grpc_addr),
    ]);
    let sidecars =
        lifeline_sim::SimAgent::start_sidecars(&c.sim, to, 1.0, Duration::from_millis(500), &stop)
            .await
            .expect("sidecars");
    assert_eq!(sidecars.len(), 300);
    let db = c.ll().db.clone();
    c.eventually("every sidecar's stream recorded", || async {
        support::sql_i64(
            &db,
            "SELECT count(*) FROM agent_streams WHERE restart_only = 1",
        )
        .await
            >= sidecars.len() as i64
    })
    .await;
    // Each replica knows every sidecar, whichever replica it streams to.
    until(&c, "every sidecar known to both replicas", || {
        c.ll().hub.reachable_agents().len() == 300 && b.hub.reachable_agents().len() == 300
    })
    .await;
    let most = std::sync::Arc::new(std::sync::atomic::AtomicI64::new(0));
    let sampling = CancellationToken::new();
    let sampler = {
        let (most, db, done) = (most.clone(), db.clone(), sampling.clone());
        tokio::spawn(async move {
            while !done.is_cancelled() {
                let n = support::sql_i64(
                    &db,
                    "SELECT count(*) FROM signals WHERE restart = 1 AND outcome IN ('pending', 'delivered')",
                )
                .await;
                most.fetch_max(n, std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
    };
    for auth in ["auth-1", "auth-2"] {
        c.sim.set_auth_status(auth, ServingStatus::NotServing).await;
    }
    c.eventually("most of the 200 stranded", || async {
        c.agents_in("stranded").await.len() >= 150
    })
    .await;
    // Both replicas at once, three times over, while the automatic loop
    // runs.
    let mut runs = tokio::task::JoinSet::new();
    for round in 0..3u64 {
        for base in [c.ll().base_url(), b.base_url()] {
            let ca = c.tls.as_ref().map(|t| t.ca_file.clone());
            runs.spawn(async move {
                tokio::time::sleep(Duration::from_millis(300 * round)).await;
                reconnect_stranded_cli(base, ca).await
            });
        }
    }
    let outputs: Vec<String> = runs
        .join_all()
        .await
        .iter()
        .map(|out| out.lines().next().unwrap_or_default().to_string())
        .collect();
    for out in &outputs {
        assert!(
            out.contains("stranded agents;") && out.contains("signalled"),
            "the CLI says what it did: {out}"
        );
    }
    let mut left = usize::MAX;
    for second in 0..120 {
        left = c.agents_in("stranded").await.len();
        if left == 0 {
            break;
        }
        if second % 5 == 0 {
            let n = support::sql_i64(&db, "SELECT count(*) FROM signals WHERE restart = 1").await;
            eprintln!("{second} s: {left} stranded, {n} restarts recorded");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(left, 0, "every stranded agent restarted and healthy");
    c.eventually("the admitted restarts answered", || async {
        support::sql_i64(
            &db,
            "SELECT count(*) FROM signals WHERE restart = 1 AND outcome IN ('pending', 'delivered')",
        )
        .await
            == 0
    })
    .await;
    sampling.cancel();
    let _ = sampler.await;
    let most = most.load(std::sync::atomic::Ordering::Relaxed);
    let acked = support::sql_i64(
        &db,
        "SELECT count(*) FROM signals WHERE restart = 1 AND outcome = 'acked'",
    )
    .await;
    eprintln!("at most {most} restarts in flight; {acked} acked; CLI runs: {outputs:?}");
    assert!(acked >= 150, "the stranded agents were restarted: {acked}");
    assert!(most >= 2, "restarts ran side by side: {most}");
    assert!(
        most <= CAP as i64,
        "never more than the cap in flight: {most}"
    );
    stop.cancel();
    b.shutdown().await;
    c.shutdown().await;
}

/// A sidecar on several replicas is one sidecar with several streams:
/// three replicas, the sidecar streaming to two of them. Each stream has
/// its own row; the third replica counts the sidecar once and relays a
/// restart to exactly one stream (one restart, not two); when one of the
/// two replicas leaves, the other's row stays and the third still reaches
/// the sidecar through it.
#[tokio::test]
async fn a_sidecar_on_several_replicas_is_one_sidecar_with_several_streams() {
    let Some(store) = support::Store::postgres("sidecar_per_replica").await else {
        return;
    };
    let c = Cluster::new()
        .agents(2)
        .tls(false)
        .store(store)
        .config(|cfg| {
            cfg.storage.replica = Some("replica-a".into());
            cfg.signals.auto_reconnect = false;
            cfg.access.manual_reconnect_interval = Duration::from_millis(1);
        })
        .start()
        .await;
    let b = replica(&c, "replica-b").await;
    let third = replica(&c, "replica-c").await;
    let t = Teleport::started(0.5, false).await;
    let stop = CancellationToken::new();
    let cfg = FileConfig {
        lifeline: List::Many(vec![
            format!("https://localhost:{}", c.ll().grpc_addr.port()),
            format!("https://localhost:{}", b.grpc_addr.port()),
        ]),
        ..sidecar_file(&c, &t)
    }
    .check()
    .expect("checks");
    tokio::spawn(lifeline_agent::run(cfg, stop.clone()));
    let db = c.ll().db.clone();
    let rows = || {
        support::sql_i64(
            &db,
            "SELECT count(*) FROM agent_streams WHERE agent = 'agent-00001'",
        )
    };
    c.eventually("a row for each stream", || async { rows().await == 2 })
        .await;
    let on_third = |path: String, post: bool| {
        let url = format!("{}{path}", third.base_url());
        let req = if post {
            c.http
                .post(url)
                .bearer_auth(support::ADMIN)
                .json(&serde_json::json!({"reason": "test"}))
        } else {
            c.http.get(url)
        };
        async move {
            let r = support::bounded("an HTTP call", req.send())
                .await
                .expect("answer");
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or_default())
        }
    };
    c.eventually("replica-c counts the sidecar once", || async {
        on_third("/api/v1/summary".into(), false).await.1["signals"]["sidecars"] == 1
    })
    .await;
    let (status, body) = on_third(format!("/api/v1/agents/{HOST}/reconnect"), true).await;
    assert_eq!(status, 202, "{body}");
    outcome(&c, body["id"].as_i64().expect("id"), "acked").await;
    assert_eq!(t.starts(), 2, "one restart, through one stream");
    // Delivered on both streams, the sidecar would have answered twice
    // (the second "already in progress"): exactly one replica heard one
    // answer, and the third delivered nothing itself.
    let answered = |s: &lifeline::stats::Stats| {
        use lifeline::stats::SignalOutcome as O;
        [O::Acked, O::Refused, O::Failed]
            .into_iter()
            .map(|o| s.signal_total(o))
            .sum::<u64>()
    };
    c.eventually("the sidecar's one answer counted", || async {
        answered(&c.ll().stats) + answered(&b.stats) == 1
    })
    .await;
    assert_eq!(
        answered(&third.stats),
        0,
        "the third relayed it, delivered nothing"
    );

    // replica-b leaves: its row goes, replica-a's stays, and replica-c
    // still reaches the sidecar (which refuses: it is cooling down).
    b.shutdown().await;
    c.eventually("replica-b's row gone, replica-a's kept", || async {
        rows().await == 1
    })
    .await;
    let (status, body) = on_third(format!("/api/v1/agents/{HOST}/reconnect"), true).await;
    assert_eq!(status, 202, "still reachable through replica-a: {body}");
    let row = outcome(&c, body["id"].as_i64().expect("id"), "refused").await;
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("cooling down"),
        "{row}"
    );
    assert_eq!(t.starts(), 2);
    stop.cancel();
    third.shutdown().await;
    c.shutdown().await;
}

/// Done needs evidence of a new process: with no PID for Teleport before
/// the restart (its `/readyz` does not answer and the PID file is gone), a
/// "ready" after it could be the old process's, so nothing is tried and
/// the sidecar says why (`refused`, not `failed`).
#[tokio::test]
async fn a_restart_with_no_pid_before_it_is_refused_and_nothing_runs() {
    let dir = tempfile::tempdir().expect("dir");
    let calls = dir.path().join("systemctl.calls");
    let stub = dir.path().join("systemctl");
    std::fs::write(
        &stub,
        format!("#!/bin/sh\necho \"$@\" >> {}\n", calls.display()),
    )
    .expect("stub");
    std::fs::set_permissions(&stub, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let nobody = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let r = Restarter::new(
        &FileConfig {
            lifeline: List::One("http://127.0.0.1:1".into()),
            host_id: Some(HOST.into()),
            restart: Method::Systemd,
            systemctl: stub,
            pid_file: dir.path().join("gone.pid"),
            diag_addr: Some(nobody.to_string()),
            ..FileConfig::default()
        }
        .check()
        .expect("checks"),
    );
    let done = r.restart("a test").await;
    assert_eq!(done.verdict, Verdict::Refused, "{done:?}");
    assert!(
        done.detail
            .starts_with("not restarting: no PID for Teleport now"),
        "{done:?}"
    );
    assert!(!calls.exists(), "nothing was run");
    // Refused, so no cooldown began: the next ask is looked at afresh.
    let again = r.restart("a test").await;
    assert_eq!(again.verdict, Verdict::Refused);
    assert!(!again.detail.contains("cooling down"), "{again:?}");
}

/// A TCP relay whose upstream can be switched, cutting every connection
/// through it: what makes a connected sidecar dial again.
struct Switch {
    port: u16,
    upstream: std::sync::Arc<std::sync::Mutex<std::net::SocketAddr>>,
    cut: tokio::sync::watch::Sender<u64>,
}

impl Switch {
    async fn start(upstream: std::net::SocketAddr) -> Switch {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("relay binds");
        let port = listener.local_addr().expect("addr").port();
        let upstream = std::sync::Arc::new(std::sync::Mutex::new(upstream));
        let (cut, _) = tokio::sync::watch::channel(0u64);
        let (to, cuts) = (upstream.clone(), cut.clone());
        tokio::spawn(async move {
            while let Ok((mut down, _)) = listener.accept().await {
                let addr = *to.lock().expect("lock");
                let mut cut = cuts.subscribe();
                tokio::spawn(async move {
                    let Ok(mut up) = tokio::net::TcpStream::connect(addr).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => {}
                        _ = cut.changed() => {}
                    }
                });
            }
        });
        Switch {
            port,
            upstream,
            cut,
        }
    }

    /// From now on to `addr`; every connection so far is cut.
    fn switch_to(&self, addr: std::net::SocketAddr) {
        *self.upstream.lock().expect("lock") = addr;
        self.cut.send_modify(|g| *g += 1);
    }
}

/// Credentials rotated under a connected sidecar (as tbot rotates them)
/// are what it presents at its next dial: the join token rewritten in
/// place, the client certificate and key replaced by rename. A relay
/// then cuts the stream and leads to a second Lifeline that admits only
/// the new token and trusts only the new certificate's CA: the sidecar is
/// admitted there, with no restart of its own; the old credentials are
/// refused there.
#[tokio::test]
async fn rotated_token_and_client_certificate_are_read_at_the_next_dial() {
    const NEW_TOKEN: &str = "rotated-join-token";
    let c = Cluster::new().agents(1).tls(true).start().await;
    let tls = c.tls.as_ref().expect("TLS");
    // The second Lifeline: the new token only, the new CA only.
    let ca2 = lifeline_sim::pki::Ca::new("rotated CA").expect("CA");
    let dir2 = tempfile::tempdir().expect("temp dir");
    let ca2_file = dir2.path().join("client-ca.pem");
    std::fs::write(&ca2_file, ca2.pem()).expect("CA file");
    let mut cfg2 = c.cfg.clone();
    cfg2.storage.path = dir2.path().join("lifeline.db");
    cfg2.access.join_tokens = vec![lifeline::access::hash_hex(NEW_TOKEN).into()];
    cfg2.server.agent_client_ca = Some(ca2_file);
    let l2 = lifeline::app::Lifeline::start(&cfg2, c.clock)
        .await
        .expect("the second Lifeline starts");

    let relay = Switch::start(c.ll().grpc_addr).await;
    let t = Teleport::start(0.1, false);
    let (cert, key) = (t.dir().join("client.crt"), t.dir().join("client.key"));
    std::fs::write(&cert, &tls.agent.cert_pem).expect("cert");
    std::fs::write(&key, &tls.agent.key_pem).expect("key");
    let file = FileConfig {
        lifeline: List::One(format!("https://localhost:{}", relay.port)),
        client_cert: Some(cert.clone()),
        client_key: Some(key.clone()),
        ..sidecar_file(&c, &t)
    };
    let cfg = file.clone().check().expect("checks");
    let stop = CancellationToken::new();
    tokio::spawn(lifeline_agent::run(cfg.clone(), stop.clone()));
    until(
        &c,
        "the sidecar's stream open on the first Lifeline",
        || c.ll().hub.reachable(HOST),
    )
    .await;

    // The old credentials are refused by the second Lifeline.
    let direct = format!("https://localhost:{}", l2.grpc_addr.port());
    let err = session::once(&direct, &cfg)
        .await
        .expect_err("the old token and certificate are refused");
    eprintln!("old credentials at the second Lifeline: {err}");

    // Rotate while connected: the token in place, the certificate and key
    // by rename.
    let token = cfg.credentials.token_file.clone().expect("a token file");
    std::fs::write(&token, format!("{NEW_TOKEN}\n")).expect("rotate token");
    let issued = ca2.issue(HOST, &[]).expect("new cert");
    let (cert_tmp, key_tmp) = (
        t.dir().join(".client.crt.new"),
        t.dir().join(".client.key.new"),
    );
    std::fs::write(&cert_tmp, &issued.cert_pem).expect("cert");
    std::fs::write(&key_tmp, &issued.key_pem).expect("key");
    std::fs::rename(&key_tmp, &key).expect("rename key");
    std::fs::rename(&cert_tmp, &cert).expect("rename cert");
    assert!(
        c.ll().hub.reachable(HOST),
        "still connected on the old credentials"
    );

    relay.switch_to(l2.grpc_addr);
    c.eventually("the sidecar admitted by the second Lifeline", || async {
        l2.hub.reachable(HOST)
    })
    .await;
    until(&c, "its stream on the first Lifeline gone", || {
        !c.ll().hub.reachable(HOST)
    })
    .await;
    stop.cancel();
    l2.shutdown().await;
}
