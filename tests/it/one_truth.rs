//! One truth: every surface Lifeline shows (the summary, `/metrics`, the
//! overview's HTML, the agent lists, incidents and the webhook bodies a
//! receiver got) agrees with every other, and with the rules of how
//! agents are counted, at every quiescent point of a chaos run with
//! maintenance windows and a rollout.
//!
//! Each failure names the invariant it broke.

use crate::support;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use lifeline::clock::Clock;
use lifeline::domain::Kind;
use lifeline_sim::receiver::Receiver;
use serde_json::{json, Value};
use support::{Cluster, Running};
use tonic_health::ServingStatus;

/// Records a broken invariant: the checker reports every one it finds,
/// named, then fails.
macro_rules! hold {
    ($v:expr, $ok:expr, $($msg:tt)+) => {
        let held: bool = $ok;
        if !held {
            $v.push(format!($($msg)+));
        }
    };
}

/// Agents in the run: a few thousand, each with a signal stream.
const AGENTS: usize = 2000;
const STANDINGS: [&str; 4] = ["healthy", "degraded", "stranded", "planned"];

/// What every surface said at one read-model generation.
#[derive(Debug)]
struct Surfaces {
    generation: u64,
    summary: Value,
    metrics: prometheus_parse::Scrape,
    overview: String,
    /// `GET /api/v1/clusters`: the one cluster's row.
    clusters: Value,
    /// Per standing: the agents the list holds, and of those how many
    /// it marks as waiting for a live proxy.
    listed: BTreeMap<&'static str, Option<(usize, usize, usize)>>,
}

fn metric(m: &prometheus_parse::Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    m.samples
        .iter()
        .find(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .and_then(|s| match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
}

/// The number the overview shows right after `marker` (up to the next
/// `<`), if it shows one.
fn shown(html: &str, marker: &str) -> Option<u64> {
    let at = html.find(marker)? + marker.len();
    html[at..].split('<').next()?.trim().parse().ok()
}

/// A figure, or (absent, not a count) one no count can equal that sums
/// without overflow.
fn count(v: &Value) -> u64 {
    v.as_u64().unwrap_or(u64::from(u32::MAX))
}

/// Every agent of `standing`, paged through the API: how many, how many
/// it marks waiting, and how many say another standing (`None` when the
/// list cannot filter by it).
async fn listed(c: &Running, standing: &str) -> Option<(usize, usize, usize)> {
    let (mut n, mut waiting, mut other) = (0, 0, 0);
    let mut cursor = String::new();
    loop {
        let (status, page) = c
            .get(&format!(
                "/api/v1/agents?state={standing}&limit=500{cursor}"
            ))
            .await;
        if status != 200 {
            return None;
        }
        for a in page["items"].as_array().into_iter().flatten() {
            n += 1;
            other += usize::from(a["standing"] != standing);
            waiting += usize::from(a["waiting_for_live_proxy"] == true);
        }
        match page["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => return Some((n, waiting, other)),
        }
    }
}

/// Reads every surface, again until they were all rendered from one
/// read-model generation (a quiescent fleet publishes no new one); after
/// twenty tries, the last read, with that said.
async fn read(v: &mut Vec<String>, step: &str, c: &Running) -> Surfaces {
    let mut tries = 0;
    loop {
        tries += 1;
        let summary = c.summary().await;
        let generation = count(&summary["generation"]);
        let (_, text) = c.get_text("/metrics").await;
        let metrics = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("metrics parse");
        let (_, overview) = c.get_text("/").await;
        let clusters = c.ok("/api/v1/clusters").await;
        let mut lists = BTreeMap::new();
        for s in STANDINGS {
            lists.insert(s, listed(c, s).await);
        }
        let again = count(&c.summary().await["generation"]);
        let same = metric(&metrics, "lifeline_read_model_generation", &[])
            == Some(generation as f64)
            && overview.contains(&format!("data-generation=\"{generation}\""))
            && again == generation;
        if same || tries == 20 {
            hold!(
                v,
                same,
                "[{step}] the surfaces say which read model they show, and it is one"
            );
            return Surfaces {
                generation,
                summary,
                metrics,
                overview,
                clusters,
                listed: lists,
            };
        }
        c.advance(Duration::from_millis(250)).await;
    }
}

/// The invariants of one read, each failure named.
fn check(v: &mut Vec<String>, step: &str, s: &Surfaces) {
    let sum = &s.summary;
    let a = &sum["agents"];
    let by: BTreeMap<&str, u64> = STANDINGS.iter().map(|k| (*k, count(&a[*k]))).collect();
    let total = count(&a["total"]);
    let waiting = count(&a["waiting_for_live_proxy"]);
    let why = |rule: &str| format!("[{step}, generation {}] {rule}: {sum}", s.generation);

    // 0. The clusters list shows the summary's figures, not its own.
    let row = &s.clusters["items"][0];
    hold!(
        v,
        (&row["agents"], &row["proxies"], &row["auth_servers"])
            == (&sum["agents"], &sum["proxies"], &sum["auth_servers"]),
        "{}",
        why(&format!(
            "the clusters row counts what the summary counts: {row}"
        ))
    );

    // 1. The standings partition the fleet.
    hold!(
        v,
        (by.values().sum::<u64>()) == (total),
        "{}",
        why("standings partition the fleet")
    );
    hold!(
        v,
        (total) == (AGENTS as u64),
        "{}",
        why("every agent is counted")
    );

    // 2. Every agent not healthy is under exactly one root cause.
    let causes = sum["root_causes"].as_array().cloned().unwrap_or_default();
    let mut under: BTreeMap<&str, u64> = BTreeMap::new();
    for rc in &causes {
        let (n, d, st) = (
            count(&rc["agents"]),
            count(&rc["degraded"]),
            count(&rc["stranded"]),
        );
        if rc["planned"].is_object() {
            hold!(
                v,
                (d, st) == (0, 0),
                "{}",
                why("a planned cause's agents are all planned")
            );
            *under.entry("planned").or_default() += n;
        } else {
            hold!(
                v,
                (n) == (d + st),
                "{}",
                why("a cause's agents are its degraded and stranded")
            );
            *under.entry("degraded").or_default() += d;
            *under.entry("stranded").or_default() += st;
        }
    }
    for k in ["degraded", "stranded", "planned"] {
        hold!(
            v,
            (under.get(k).copied().unwrap_or(0)) == (by[k]),
            "{}",
            why(&format!("every {k} agent is under exactly one root cause"))
        );
    }

    // 3. Waiting for a live proxy: only degraded or stranded agents.
    hold!(
        v,
        waiting <= by["degraded"] + by["stranded"],
        "{}",
        why("waiting agents are degraded or stranded, never planned")
    );

    // 4. /metrics says the same.
    for k in STANDINGS {
        hold!(
            v,
            (metric(&s.metrics, "lifeline_agents", &[("state", k)])) == (Some(by[k] as f64)),
            "{}",
            why(&format!("lifeline_agents{{state={k}}} is the summary's"))
        );
    }
    hold!(
        v,
        (metric(&s.metrics, "lifeline_agents_waiting_for_live_proxy", &[]))
            == (Some(waiting as f64)),
        "{}",
        why("the waiting gauge is the summary's")
    );
    let per_cause: f64 = s
        .metrics
        .samples
        .iter()
        .filter(|x| x.metric == "lifeline_root_cause_agents")
        .filter_map(|x| match x.value {
            prometheus_parse::Value::Gauge(v) | prometheus_parse::Value::Untyped(v) => Some(v),
            _ => None,
        })
        .sum();
    hold!(
        v,
        (per_cause) == (by["stranded"] as f64),
        "{}",
        why("stranded per root cause adds up")
    );

    // 5. The overview says the same.
    let o = &s.overview;
    for (k, icon) in [
        ("healthy", "✓ "),
        ("degraded", "◐ "),
        ("stranded", "✕ "),
        ("planned", "▢ "),
    ] {
        hold!(
            v,
            (shown(o, &format!("<span class=\"n\">{icon}"))) == (Some(by[k])),
            "{}",
            why(&format!("the overview's {k} count is the summary's"))
        );
    }
    hold!(
        v,
        (shown(o, "<span class=\"n\">◌ ").unwrap_or(0)) == (waiting),
        "{}",
        why("the overview's waiting count is the summary's")
    );
    let proxies = format!(
        "<span class=\"n\">{}/{}</span> proxies live",
        count(&sum["proxies"]["live"]),
        count(&sum["proxies"]["total"])
    );
    hold!(
        v,
        o.contains(&proxies),
        "{}",
        why("the overview's proxies are the summary's")
    );
    if causes.is_empty() {
        hold!(
            v,
            (by["healthy"]) == (total),
            "{}",
            why("no root cause only when all are healthy")
        );
        hold!(
            v,
            o.contains("Every agent is healthy"),
            "{}",
            why("the overview says all healthy")
        );
    } else {
        hold!(
            v,
            !o.contains("Every agent is healthy"),
            "{}",
            why("the overview shows the causes")
        );
    }

    // 6. The agent lists hold exactly the counted agents.
    let mut marked = 0;
    for k in STANDINGS {
        let Some((n, w, other)) = s.listed[k] else {
            hold!(
                v,
                false,
                "{}",
                why(&format!("the agent list can list the {k}"))
            );
            continue;
        };
        marked += w;
        hold!(
            v,
            n as u64 == by[k],
            "{}",
            why(&format!("the {k} list holds the {k} count"))
        );
        hold!(
            v,
            other == 0,
            "{}",
            why(&format!("each agent the {k} list holds is {k}"))
        );
    }
    hold!(
        v,
        marked as u64 == waiting,
        "{}",
        why("the lists mark the waiting agents")
    );
}

/// Every agent-minute and peak of an incident, from its own episodes.
/// Returns how many incidents each check covered: all, their timelines,
/// their notifications.
async fn check_incidents(v: &mut Vec<String>, c: &Running, got: &[Value]) -> (usize, usize, usize) {
    c.flush().await;
    let list = c.ok("/api/v1/incidents?limit=500").await;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    // The last body each incident was told with.
    let mut told: BTreeMap<i64, Value> = BTreeMap::new();
    for b in got {
        if let Some(i) = b["data"]["incident"].as_object() {
            told.insert(i["id"].as_i64().unwrap_or(0), Value::Object(i.clone()));
        }
    }
    let (mut timelines, mut notified) = (0, 0);
    for i in &items {
        let id = i["id"].as_i64().expect("an id");
        let why = |rule: &str| format!("incident {id}: {rule}: {i}");
        let (ps, pd, pp) = (
            count(&i["peak_stranded"]),
            count(&i["peak_degraded"]),
            count(&i["peak_planned"]),
        );
        let minutes = i["agent_minutes_stranded"].as_f64().unwrap_or(-1.0);
        if i["planned"].is_object() {
            hold!(
                v,
                (ps, pd) == (0, 0),
                "{}",
                why("a planned incident's agents are in no stranded or degraded peak")
            );
            hold!(
                v,
                (minutes) == (0.0),
                "{}",
                why("planned agents are in no agent-minutes stranded")
            );
            hold!(
                v,
                pp > 0,
                "{}",
                why("a planned incident has a planned peak")
            );
        } else {
            hold!(
                v,
                (pp) == (0),
                "{}",
                why("an unplanned incident has no planned peak")
            );
        }
        let one = c.ok(&format!("/api/v1/incidents/{id}")).await;
        check_signals(v, c, id, i, &one).await;
        check_rendered(v, c, id, i).await;
        let moved: u64 = one["moved_out"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| count(&m["agents"]))
            .sum();
        let mut episodes = Vec::new();
        let mut cursor = String::new();
        loop {
            let page = c
                .ok(&format!("/api/v1/episodes?incident={id}&limit=500{cursor}"))
                .await;
            episodes.extend(page["items"].as_array().cloned().unwrap_or_default());
            match page["next_cursor"].as_str() {
                Some(n) => cursor = format!("&cursor={n}"),
                None => break,
            }
        }
        let agents: BTreeSet<&str> = episodes
            .iter()
            .filter_map(|e| e["agent"].as_str())
            .collect();
        // An agent that moved out and came back is in both: each is
        // counted once.
        let held = count(&i["agents"]);
        hold!(
            v,
            agents.len() as u64 <= held && held <= agents.len() as u64 + moved,
            "{} ({} in its episodes, {moved} moved out)",
            why("its agents are its episodes' agents plus those it says moved"),
            agents.len()
        );
        if i["open"] == false && moved == 0 && !i["planned"].is_object() {
            // The timeline, from its episodes: the most stranded (and
            // degraded) at once, and the stranded time.
            let started = support::ts(&i["started"]);
            let ended = support::ts(&i["ended"]);
            let mut edges: Vec<(i64, i32, bool)> = Vec::new();
            let (mut stranded_us, mut degraded_us) = (0i64, 0i64);
            for e in &episodes {
                let from = support::ts(&e["started_at"]).max(started);
                let to = e["ended_at"]
                    .as_str()
                    .map_or(ended, |_| support::ts(&e["ended_at"]));
                let is_stranded = e["state"] == "stranded";
                if to <= from {
                    continue; // ended as the incident began: none of its time
                }
                edges.push((from.as_micros(), 1, is_stranded));
                edges.push((to.as_micros(), -1, is_stranded));
                if is_stranded {
                    stranded_us += to.as_micros() - from.as_micros();
                } else {
                    degraded_us += to.as_micros() - from.as_micros();
                }
            }
            edges.sort_by_key(|(t, d, _)| (*t, *d));
            let (mut now, mut most) = ([0i64; 2], [0i64; 2]);
            for (_, d, s) in edges {
                let k = usize::from(!s);
                now[k] += i64::from(d);
                most[k] = most[k].max(now[k]);
            }
            hold!(
                v,
                (most[0] as u64, most[1] as u64) == (ps, pd),
                "{}",
                why("its stranded and degraded peaks are the most of its timeline")
            );
            timelines += 1;
            let integral = stranded_us as f64 / 60e6;
            hold!(
                v,
                (integral - minutes).abs() <= 1.0,
                "{} (timeline {integral:.3})",
                why("its agent-minutes are its timeline's integral, to within one sample")
            );
            let degraded = degraded_us as f64 / 60e6;
            let said = i["agent_minutes_degraded"].as_f64().unwrap_or(-1.0);
            hold!(
                v,
                (degraded - said).abs() <= 1.0,
                "{} (timeline {degraded:.3})",
                why("its degraded agent-minutes are its timeline's integral, to within one sample")
            );
        }
        if i["open"] == false {
            if let Some(body) = told.get(&id) {
                notified += 1;
                for k in [
                    "agents",
                    "peak_stranded",
                    "peak_degraded",
                    "peak_planned",
                    "signals_sent",
                    "agent_minutes_stranded",
                    "agent_minutes_degraded",
                    "agent_minutes_planned",
                ] {
                    hold!(
                        v,
                        (body[k]) == (i[k]),
                        "{}",
                        why(&format!("its last notification carries the same {k}"))
                    );
                }
            }
        }
    }
    let signals: u64 = items.iter().map(|i| count(&i["signals_sent"])).sum();
    eprintln!("one truth: the incidents count {signals} signals in all");
    (items.len(), timelines, notified)
}

/// An incident's signal figure is its signal rows: paged through its API,
/// and summed by kind and outcome.
async fn check_signals(v: &mut Vec<String>, c: &Running, id: i64, i: &Value, one: &Value) {
    let sent = count(&i["signals_sent"]);
    let by_kind: u64 = one["signal_counts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|k| count(&k["count"]))
        .sum();
    let mut rows = 0u64;
    let mut page = one["signals"].clone();
    loop {
        rows += page["items"].as_array().map_or(0, |a| a.len() as u64);
        match page["next_cursor"].as_str() {
            Some(n) => {
                page = c
                    .ok(&format!("/api/v1/incidents/{id}?signals_cursor={n}"))
                    .await["signals"]
                    .clone()
            }
            None => break,
        }
    }
    hold!(
        v,
        (rows, by_kind) == (sent, sent),
        "incident {id}: its signals count is the number of its signal rows \
         ({sent} sent, {rows} rows, {by_kind} by kind and outcome)"
    );
}

/// The incident's page and its postmortem draft say the incident's own
/// figures, in the words every surface uses.
async fn check_rendered(v: &mut Vec<String>, c: &Running, id: i64, i: &Value) {
    let words = |parts: &[(&str, String)]| -> String {
        let said: Vec<String> = parts
            .iter()
            .filter(|(_, n)| n != "0")
            .map(|(w, n)| format!("{n} {w}"))
            .collect();
        if said.is_empty() {
            "0 agents".into()
        } else {
            said.join(", ")
        }
    };
    let peak = words(&[
        ("stranded", count(&i["peak_stranded"]).to_string()),
        ("degraded", count(&i["peak_degraded"]).to_string()),
        ("planned", count(&i["peak_planned"]).to_string()),
    ]);
    let m = |k: &str| format!("{:.1}", i[k].as_f64().unwrap_or(-1.0));
    let minutes = if i["planned"].is_object() {
        format!("{} planned", m("agent_minutes_planned"))
    } else {
        format!(
            "{} stranded, {} degraded",
            m("agent_minutes_stranded"),
            m("agent_minutes_degraded")
        )
    };
    let (_, page) = c.get_text(&format!("/incidents/{id}")).await;
    let figure = |name: &str| -> Option<String> {
        let marker = format!("data-figure=\"{name}\">");
        let at = page.find(&marker)? + marker.len();
        Some(page[at..].split('<').next()?.trim().to_string())
    };
    for (name, want) in [
        ("peak", peak.clone()),
        ("minutes", minutes.clone()),
        ("agents", count(&i["agents"]).to_string()),
        ("signals", count(&i["signals_sent"]).to_string()),
    ] {
        let got = figure(name);
        hold!(
            v,
            got.as_deref() == Some(want.as_str()),
            "incident {id}: its page shows its {name} as {want:?}, not {got:?}"
        );
    }
    let (_, draft) = c.get_text(&format!("/api/v1/incidents/{id}/report")).await;
    for line in [
        format!("- **Agents affected:** {}", count(&i["agents"])),
        format!("- **Peak at once:** {peak}"),
        format!("- **Agent-minutes:** {minutes}"),
    ] {
        hold!(
            v,
            draft.lines().any(|l| l.starts_with(&line)),
            "incident {id}: its postmortem draft says {line:?}"
        );
    }
    let drafted: u64 = draft
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| signal"))
        .filter_map(|l| {
            l.trim_end_matches(" |")
                .rsplit("| ")
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum();
    hold!(
        v,
        drafted == count(&i["signals_sent"]),
        "incident {id}: its postmortem draft's signals ({drafted}) are its signals_sent"
    );
}

/// Maintenance window over `targets` for `secs`, as an operator declares it.
async fn window(c: &Running, targets: &[&str], secs: u64) -> i64 {
    let until = c.clock.now().saturating_add(Duration::from_secs(secs));
    let body = json!({"targets": targets, "until": until.rfc3339(), "reason": "checker"});
    let (status, w) = c.post("/api/v1/maintenance", &body.to_string()).await;
    assert_eq!(status, 201, "{w}");
    w["id"].as_i64().expect("an id")
}

/// A few thousand agents through ten chaos steps, maintenance windows
/// starting and ending, and a rollout: at each quiescent point every
/// surface agrees; at the end every incident agrees with its episodes and
/// its notification.
#[tokio::test(start_paused = true)]
async fn every_surface_tells_one_truth_under_chaos() {
    let rx = Receiver::start(Clock::manual()).await.expect("receiver");
    let dir = tempfile::tempdir().expect("dir");
    let secret = dir.path().join("secret");
    std::fs::write(&secret, "whsec_checker\n").expect("secret");
    let hook = support::webhook("oncall", rx.url("/hook"), &secret);
    let c = Cluster::new()
        .agents(AGENTS)
        .proxies(4)
        .auth_servers(2)
        .ttl(Duration::from_secs(10))
        .agent_ttl(Duration::from_secs(3600))
        .sim_agents(0.2)
        .config(move |cfg| cfg.notify.webhooks = vec![hook])
        .start()
        .await;
    c.ready().await;
    // A healthy start: nothing is wrong, so nothing counts as wrong.
    let mut broken = Vec::new();
    let s = read(&mut broken, "start", &c).await;
    check(&mut broken, "start", &s);
    for m in &s.metrics.samples {
        let wrong = ["_rejected", "_refused", "_failed"]
            .iter()
            .any(|w| m.metric.contains(w));
        if wrong {
            if let prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) =
                m.value
            {
                hold!(
                    broken,
                    v == 0.0,
                    "[start] a healthy start counts nothing wrong: {} {:?} = {v}",
                    m.metric,
                    m.labels
                );
            }
        }
    }
    let mut wrong = Vec::new();
    support::wrong_figures("ingest", &s.summary["ingest"], &mut wrong);
    for w in wrong {
        hold!(
            broken,
            false,
            "[start] a healthy start counts nothing wrong: {w}"
        );
    }

    let p = |i: usize| lifeline_sim::proxy_name(i);
    let auth = |i: usize| lifeline_sim::auth_name(i);
    let mut windows = Vec::new();
    let steps: Vec<&str> = vec![
        "a proxy stops",
        "a window on a second proxy starts",
        "the second proxy stops, inside its window",
        "an auth server turns NOT_SERVING",
        "the auth server heals",
        "the first window is ended early",
        "a window on some agents starts",
        "the proxies heal",
        "a rollout replaces two proxies",
        "the other auth server turns NOT_SERVING and heals",
        "the agents' window ends",
    ];
    for (n, step) in steps.iter().enumerate() {
        match n {
            0 => c.sim.pause_heartbeats(&p(0)).await,
            1 => windows.push(window(&c, &[&format!("proxy/{}", p(1))], 600).await),
            2 => c.sim.pause_heartbeats(&p(1)).await,
            3 => {
                c.sim
                    .set_auth_status(&auth(0), ServingStatus::NotServing)
                    .await
            }
            4 => {
                c.sim
                    .set_auth_status(&auth(0), ServingStatus::Serving)
                    .await
            }
            5 => {
                let (status, v) = c
                    .post(&format!("/api/v1/maintenance/{}/end", windows[0]), "")
                    .await;
                assert_eq!(status, 200, "{v}");
            }
            6 => windows.push(window(&c, &["agent/agent-0001?"], 40).await),
            7 => {
                for i in 0..2 {
                    c.sim.resume_heartbeats(Kind::Proxy, &p(i)).await;
                }
            }
            8 => {
                c.sim.rolling_upgrade(&[p(2).as_str(), p(3).as_str()]).await;
            }
            9 => {
                c.sim
                    .set_auth_status(&auth(1), ServingStatus::NotServing)
                    .await;
                c.advance(Duration::from_secs(5)).await;
                c.sim
                    .set_auth_status(&auth(1), ServingStatus::Serving)
                    .await;
            }
            _ => c.advance(Duration::from_secs(40)).await,
        }
        c.advance(Duration::from_secs(15)).await;
        let s = read(&mut broken, step, &c).await;
        check(&mut broken, step, &s);
    }
    // Everything heals; every incident ends and is told.
    c.advance_until("every agent healthy", Duration::from_secs(300), || async {
        c.summary().await["agents"]["healthy"] == AGENTS
    })
    .await;
    c.advance(Duration::from_secs(60)).await;
    let s = read(&mut broken, "healed", &c).await;
    check(&mut broken, "healed", &s);
    let got: Vec<Value> = rx.got().iter().map(|r| r.json()).collect();
    let (n, timelines, notified) = check_incidents(&mut broken, &c, &got).await;
    eprintln!("one truth: {n} incidents checked, {timelines} against their timelines, {notified} against their notifications");
    assert!(
        broken.is_empty(),
        "{} invariants broken:\n{}",
        broken.len(),
        broken.join("\n")
    );
    assert!(
        n >= 4 && timelines >= 1 && notified >= 1,
        "the run made incidents to check: {n}, {timelines}, {notified}"
    );
    c.shutdown().await;
}
