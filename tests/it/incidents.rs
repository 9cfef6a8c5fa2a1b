//! Incidents from the cluster's side: two proxies expire, the agents they
//! strand and degrade are moved by automatic reconnects and recover, and
//! the API tells it as incidents (cause, peaks, agents, signals, recovery
//! times), as counts over time and as a postmortem draft; on both engines.

use crate::support;
use std::time::Duration;

use serde_json::Value;
use support::{Cluster, Running};

async fn text(c: &Running, path: &str) -> (u16, String) {
    c.get_text(path).await
}

on_both_engines! {
/// Guards the incident record end to end: the proxies' expiry opens
/// incidents of cause `proxy_expired` naming them; while open they are on
/// top of the list with their agents' episodes; once every agent is healthy
/// they have ended, with signals counted and recovery times; history shows
/// the stranded agents in the minute they were stranded; the report is a
/// Markdown draft; bad parameters are clear 400s.
#[tokio::test(start_paused = true)]
async fn proxies_expiring_are_incidents_from_stranding_to_recovery(store) {
    let c = Cluster::six_legacy().store(store).start().await;
    c.ready().await;
    c.strand_two().await;
    c.flush().await;
    // Automatic reconnects may already have ended one of them.
    let open = c.ok("/api/v1/incidents").await;
    let items = open["items"].as_array().expect("items").clone();
    assert!(!items.is_empty(), "{open}");
    for i in &items {
        assert_eq!(i["cause"], "proxy_expired", "{i}");
        assert!(["proxy-1", "proxy-2"].contains(&i["resource"].as_str().unwrap_or_default()), "{i}");
        assert_eq!(i["open"], i["ended"].is_null(), "{i}");
        assert!(i["title"].as_str().unwrap_or_default().ends_with(" expired"), "{i}");
    }
    let stranded: u64 = items.iter().map(|i| i["peak_stranded"].as_u64().unwrap_or(0)).sum();
    assert!(stranded >= 2, "the two stranded agents: {open}");
    let id = items[0]["id"].as_i64().expect("id");
    let one = c.ok(&format!("/api/v1/incidents/{id}")).await;
    let eps = one["episodes"]["items"].as_array().expect("episodes");
    assert!(!eps.is_empty() && eps.iter().all(|e| e["incident"] == id), "{one}");

    c.advance_until("every agent healthy", Duration::from_secs(60), || async {
        c.agents_in("healthy").await.len() == 6
    })
    .await;
    // The minute's count is written once the minute has passed.
    c.advance(Duration::from_secs(61)).await;
    c.flush().await;
    let all = c.ok("/api/v1/incidents").await;
    let items = all["items"].as_array().expect("items");
    assert!(items.iter().all(|i| i["open"] == false && i["ended"].is_string()), "{all}");
    assert!(items.iter().any(|i| i["signals_sent"].as_u64() > Some(0)), "signals counted: {all}");
    assert!(
        items.iter().any(|i| i["recover_p50_ms"].as_f64() > Some(0.0)
            && i["recover_max_ms"].as_f64() >= i["recover_p50_ms"].as_f64()),
        "recovery times: {all}"
    );
    let with_signals = items
        .iter()
        .find(|i| i["signals_sent"].as_u64() > Some(0))
        .and_then(|i| i["id"].as_i64())
        .expect("one with signals");
    let one = c.ok(&format!("/api/v1/incidents/{with_signals}")).await;
    let sigs = one["signals"]["items"].as_array().expect("signals");
    assert!(sigs.iter().any(|s| s["outcome"] == "acked"), "{one}");
    assert!(one["signal_counts"].as_array().is_some_and(|c| !c.is_empty()), "{one}");

    let closed = c.ok("/api/v1/incidents?open=false&cause=proxy_expired&since=1h").await;
    assert_eq!(closed["items"].as_array().map(Vec::len), Some(items.len()));
    let none = c.ok("/api/v1/incidents?resource=proxy-9").await;
    assert_eq!(none["items"], Value::Array(vec![]));

    let history = c.ok("/api/v1/history?series=stranded,degraded&step=1m&since=1h").await;
    let points = history["points"].as_array().expect("points");
    assert!(points.iter().any(|p| p["stranded"].as_u64() >= Some(2)), "{history}");
    assert!(points.iter().all(|p| p.get("agents").is_none()), "only the series asked for");
    assert_eq!(history["step_seconds"], 60);

    let (status, md) = text(&c, &format!("/api/v1/incidents/{with_signals}/report")).await;
    assert_eq!(status, 200);
    for part in ["# Incident", "## Impact", "Agents affected", "## What Lifeline did", "| reconnect | acked |", "Time to recover"] {
        assert!(md.contains(part), "{part:?} in\n{md}");
    }

    // The dashboard: the list, and the incident with its timeline.
    let (_, html) = text(&c, "/").await;
    assert!(html.contains("<svg class=\"timeline strip\""), "the overview's strip");
    assert!(
        html.contains(&format!("<a class=\"band\" href=\"/incidents/{with_signals}\"")),
        "a band links to the incident"
    );
    let (status, html) = text(&c, "/incidents").await;
    assert_eq!(status, 200);
    assert!(html.contains(&format!("href=\"/incidents/{with_signals}\"")), "{html}");
    assert!(html.contains(" expired</a>"), "titles listed");
    let (status, html) = text(&c, &format!("/incidents/{with_signals}")).await;
    assert_eq!(status, 200);
    for part in [
        "<svg class=\"timeline\"",
        "<polyline class=\"stranded\" points=\"",
        "class=\"mark acked\"",
        "Postmortem draft (Markdown)",
        "Agents affected",
    ] {
        assert!(html.contains(part), "{part:?} on the incident page");
    }
    // Minutes stranded: the agent's own, and those a proxy caused.
    let (_, html) = text(&c, "/agents/agent-00001").await;
    assert!(html.contains("id=\"stranded-minutes\""), "the agent's minutes stranded");
    assert!(html.contains("incident #"), "its episodes link their incident");
    let resource = items
        .iter()
        .find(|i| i["id"] == with_signals)
        .and_then(|i| i["resource"].as_str())
        .unwrap_or_default()
        .to_string();
    let (_, html) = text(&c, &format!("/agents?proxy={resource}")).await;
    assert!(html.contains(&format!("Agent stranding proxy <strong>{resource}</strong> caused")), "{html}");
    let stranded_minutes: f64 = items
        .iter()
        .map(|i| i["agent_minutes_stranded"].as_f64().unwrap_or(0.0))
        .sum();
    assert!(stranded_minutes > 0.0, "agent-minutes stranded: {all}");
    let (status, _) = text(&c, "/incidents/not-a-number").await;
    assert_eq!(status, 404);

    for (path, what) in [
        ("/api/v1/incidents?cause=fire", "cause must be one of"),
        ("/api/v1/history?step=30s", "(a number and one of m, h, d)"),
        ("/api/v1/history?series=weather", "series must list"),
        ("/api/v1/history?step=1m&since=30d", "points asked"),
        ("/api/v1/incidents?since=yesterday", "since"),
        ("/api/v1/incidents/99999999999999999999", "not a positive integer"),
        ("/api/v1/episodes?incident=0", "incident must be"),
    ] {
        let (status, body) = c.get(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body["error"]["message"].as_str().unwrap_or_default().contains(what), "{path}: {body}");
    }
    // A since after now asks for nothing yet.
    let later = c.ok("/api/v1/history?since=2999-01-01T00:00:00Z").await;
    assert_eq!(later["points"], Value::Array(vec![]), "{later}");
    let (status, body) = c.get("/api/v1/incidents/999999").await;
    assert_eq!(status, 404, "{body}");
    c.shutdown().await;
}
}
