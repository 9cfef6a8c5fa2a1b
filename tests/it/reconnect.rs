//! Getting stranded agents out: manual and automatic reconnects with real
//! simulated agents on real gRPC streams, the audit, and the storm guard.

use crate::support;
use std::time::Duration;

use lifeline_sim::AgentEvent;
use serde_json::Value;
use support::{cli, Cluster, Running, STRANDED as AGENT};

async fn signal(c: &Running, id: i64) -> Value {
    c.ok(&format!("/api/v1/signals/{id}")).await
}

async fn wait_outcome(c: &Running, id: i64, outcome: &str) -> Value {
    c.eventually(&format!("signal {id} {outcome}"), || async {
        signal(c, id).await["outcome"] == outcome
    })
    .await;
    signal(c, id).await
}

fn position(events: &[AgentEvent], e: &AgentEvent) -> usize {
    events
        .iter()
        .position(|x| x == e)
        .unwrap_or_else(|| panic!("{e:?} not in {events:?}"))
}

on_both_engines! {
/// Guards the manual path end to end: a legacy agent stranded by proxy
/// expiry is told to reconnect, opens a new tunnel before closing the old,
/// acks; the audit row says so and the episode is closed by that signal.
#[tokio::test(start_paused = true)]
async fn manual_reconnect_recovers_a_stranded_legacy_agent(store) {
    let c = Cluster::two_stranded_by_hand_on(store).await;
    assert!(c.agents_in("stranded").await.contains(&AGENT.to_string()));

    let (status, body) = c
        .post(
            &format!("/api/v1/agents/{AGENT}/reconnect"),
            r#"{"proxy":"proxy-1","reason":"incident 42"}"#,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("signal id");
    assert_eq!(body["agent"], AGENT);
    assert_eq!(body["proxy"], "proxy-1");
    assert_eq!(body["reason"], "incident 42");
    assert_eq!(body["requested_by"], "api:admin", "channel and token name");
    assert_eq!(body["kind"], "reconnect");
    // Committed before the answer: readable at once.
    assert_eq!(signal(&c, id).await["id"], id);

    let row = wait_outcome(&c, id, "acked").await;
    assert!(
        row["delivered"].is_string() && row["acked"].is_string(),
        "{row}"
    );
    assert!(row["latency_ms"].as_f64().is_some(), "{row}");

    let ev = c.agent(AGENT).events();
    let opened = ev
        .iter()
        .position(|e| matches!(e, AgentEvent::Opened(p) if p == "proxy-3" || p == "proxy-4"))
        .expect("opened a tunnel to a live proxy");
    let closed = position(&ev, &AgentEvent::Closed("proxy-1".into()));
    assert!(opened < closed, "opened before closing: {ev:?}");
    assert!(ev.contains(&AgentEvent::Acked {
        id: id as u64,
        ok: true
    }));

    c.advance_until(
        "agent no longer stranded",
        Duration::from_secs(5),
        || async { c.state(AGENT).await != "stranded" },
    )
    .await;
    c.flush().await;
    let eps = c
        .ok(&format!("/api/v1/episodes?agent={AGENT}&state=stranded"))
        .await;
    let ep = &eps["items"][0];
    assert!(ep["ended_at"].is_string(), "{eps}");
    assert_eq!(
        ep["ended_by_signal"], id,
        "episode ended by the signal: {eps}"
    );
    // Auto reconnect is off: this was the only signal.
    assert_eq!(
        c.ok("/api/v1/signals").await["items"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    c.shutdown().await;
}
}

on_both_engines! {
/// Guards automatic recovery: with nobody acting, the stranded agent gets
/// a Reconnect, moves, and then (still degraded, one tunnel on a dead
/// proxy) gets another until it is healthy.
#[tokio::test(start_paused = true)]
async fn automatic_reconnect_recovers_without_a_person(store) {
    let c = Cluster::six_legacy().store(store).start().await;
    c.ready().await;
    c.strand_two().await;
    c.advance_until("agent healthy again", Duration::from_secs(40), || async {
        c.state(AGENT).await == "healthy"
    })
    .await;
    // The agent's ack crosses a real socket after it has moved.
    c.eventually("an automatic signal acked", || async {
        c.flush().await;
        let sigs = c
            .ok(&format!("/api/v1/signals?agent={AGENT}&requested_by=auto"))
            .await;
        let items = sigs["items"].as_array().expect("items");
        assert!(!items.is_empty(), "automatic signals recorded");
        items.iter().any(|s| s["outcome"] == "acked")
    })
    .await;
    let eps = c
        .ok(&format!("/api/v1/episodes?agent={AGENT}&state=stranded"))
        .await;
    assert!(eps["items"][0]["ended_by_signal"].is_i64(), "{eps}");
    // Every agent gets off the dead proxies (the others on their own
    // backoff schedules), and all end healthy.
    let dead = ["proxy-1".to_string(), "proxy-2".to_string()];
    let off = || {
        c.agents
            .iter()
            .all(|a| a.tunnels().iter().all(|t| !dead.contains(t)))
    };
    for _ in 0..240 {
        if off() {
            break;
        }
        c.advance(Duration::from_millis(250)).await;
    }
    if !off() {
        for a in &c.agents {
            eprintln!("{} {:?} {:?}", a.name, a.tunnels(), a.events());
        }
        eprintln!("{}", c.ok("/api/v1/signals?limit=50").await);
        eprintln!("{}", c.summary().await["signals"]);
        panic!("agents left on dead proxies");
    }
    c.advance_until("every agent healthy", Duration::from_secs(5), || async {
        c.agents_in("healthy").await.len() == 6
    })
    .await;
    c.shutdown().await;
}
}

/// Automatic signals per agent, and how many of them failed.
async fn auto_signals(c: &Running) -> std::collections::BTreeMap<String, (usize, usize)> {
    let mut per = std::collections::BTreeMap::new();
    let sigs = c.ok("/api/v1/signals?requested_by=auto&limit=1000").await;
    for s in sigs["items"].as_array().expect("items") {
        let e = per
            .entry(s["agent"].as_str().unwrap_or_default().to_string())
            .or_insert((0, 0));
        e.0 += 1;
        if s["outcome"] == "failed" {
            e.1 += 1;
        }
    }
    per
}

/// Guards "automatic reconnects only where they can help": with two of three
/// proxies expired, an agent already on the one live proxy has nowhere to
/// go. It is not signalled again and again; it is *waiting for a live
/// proxy* (agent item, summary, /metrics), and the moment a proxy turns live
/// (a heartbeat, no timer) it is signalled and recovers.
#[tokio::test(start_paused = true)]
async fn agents_with_nowhere_to_go_wait_for_a_live_proxy() {
    // Legacy agents on 3 proxies: agent i on proxies i%3 and (i+1)%3.
    let c = Cluster::new()
        .agents(6)
        .proxies(3)
        .ttl(Duration::from_secs(10))
        .agent_ttl(Duration::from_secs(3600))
        .sim_agents(1.0)
        .start()
        .await;
    c.ready().await;
    c.stop_proxies(&["proxy-1", "proxy-2"]).await;
    // A minute of backoff steps: the stranded ones move to proxy-3, and
    // then everyone is on proxy-3 plus a dead one, with nowhere to go.
    c.advance_until("every agent waiting", Duration::from_secs(60), || async {
        let s = c.summary().await;
        // The fleet's view, and the automatic loop's once its pending
        // backoff timers have found nowhere to go.
        s["agents"]["waiting_for_live_proxy"] == 6
            && s["signals"]["storm_guard"]["agents_waiting_for_live_proxy"] == 6
    })
    .await;
    c.flush().await;
    let before = auto_signals(&c).await;
    for (agent, (_, failed)) in &before {
        assert!(*failed <= 1, "{agent}: {failed} failed automatic signals");
    }
    let item = c.ok("/api/v1/agents/agent-00002").await;
    assert_eq!(item["state"], "degraded", "{item}");
    assert_eq!(item["waiting_for_live_proxy"], true, "{item}");
    let page = c.ok("/api/v1/agents?state=degraded").await;
    assert!(
        page["items"]
            .as_array()
            .expect("items")
            .iter()
            .all(|a| a["waiting_for_live_proxy"] == true),
        "{page}"
    );
    let s = c.summary().await;
    assert_eq!(
        s["signals"]["storm_guard"]["agents_waiting_for_live_proxy"], 6,
        "{s}"
    );
    assert_eq!(s["signals"]["storm_guard"]["agents_retrying"], 0, "{s}");
    let (_, metrics) = c.get_text("/metrics").await;
    assert!(
        metrics.contains("lifeline_agents_waiting_for_live_proxy{cluster=\"default\"} 6"),
        "{metrics}"
    );

    // The dashboard says so: the overview's count, each row, the agent page.
    let (_, overview) = c.get_text("/").await;
    assert!(overview.contains(r#"id="waiting-count""#), "overview count");
    // With a proxy live, its card says why they wait all the same.
    let proxies = &overview[overview
        .find(r#"id="proxies-count""#)
        .expect("proxies card")..];
    let proxies = &proxies[..proxies.find("</a>").expect("its end")];
    assert!(
        proxies.contains("6 waiting agents are already on it"),
        "{proxies}"
    );
    let (_, rows) = c.get_text("/agents?state=degraded").await;
    assert_eq!(rows.matches("◌ waiting for a live proxy").count(), 6);
    let (_, page) = c.get_text("/agents/agent-00002").await;
    assert!(page.contains(r#"id="waiting""#), "agent page");

    // Another two minutes: no timer sends anything to a waiting agent.
    c.advance(Duration::from_secs(120)).await;
    c.flush().await;
    assert_eq!(auto_signals(&c).await, before, "no signal while waiting");

    // proxy-1 heartbeats again: the agents not on it are signalled at once
    // (no virtual time passes), move, and everyone ends healthy.
    c.sim
        .resume_heartbeats(lifeline::domain::Kind::Proxy, "proxy-1")
        .await;
    c.eventually("waiting agents signalled on the heartbeat", || async {
        c.flush().await;
        let now = auto_signals(&c).await;
        now.values().map(|v| v.0).sum::<usize>() > before.values().map(|v| v.0).sum::<usize>()
    })
    .await;
    c.advance_until(
        "agents on proxy-2 moved",
        Duration::from_secs(10),
        || async { c.summary().await["agents"]["waiting_for_live_proxy"] == 0 },
    )
    .await;
    c.flush().await;
    for (agent, (_, failed)) in auto_signals(&c).await {
        assert!(failed <= 1, "{agent}: {failed} failed automatic signals");
    }
    c.shutdown().await;
}

/// Guards "no false alarms from Lifeline's own blindness": with the watch
/// stream gone, proxies that stop heartbeating strand nobody and no
/// automatic signal is sent; the summary says why.
#[tokio::test(start_paused = true)]
async fn a_killed_upstream_stream_sends_no_automatic_signal() {
    let c = Cluster::six_legacy().start().await;
    c.ready().await;
    c.sim.set_accepting(false);
    c.sim.kill_streams();
    real_wait_not_ready(&c).await;
    c.strand_two().await;
    c.advance(Duration::from_secs(30)).await;
    let sigs = c.ok("/api/v1/signals").await;
    assert_eq!(sigs["items"].as_array().map(Vec::len), Some(0), "{sigs}");
    let g = &c.summary().await["signals"]["storm_guard"];
    assert_eq!(g["paused"], true, "{g}");
    assert!(
        g["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("not current"),
        "{g}"
    );
    c.shutdown().await;
}

async fn real_wait_not_ready(c: &Running) {
    support::real_timeout(support::REAL_WAIT, c.ll().fleet.wait_not_ready())
        .await
        .expect("stream loss noticed")
        .expect("fleet alive");
}

/// Guards the storm guard: every agent stranded at once (both proxies
/// expire at the same instant) pauses automatic reconnects, the summary
/// says so; a manual reconnect still goes out.
#[tokio::test(start_paused = true)]
async fn more_than_the_storm_share_stranded_pauses_automatic_signals() {
    let c = Cluster::storm().start().await;
    c.ready().await;
    c.strand_everyone().await;
    assert_eq!(c.agents_in("stranded").await.len(), 6);
    let g = c.summary().await["signals"]["storm_guard"].clone();
    assert_eq!(g["paused"], true, "{g}");
    assert!(
        g["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("storm guard"),
        "{g}"
    );
    assert_eq!(g["stranded_in_window"], 6, "{g}");
    let auto = c.ok("/api/v1/signals?requested_by=auto").await;
    assert_eq!(auto["items"].as_array().map(Vec::len), Some(0), "{auto}");

    let (status, body) = c
        .post(&format!("/api/v1/agents/{AGENT}/reconnect"), "")
        .await;
    assert_eq!(status, 202, "{body}");
    // No live proxy to move to: the agent says so.
    let row = wait_outcome(&c, body["id"].as_i64().unwrap_or_default(), "failed").await;
    assert!(
        row["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("no live proxy"),
        "{row}"
    );
    c.shutdown().await;
}

/// Guards the selector endpoint and its refusals.
#[tokio::test(start_paused = true)]
async fn reconnect_selectors_and_refusals() {
    let c = Cluster::two_stranded_by_hand().await;

    // Before anything moves: proxy-4 carries agent-00003 (proxy-3, proxy-4)
    // and agent-00004 (proxy-4, proxy-1).
    let (status, body) = c.post("/api/v1/reconnects", r#"{"proxy":"proxy-4"}"#).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["matched"], 2, "{body}");
    let mut agents = support::strs(&body["signals"], "agent");
    agents.sort();
    assert_eq!(agents, ["agent-00003", "agent-00004"]);
    assert!(support::strs(&body["signals"], "proxy")
        .iter()
        .all(|p| p == "proxy-4"));

    // Moving those two strands nobody: still the two on proxy-1 + proxy-2.
    let (status, body) = c
        .post("/api/v1/reconnects", r#"{"state":"stranded"}"#)
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["matched"], 2, "{body}");
    let mut agents = support::strs(&body["signals"], "agent");
    agents.sort();
    assert_eq!(agents, ["agent-00001", "agent-00005"]);

    let (status, body) = c
        .post("/api/v1/reconnects", r#"{"auth_server":"auth-1"}"#)
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["matched"], 3, "{body}");
    // Agents signalled moments ago are skipped by the per-agent limit, the
    // rest signalled: a selector never fails as a whole for it.
    let asked = ["agent-00001", "agent-00003", "agent-00004", "agent-00005"];
    let skipped = support::strs(&body["skipped"], "agent");
    let sent = support::strs(&body["signals"], "agent");
    assert_eq!(skipped.len() + sent.len(), 3, "{body}");
    assert!(
        skipped.iter().all(|a| asked.contains(&a.as_str())),
        "{body}"
    );
    assert!(sent.iter().all(|a| !asked.contains(&a.as_str())), "{body}");
    assert!(
        !skipped.is_empty(),
        "auth-1 serves an agent asked already: {body}"
    );
    assert!(support::strs(&body["skipped"], "reason")
        .iter()
        .all(|r| r.starts_with("rate limited")));

    for (path, payload, code, error) in [
        ("/api/v1/reconnects", "{}", 400, "bad_body"),
        (
            "/api/v1/reconnects",
            r#"{"state":"stranded","proxy":"proxy-1"}"#,
            400,
            "bad_body",
        ),
        (
            "/api/v1/reconnects",
            r#"{"state":"healthy"}"#,
            400,
            "bad_body",
        ),
        (
            "/api/v1/reconnects",
            r#"{"proxy":"proxy-9"}"#,
            404,
            "not_found",
        ),
        ("/api/v1/reconnects", "not json", 400, "bad_body"),
        ("/api/v1/agents/nobody/reconnect", "", 404, "not_found"),
        (
            "/api/v1/agents/agent-00001/reconnect",
            r#"{"proxy":7}"#,
            400,
            "bad_body",
        ),
        (
            "/api/v1/agents/agent-00001/reconnect",
            r#"{"bogus":1}"#,
            400,
            "bad_body",
        ),
        (
            "/api/v1/agents/agent-00002/reconnect",
            r#"{"proxy":"proxy-1"}"#,
            409,
            "no_such_tunnel",
        ),
    ] {
        let (status, body) = c.post(path, payload).await;
        assert_eq!(status, code, "{path} {payload}: {body}");
        assert_eq!(body["error"]["code"], error, "{path} {payload}: {body}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    for (path, code) in [
        ("/api/v1/signals/abc", 400),
        ("/api/v1/signals/99999", 404),
        ("/api/v1/signals?outcome=maybe", 400),
        ("/api/v1/signals?limit=0", 400),
        ("/api/v1/signals?cursor=x", 400),
    ] {
        assert_eq!(c.get(path).await.0, code, "{path}");
    }
    // Paging through the audit, newest first.
    let p1 = c.ok("/api/v1/signals?limit=2").await;
    let cursor = p1["next_cursor"].as_str().expect("a next page").to_string();
    let p2 = c
        .ok(&format!("/api/v1/signals?limit=2&cursor={cursor}"))
        .await;
    let (a, b) = (support::ids(&p1["items"]), support::ids(&p2["items"]));
    assert!(a[0] > a[1] && a[1] > b[0], "{a:?} {b:?}");
    c.shutdown().await;
}

/// Guards 409: an agent that is known but not on a signal stream.
#[tokio::test(start_paused = true)]
async fn reconnect_to_an_agent_without_a_stream_is_a_conflict() {
    let c = Cluster::new().agents(2).start().await;
    c.ready().await;
    let (status, body) = c
        .post(&format!("/api/v1/agents/{AGENT}/reconnect"), "")
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "not_connected");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("not connected"),
        "{body}"
    );
    c.shutdown().await;
}

/// Guards `lifeline reconnect`: it prints the signal's outcome and its exit
/// code says whether the agent acked; refusals are clear and non-zero.
#[tokio::test(start_paused = true)]
async fn the_cli_reconnects_and_reports_the_outcome() {
    let c = Cluster::two_stranded_by_hand().await;

    let (code, out, err) = cli(
        &c,
        &[
            "reconnect",
            AGENT,
            "--proxy",
            "proxy-1",
            "--reason",
            "cli test",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(&format!("to {AGENT}: acked")), "{out}");
    let rows = c.ok(&format!("/api/v1/signals?agent={AGENT}")).await;
    assert_eq!(rows["items"][0]["requested_by"], "cli:updater");
    assert_eq!(rows["items"][0]["reason"], "cli test");

    let (code, out, _) = cli(&c, &["reconnect", "--stranded"]).await;
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("1 stranded agents; 1 signalled"), "{out}");

    let (code, _, err) = cli(&c, &["reconnect", "nobody"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("404") && err.contains("nobody"), "{err}");

    // A wrong token is refused before anything is looked at.
    let (code, _, err) = cli(&c, &["reconnect", "nobody", "--token", "wrong"]).await;
    assert_ne!(code, 0);
    assert!(err.contains("401") && err.contains("not valid"), "{err}");
    c.shutdown().await;
}

/// Guards periodic reconnects: every connected agent gets one per interval,
/// spread so no more than the configured rate goes out per second.
#[tokio::test(start_paused = true)]
async fn periodic_reconnects_reach_every_agent_at_a_bounded_rate() {
    let c = Cluster::new()
        .agents(6)
        .proxies(4)
        .sim_agents(0.0)
        .signals(|s| {
            s.reconnect_interval = Some(Duration::from_secs(20));
            s.periodic_max_per_second = 2;
        })
        .start()
        .await;
    c.ready().await;
    c.advance_until("a periodic round done", Duration::from_secs(40), || async {
        c.ok("/api/v1/signals?requested_by=periodic").await["items"]
            .as_array()
            .is_some_and(|a| a.len() >= 6)
    })
    .await;
    c.flush().await;
    let rows = c.ok("/api/v1/signals?requested_by=periodic&limit=6").await;
    let mut agents = support::strs(&rows["items"], "agent");
    agents.sort();
    agents.dedup();
    assert_eq!(agents.len(), 6, "one per agent: {rows}");
    // At most 2 per second: 6 signals span at least 2 s.
    let times: Vec<_> = rows["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|r| support::ts(&r["created"]))
        .collect();
    let (first, last) = (times.iter().min().unwrap(), times.iter().max().unwrap());
    assert!(last.since(*first) >= Duration::from_secs(2), "{rows}");
    c.shutdown().await;
}

/// Guards graceful tunnel closing: agents that want one tunnel but hold two
/// get a CloseTunnel once the topology has been still past the threshold,
/// and never lose their last live tunnel.
#[tokio::test(start_paused = true)]
async fn graceful_closing_trims_excess_tunnels_after_a_still_period() {
    let c = Cluster::new()
        .agents(4)
        .proxies(3)
        .sim_agents(0.0)
        .desired_tunnels(1)
        .signals(|s| {
            s.graceful_tunnel_closing = true;
            s.graceful_threshold = Duration::from_secs(10);
        })
        .start()
        .await;
    c.ready().await;
    // Not before the (randomised) threshold of 10–20 s.
    c.advance(Duration::from_secs(8)).await;
    assert_eq!(
        c.ok("/api/v1/signals?kind=close_tunnel").await["items"]
            .as_array()
            .map(Vec::len),
        Some(0)
    );
    // Three tunnels each: two closes, each after a still period of up to
    // 20 s (an agent closed once waits out the threshold again), plus the
    // loop's one-second look.
    c.advance_until(
        "every agent down to one tunnel",
        Duration::from_secs(60),
        || async { c.agents.iter().all(|a| a.tunnels().len() == 1) },
    )
    .await;
    c.flush().await;
    let rows = c.ok("/api/v1/signals?kind=close_tunnel").await;
    assert!(support::strs(&rows["items"], "requested_by")
        .iter()
        .all(|r| r == "graceful"));
    c.advance(Duration::from_secs(30)).await;
    for a in &c.agents {
        assert_eq!(a.tunnels().len(), 1, "{} keeps its last tunnel", a.name);
    }
    for name in ["agent-00001", "agent-00002", "agent-00003", "agent-00004"] {
        assert_eq!(c.state(name).await, "healthy");
    }
    c.shutdown().await;
}

/// Guards the one admission: manual, automatic, periodic and graceful
/// signals pass the same checks in one place, each refusal naming the
/// agent and why; what passes is recorded and sent as one batch.
#[tokio::test(start_paused = true)]
async fn every_origin_passes_one_admission() {
    use lifeline::signals::dispatch::{Origin, Refusal};
    use lifeline::signals::hub::{Ask, SendError, SignalRequest};
    let c = Cluster::six_legacy()
        .signals(|s| s.auto_reconnect = false)
        .start()
        .await;
    c.ready().await;
    c.agent("agent-00006").stop();
    c.eventually("agent-00006's stream closed", || async {
        !c.ll().hub.is_connected("agent-00006")
    })
    .await;
    let req = |agent: &str, ask: Ask| SignalRequest {
        agent: agent.into(),
        ask,
        reason: "test".into(),
        requested_by: "test".into(),
        trace: None,
    };
    let reconnect = |agent: &str, proxy: &str| {
        req(
            agent,
            Ask::Reconnect {
                proxy: proxy.into(),
            },
        )
    };
    let d = &c.ll().dispatch;

    let done = d
        .send(
            Origin::Manual,
            vec![
                reconnect("agent-unknown", ""),
                reconnect("agent-00006", ""),
                reconnect("agent-00001", "proxy-nope"),
                reconnect("agent-00002", ""),
            ],
        )
        .await
        .expect("manual signals go from any replica");
    let refused: Vec<(&str, Refusal)> =
        done.refused.iter().map(|(a, r)| (a.as_str(), *r)).collect();
    assert_eq!(
        refused,
        vec![
            ("agent-unknown", Refusal::UnknownAgent),
            ("agent-00006", Refusal::NotConnected),
            ("agent-00001", Refusal::NoSuchTunnel),
        ]
    );
    assert_eq!(done.sent.len(), 1);
    assert_eq!(done.sent[0].agent, "agent-00002");

    // The same agent again, at once: the manual rate limit.
    let again = d
        .send(Origin::Manual, vec![reconnect("agent-00002", "")])
        .await
        .expect("admission answers");
    assert!(
        matches!(again.refused[..], [(_, Refusal::RateLimited(_))]),
        "{:?}",
        again.refused
    );

    // Automatic reconnects are off here: the whole batch waits.
    let auto = d
        .send(Origin::Automatic, vec![reconnect("agent-00003", "")])
        .await;
    assert!(matches!(auto, Err(SendError::Paused(_))), "{auto:?}");

    // Periodic and graceful: the leader's, through the same checks.
    let periodic = d
        .send(
            Origin::Periodic,
            vec![reconnect("agent-00003", ""), reconnect("agent-00006", "")],
        )
        .await
        .expect("alone on SQLite it leads");
    assert_eq!(periodic.sent.len(), 1);
    assert_eq!(
        periodic.refused,
        vec![("agent-00006".to_string(), Refusal::NotConnected)]
    );
    let graceful = d
        .send(
            Origin::Graceful,
            vec![req(
                "agent-00004",
                Ask::CloseTunnel {
                    proxy: "proxy-nope".into(),
                },
            )],
        )
        .await
        .expect("admission answers");
    assert_eq!(
        graceful.refused,
        vec![("agent-00004".to_string(), Refusal::NoSuchTunnel)]
    );
    c.shutdown().await;
}
