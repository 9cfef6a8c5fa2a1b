//! Detection: expiries and auth health strand exactly the agents that depend
//! on them, at the expiry instant, grouped by root cause.

use crate::support;
use std::time::Duration;

use lifeline::domain::{AgentState, CauseKind, Kind};
use serde_json::json;
use support::{strs, ts, Cluster};
use tonic_health::ServingStatus;

// Six agents on three proxies: agent i has tunnels to proxies i%3 and
// (i+1)%3, and auth server i%2. So agents 1 and 4 sit on proxy-1 + proxy-2,
// and auth-1 has agents 1, 3, 5.

on_both_engines! {
/// Guards the core promise: proxies that stop heartbeating strand the agents
/// with no other live tunnel at the instant the last TTL runs out.
#[tokio::test(start_paused = true)]
async fn proxy_expiry_strands_its_agents(store) {
    let c = Cluster::new().store(store).start().await;
    c.ready().await;
    assert!(c.agents_in("stranded").await.is_empty());
    let mut changes = c.ll().fleet.subscribe();

    c.sim.pause_heartbeats("proxy-1").await;
    c.sim.pause_heartbeats("proxy-2").await;
    let e1 = c.expires(Kind::Proxy, "proxy-1").await;
    let e2 = c.expires(Kind::Proxy, "proxy-2").await;
    let last = e1.max(e2);
    c.advance_to(last).await;

    assert_eq!(
        c.agents_in("stranded").await,
        vec!["agent-00001", "agent-00004"]
    );
    assert_eq!(
        c.agents_in("degraded").await,
        vec!["agent-00002", "agent-00003", "agent-00005", "agent-00006"]
    );

    // Flagged at the expiry instant itself (tokio's timer tick is 1 ms).
    let mut seen = 0;
    while let Ok(batch) = changes.try_recv() {
        for ch in batch.iter().filter(|c| c.to == AgentState::Stranded) {
            seen += 1;
            assert_eq!(ch.since, last, "{ch:?}");
            let lag = ch.detected_at.as_micros() - ch.since.as_micros();
            assert!((0..=1_000).contains(&lag), "detected {lag} µs after expiry");
            assert_eq!(ch.cause, Some(CauseKind::ProxyExpired));
        }
    }
    assert_eq!(seen, 2);

    let agent = c.ok("/api/v1/agents/agent-00001").await;
    assert_eq!(agent["state"], "stranded");
    assert_eq!(agent["reasons"], json!(["no_live_tunnel"]));
    assert_eq!(ts(&agent["since"]).as_millis(), last.as_millis());
    let states = strs(&agent["tunnels"], "proxy_state");
    assert_eq!(states, vec!["expired", "expired"]);

    // One failure, one line; every agent not healthy is under one, the
    // degraded too (the two that lost one of their tunnels).
    let s = c.summary().await;
    let causes = s["root_causes"].as_array().unwrap();
    let stranding: Vec<&serde_json::Value> =
        causes.iter().filter(|c| c["stranded"].as_u64() > Some(0)).collect();
    assert_eq!(stranding.len(), 1, "{causes:?}");
    let under: u64 = causes.iter().filter_map(|c| c["agents"].as_u64()).sum();
    let a = &s["agents"];
    let not_healthy = ["degraded", "stranded", "planned"]
        .iter()
        .filter_map(|k| a[*k].as_u64())
        .sum::<u64>();
    assert_eq!(under, not_healthy, "{s}");
    let causes = stranding;
    assert_eq!(causes[0]["cause"], "proxy_expired");
    assert_eq!(causes[0]["stranded"], 2);
    assert_eq!(ts(&causes[0]["since"]).as_millis(), last.as_millis());
    assert_eq!(s["proxies"]["expired"], 2);

    // The proxies come back: everyone recovers, episodes close.
    c.sim.resume_heartbeats(Kind::Proxy, "proxy-1").await;
    c.sim.resume_heartbeats(Kind::Proxy, "proxy-2").await;
    c.quiesce().await;
    let s = c.summary().await;
    assert_eq!(s["agents"]["healthy"], 6, "{s}");
    c.flush().await;
    let eps = c.ok("/api/v1/episodes?agent=agent-00001").await;
    let ep = &eps["items"][0];
    assert_eq!(ep["state"], "stranded");
    let blamed = if e2 >= e1 { "proxy-2" } else { "proxy-1" };
    assert_eq!(ep["cause_resource"], blamed);
    assert_eq!(ep["end_reason"], "recovered");
    assert!(!ep["ended_at"].is_null());
    c.shutdown().await;
}
}

/// Guards the timer rule: a heartbeat that arrives before the old expiry
/// keeps the proxy alive (the timer re-checks the current expiry).
#[tokio::test(start_paused = true)]
async fn heartbeats_keep_proxies_alive_across_many_ttls() {
    let c = Cluster::new().start().await;
    c.ready().await;
    c.advance(Duration::from_secs(45)).await;
    let s = c.summary().await;
    assert_eq!(s["proxies"]["expired"], 0, "{s}");
    assert_eq!(s["agents"]["healthy"], 6, "{s}");
    let w = c.ok("/api/v1/ttl-windows?kind=proxy").await;
    for item in w["items"].as_array().unwrap() {
        assert!(item["heartbeats_seen"].as_u64().unwrap() >= 7, "{item}");
        assert_eq!(item["heartbeats_missed"], 0, "{item}");
    }
    c.shutdown().await;
}

on_both_engines! {
/// Guards the auth rule: NOT_SERVING strands its agents at once; SERVING
/// again closes the episode.
#[tokio::test(start_paused = true)]
async fn auth_not_serving_strands_and_serving_closes_the_episode(store) {
    let c = Cluster::new().store(store).start().await;
    c.ready().await;
    c.sim
        .set_auth_status("auth-1", ServingStatus::NotServing)
        .await;
    let want = vec!["agent-00001", "agent-00003", "agent-00005"];
    c.eventually("auth-1's agents stranded", || async {
        c.agents_in("stranded").await == want
    })
    .await;
    let a = c.ok("/api/v1/agents/agent-00003").await;
    assert_eq!(a["reasons"], json!(["auth_unhealthy"]));
    assert_eq!(a["cause"]["kind"], "auth_not_serving");
    assert_eq!(a["auth_health"], "NOT_SERVING");
    let causes = c.summary().await["root_causes"].clone();
    assert_eq!(causes[0]["cause"], "auth_not_serving");
    assert_eq!(causes[0]["resource"], "auth-1");
    assert_eq!(causes[0]["agents"], 3);

    c.advance(Duration::from_secs(1)).await;
    c.sim
        .set_auth_status("auth-1", ServingStatus::Serving)
        .await;
    c.eventually("nobody stranded", || async {
        c.agents_in("stranded").await.is_empty()
    })
    .await;
    c.flush().await;

    let eps = c.ok("/api/v1/episodes?agent=agent-00003").await;
    let ep = &eps["items"][0];
    assert_eq!(ep["reasons"], json!(["auth_unhealthy"]));
    assert_eq!(ep["end_reason"], "recovered");
    let len = ts(&ep["ended_at"]).as_micros() - ts(&ep["started_at"]).as_micros();
    assert_eq!(len, 1_000_000, "the episode lasts exactly the outage");
    let auth = c.ok("/api/v1/auth-servers/auth-1").await;
    let to = strs(&auth["transitions"], "to_status");
    assert_eq!(to[..2], ["SERVING", "NOT_SERVING"], "{to:?}");
    c.shutdown().await;
}
}

/// Guards against false alarms: a broken health stream is UNKNOWN, not
/// NOT_SERVING, and strands only after the grace.
#[tokio::test(start_paused = true)]
async fn lost_health_stream_is_unknown_and_strands_only_after_the_grace() {
    let c = Cluster::new()
        .agent_ttl(Duration::from_secs(3600))
        .unknown_grace(Duration::from_secs(5))
        .start()
        .await;
    c.ready().await;
    c.sim.stop_auth("auth-2");
    c.eventually("auth-2 UNKNOWN", || async {
        let auths = c.ok("/api/v1/auth-servers").await;
        auths["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["name"] == "auth-2" && a["health"] == "UNKNOWN")
    })
    .await;
    let a2 = c.ok("/api/v1/auth-servers/auth-2").await;
    assert_eq!(a2["strands_agents"], false, "{a2}");
    assert!(c.agents_in("stranded").await.is_empty());

    c.advance(Duration::from_secs(4)).await;
    assert!(
        c.agents_in("stranded").await.is_empty(),
        "still within grace"
    );
    c.advance(Duration::from_secs(2)).await;
    assert_eq!(
        c.agents_in("stranded").await,
        vec!["agent-00002", "agent-00004", "agent-00006"]
    );
    let a = c.ok("/api/v1/agents/agent-00002").await;
    assert_eq!(a["cause"]["kind"], "auth_unknown");
    c.shutdown().await;
}

/// Guards the UNIMPLEMENTED fallback: an auth server without Watch is polled.
#[tokio::test(start_paused = true)]
async fn auth_without_watch_is_polled_with_check() {
    let c = Cluster::new().check_only_auth().start().await;
    c.ready().await;
    let auths = c.ok("/api/v1/auth-servers").await;
    for a in auths["items"].as_array().unwrap() {
        assert_eq!(a["mode"], "poll", "{a}");
        assert_eq!(a["health"], "SERVING", "{a}");
    }
    c.sim
        .set_auth_status("auth-1", ServingStatus::NotServing)
        .await;
    c.advance(Duration::from_millis(1500)).await;
    let want = vec!["agent-00001", "agent-00003", "agent-00005"];
    c.eventually("auth-1's agents stranded", || async {
        c.agents_in("stranded").await == want
    })
    .await;
    c.shutdown().await;
}

/// Guards the agent's own TTL: an agent whose heartbeat expires is stranded
/// `agent_expired`, grouped under its auth server.
#[tokio::test(start_paused = true)]
async fn agent_expiry_strands_it() {
    let c = Cluster::new().start().await;
    c.ready().await;
    c.sim.pause_heartbeats("agent-00002").await;
    let e = c.expires(Kind::Agent, "agent-00002").await;
    c.advance_to(e).await;
    let a = c.ok("/api/v1/agents/agent-00002").await;
    assert_eq!(a["state"], "stranded");
    assert_eq!(a["reasons"], json!(["agent_expired"]));
    assert_eq!(ts(&a["since"]).as_millis(), e.as_millis());
    assert_eq!(a["cause"]["resource"], "auth-2");
    c.shutdown().await;
}

/// An auth server's entry in `/api/v1/auth-servers`.
async fn auth_view(c: &support::Running, name: &str) -> serde_json::Value {
    c.ok(&format!("/api/v1/auth-servers/{name}")).await
}

/// Guards older Teleport: an Auth that serves no `grpc.health.v1` at all
/// (UNIMPLEMENTED on Watch and Check) is NOT_SERVED, never strands by
/// itself however long it lasts, and its own heartbeat decides: expired,
/// its agents are stranded (`auth_expired`); back, they recover.
#[tokio::test(start_paused = true)]
async fn an_auth_without_health_strands_only_when_its_heartbeat_expires() {
    let c = Cluster::new()
        .auth_without_health()
        .agent_ttl(Duration::from_secs(3600))
        .unknown_grace(Duration::from_secs(5))
        .start()
        .await;
    c.ready().await;
    c.eventually("auth-2 NOT_SERVED", || async {
        auth_view(&c, "auth-2").await["health"] == "NOT_SERVED"
    })
    .await;
    let a2 = auth_view(&c, "auth-2").await;
    assert_eq!(a2["evidence"], "heartbeat", "{a2}");
    assert_eq!(a2["strands_agents"], false, "{a2}");
    c.advance(Duration::from_secs(60)).await;
    assert!(
        c.agents_in("stranded").await.is_empty(),
        "far past the grace, still no false alarm"
    );

    c.sim.pause_heartbeats("auth-2").await;
    // Past its TTL (10 s) since the last heartbeat.
    c.advance(Duration::from_secs(12)).await;
    c.eventually(
        "auth-2's heartbeat expires and its agents strand",
        || async {
            c.agents_in("stranded").await == vec!["agent-00002", "agent-00004", "agent-00006"]
        },
    )
    .await;
    let a = c.ok("/api/v1/agents/agent-00002").await;
    assert_eq!(a["cause"]["kind"], "auth_expired", "{a}");
    assert_eq!(auth_view(&c, "auth-2").await["strands_agents"], true);

    c.sim
        .resume_heartbeats(lifeline::domain::Kind::AuthServer, "auth-2")
        .await;
    c.eventually("its agents recover", || async {
        c.agents_in("stranded").await.is_empty()
    })
    .await;
    c.shutdown().await;
}

/// Guards an Auth Lifeline cannot reach from the start (say, only through
/// a proxy that routes to a random Auth): NEVER_REACHED, on its heartbeat,
/// no agent stranded past the grace. One that answered and then went
/// silent keeps the grace rule (`lost_health_stream_is_unknown…`).
#[tokio::test(start_paused = true)]
async fn an_auth_never_reached_does_not_strand_its_agents() {
    let c = Cluster::new()
        .agent_ttl(Duration::from_secs(3600))
        .unknown_grace(Duration::from_secs(5))
        .config(|cfg| {
            // Static configuration wins: auth-2's health is looked for
            // where nothing listens.
            cfg.auth_servers.push(lifeline::config::StaticAuthServer {
                name: "auth-2".into(),
                addr: "127.0.0.1:1".into(),
            });
        })
        .start()
        .await;
    c.eventually("the watch is ready", || async {
        c.get("/readyz").await.0 == 200
    })
    .await;
    c.eventually("auth-2 NEVER_REACHED", || async {
        auth_view(&c, "auth-2").await["health"] == "NEVER_REACHED"
    })
    .await;
    c.advance(Duration::from_secs(60)).await;
    let a2 = auth_view(&c, "auth-2").await;
    assert_eq!(
        (&a2["health"], &a2["evidence"], &a2["strands_agents"]),
        (
            &serde_json::json!("NEVER_REACHED"),
            &serde_json::json!("heartbeat"),
            &serde_json::json!(false)
        ),
        "{a2}"
    );
    assert!(c.agents_in("stranded").await.is_empty());
    c.shutdown().await;
}
