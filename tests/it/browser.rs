//! The dashboard in a real browser: Debian's chromium driven over W3C
//! WebDriver (chromedriver) by fantoccini. It starts `lifeline demo` as an
//! operator would, opens the overview, waits for chaos to strand an agent,
//! clicks Reconnect on the agent's page and watches it recover in place,
//! follows the incidents chaos made (list, timeline, the overview's strip),
//! changes a setting through the Settings page, then checks the phone
//! layout. Screenshots are saved under
//! `target/tmp/browser/` as artefacts.
//!
//! Real time, not virtual: the browser and the demo are separate processes.
//! Every wait polls a condition against a deadline; nothing sleeps to let
//! things "settle". With `CI=true` a missing browser fails the test (CI
//! installs it); elsewhere the test says so and skips.

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

fn on_path(names: &[&str]) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    for name in names {
        let p = Path::new(name);
        if p.is_absolute() && p.exists() {
            return Some(p.to_path_buf());
        }
        for dir in std::env::split_paths(&path) {
            let c = dir.join(name);
            if c.is_file() {
                return Some(c);
            }
        }
    }
    None
}

fn browser_missing(what: &str) {
    if std::env::var("CI").is_ok_and(|v| v == "true" || v == "1") {
        panic!(
            "{what}; CI=true requires a browser (.ci/run installs Debian's chromium and chromium-driver)"
        );
    }
    eprintln!("SKIPPED: {what} (install Debian's chromium and chromium-driver to run this test)");
}

fn artefacts() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser");
    std::fs::create_dir_all(&d).expect("artefact dir");
    d
}

async fn shot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    let p = artefacts().join(name);
    std::fs::write(&p, png).expect("write screenshot");
    eprintln!("screenshot: {}", p.display());
}

/// Polls `f` every 250 ms until it yields, or fails naming `what`.
async fn until<T, F, Fut>(what: &str, limit: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn js(c: &Client, script: &str) -> Value {
    c.execute(script, vec![]).await.unwrap_or(Value::Null)
}

/// `lifeline demo` on free ports; returns the process and the dashboard URL.
/// The demo's API token (all roles), given on its command line.
const TOKEN: &str = "browser-test-token";

async fn start_demo(db: &Path) -> (Child, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args([
            "demo",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--agents",
            "30",
            "--proxies",
            "3",
            "--ttl",
            "2s",
            "--chaos-period",
            "6s",
            "--legacy-share",
            "1",
            "--no-auto-reconnect",
            "--token",
            TOKEN,
            "--db",
        ])
        .arg(db)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("lifeline demo starts");
    let out = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(out).lines();
    let url = tokio::time::timeout(Duration::from_secs(60), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(u) = l.trim().strip_prefix("dashboard") {
                return Some(u.trim().trim_end_matches('/').to_string());
            }
        }
        None
    })
    .await
    .ok()
    .flatten()
    .expect("the demo prints its dashboard URL");
    // Keep draining stdout so the demo never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, url)
}

async fn start_browser() -> Option<(Child, Client)> {
    let Some(chromium) = std::env::var_os("LIFELINE_CHROMIUM")
        .map(PathBuf::from)
        .or_else(|| on_path(&["chromium", "chromium-browser", "google-chrome"]))
    else {
        browser_missing("no chromium found on PATH");
        return None;
    };
    let Some(driver) = std::env::var_os("LIFELINE_CHROMEDRIVER")
        .map(PathBuf::from)
        .or_else(|| on_path(&["chromedriver"]))
    else {
        browser_missing("no chromedriver found on PATH");
        return None;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(&driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{} does not start: {e}", driver.display()));
    until(
        "chromedriver to listen",
        Duration::from_secs(20),
        || async {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        },
    )
    .await;
    let profile = tempfile::tempdir().expect("profile dir");
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({
            "binary": chromium,
            "args": [
                "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-quic", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--window-size=1280,1000",
                format!("--user-data-dir={}", profile.path().display()),
            ],
        }),
    );
    let conn = hyper_util::client::legacy::connect::HttpConnector::new();
    match ClientBuilder::new(conn)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{port}"))
        .await
    {
        Ok(c) => {
            // The profile lives as long as the test process.
            std::mem::forget(profile);
            Some((child, c))
        }
        Err(e) => {
            browser_missing(&format!("chromium does not start under chromedriver: {e}"));
            None
        }
    }
}

/// Guards the operator's path end to end in a real browser: overview live
/// over SSE → a stranded agent appears after chaos → its page → Reconnect
/// → progress in place to "recovered"; the audit says the UI asked; the
/// overview fits a phone screen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_reconnects_a_stranded_agent_in_a_real_browser() {
    let dir = tempfile::tempdir().expect("temp dir");
    let Some((_driver, c)) = start_browser().await else {
        return;
    };
    let (_demo, base) = start_demo(&dir.path().join("demo.db")).await;

    c.goto(&format!("{base}/"))
        .await
        .expect("open the overview");
    let title = c.title().await.expect("title");
    assert!(title.contains("Lifeline"), "{title}");
    until(
        "the live stream to connect",
        Duration::from_secs(20),
        || async {
            let t = js(
                &c,
                "return document.getElementById('live-status').textContent",
            )
            .await;
            (t.as_str() == Some("● live")).then_some(())
        },
    )
    .await;
    // Keyboard: a TTL row takes focus and then shows its details. (A click
    // first gives the headless window focus, as a user has; it lands on the
    // header's status text, which live updates never replace.)
    c.find(Locator::Id("live-status"))
        .await
        .expect("the live status")
        .click()
        .await
        .expect("click");
    let tip = js(
        &c,
        "const row = document.querySelector('svg.ttl a.row');
         row.focus();
         const tip = row.querySelector('.tip');
         return [document.activeElement === row, getComputedStyle(tip).display, tip.textContent];",
    )
    .await;
    assert_eq!(tip[0], Value::Bool(true), "a TTL row is focusable: {tip}");
    assert_ne!(tip[1], "none", "focus shows the row's details: {tip}");
    let text = tip[2].as_str().unwrap_or_default();
    for part in ["last heartbeat", "TTL", "expires", "heartbeats missed"] {
        assert!(text.contains(part), "details name {part}: {text}");
    }
    shot(&c, "1-overview.png").await;

    // Sign in (Reconnect needs the update role), and land on the overview.
    c.goto(&format!("{base}/signin?next=/"))
        .await
        .expect("open sign-in");
    c.find(Locator::Css("form.signin input[name=token]"))
        .await
        .expect("the token field")
        .send_keys(TOKEN)
        .await
        .expect("type the token");
    c.find(Locator::Css("form.signin button"))
        .await
        .expect("the sign-in button")
        .click()
        .await
        .expect("sign in");
    until(
        "signed in on the overview",
        Duration::from_secs(10),
        || async {
            let who = js(
            &c,
            "const w = document.querySelector('form.who span'); return w ? w.textContent : null;",
        )
        .await;
            let url = c.current_url().await.ok()?;
            (url.path() == "/" && who.as_str() == Some("demo")).then_some(())
        },
    )
    .await;

    // Chaos stops proxies; legacy agents on both dead proxies are stranded
    // and stay so (automatic reconnects are off in this demo).
    let agent: String = until(
        "a stranded agent with no live tunnel on the overview",
        Duration::from_secs(120),
        || async {
            js(
                &c,
                "const r = [...document.querySelectorAll('#live tr[data-agent]')]
                   .find(tr => tr.cells[2].textContent.includes('no_live_tunnel'));
                 return r ? r.dataset.agent : null;",
            )
            .await
            .as_str()
            .map(str::to_string)
        },
    )
    .await;
    shot(&c, "2-overview-stranded.png").await;
    assert!(
        js(&c, "return document.body.innerText")
            .await
            .as_str()
            .unwrap_or_default()
            .contains("agents stranded"),
        "the root cause line is shown"
    );

    // Click through to the agent's page (the live list may re-render under
    // the click; retry on a fresh element).
    let href = format!("/agents/{agent}");
    until("the agent's page", Duration::from_secs(10), || async {
        if let Ok(a) = c
            .find(Locator::Css(&format!("#live tr[data-agent='{agent}'] a")))
            .await
        {
            let _ = a.click().await;
        }
        let url = c.current_url().await.ok()?;
        (url.path() == href).then_some(())
    })
    .await;
    let state = js(
        &c,
        "return document.getElementById('agent-state').dataset.state",
    )
    .await;
    eprintln!("{agent} is {state} when its page opens");

    c.find(Locator::Id("reconnect-button"))
        .await
        .expect("a Reconnect button")
        .click()
        .await
        .expect("click Reconnect");
    let progress: String = until(
        "the reconnect to finish",
        Duration::from_secs(45),
        || async {
            let v = js(
                &c,
                "const o = document.querySelector('form[data-reconnect] output.progress');
             return o ? [o.dataset.phase || '', o.textContent] : null;",
            )
            .await;
            let phase = v[0].as_str()?;
            let text = v[1].as_str().unwrap_or_default().to_string();
            assert_ne!(phase, "failed", "the reconnect failed: {text}");
            (phase == "recovered").then_some(text)
        },
    )
    .await;
    assert!(progress.contains("acked"), "{progress}");
    assert!(progress.contains("recovered"), "{progress}");
    shot(&c, "3-agent-recovered.png").await;

    // The audit names the dashboard as the requester.
    let audit: Value = reqwest::get(format!(
        "{base}/api/v1/signals?agent={agent}&requested_by=ui"
    ))
    .await
    .expect("audit")
    .json()
    .await
    .expect("JSON");
    assert_eq!(audit["items"][0]["outcome"], "acked", "{audit}");

    // The incidents chaos made: the list, then one incident's timeline.
    c.goto(&format!("{base}/incidents"))
        .await
        .expect("open incidents");
    let incident: String = until("an incident listed", Duration::from_secs(30), || async {
        let v = js(
            &c,
            "const a = document.querySelector('table.incidents td a'); return a ? a.getAttribute('href') : null;",
        )
        .await;
        if v.is_null() {
            let _ = c.refresh().await;
        }
        v.as_str().map(str::to_string)
    })
    .await;
    shot(&c, "4-incidents.png").await;
    c.goto(&format!("{base}{incident}"))
        .await
        .expect("open the incident");
    let drawn = js(
        &c,
        "const s = document.querySelector('svg.timeline');
         return s ? [s.querySelectorAll('polyline').length, document.body.innerText.includes('Postmortem draft')] : null;",
    )
    .await;
    assert_eq!(
        drawn,
        json!([2, true]),
        "the timeline and the draft's button"
    );
    shot(&c, "5-incident.png").await;
    let report = reqwest::get(format!("{base}/api/v1{incident}/report"))
        .await
        .expect("report")
        .text()
        .await
        .expect("text");
    assert!(report.starts_with("# Incident"), "{report}");

    // The overview's strip: a band per incident, each a link to it.
    c.goto(&format!("{base}/")).await.expect("overview");
    let band: String = until("a band on the strip", Duration::from_secs(30), || async {
        js(
            &c,
            "const b = document.querySelector('svg.strip a.band'); return b ? b.getAttribute('href') : null;",
        )
        .await
        .as_str()
        .map(str::to_string)
    })
    .await;
    assert!(band.starts_with("/incidents/"), "{band}");
    shot(&c, "6-overview-strip.png").await;

    // Settings: a change made through the page is the API's.
    c.goto(&format!("{base}/settings#setting-storm_share"))
        .await
        .expect("settings");
    let field = c
        .find(Locator::Css("#setting-storm_share input[name=value]"))
        .await
        .expect("the storm_share field");
    field.clear().await.expect("clear");
    field.send_keys("0.45").await.expect("type");
    c.find(Locator::Css("#setting-storm_share button[type=submit]"))
        .await
        .expect("Save")
        .click()
        .await
        .expect("save");
    until("the change saved", Duration::from_secs(10), || async {
        let url = c.current_url().await.ok()?;
        (url.query() == Some("saved=storm_share")).then_some(())
    })
    .await;
    shot(&c, "7-settings.png").await;
    let setting: Value = reqwest::get(format!("{base}/api/v1/settings/storm_share"))
        .await
        .expect("setting")
        .json()
        .await
        .expect("JSON");
    assert_eq!(setting["value"], json!(0.45), "{setting}");
    assert_eq!(setting["origin"], "dynamic", "{setting}");

    // A phone: the page itself never scrolls sideways (wide tables and the
    // timeline scroll inside their own boxes).
    c.set_window_size(390, 844).await.expect("phone size");
    c.goto(&format!("{base}/")).await.expect("overview again");
    let fits = js(
        &c,
        "return document.documentElement.scrollWidth <= window.innerWidth + 1",
    )
    .await;
    shot(&c, "8-overview-phone.png").await;
    assert_eq!(fits, Value::Bool(true), "the overview fits a phone's width");
    c.goto(&format!("{base}{incident}"))
        .await
        .expect("the incident again");
    let fits = js(
        &c,
        "return document.documentElement.scrollWidth <= window.innerWidth + 1",
    )
    .await;
    shot(&c, "9-incident-phone.png").await;
    assert_eq!(
        fits,
        Value::Bool(true),
        "an incident's page fits a phone's width"
    );
    c.close().await.expect("close the browser");
}
