//! Telling people: incidents through signed webhooks (in order, retried,
//! across a restart, one hung receiver holding up nothing else) and
//! through a real Alertmanager (`prometheus-alertmanager`), its silences
//! included.

use crate::support;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lifeline::clock::Clock;
use lifeline::config::WebhookConfig;
use lifeline::notify::sign;
use lifeline::store::outbox;
use lifeline_sim::receiver::{Answer, Received, Receiver};
use support::{Cluster, Running, Store};

pub(crate) const SECRET: &str = "whsec_test_secret";

pub(crate) fn secret_file(dir: &Path) -> PathBuf {
    let p = dir.join("webhook-secret");
    std::fs::write(&p, format!("{SECRET}\n")).expect("secret written");
    p
}

/// Six legacy agents on `store`, telling `hooks` (name, URL).
pub(crate) async fn cluster(store: Store, dir: &Path, hooks: Vec<(&str, String)>) -> Running {
    let secret = secret_file(dir);
    let hooks: Vec<WebhookConfig> = hooks
        .into_iter()
        .map(|(n, u)| support::webhook(n, u, &secret))
        .collect();
    let c = Cluster::six_legacy()
        .store(store)
        .config(move |cfg| cfg.notify.webhooks = hooks)
        .start()
        .await;
    c.ready().await;
    c
}

/// Every event the outbox holds, by id.
pub(crate) async fn written(c: &Running) -> Vec<outbox::Event> {
    outbox::after(&c.ll().db, 0, 1000)
        .await
        .expect("events read")
}

/// The ids of the requests answered 2xx, in the order they came.
pub(crate) fn delivered(got: &[Received]) -> Vec<i64> {
    got.iter()
        .filter(|r| r.status == Some(200))
        .filter_map(|r| r.json()["id"].as_i64())
        .collect()
}

fn assert_signed(got: &[Received]) {
    for r in got {
        let h = r.header(sign::HEADER).expect("signed");
        let now = r.at.as_micros() / 1_000_000;
        assert_eq!(
            sign::verify(SECRET.as_bytes(), h, &r.body, now, 300),
            Ok(()),
            "{h}"
        );
        assert_eq!(
            sign::verify(b"another secret", h, &r.body, now, 300),
            Err(sign::Refusal::Mismatch)
        );
        assert_eq!(
            r.header("X-Lifeline-Delivery").map(str::to_string),
            r.json()["id"].as_i64().map(|i| i.to_string())
        );
    }
}

/// Every field of each webhook body is declared in the OpenAPI document's
/// `WebhookEvent` schema (following `$ref`, `allOf`, `oneOf`, `anyOf`):
/// what a receiver gets is what the contract says.
async fn assert_documented(c: &Running, bodies: &[serde_json::Value]) {
    use serde_json::Value;
    fn resolve<'a>(doc: &'a Value, s: &'a Value) -> &'a Value {
        match s["$ref"]
            .as_str()
            .and_then(|r| r.strip_prefix("#/components/schemas/"))
        {
            Some(name) => resolve(doc, &doc["components"]["schemas"][name]),
            None => s,
        }
    }
    /// The property schemas a schema declares, all its branches together.
    fn properties<'a>(doc: &'a Value, s: &'a Value, out: &mut Vec<(&'a str, &'a Value)>) {
        let s = resolve(doc, s);
        if let Some(p) = s["properties"].as_object() {
            out.extend(p.iter().map(|(k, v)| (k.as_str(), v)));
        }
        for key in ["allOf", "oneOf", "anyOf"] {
            for b in s[key].as_array().into_iter().flatten() {
                properties(doc, b, out);
            }
        }
    }
    fn check(doc: &Value, s: &Value, v: &Value, at: &str, wrong: &mut Vec<String>) {
        let Some(o) = v.as_object() else { return };
        let mut declared = Vec::new();
        properties(doc, s, &mut declared);
        for (k, x) in o {
            let here = format!("{at}.{k}");
            let mut found = declared.iter().filter(|(n, _)| n == k).peekable();
            if found.peek().is_none() {
                wrong.push(here);
                continue;
            }
            if x.is_object() {
                // Declared by any branch: its fields are checked against
                // them all.
                let merged = Value::Object(
                    [(
                        "allOf".to_string(),
                        Value::Array(found.map(|(_, s)| (*s).clone()).collect()),
                    )]
                    .into_iter()
                    .collect(),
                );
                check(doc, &merged, x, &here, wrong);
            }
        }
    }
    let doc = c.ok("/api/v1/openapi.json").await;
    let event = doc["components"]["schemas"]["WebhookEvent"].clone();
    assert!(event.is_object(), "WebhookEvent is documented");
    let mut wrong = Vec::new();
    for b in bodies {
        check(&doc, &event, b, "body", &mut wrong);
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "fields the webhook schema does not declare: {wrong:?}"
    );
}

/// Runs the verification recipe the book gives (Python) on one delivery,
/// with the receiver's clock at `now` (Unix seconds).
fn readme_recipe(secret: &str, header: &str, body: &[u8], now: i64) -> bool {
    let readme =
        std::fs::read_to_string(support::repo().join("docs/src/operating/notifications.md"))
            .expect("the notifications page");
    let start = readme.find("def verify(").expect("the page's recipe");
    let head = &readme[..start];
    let from = head.rfind("```python\n").expect("its code block") + "```python\n".len();
    let to = start + readme[start..].find("```").expect("its end");
    let dir = tempfile::tempdir().expect("dir");
    let body_file = dir.path().join("body");
    std::fs::write(&body_file, body).expect("body written");
    let script = format!(
        "{}\ntime.time = lambda: {now}\nprint(verify({secret:?}.encode(), {header:?}, open({:?}, 'rb').read()))\n",
        &readme[from..to],
        body_file.display().to_string(),
    );
    let out = std::process::Command::new("python3")
        .arg("-c")
        .arg(&script)
        .output()
        .expect("python3 runs");
    let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(
        said == "True" || said == "False",
        "{said} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    said == "True"
}

on_both_engines! {
/// A receiver that answers 500 for two minutes, then 200, gets every
/// event the outbox holds, in order, each signed; the log says how many
/// attempts each took.
#[tokio::test(start_paused = true)]
async fn a_receiver_failing_for_two_minutes_gets_every_event_in_order(store) {
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let c = cluster(store, dir.path(), vec![("oncall", rx.url("/hook"))]).await;
    let failing_until = c.clock.now().saturating_add(Duration::from_secs(120));
    rx.answer(Answer::FailUntil(failing_until));
    c.strand_two().await;
    c.advance_until("every agent healthy", Duration::from_secs(60), || async {
        c.agents_in("healthy").await.len() == 6
    })
    .await;
    c.flush().await;
    let events = written(&c).await;
    let kinds: BTreeSet<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert!(kinds.contains("incident.opened") && kinds.contains("incident.resolved"), "{kinds:?}");
    let ids: Vec<i64> = events.iter().map(|e| e.id).collect();
    c.advance_until("every event delivered", Duration::from_secs(900), || async {
        delivered(&rx.got()) == ids
    })
    .await;
    let got = rx.got();
    assert!(got.iter().any(|r| r.status == Some(500)), "it failed first");
    assert!(got
        .iter()
        .filter(|r| r.status == Some(200))
        .all(|r| r.at >= failing_until));
    // In order: no event is tried before the one before it was taken.
    let tried: Vec<i64> = got.iter().filter_map(|r| r.json()["id"].as_i64()).collect();
    assert!(tried.windows(2).all(|w| w[0] <= w[1]), "{tried:?}");
    assert_signed(&got);
    let bodies: Vec<serde_json::Value> = got.iter().map(|r| r.json()).collect();
    assert_documented(&c, &bodies).await;
    let body = got.last().expect("one").json();
    // Each notice names its incident's cluster, by the name the pages use.
    assert_eq!(body["cluster"], c.cfg.cluster.cluster().as_str(), "{body}");
    assert_eq!(body["data"]["incident"]["cluster"], body["cluster"], "{body}");
    assert!(body["data"]["incident"]["url"].as_str().is_some_and(|u| u.contains("/incidents/")), "{body}");
    assert!(["critical", "warning"].contains(&body["data"]["incident"]["severity"].as_str().unwrap_or("")));

    // The last answer may come before Lifeline records it.
    c.advance_until("every delivery logged", Duration::from_secs(5), || async {
        c.ok("/api/v1/webhooks/oncall/deliveries").await["items"]
            .as_array()
            .is_some_and(|v| v.len() == ids.len())
    })
    .await;
    let log = c.ok("/api/v1/webhooks/oncall/deliveries").await;
    let items = log["items"].as_array().expect("items");
    assert!(items.iter().all(|d| d["outcome"] == "delivered" && d["status"] == 200), "{log}");
    let first = items.last().expect("the first event");
    assert!(first["attempts"].as_u64() > Some(1), "{first}");
    assert!(first["latency_ms"].is_number(), "{first}");
    let hooks = c.ok("/api/v1/webhooks").await;
    assert_eq!(hooks["items"][0]["name"], "oncall");
    assert!(!hooks.to_string().contains(&rx.addr.to_string()), "the URL is never shown: {hooks}");
    let (status, unknown) = c.get("/api/v1/webhooks/nobody/deliveries").await;
    assert_eq!(status, 404, "{unknown}");
    let (status, page) = c.get_text("/webhooks").await;
    assert_eq!(status, 200);
    assert!(page.contains("oncall") && page.contains("incident.opened") && page.contains("delivered"));
    assert!(!page.contains(&rx.addr.to_string()), "the URL is never shown");

    // The book's recipe tells a good delivery from a forged or replayed one.
    let r = got.last().expect("one");
    let header = r.header(sign::HEADER).expect("signed");
    let now = r.at.as_micros() / 1_000_000;
    assert!(readme_recipe(SECRET, header, &r.body, now));
    assert!(!readme_recipe("a wrong secret", header, &r.body, now));
    assert!(!readme_recipe(SECRET, header, b"{\"id\":999}", now), "a changed body");
    assert!(!readme_recipe(SECRET, header, &r.body, now + 3600), "a replay an hour later");
    c.shutdown().await;
}
}

on_both_engines! {
/// A receiver down longer than `max_age` is not paged about the past: an
/// event's age counts from the event's own time, so the events older than
/// `max_age` when it is back are dropped and counted (`too_old`), a
/// restart halfway resets no event's age, and the newer ones arrive in
/// order. (`max_age` 10 min and 12.5 min down stand for 24 h and 25 h.)
#[tokio::test(start_paused = true)]
async fn a_receiver_down_longer_than_max_age_gets_only_the_events_still_young(store) {
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let mut hook = support::webhook("oncall", rx.url("/hook"), &secret);
    hook.max_age = Duration::from_secs(600);
    let mut c = Cluster::six_legacy()
        .store(store)
        .config(move |cfg| cfg.notify.webhooks = vec![hook])
        .start()
        .await;
    c.ready().await;
    let start = c.clock.now();
    let back = start.saturating_add(Duration::from_secs(750));
    rx.answer(Answer::FailUntil(back));
    // Events at the start: the incident opening and resolving.
    c.strand_two().await;
    c.advance_until("every agent healthy", Duration::from_secs(60), || async {
        c.agents_in("healthy").await.len() == 6
    })
    .await;
    c.flush().await;
    let old: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
    assert!(!old.is_empty());
    // Halfway, Lifeline restarts: it begins delivering them again.
    c.advance(Duration::from_secs(300)).await;
    c.restart_lifeline().await;
    c.eventually("the next Lifeline leads", || async { c.ll().hub.leads() }).await;
    // Shortly before the receiver is back, newer events: a window.
    c.advance_to(start.saturating_add(Duration::from_secs(700))).await;
    let until = c.clock.now().saturating_add(Duration::from_secs(60)).rfc3339();
    let body = serde_json::json!({"targets": ["proxy/proxy-3"], "until": until, "reason": "patch"});
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    c.advance_until("the window is told as it ends", Duration::from_secs(120), || async {
        written(&c).await.iter().any(|e| e.kind == "maintenance.ended")
    })
    .await;
    // Young: written after the old ones. An event young when the
    // receiver is back may still age past max_age while its retry waits
    // out the backoff (at most 5 min): those in between are delivered or
    // dropped as too old, each one or the other, never both. The ones
    // written in the last 5 min before it is back are delivered.
    let retry_cap = Duration::from_secs(300);
    let surely_young_from = back.saturating_sub(Duration::from_secs(600) - retry_cap);
    let written_now = written(&c).await;
    let young: Vec<i64> = written_now.iter().map(|e| e.id).filter(|id| !old.contains(id)).collect();
    let surely_young: Vec<i64> = written_now
        .iter()
        .filter(|e| !old.contains(&e.id) && e.at_us >= surely_young_from.as_micros())
        .map(|e| e.id)
        .collect();
    assert!(surely_young.len() >= 2, "{young:?}");
    let dropped_young = || async {
        let log = c.ok("/api/v1/webhooks/oncall/deliveries?limit=100").await;
        log["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|d| d["outcome"] == "dropped")
            .filter_map(|d| d["event_id"].as_i64())
            .filter(|id| young.contains(id))
            .collect::<Vec<i64>>()
    };
    let mut waited = 0;
    let middle_dropped = loop {
        let mut got = delivered(&rx.got());
        got.dedup();
        let dropped = dropped_young().await;
        let told: Vec<i64> = young.iter().copied().filter(|id| !dropped.contains(id)).collect();
        if got == told && surely_young.iter().all(|id| got.contains(id)) {
            break dropped;
        }
        waited += 1;
        assert!(
            waited < 900,
            "the young events {young:?} were not delivered (dropped: {dropped:?}): {:?}; written {:?}",
            rx.got()
                .iter()
                .map(|r| (r.json()["id"].clone(), r.status, r.at))
                .collect::<Vec<_>>(),
            written(&c).await.iter().map(|e| (e.id, e.kind.clone(), e.at_us)).collect::<Vec<_>>()
        );
        c.advance(Duration::from_secs(1)).await;
    };
    for id in &middle_dropped {
        let e = written_now.iter().find(|e| e.id == *id).expect("written");
        assert!(e.at_us < surely_young_from.as_micros(), "event {id}, written within 5 min of the receiver's return, was dropped");
    }
    let got = rx.got();
    let bodies: Vec<serde_json::Value> = got.iter().map(|r| r.json()).collect();
    assert_documented(&c, &bodies).await;
    for id in &old {
        assert!(
            !got.iter().any(|r| r.status == Some(200) && r.json()["id"].as_i64() == Some(*id)),
            "event {id}, older than max_age, was delivered"
        );
    }
    let (_, metrics) = c.get_text("/metrics").await;
    assert!(
        metrics.contains(&format!(
            "lifeline_notifications_dropped_total{{channel=\"webhook\",reason=\"too_old\"}} {}",
            old.len() + middle_dropped.len()
        )),
        "each old event dropped and counted once, by the Lifeline that dropped it: {metrics}"
    );
    let log = c.ok("/api/v1/webhooks/oncall/deliveries?limit=100").await;
    let dropped: Vec<i64> = log["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["outcome"] == "dropped")
        .filter_map(|d| d["event_id"].as_i64())
        .collect();
    assert_eq!(dropped.len(), old.len() + middle_dropped.len(), "{log}");
    c.shutdown().await;
}
}

on_both_engines! {
/// Lifeline stops while a delivery hangs; the next one delivers that
/// event and the rest (at least once: the receiver saw it twice).
#[tokio::test(start_paused = true)]
async fn the_next_lifeline_delivers_what_the_last_one_left_mid_delivery(store) {
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let mut c = cluster(store, dir.path(), vec![("oncall", rx.url("/hook"))]).await;
    rx.answer(Answer::Hang);
    c.strand_two().await;
    c.flush().await;
    c.advance_until("the first delivery in flight", Duration::from_secs(5), || async {
        !rx.got().is_empty()
    })
    .await;
    let first = rx.got()[0].json()["id"].as_i64().expect("an id");
    let left: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
    assert_eq!(left.first(), Some(&first));
    // The simulated agents know the first Lifeline's port only: the next
    // one goes on from the database alone.
    // The receiver answers from now on (the hung request stays hung):
    // whatever the next Lifeline sends first is answered.
    rx.answer(Answer::Ok);
    c.restart_lifeline().await;
    c.eventually("the next Lifeline leads", || async { c.ll().hub.leads() }).await;
    c.advance_until("what the first left is delivered", Duration::from_secs(60), || async {
        let got = delivered(&rx.got());
        left.iter().all(|id| got.contains(id))
    })
    .await;
    c.flush().await;
    let ids: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
    // In order; events written after this read (the fleet goes on) may
    // follow.
    c.advance_until("every event delivered, in order", Duration::from_secs(60), || async {
        delivered(&rx.got()).starts_with(&ids)
    })
    .await;
    let tries = rx.got().iter().filter(|r| r.json()["id"].as_i64() == Some(first)).count();
    assert_eq!(tries, 2, "once hung, once delivered");
    c.shutdown().await;
}
}

/// A receiver that never answers holds up only its own webhook: the
/// other gets each event as it is written, and ingest goes on.
#[tokio::test(start_paused = true)]
async fn a_hung_receiver_slows_neither_ingest_nor_the_other_webhooks() {
    let hung = Receiver::start(Clock::manual()).await.expect("receiver");
    hung.answer(Answer::Hang);
    let fine = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let c = cluster(
        Store::Sqlite,
        dir.path(),
        vec![("hung", hung.url("/h")), ("fine", fine.url("/f"))],
    )
    .await;
    let heartbeats = c
        .ll()
        .stats
        .heartbeats
        .load(std::sync::atomic::Ordering::Relaxed);
    c.strand_two().await;
    c.flush().await;
    let opened: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
    assert!(!opened.is_empty());
    c.advance(Duration::from_secs(1)).await;
    // Delivery crosses real sockets: the wait is in real time, with the
    // virtual clock held so that nothing (the hung attempt's timeout, the
    // agents' recovery) moves on meanwhile.
    let hold = support::hold_clock();
    c.eventually("the other webhook has every event", || async {
        let now: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
        now.starts_with(&opened) && delivered(&fine.got()) == now
    })
    .await;
    assert_eq!(hung.got().len(), 1, "one attempt, hanging");
    drop(hold);
    c.advance_until("every agent healthy", Duration::from_secs(60), || async {
        c.agents_in("healthy").await.len() == 6
    })
    .await;
    c.flush().await;
    let all: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
    c.advance(Duration::from_secs(1)).await;
    let _hold = support::hold_clock();
    c.eventually("the other webhook has the ends too", || async {
        let now: Vec<i64> = written(&c).await.iter().map(|e| e.id).collect();
        now.starts_with(&all) && delivered(&fine.got()) == now
    })
    .await;
    assert!(
        c.ll()
            .stats
            .heartbeats
            .load(std::sync::atomic::Ordering::Relaxed)
            > heartbeats
    );
    assert!(delivered(&hung.got()).is_empty());
    c.shutdown().await;
}

/// The storm guard pausing automatic reconnects is `restarts.paused`,
/// its window passing `restarts.resumed`; a webhook that takes only those
/// is sent nothing else.
#[tokio::test(start_paused = true)]
async fn the_storm_guard_pausing_and_resuming_is_told() {
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let secret = secret_file(dir.path());
    let mut hook = support::webhook("pauses", rx.url("/p"), &secret);
    hook.events = vec![
        lifeline::domain::NoticeKind::RestartsPaused,
        lifeline::domain::NoticeKind::RestartsResumed,
    ];
    let c = Cluster::storm()
        .config(move |cfg| cfg.notify.webhooks = vec![hook])
        .start()
        .await;
    c.ready().await;
    c.strand_everyone().await;
    let kinds = |rx: &Receiver| -> Vec<String> {
        rx.got()
            .iter()
            .filter(|r| r.status == Some(200))
            .filter_map(|r| r.json()["type"].as_str().map(str::to_string))
            .collect()
    };
    // The resume may follow before this looks (the storm's window can
    // pass while the agents strand): the pause is told first.
    // Delivery crosses a real socket: each look gives it a moment of real
    // time, so a busy machine cannot spend the virtual budget first.
    c.advance_until("the pause told", Duration::from_secs(60), || async {
        support::real_sleep(Duration::from_millis(5)).await;
        kinds(&rx).first().map(String::as_str) == Some("restarts.paused")
    })
    .await;
    let body = rx.got()[0].json();
    assert_eq!(body["data"]["reconnects_paused"], true, "{body}");
    assert!(
        body["data"]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("storm guard")),
        "{body}"
    );
    c.advance_until("the resume told", Duration::from_secs(600), || async {
        support::real_sleep(Duration::from_millis(5)).await;
        kinds(&rx) == ["restarts.paused", "restarts.resumed"]
    })
    .await;
    let bodies: Vec<serde_json::Value> = rx.got().iter().map(|r| r.json()).collect();
    assert_documented(&c, &bodies).await;
    c.shutdown().await;
}

/// Debian's Alertmanager (`prometheus-alertmanager`, which `.ci/run`
/// installs): `None` skips the test, except under `CI=true`, where a
/// missing binary fails it.
fn alertmanager_binary() -> Option<PathBuf> {
    let found = ["prometheus-alertmanager", "alertmanager"]
        .iter()
        .find_map(|name| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(name))
                    .find(|p| p.is_file())
            })
        });
    if found.is_none() {
        assert!(
            std::env::var("CI").ok().as_deref() != Some("true"),
            "CI=true and no prometheus-alertmanager on PATH (apt-get install prometheus-alertmanager)"
        );
        eprintln!("skipped: no prometheus-alertmanager on PATH");
    }
    found
}

fn spawn(bin: &Path, args: &[String]) -> std::process::Child {
    std::process::Command::new(bin)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("alertmanager starts")
}

/// A real Alertmanager on a free port, its one route sending every
/// alert (grouped per incident, at once) to `receiver`, resolved ones too.
struct Alertmanager {
    child: std::process::Child,
    url: String,
    bin: PathBuf,
    args: Vec<String>,
    _dir: tempfile::TempDir,
}

impl Alertmanager {
    async fn start(bin: &Path, receiver: &str) -> Alertmanager {
        let dir = tempfile::tempdir().expect("dir");
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = dir.path().join("alertmanager.yml");
        std::fs::write(
            &config,
            format!(
                "route:\n  receiver: test\n  group_by: ['lifeline_incident', 'severity']\n  \
                 group_wait: 0s\n  group_interval: 1s\n  repeat_interval: 1h\n\
                 receivers:\n  - name: test\n    webhook_configs:\n      - url: '{receiver}'\n        send_resolved: true\n"
            ),
        )
        .expect("config written");
        let args = vec![
            format!("--config.file={}", config.display()),
            format!("--storage.path={}", dir.path().join("data").display()),
            format!("--web.listen-address=127.0.0.1:{port}"),
            "--cluster.listen-address=".to_string(),
        ];
        let mut am = Alertmanager {
            child: spawn(bin, &args),
            url: format!("http://127.0.0.1:{port}"),
            bin: bin.to_path_buf(),
            args,
            _dir: dir,
        };
        am.ready().await;
        am
    }

    /// Killed outright (what it held in memory, alerts and unsaved
    /// silences, is gone).
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Started again on the same port and storage.
    async fn restart(&mut self) {
        self.child = spawn(&self.bin, &self.args);
        self.ready().await;
    }

    async fn ready(&mut self) {
        let http = reqwest::Client::new();
        for _ in 0..200 {
            if let Ok(r) = http.get(format!("{}/-/ready", self.url)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!("alertmanager not ready within 20 s");
    }

    async fn alerts(&self, filter: &str) -> serde_json::Value {
        alerts(&self.url, filter).await
    }
}

/// The alerts of the Alertmanager at `url` that `filter` matches.
async fn alerts(url: &str, filter: &str) -> serde_json::Value {
    reqwest::Client::new()
        .get(format!("{url}/api/v2/alerts"))
        .query(&[("filter", filter)])
        .send()
        .await
        .expect("alerts read")
        .json()
        .await
        .expect("json")
}

impl Drop for Alertmanager {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The alerts of every notification Alertmanager sent the receiver, with
/// each notification's status.
fn notified(rx: &Receiver) -> Vec<serde_json::Value> {
    rx.got()
        .iter()
        .flat_map(|r| r.json()["alerts"].as_array().cloned().unwrap_or_default())
        .collect()
}

/// Real time, a real Alertmanager: an incident arrives at its receiver
/// with Lifeline's labels and annotations, then resolved after recovery;
/// a silence for `cause="proxy_expired"` made through Alertmanager's API
/// holds back exactly those, and an auth server's incident still arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_reach_a_real_alertmanager_resolve_and_obey_its_silences() {
    let Some(bin) = alertmanager_binary() else {
        return;
    };
    let rx = Receiver::start(Clock::system()).await.expect("receiver");
    let am = Alertmanager::start(&bin, &rx.url("/am")).await;
    let am_url = am.url.clone();
    // Without automatic reconnects an incident lasts until its proxy is
    // back (with them, it can end before its first post, and Alertmanager
    // does not notify an alert that arrives resolved).
    let c = Cluster::six_legacy()
        .ttl(Duration::from_secs(3))
        .signals(|s| s.auto_reconnect = false)
        .config(move |cfg| {
            cfg.notify.cluster = "test-cluster".into();
            cfg.notify.alertmanager.urls = vec![am_url];
            cfg.notify.alertmanager.resend = Duration::from_secs(2);
            cfg.notify.alertmanager.ends_after = Duration::from_secs(30);
            cfg.server.external_url = Some("https://lifeline.example.com".into());
        })
        .start()
        .await;
    c.ready().await;
    c.sim.pause_heartbeats("proxy-1").await;
    c.eventually("a firing proxy-1 notification", || async {
        notified(&rx)
            .iter()
            .any(|a| a["status"] == "firing" && a["labels"]["resource"] == "proxy-1")
    })
    .await;
    let alert = notified(&rx)
        .into_iter()
        .find(|a| a["labels"]["resource"] == "proxy-1")
        .expect("one");
    let l = &alert["labels"];
    assert_eq!(l["alertname"], "LifelineIncident", "{alert}");
    assert_eq!(l["cause"], "proxy_expired");
    assert_eq!(l["cluster"], "test-cluster");
    assert!(
        ["critical", "warning"].contains(&l["severity"].as_str().unwrap_or("")),
        "{alert}"
    );
    let id = l["lifeline_incident"]
        .as_str()
        .expect("the incident's id")
        .to_string();
    let a = &alert["annotations"];
    assert_eq!(a["summary"], format!("Incident {id}: proxy-1 expired"));
    assert!(
        a["description"]
            .as_str()
            .is_some_and(|d| d.contains("agent")),
        "{alert}"
    );
    let page = format!("https://lifeline.example.com/incidents/{id}");
    assert_eq!(alert["generatorURL"], page);
    assert_eq!(a["runbook_url"], page);

    // proxy-1 heartbeats again: its agents recover and the incident ends.
    c.sim
        .resume_heartbeats(lifeline::domain::Kind::Proxy, "proxy-1")
        .await;
    c.eventually("the proxy-1 incident notified resolved", || async {
        notified(&rx).iter().any(|a| {
            a["status"] == "resolved" && a["labels"]["lifeline_incident"].as_str() == Some(&id)
        })
    })
    .await;

    // A silence for every proxy_expired alert, made through Alertmanager.
    let now = Clock::system().now();
    let silence = serde_json::json!({
        "matchers": [{"name": "cause", "value": "proxy_expired", "isRegex": false, "isEqual": true}],
        "startsAt": now.rfc3339(),
        "endsAt": now.saturating_add(Duration::from_secs(3600)).rfc3339(),
        "createdBy": "notify test",
        "comment": "proxy-2 is being drained"
    });
    let r = reqwest::Client::new()
        .post(format!("{}/api/v2/silences", am.url))
        .json(&silence)
        .send()
        .await
        .expect("silence posted");
    assert!(r.status().is_success(), "{}", r.status());
    let before = rx.got().len();
    c.sim.pause_heartbeats("proxy-2").await;
    c.sim
        .set_auth_status("auth-1", tonic_health::ServingStatus::NotServing)
        .await;
    c.eventually("auth-1's incident notified", || async {
        notified(&rx)
            .iter()
            .any(|a| a["labels"]["cause"] == "auth_not_serving")
    })
    .await;
    c.eventually("proxy-2's alert in Alertmanager, silenced", || async {
        let got = am.alerts("resource=\"proxy-2\"").await;
        got.as_array().is_some_and(|v| {
            !v.is_empty() && v.iter().all(|a| a["status"]["state"] == "suppressed")
        })
    })
    .await;
    // Three of the route's group intervals: a notification of it would
    // have been sent by now.
    support::real_sleep(Duration::from_secs(3)).await;
    let after: Vec<Received> = rx.got().split_off(before);
    assert!(
        after.iter().all(|r| !r.json()["alerts"]
            .as_array()
            .is_some_and(|v| v.iter().any(|a| a["labels"]["cause"] == "proxy_expired"))),
        "the silence held back proxy_expired"
    );
    drop(am);
    c.shutdown().await;
}

/// Lifeline's silences in a real Alertmanager: `createdBy = "lifeline"`.
async fn lifeline_silences(am: &Alertmanager) -> Vec<serde_json::Value> {
    let all: serde_json::Value = reqwest::Client::new()
        .get(format!("{}/api/v2/silences", am.url))
        .send()
        .await
        .expect("silences read")
        .json()
        .await
        .expect("json");
    all.as_array()
        .into_iter()
        .flatten()
        .filter(|s| s["createdBy"] == "lifeline")
        .cloned()
        .collect()
}

/// Real time, a real Alertmanager: a maintenance window on proxy-1 is a
/// silence of the labels `[notify.alertmanager.silences]` gives proxies
/// (`createdBy` lifeline, the window in its comment, ending with it); an
/// alert the cluster's own monitoring posts for proxy-1 is silenced while
/// it lasts and not after. A Lifeline restart mid-window neither
/// duplicates nor loses the silence; ending the window early expires it;
/// a glob target is a regex matcher.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_window_silences_the_clusters_own_alerts_in_alertmanager() {
    let Some(bin) = alertmanager_binary() else {
        return;
    };
    let rx = Receiver::start(Clock::system()).await.expect("receiver");
    let mut am = Alertmanager::start(&bin, &rx.url("/am")).await;
    let am_url = am.url.clone();
    let am_api = am.url.clone();
    let mut c = Cluster::six_legacy()
        .config(move |cfg| {
            cfg.notify.alertmanager.urls = vec![am_url];
            cfg.notify.alertmanager.resend = Duration::from_secs(1);
            cfg.notify.alertmanager.ends_after = Duration::from_secs(30);
            cfg.notify.alertmanager.silences.proxy = [
                ("job".to_string(), "teleport-proxy".to_string()),
                ("instance".to_string(), "{name}:3080".to_string()),
            ]
            .into();
        })
        .start()
        .await;
    c.ready().await;
    // The cluster's own monitoring fires about proxy-1.
    let now = Clock::system().now();
    let alert = serde_json::json!([{
        "labels": {"alertname": "TeleportProxyDown", "job": "teleport-proxy", "instance": "proxy-1:3080"},
        "startsAt": now.rfc3339(),
        "endsAt": now.saturating_add(Duration::from_secs(3600)).rfc3339(),
    }]);
    let post_alert = || async {
        let r = reqwest::Client::new()
            .post(format!("{am_api}/api/v2/alerts"))
            .json(&alert)
            .send()
            .await
            .expect("alert posted");
        assert!(r.status().is_success(), "{}", r.status());
    };
    post_alert().await;
    let state = || async {
        alerts(&am_api, "alertname=\"TeleportProxyDown\"").await[0]["status"]["state"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    c.eventually("the alert fires", || async { state().await == "active" })
        .await;

    // Alertmanager is down as the window starts: Lifeline's attempts
    // fail, and once it is back (its alerts gone with it, the cluster's
    // monitoring posts them again) the silences are made.
    am.kill();
    let until = c.clock.now().saturating_add(Duration::from_secs(600));
    let body = serde_json::json!({"targets": ["proxy/proxy-1", "proxy/edge-*"], "until": until.rfc3339(), "reason": "kernel upgrade"});
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    support::real_sleep(Duration::from_millis(2500)).await;
    am.restart().await;
    post_alert().await;
    let id = w["id"].as_i64().expect("an id");
    c.eventually("two silences, one per target", || async {
        lifeline_silences(&am)
            .await
            .iter()
            .filter(|s| s["status"]["state"] == "active")
            .count()
            == 2
    })
    .await;
    let silences = lifeline_silences(&am).await;
    let exact = silences
        .iter()
        .find(|s| {
            s["comment"]
                .as_str()
                .unwrap_or("")
                .contains("(proxy/proxy-1)")
        })
        .expect("proxy-1's silence");
    assert!(
        exact["comment"]
            .as_str()
            .unwrap_or("")
            .starts_with(&format!(
                "lifeline maintenance window {id} (proxy/proxy-1): kernel upgrade"
            )),
        "{exact}"
    );
    let ends = lifeline::Ts::parse_rfc3339(exact["endsAt"].as_str().unwrap_or("")).expect("endsAt");
    assert!(
        ends.since(until).as_secs() < 2 && until.since(ends).as_secs() < 2,
        "{exact}"
    );
    let m = exact["matchers"].as_array().expect("matchers");
    assert!(
        m.iter().any(|m| m["name"] == "instance"
            && m["value"] == "proxy-1:3080"
            && m["isRegex"] == false),
        "{exact}"
    );
    let glob = silences
        .iter()
        .find(|s| {
            s["comment"]
                .as_str()
                .unwrap_or("")
                .contains("(proxy/edge-*)")
        })
        .expect("the glob's silence");
    assert!(
        glob["matchers"]
            .as_array()
            .expect("matchers")
            .iter()
            .any(|m| {
                m["name"] == "instance" && m["value"] == "edge-.*:3080" && m["isRegex"] == true
            }),
        "{glob}"
    );
    c.eventually("the alert is silenced", || async {
        state().await == "suppressed"
    })
    .await;

    // A restart mid-window: the same silences, none added.
    c.restart_lifeline().await;
    c.eventually("the next Lifeline leads", || async { c.ll().hub.leads() })
        .await;
    for _ in 0..3 {
        support::real_sleep(Duration::from_millis(1200)).await;
        let active: Vec<_> = lifeline_silences(&am)
            .await
            .into_iter()
            .filter(|s| s["status"]["state"] == "active")
            .collect();
        assert_eq!(active.len(), 2, "{active:#?}");
    }

    // Ended early: its silences expire, and the alert fires again.
    let (status, e) = c.post(&format!("/api/v1/maintenance/{id}/end"), "").await;
    assert_eq!(status, 200, "{e}");
    c.eventually("the silences expired", || async {
        lifeline_silences(&am)
            .await
            .iter()
            .all(|s| s["status"]["state"] == "expired")
    })
    .await;
    post_alert().await;
    c.eventually("the alert fires again", || async {
        state().await == "active"
    })
    .await;
    c.shutdown().await;
}
