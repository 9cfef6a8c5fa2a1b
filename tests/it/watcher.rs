//! The watch protocol: generations, stale data, rejected kinds, heartbeats,
//! and bad input from the cluster.

use crate::support;
use std::time::Duration;

use lifeline::domain::Kind;
use lifeline::proto::v1 as pb;
use lifeline::proto::{to_duration, to_timestamp};
use support::{strs, Cluster};

fn put(s: pb::Server) -> pb::Event {
    pb::Event {
        r#type: pb::EventType::Put as i32,
        resource: Some(pb::event::Resource::Server(s)),
    }
}

/// Guards "no false alarms from Lifeline's own blindness": while the stream
/// is down nothing expires and nobody is stranded; the return resyncs.
#[tokio::test(start_paused = true)]
async fn lost_stream_makes_data_stale_and_strands_nobody_until_resync() {
    let c = Cluster::new().start().await;
    c.ready().await;
    c.sim.set_accepting(false);
    c.sim.kill_streams();
    c.eventually("readyz red", || async { c.get("/readyz").await.0 == 503 })
        .await;
    let (_, body) = c.get("/readyz").await;
    assert_eq!(body["source_phase"], "retrying", "{body}");
    let s = c.summary().await;
    for k in ["proxy", "auth_server", "agent", "tunnel_connection"] {
        assert_eq!(s["watcher"]["kinds"][k]["state"], "stale", "{k}: {s}");
    }
    assert_eq!(s["classification_live"], false);

    // Every proxy goes quiet, far past its TTL, while Lifeline is blind.
    for p in ["proxy-1", "proxy-2", "proxy-3"] {
        c.sim.pause_heartbeats(p).await;
    }
    c.advance(Duration::from_secs(30)).await;
    let s = c.summary().await;
    assert_eq!(
        s["proxies"]["expired"], 0,
        "nothing expires from stale data"
    );
    assert_eq!(
        s["agents"]["stranded"], 0,
        "nobody stranded from stale data"
    );
    assert!(c.agents_in("stranded").await.is_empty());

    // The cluster comes back: a new generation lists the truth.
    c.sim.set_accepting(true);
    c.advance_until("watcher ready again", Duration::from_secs(120), || async {
        c.get("/readyz").await.0 == 200
    })
    .await;
    assert_eq!(c.get("/readyz").await.1["source_phase"], "following");
    let s = c.summary().await;
    assert!(
        s["watcher"]["kinds"]["proxy"]["generation"]
            .as_u64()
            .unwrap()
            >= 2,
        "{s}"
    );
    assert_eq!(s["proxies"]["expired"], 3);
    assert_eq!(s["agents"]["stranded"], 6);
    c.shutdown().await;
}

/// Guards the RFD 0226 heartbeat rule: only a changed `expires` counts.
#[tokio::test(start_paused = true)]
async fn same_expiry_put_is_not_a_heartbeat() {
    let c = Cluster::new().quiet().start().await;
    c.ready().await;
    let mut p = c.sim.get_server(Kind::Proxy, "proxy-1").await.unwrap();
    p.labels.insert("env".into(), "prod".into());
    c.sim.put_server(p.clone()).await;
    c.quiesce().await;
    let w = c.ok("/api/v1/ttl-windows?kind=proxy").await;
    assert_eq!(w["items"][0]["name"], "proxy-1");
    assert_eq!(w["items"][0]["heartbeats_seen"], 0, "{w}");

    let mut e = p.expires.unwrap();
    e.seconds += 1;
    p.expires = Some(e);
    c.sim.put_server(p).await;
    c.quiesce().await;
    let w = c.ok("/api/v1/ttl-windows?kind=proxy").await;
    assert_eq!(w["items"][0]["heartbeats_seen"], 1, "{w}");

    c.flush().await;
    let ev = c.ok("/api/v1/events?name=proxy-1").await;
    let kinds = strs(&ev["items"], "event");
    assert_eq!(kinds, vec!["heartbeat", "update"], "newest first");
    c.shutdown().await;
}

/// Guards partial-cache healthiness: a kind the source rejects is reported,
/// keeps /readyz green, and raises no reason from data Lifeline lacks.
#[tokio::test(start_paused = true)]
async fn rejected_kind_keeps_readyz_green() {
    let c = Cluster::new().reject(Kind::TunnelConnection).start().await;
    c.ready().await;
    let (status, body) = c.get("/readyz").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["kinds"]["tunnel_connection"]["state"], "rejected");
    assert_eq!(body["kinds"]["proxy"]["state"], "ready");

    c.sim.pause_heartbeats("proxy-1").await;
    let e = c.expires(Kind::Proxy, "proxy-1").await;
    c.advance_to(e).await;
    let s = c.summary().await;
    assert_eq!(s["proxies"]["expired"], 1);
    assert_eq!(
        s["agents"]["healthy"], 6,
        "no tunnel data, no tunnel reason: {s}"
    );
    c.shutdown().await;
}

/// Guards compatibility with older sources: INIT without a WatchStatus
/// means every kind was accepted.
#[tokio::test(start_paused = true)]
async fn init_without_status_means_all_kinds_accepted() {
    let c = Cluster::new().legacy_init().start().await;
    c.ready().await;
    let (status, body) = c.get("/readyz").await;
    assert_eq!(status, 200);
    for k in ["proxy", "auth_server", "agent", "tunnel_connection"] {
        assert_eq!(body["kinds"][k]["state"], "ready", "{k}");
    }
    c.shutdown().await;
}

on_both_engines! {
/// Guards "bad input gets a clear error and loses nothing": every malformed
/// event is rejected with its own code, counted, recorded, and the watcher
/// keeps going.
#[tokio::test(start_paused = true)]
async fn bad_events_are_rejected_counted_and_recorded(store) {
    let c = Cluster::new().store(store).quiet().start().await;
    c.ready().await;
    let now = c.clock.now();
    let good = c.sim.get_server(Kind::Proxy, "proxy-1").await.unwrap();
    let with = |f: &dyn Fn(&mut pb::Server)| {
        let mut s = good.clone();
        f(&mut s);
        put(s)
    };
    c.sim.inject(with(&|s| s.kind = "node".into()));
    c.sim.inject(with(&|s| s.name = String::new()));
    c.sim
        .inject(with(&|s| s.ttl = Some(to_duration(Duration::ZERO))));
    c.sim.inject(with(&|s| {
        s.ttl = Some(prost_types::Duration {
            seconds: -5,
            nanos: 0,
        })
    }));
    c.sim.inject(with(&|s| {
        s.expires = Some(to_timestamp(now.saturating_sub(Duration::from_secs(7200))))
    }));
    c.sim.inject(pb::Event {
        r#type: pb::EventType::Put as i32,
        resource: None,
    });
    c.sim.inject(pb::Event {
        r#type: pb::EventType::Put as i32,
        resource: Some(pb::event::Resource::Tunnel(pb::TunnelConnection {
            name: "t".into(),
            agent: "agent-00001".into(),
            ..Default::default()
        })),
    });
    c.quiesce().await;

    let s = c.summary().await;
    let r = &s["ingest"]["rejected"];
    assert_eq!(r["unknown_kind"], 1, "{r}");
    assert_eq!(r["empty_name"], 1, "{r}");
    assert_eq!(r["bad_ttl"], 2, "{r}");
    assert_eq!(r["expired_too_long_ago"], 1, "{r}");
    assert_eq!(r["empty_event"], 1, "{r}");
    assert_eq!(r["missing_field"], 1, "{r}");
    assert_eq!(s["proxies"]["total"], 3, "nothing bad was applied");
    assert_eq!(c.get("/readyz").await.0, 200, "the watcher keeps going");

    c.flush().await;
    let ev = c.ok("/api/v1/events?event=rejected").await;
    let items = ev["items"].as_array().unwrap();
    assert_eq!(items.len(), 7);
    assert!(items.iter().any(|e| e["detail"]
        .as_str()
        .unwrap()
        .starts_with("bad_ttl: ttl -5s")));
    c.shutdown().await;
}
}

/// Guards bounded messages: an event over the size limit is counted as
/// oversized and the watcher resyncs rather than dying.
#[tokio::test(start_paused = true)]
async fn oversized_message_is_counted_and_the_watcher_resyncs() {
    let c = Cluster::new()
        .quiet()
        .max_message_bytes(128 * 1024)
        .start()
        .await;
    c.ready().await;
    let mut big = c.sim.get_server(Kind::Proxy, "proxy-2").await.unwrap();
    big.labels.insert("blob".into(), "x".repeat(256 * 1024));
    c.sim.inject(put(big));
    c.advance_until(
        "oversized counted and resynced",
        Duration::from_secs(60),
        || async {
            let s = c.summary().await;
            s["ingest"]["rejected"]["oversized_message"] == 1
                && s["watcher"]["ready"] == true
                && s["watcher"]["kinds"]["proxy"]["generation"] == 2
        },
    )
    .await;
    assert_eq!(c.ok("/api/v1/proxies/proxy-2").await["name"], "proxy-2");
    c.shutdown().await;
}
