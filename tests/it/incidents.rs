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
        ("/api/v1/incidents?since=yesterday", "since"),
        ("/api/v1/incidents/99999999999999999999", "not a positive integer"),
        ("/api/v1/episodes?incident=0", "incident must be"),
    ] {
        let (status, body) = c.get(path).await;
        assert_eq!(status, 400, "{path}: {body}");
        assert!(body["error"]["message"].as_str().unwrap_or_default().contains(what), "{path}: {body}");
    }
    // A since before anything kept, or asking more steps than are
    // answered, starts at the oldest kept count (or the newest 10,000
    // steps) and says so.
    for far in ["30d", "0246-08-28T03:00:44Z"] {
        let v = c.ok(&format!("/api/v1/history?step=1m&since={far}")).await;
        let first = v["points"][0]["at"].as_str().unwrap_or_default().to_string();
        let since = v["since"].as_str().unwrap_or_default();
        assert!(!first.is_empty() && since <= first.as_str(), "{far}: {v}");
        assert!(since > "2000", "{far}: starts at kept data: {v}");
    }
    // A since after now asks for nothing yet.
    let later = c.ok("/api/v1/history?since=2999-01-01T00:00:00Z").await;
    assert_eq!(later["points"], Value::Array(vec![]), "{later}");
    let (status, body) = c.get("/api/v1/incidents/999999").await;
    assert_eq!(status, 404, "{body}");
    c.shutdown().await;
}
}

/// The number after `before` in `text` (the first such).
fn number_after(text: &str, before: &str) -> u64 {
    let at = text
        .find(before)
        .unwrap_or_else(|| panic!("{before:?} in {text}"))
        + before.len();
    text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("a number after {before:?}"))
}

on_both_engines! {
/// Guards figures that agree: two agents stranded by a proxy move to
/// another incident when their auth server stops serving (their cause
/// changes, their state does not; the proxy's degraded agents on another
/// auth server stay). The proxy's incident still counts
/// them (peak, agents); its page's timeline peaks at the same number, its
/// table lists the same agents until they left, and it says where they
/// went, with a link; the API says so too.
#[tokio::test(start_paused = true)]
async fn an_incident_whose_agents_changed_cause_says_where_they_went(store) {
    let c = Cluster::six_legacy()
        .store(store)
        .signals(|s| s.auto_reconnect = false)
        .start()
        .await;
    c.ready().await;
    c.strand_two().await;
    c.flush().await;
    let list = c.ok("/api/v1/incidents?cause=proxy_expired").await;
    let x = list["items"]
        .as_array()
        .and_then(|l| l.iter().find(|i| i["peak_stranded"] == 2))
        .and_then(|i| i["id"].as_i64())
        .unwrap_or_else(|| panic!("the proxy incident stranding two: {list}"));
    c.sim
        .set_auth_status("auth-1", tonic_health::ServingStatus::NotServing)
        .await;
    // Its agents on auth-1 move; those on auth-2 stay, degraded.
    c.advance_until("the stranded agents move", Duration::from_secs(30), || async {
        c.flush().await;
        c.ok(&format!("/api/v1/incidents/{x}")).await["moved_out"]
            .as_array()
            .is_some_and(|m| !m.is_empty())
    })
    .await;
    let api = c.ok(&format!("/api/v1/incidents/{x}")).await;
    let moved = api["moved_out"].as_array().expect("moved_out").clone();
    assert_eq!(moved.len(), 1, "{api}");
    assert_eq!(moved[0]["agents"], 2, "{api}");
    let y = moved[0]["incident"].as_i64().expect("where they went");
    let to = c.ok(&format!("/api/v1/incidents/{y}")).await;
    assert_eq!(to["cause"], "auth_not_serving", "{to}");
    assert!(moved[0]["title"].as_str().unwrap_or("").contains("NOT_SERVING"), "{api}");

    let (status, html) = c.get_text(&format!("/incidents/{x}")).await;
    assert_eq!(status, 200);
    let peak = api["peak_stranded"].as_u64().expect("peak");
    assert_eq!(number_after(&html, "data-figure=\"peak\">"), peak, "the page's peak");
    assert_eq!(number_after(&html, "at most "), peak, "the timeline's peak");
    assert_eq!(number_after(&html, "data-figure=\"agents\">"), api["agents"].as_u64().expect("agents"));
    let table = &html[html.find("<table class=\"agents\">").expect("the agents table")..];
    let table = &table[..table.find("</table>").expect("its end")];
    let listed: std::collections::BTreeSet<&str> = table
        .split("<td><a href=\"/agents/")
        .skip(1)
        .filter_map(|r| r.split('"').next())
        .collect();
    assert_eq!(listed.len() as u64, api["agents"].as_u64().unwrap_or(0), "{table}");
    assert!(table.contains(&format!("moved to #{y}")), "{table}");
    assert!(
        html.contains(&format!("2 agents moved to <a href=\"/incidents/{y}\">incident {y}</a>")),
        "the page says where they went"
    );
    let (_, md) = c.get_text(&format!("/api/v1/incidents/{x}/report")).await;
    assert!(md.contains(&format!("2 moved to incident {y}")), "{md}");
    c.shutdown().await;
}
}
