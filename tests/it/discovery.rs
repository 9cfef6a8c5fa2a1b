//! Delta discovery on real `AgentSignals.Connect` streams, and simulated
//! agents that follow the auth policy.

use crate::support;
use std::time::Duration;

use lifeline::proto::v1 as pb;
use lifeline::proto::v1::agent_signals_client::AgentSignalsClient;
use lifeline_sim::AgentEvent;
use support::{Cluster, Running};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Endpoint;
use tonic::Streaming;

/// A bare agent stream: Hello sent, nothing else.
struct Raw {
    inbound: Streaming<pb::Signal>,
    _out: mpsc::Sender<pb::AgentMessage>,
}

async fn connect(c: &Running, agent: &str) -> Raw {
    connect_with(c, agent, None).await
}

/// `window`: the HTTP/2 flow-control window the agent grants (a small one
/// makes an agent that stops reading stall quickly, like a stuck one).
async fn connect_with(c: &Running, agent: &str, window: Option<u32>) -> Raw {
    let mut ep = Endpoint::from_shared(format!("http://{}", c.ll().grpc_addr)).expect("uri");
    if let Some(w) = window {
        ep = ep
            .initial_stream_window_size(w)
            .initial_connection_window_size(w);
    }
    let ch = ep.connect().await.expect("Lifeline's gRPC port answers");
    let (tx, rx) = mpsc::channel(4);
    tx.send(pb::AgentMessage::hello(agent, "test", 2))
        .await
        .expect("hello queued");
    let inbound = AgentSignalsClient::new(ch)
        .connect(lifeline_sim::join_request(
            ReceiverStream::new(rx),
            lifeline_sim::SIM_JOIN_TOKEN,
        ))
        .await
        .expect("Connect")
        .into_inner();
    Raw { inbound, _out: tx }
}

fn discovery(s: pb::Signal) -> pb::Discovery {
    match s.kind {
        Some(pb::signal::Kind::Discovery(d)) => d,
        other => panic!("expected Discovery, got {other:?}"),
    }
}

async fn next(r: &mut Raw) -> pb::Discovery {
    let m = support::real_timeout(support::REAL_WAIT, r.inbound.message())
        .await
        .expect("a message in time")
        .expect("stream healthy")
        .expect("stream open");
    discovery(m)
}

fn names(d: &pb::Discovery) -> Vec<String> {
    d.proxies.iter().map(|p| p.name.clone()).collect()
}

fn ttl_s(d: &pb::Discovery, name: &str) -> i64 {
    d.proxies
        .iter()
        .find(|p| p.name == name)
        .and_then(|p| p.ttl)
        .map(|t| t.seconds)
        .unwrap_or(-1)
}

/// Guards the discovery sequence: first a full list with each proxy's time
/// left, then only the proxies that heartbeated, several heartbeats in one
/// message, each with its fresh TTL.
#[tokio::test(start_paused = true)]
async fn discovery_is_full_first_then_coalesced_deltas() {
    let c = Cluster::new()
        .proxies(3)
        .quiet()
        .ttl(Duration::from_secs(60))
        .start()
        .await;
    c.ready().await;
    c.advance(Duration::from_secs(20)).await;
    let mut r = connect(&c, "agent-00001").await;
    let first = next(&mut r).await;
    assert!(first.full);
    assert_eq!(names(&first), ["proxy-1", "proxy-2", "proxy-3"]);
    for p in &first.proxies {
        let ttl = p.ttl.expect("ttl").seconds;
        assert!(
            (39..=40).contains(&ttl),
            "{}: time left, not the announce TTL: {ttl}",
            p.name
        );
        assert_eq!(p.group_id, "proxy-group");
        assert!(!p.addr.is_empty());
    }

    // Two heartbeats that arrive together: one delta naming both.
    c.sim
        .heartbeat(lifeline::domain::Kind::Proxy, "proxy-1")
        .await;
    c.sim
        .heartbeat(lifeline::domain::Kind::Proxy, "proxy-3")
        .await;
    c.quiesce().await;
    let d = next(&mut r).await;
    assert!(!d.full);
    assert_eq!(names(&d), ["proxy-1", "proxy-3"]);
    assert_eq!(ttl_s(&d, "proxy-1"), 60);

    // A later heartbeat: only that proxy.
    c.advance(Duration::from_secs(5)).await;
    c.sim
        .heartbeat(lifeline::domain::Kind::Proxy, "proxy-2")
        .await;
    c.quiesce().await;
    let d = next(&mut r).await;
    assert!(!d.full);
    assert_eq!(names(&d), ["proxy-2"]);
    assert_eq!(ttl_s(&d, "proxy-2"), 60);

    let s = c.summary().await;
    assert_eq!(s["ingest"]["signals"]["discovery_full"], 1, "{s}");
    assert_eq!(s["ingest"]["signals"]["discovery_delta"], 2, "{s}");
    c.shutdown().await;
}

/// Guards isolation: a stream that stops reading does not delay discovery to
/// another, and when it reads again it catches up with one full list rather
/// than a backlog.
#[tokio::test(start_paused = true)]
async fn a_stalled_stream_does_not_delay_the_others() {
    let c = Cluster::new()
        .proxies(3)
        .quiet()
        .ttl(Duration::from_secs(60))
        .signals(|s| {
            s.discovery_backlog = 16;
            s.max_delta_proxies = 2;
        })
        .start()
        .await;
    c.ready().await;
    let mut stalled = connect_with(&c, "agent-00001", Some(4096)).await;
    let mut live = connect(&c, "agent-00002").await;
    assert!(next(&mut stalled).await.full);
    assert!(next(&mut live).await.full);
    // Enough heartbeats to fill the stalled stream's HTTP/2 window.
    for i in 0..3000 {
        tokio::time::advance(Duration::from_millis(1)).await;
        let proxy = format!("proxy-{}", i % 3 + 1);
        c.sim.heartbeat(lifeline::domain::Kind::Proxy, &proxy).await;
        if i % 100 == 99 {
            c.quiesce().await;
            // The live stream keeps up while the other is not read at all.
            let d = next(&mut live).await;
            assert!(!d.proxies.is_empty());
            while let Some(Some(Ok(_))) =
                futures::FutureExt::now_or_never(live.inbound.message()).map(|m| m.transpose())
            {
            }
        }
    }
    c.quiesce().await;
    // The stalled stream, read again, gets what was already in flight and
    // then one full list (it fell behind the bounded log), not 3000 deltas.
    let mut got = 0;
    let mut saw_full = false;
    while let Some(m) =
        support::real_timeout(Duration::from_millis(500), stalled.inbound.message()).await
    {
        let d = discovery(m.expect("ok").expect("open"));
        got += 1;
        saw_full |= d.full;
    }
    assert!(got < 3000, "bounded: {got} messages");
    assert!(saw_full, "caught up with a full Discovery");
    c.shutdown().await;
}

/// Guards teleport_pick_healthy in the simulated agents: under reconnect
/// mode an agent on a NOT_SERVING auth server moves to a healthy one, and a
/// stream open on the old connection is not dropped by the move.
#[tokio::test(start_paused = true)]
async fn a_sim_agent_moves_off_a_not_serving_auth_without_dropping_a_stream() {
    let c = Cluster::new()
        .agents(2)
        .lb_policy(r#"{"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":"reconnect"}}]}"#)
        .sim_agents(0.0)
        .start()
        .await;
    c.ready().await;
    let a = c.agent("agent-00001");
    assert_eq!(a.auth(), "auth-1");
    let open = a.open_auth_stream(&c.sim).expect("stream opened");
    c.advance(Duration::from_secs(1)).await;
    assert!(open.is_open());

    c.sim
        .set_auth_status("auth-1", tonic_health::ServingStatus::NotServing)
        .await;
    c.advance_until("agent moved to auth-2", Duration::from_secs(20), || async {
        a.auth() == "auth-2"
    })
    .await;
    assert!(a.events().contains(&AgentEvent::AuthSwitched {
        from: "auth-1".into(),
        to: "auth-2".into()
    }));
    assert!(
        open.is_open(),
        "the stream on the old connection is still open"
    );
    assert_eq!(open.auth, "auth-1");
    c.advance_until(
        "Lifeline sees the agent on auth-2",
        Duration::from_secs(5),
        || async {
            let d = c.ok("/api/v1/agents/agent-00001").await;
            d["auth_server"] == "auth-2" && d["state"] == "healthy"
        },
    )
    .await;
    open.finish();
    c.shutdown().await;
}

/// Guards the other branch: under pick_first the agent stays put.
#[tokio::test(start_paused = true)]
async fn under_pick_first_a_sim_agent_does_not_watch_auth_health() {
    let c = Cluster::new().agents(2).sim_agents(0.0).start().await;
    c.ready().await;
    c.sim
        .set_auth_status("auth-1", tonic_health::ServingStatus::NotServing)
        .await;
    c.advance(Duration::from_secs(10)).await;
    assert_eq!(c.agent("agent-00001").auth(), "auth-1");
    c.shutdown().await;
}
