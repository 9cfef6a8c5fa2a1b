//! Rollouts, through the simulator's rolling upgrade on both sources:
//! proxies replaced one by one by their group's next generation, each old
//! one leaving by its own delete. Its agents' strandings are departures,
//! planned as a rollout: said so in the incident's title, page, report
//! and notification, and its agents still moved.

use crate::support;
use std::time::Duration;

use lifeline::store::outbox;
use serde_json::Value;
use support::{Cluster, Running, STRANDED};

/// The rollout incidents (cause `proxy_departed`), checked for what they
/// say of themselves.
async fn rollout_incidents(c: &Running) -> Vec<Value> {
    c.flush().await;
    let list = c.ok("/api/v1/incidents?cause=proxy_departed").await;
    let items = list["items"].as_array().cloned().unwrap_or_default();
    assert!(!items.is_empty(), "departures make incidents: {list}");
    for i in &items {
        assert_eq!(i["planned"]["kind"], "rollout", "{i}");
        let title = i["title"].as_str().unwrap_or_default();
        assert!(
            title.contains("departed") && title.contains("planned: rollout"),
            "{title}"
        );
    }
    items
}

/// The lifeline source: the two proxies agent-00001 holds are upgraded;
/// it is stranded by their departure, planned; the incident is told (a
/// rollout's is, labelled), its page and report say so; automatic
/// reconnects still move it, to the new generation.
#[tokio::test(start_paused = true)]
async fn a_rolling_upgrade_is_a_planned_rollout_on_the_lifeline_source() {
    let c = Cluster::six_legacy().start().await;
    c.ready().await;
    let new = c.sim.rolling_upgrade(&["proxy-1", "proxy-2"]).await;
    assert_eq!(new, ["proxy-1-g2", "proxy-2-g2"]);
    c.advance(Duration::from_millis(500)).await;
    c.flush().await;
    let eps = c
        .ok(&format!("/api/v1/episodes?agent={STRANDED}&state=stranded"))
        .await;
    assert_eq!(eps["items"][0]["cause"], "proxy_departed", "{eps}");
    let items = rollout_incidents(&c).await;
    let id = items[0]["id"].as_i64().expect("id");
    c.advance_until("every agent healthy", Duration::from_secs(60), || async {
        c.agents_in("healthy").await.len() == 6
    })
    .await;
    let on_new = c
        .agents
        .iter()
        .any(|a| a.tunnels().iter().any(|t| t.ends_with("-g2")));
    assert!(on_new, "agents moved to the new generation");
    c.flush().await;
    let events = outbox::after(&c.ll().db, 0, 1000).await.expect("events");
    let opened = events
        .iter()
        .find(|e| e.incident_id == Some(id) && e.kind == "incident.opened")
        .expect("a rollout's incident is told");
    assert!(
        opened.body.contains("\"kind\":\"rollout\""),
        "{}",
        opened.body
    );
    let (_, page) = c.get_text(&format!("/incidents/{id}")).await;
    assert!(
        page.contains("departed (shut down gracefully) (planned: rollout)"),
        "the page"
    );
    let (_, md) = c.get_text(&format!("/api/v1/incidents/{id}/report")).await;
    assert!(md.contains("planned: rollout"), "{md}");
    c.shutdown().await;
}

/// The teleport source: the same upgrade, through Teleport's watcher
/// (proxy group labels, Teleport's DELETE), strands the agents whose
/// tunnels named only the old proxies, as a planned rollout.
#[tokio::test(start_paused = true)]
async fn a_rolling_upgrade_is_a_planned_rollout_on_the_teleport_source() {
    let c = Cluster::new()
        .teleport(lifeline_sim::TeleportSpec::default())
        .start()
        .await;
    c.ready().await;
    let p = c.ok("/api/v1/proxies/proxy-1").await;
    assert_eq!(
        (p["group_id"].as_str(), p["group_generation"].as_u64()),
        (Some("proxy-group"), Some(1)),
        "{p}"
    );
    c.sim.rolling_upgrade(&["proxy-1", "proxy-2"]).await;
    c.advance(Duration::from_millis(500)).await;
    // Planned: in the planned figure, in no stranded one; the two that
    // lost every tunnel are the stranded among them.
    assert!(c.agents_in("stranded").await.is_empty());
    let planned = c.ok("/api/v1/agents?state=planned&limit=1000").await;
    let stranded: Vec<&str> = planned["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|a| a["state"] == "stranded")
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(stranded, ["agent-00001", "agent-00004"]);
    for agent in ["agent-00001", "agent-00004"] {
        let a = c.ok(&format!("/api/v1/agents/{agent}")).await;
        assert_eq!(a["cause"]["kind"], "proxy_departed", "{a}");
        assert_eq!(a["cause"]["planned"]["kind"], "rollout", "{a}");
    }
    let p = c.ok("/api/v1/proxies/proxy-1-g2").await;
    assert_eq!(p["group_generation"], 2, "{p}");
    rollout_incidents(&c).await;
    c.shutdown().await;
}
