//! The `teleport` source end to end: the simulator plays Teleport's Auth
//! API over mutual TLS (certificates made at start, an identity file in
//! tctl's layout), and the core stranded scenarios run through it. Plus
//! every way the identity or the TLS handshake can be wrong, each with the
//! message an operator reads.

use crate::support;
use std::time::Duration;

use lifeline::config::{AlpnUpgrade, SourceKind};
use lifeline::domain::Kind;
use lifeline::{Clock, Lifeline};
use lifeline_sim::{write_private, SimCluster, SimSpec, TeleportSpec};
use serde_json::{json, Value};
use support::{strs, Cluster};
use tonic_health::ServingStatus;

fn peering() -> TeleportSpec {
    TeleportSpec::default()
}

fn mesh() -> TeleportSpec {
    TeleportSpec {
        proxy_peering: false,
        ..TeleportSpec::default()
    }
}

// Six agents on three proxies: agent i holds tunnels to proxies i%3 and
// (i+1)%3 and is attached to auth server i%2 (see the stranded tests).

/// Proxies that stop heartbeating strand, through Teleport's watcher, the
/// agents whose ProxyIDs name only them.
#[tokio::test(start_paused = true)]
async fn teleport_proxy_expiry_strands_the_agents_tunnelled_only_there() {
    let c = Cluster::new().teleport(peering()).start().await;
    c.ready().await;
    let agent = c.ok("/api/v1/agents/agent-00001").await;
    assert_eq!(agent["labels"]["lifeline.dev/tunnels"], "observed");
    assert_eq!(agent["labels"]["teleport.dev/services"], "node");
    assert_eq!(strs(&agent["tunnels"], "proxy"), ["proxy-1", "proxy-2"]);
    let (_, page) = c.get_text("/agents/agent-00001").await;
    assert!(page.contains("lifeline.dev/tunnels=observed"), "{page}");
    assert!(
        !page.contains("tunnels-assumed"),
        "observed tunnels are not called assumed"
    );

    c.stop_proxies(&["proxy-1", "proxy-2"]).await;
    assert_eq!(
        c.agents_in("stranded").await,
        ["agent-00001", "agent-00004"]
    );
    let agent = c.ok("/api/v1/agents/agent-00001").await;
    assert_eq!(agent["reasons"], json!(["no_live_tunnel"]));
    c.shutdown().await;
}

/// An auth server NOT_SERVING over mutual TLS strands the agents
/// GetInstances attaches to it.
#[tokio::test(start_paused = true)]
async fn teleport_auth_not_serving_strands_the_agents_its_instances_name() {
    let c = Cluster::new().teleport(peering()).start().await;
    c.ready().await;
    let agent = c.ok("/api/v1/agents/agent-00002").await;
    assert_eq!(agent["auth_server"], "auth-2", "from GetInstances' AuthID");

    c.sim
        .set_auth_status("auth-1", ServingStatus::NotServing)
        .await;
    c.eventually("auth-1's agents stranded", || async {
        c.agents_in("stranded").await == ["agent-00001", "agent-00003", "agent-00005"]
    })
    .await;
    let agent = c.ok("/api/v1/agents/agent-00003").await;
    assert_eq!(agent["reasons"], json!(["auth_unhealthy"]));
    c.shutdown().await;
}

/// A killed watch stream turns every kind stale; nothing is stranded from
/// stale data, and a resync brings it back.
#[tokio::test(start_paused = true)]
async fn teleport_killed_stream_keeps_data_stale_until_resync() {
    let c = Cluster::new().teleport(peering()).start().await;
    c.ready().await;
    c.sim.set_accepting(false);
    c.sim.kill_streams();
    c.eventually("every kind stale", || async {
        let s = c.summary().await;
        Kind::ALL
            .iter()
            .all(|k| s["watcher"]["kinds"][k.as_str()]["state"] == "stale")
    })
    .await;
    let (code, body) = c.get_text("/readyz").await;
    assert_eq!(code, 503);
    assert!(body.contains("cluster source"), "{body}");

    c.sim.pause_heartbeats("proxy-1").await;
    c.sim.pause_heartbeats("proxy-2").await;
    let e = c
        .expires(Kind::Proxy, "proxy-1")
        .await
        .max(c.expires(Kind::Proxy, "proxy-2").await);
    c.advance_to(e).await;
    assert!(
        c.agents_in("stranded").await.is_empty(),
        "nothing expires from stale data"
    );

    c.sim.set_accepting(true);
    c.advance_until(
        "resynced and stranded",
        Duration::from_secs(120),
        || async { c.agents_in("stranded").await == ["agent-00001", "agent-00004"] },
    )
    .await;
    c.shutdown().await;
}

/// A kind Teleport does not confirm in INIT's WatchStatus is rejected;
/// without proxies no tunnel reason is raised.
#[tokio::test(start_paused = true)]
async fn teleport_unconfirmed_kind_is_rejected() {
    let c = Cluster::new()
        .teleport(peering())
        .reject(Kind::Proxy)
        .start()
        .await;
    c.ready().await;
    let s = c.summary().await;
    assert_eq!(s["watcher"]["kinds"]["proxy"]["state"], "rejected", "{s}");
    assert_eq!(s["watcher"]["kinds"]["agent"]["state"], "ready", "{s}");
    c.shutdown().await;
}

/// An older Auth sends INIT with no WatchStatus: every kind confirmed.
#[tokio::test(start_paused = true)]
async fn teleport_legacy_init_confirms_every_kind() {
    let c = Cluster::new()
        .teleport(peering())
        .legacy_init()
        .start()
        .await;
    c.ready().await;
    let s = c.summary().await;
    for k in Kind::ALL {
        assert_eq!(
            s["watcher"]["kinds"][k.as_str()]["state"],
            "ready",
            "{k}: {s}"
        );
    }
    c.shutdown().await;
}

/// DELETE events arrive in Teleport's shapes: a `ResourceHeader` for proxies
/// and nodes; for app, database and Kubernetes services a header naming
/// the host in `Description`, or the typed message with no `Spec` and the
/// host in `Description`. Each takes its service off its host.
#[tokio::test(start_paused = true)]
async fn teleport_deletes_take_teleports_shapes() {
    use lifeline_sim::{DeleteShape, SimService};
    let c = Cluster::new().teleport(peering()).start().await;
    c.ready().await;
    c.sim.delete_server(Kind::Proxy, "proxy-3").await;
    c.sim.delete_server(Kind::Agent, "agent-00006").await;
    c.quiesce().await;
    let (code, _) = c.get("/api/v1/agents/agent-00006").await;
    assert_eq!(code, 404);
    let proxies = c.ok("/api/v1/proxies").await;
    assert!(!support::names(&proxies["items"]).contains(&"proxy-3".to_string()));

    let long = Duration::from_secs(3600);
    let host = "agent-00002";
    let services = [
        (SimService::App, "grafana", DeleteShape::Header),
        (SimService::App, "wiki", DeleteShape::Typed),
        (SimService::Db, "orders", DeleteShape::Typed),
        (SimService::Kube, "prod", DeleteShape::Typed),
    ];
    for (kind, name, _) in services {
        c.sim.put_service(kind, host, name, long).await;
    }
    c.quiesce().await;
    let agent = c.ok(&format!("/api/v1/agents/{host}")).await;
    assert_eq!(
        agent["labels"]["teleport.dev/services"],
        "app_server,db_server,kube_server,node"
    );
    for (kind, name, shape) in services {
        c.sim.delete_service(kind, host, name, shape).await;
    }
    c.quiesce().await;
    let agent = c.ok(&format!("/api/v1/agents/{host}")).await;
    assert_eq!(agent["labels"]["teleport.dev/services"], "node");
    let s = c.summary().await;
    assert_eq!(s["ingest"]["rejected"], json!({}), "nothing refused: {s}");
    c.shutdown().await;
}

/// A host running a node and an app lives while either heartbeats: the
/// app expiring leaves it healthy, and so does the node stopping while
/// the app goes on.
#[tokio::test(start_paused = true)]
async fn teleport_host_with_two_services_lives_while_one_heartbeats() {
    let c = Cluster::new().teleport(peering()).start().await;
    c.ready().await;
    c.sim
        .put_app("agent-00001", "grafana", Duration::from_secs(5))
        .await;
    c.sim
        .put_app("agent-00002", "wiki", Duration::from_secs(3600))
        .await;
    c.quiesce().await;
    c.advance(Duration::from_secs(10)).await;
    assert_eq!(
        c.state("agent-00001").await,
        "healthy",
        "the node still heartbeats"
    );

    c.sim.pause_heartbeats("agent-00002").await;
    c.advance(Duration::from_secs(90)).await;
    assert_eq!(
        c.state("agent-00002").await,
        "healthy",
        "the app still heartbeats"
    );
    let agent = c.ok("/api/v1/agents/agent-00002").await;
    assert_eq!(agent["labels"]["teleport.dev/services"], "app_server,node");
    c.shutdown().await;
}

/// In agent mesh Teleport records no ProxyIDs: Lifeline assumes a tunnel
/// to every proxy and says so; losing two of three proxies degrades.
#[tokio::test(start_paused = true)]
async fn teleport_agent_mesh_assumes_every_proxy_and_says_so() {
    let c = Cluster::new().teleport(mesh()).start().await;
    c.ready().await;
    let agent = c.ok("/api/v1/agents/agent-00001").await;
    assert_eq!(agent["labels"]["lifeline.dev/tunnels"], "assumed");
    assert_eq!(
        strs(&agent["tunnels"], "proxy"),
        ["proxy-1", "proxy-2", "proxy-3"]
    );
    let (_, page) = c.get_text("/agents/agent-00001").await;
    assert!(
        page.contains("id=\"tunnels-assumed\""),
        "the page says so: {page}"
    );
    assert!(page.contains("Assumed, not observed"), "{page}");
    assert!(page.contains("teleport.dev/services=node"), "{page}");
    c.stop_proxies(&["proxy-1", "proxy-2"]).await;
    assert!(c.agents_in("stranded").await.is_empty());
    assert_eq!(c.agents_in("degraded").await.len(), 6);
    c.shutdown().await;
}

/// An Auth without PresenceService: proxies and auth servers are listed
/// over HTTPS on the same listener and mutual TLS.
#[tokio::test(start_paused = true)]
async fn teleport_lists_over_https_when_presence_is_unimplemented() {
    let c = Cluster::new()
        .teleport(TeleportSpec {
            presence: false,
            ..peering()
        })
        .start()
        .await;
    c.ready().await;
    assert_eq!(
        support::names(&c.ok("/api/v1/proxies").await["items"]).len(),
        3
    );
    c.shutdown().await;
}

/// A Teleport cluster played behind a proxy's TLS routing (and, with
/// `behind_balancer`, a layer-7 load balancer), and Lifeline set to reach
/// it through the routing with `mode`.
async fn through_routing(behind_balancer: bool, mode: AlpnUpgrade) -> support::Running {
    let spec = TeleportSpec {
        tls_routing: true,
        behind_balancer,
        ..peering()
    };
    let name = spec.cluster_name.clone();
    Cluster::new()
        .teleport(spec)
        .config(move |cfg| {
            cfg.cluster.tls_routing = true;
            cfg.cluster.cluster_name = name;
            cfg.cluster.alpn_upgrade = mode;
        })
        .start()
        .await
}

/// Through a proxy's TLS routing: only the Auth routing ALPN is accepted.
#[tokio::test(start_paused = true)]
async fn teleport_through_tls_routing_offers_the_auth_alpn() {
    let c = through_routing(false, AlpnUpgrade::Auto).await;
    // Auth health goes straight to each Auth (ALPN h2), which the routing
    // listener does not serve in the simulator: readiness of the watch is
    // the point here.
    support::real_timeout(support::REAL_WAIT, c.ll().fleet.wait_ready())
        .await
        .expect("ready through TLS routing")
        .expect("fleet alive");
    assert_eq!(
        c.sim.upgrades(),
        0,
        "a proxy that negotiates ALPN is dialled straight"
    );
    // Without the routing protocol the same listener refuses Lifeline.
    let Some(identity) = c.sim.pki().map(|p| p.identity("lifeline")) else {
        panic!("a Teleport simulation has a PKI")
    };
    let body = failing_source(
        &c.sim,
        &identity.expect("identity"),
        "teleport.cluster.local",
    )
    .await;
    assert!(body.contains("none of the offered ALPN"), "{body}");
    c.shutdown().await;
}

/// Guards proxies behind a layer-7 load balancer, which ends TLS and keeps
/// no ALPN: Lifeline finds it out with Teleport's probe, reaches the
/// Auth through the proxy's connection upgrade (the routed TLS inside a
/// WebSocket the proxy pings), and stays connected while the pings come
/// and go. `always` upgrades even where the proxy could be reached
/// straight.
#[tokio::test(start_paused = true)]
async fn a_proxy_behind_a_layer7_balancer_is_reached_through_the_alpn_upgrade() {
    for (behind_balancer, mode) in [(true, AlpnUpgrade::Auto), (false, AlpnUpgrade::Always)] {
        let c = through_routing(behind_balancer, mode).await;
        support::real_timeout(support::REAL_WAIT, c.ll().fleet.wait_ready())
            .await
            .expect("ready through the connection upgrade")
            .expect("fleet alive");
        assert!(c.sim.upgrades() >= 1, "{mode:?}: the upgrade was used");
        let generation = || {
            c.ll()
                .stats
                .watch_generations
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let before = generation();
        let pongs = c.sim.upgrade_pongs();
        // Two minutes of the proxy's pings (one every 15 s), each
        // answered, on a quiet watch.
        for _ in 0..8 {
            c.advance(Duration::from_secs(15)).await;
        }
        c.eventually("each of the proxy's pings is answered", || async {
            c.sim.upgrade_pongs() >= pongs + 8
        })
        .await;
        assert_eq!(generation(), before, "{mode:?}: the watch stayed up");
        c.sim
            .put_app("agent-00002", "grafana", Duration::from_secs(3600))
            .await;
        c.eventually("a heartbeat crosses the upgraded watch", || async {
            let agent = c.ok("/api/v1/agents/agent-00002").await;
            agent["labels"]["teleport.dev/services"] == "app_server,node"
        })
        .await;
        c.shutdown().await;
    }
}

/// Starts Lifeline against `sim` with `identity` and `server_name`, and
/// returns what `/readyz` says once the source has failed.
async fn failing_source(sim: &SimCluster, identity: &str, server_name: &str) -> String {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("identity");
    write_private(&path, identity).expect("identity written");
    let mut cfg = lifeline::config::Config::default();
    cfg.server.listen = ([127, 0, 0, 1], 0).into();
    cfg.server.grpc_listen = ([127, 0, 0, 1], 0).into();
    cfg.storage.path = dir.path().join("l.db");
    cfg.cluster.source = SourceKind::Teleport;
    cfg.cluster.addr = sim.addr().to_string();
    cfg.cluster.identity_file = Some(path);
    cfg.cluster.server_name = server_name.to_string();
    support::test_access(&mut cfg);
    let ll = Lifeline::start(&cfg, sim.clock())
        .await
        .expect("starts: the identity itself is sound");
    let http = reqwest::Client::new();
    let url = format!("http://{}/readyz", ll.http_addr);
    let mut body = String::new();
    for _ in 0..200 {
        body = http
            .get(&url)
            .send()
            .await
            .expect("readyz")
            .text()
            .await
            .unwrap_or_default();
        if body.contains("cluster source") {
            break;
        }
        support::real_sleep(Duration::from_millis(25)).await;
    }
    ll.shutdown().await;
    body
}

/// Every TLS failure names what is wrong: a CA that does not sign the
/// server, a client certificate the server refuses, a wrong server name.
#[tokio::test]
async fn teleport_tls_failures_say_what_is_wrong() {
    support::logs();
    let sim = SimCluster::start(
        SimSpec {
            teleport: Some(peering()),
            agents: 2,
            ..SimSpec::default()
        },
        Clock::system(),
    )
    .await
    .expect("sim starts");
    let Some(pki) = sim.pki() else {
        panic!("a Teleport simulation has a PKI")
    };
    let wrong_ca = pki
        .identity_trusting_another_ca("lifeline")
        .expect("identity");
    let body = failing_source(&sim, &wrong_ca, "teleport.cluster.local").await;
    assert!(body.contains("not signed by a trusted CA"), "{body}");

    let foreign = pki.foreign_identity("lifeline").expect("identity");
    let body = failing_source(&sim, &foreign, "teleport.cluster.local").await;
    assert!(
        body.contains("refused Lifeline's client certificate"),
        "{body}"
    );

    let good = pki.identity("lifeline").expect("identity");
    let body = failing_source(&sim, &good, "auth.example.com").await;
    assert!(body.contains("not valid for the server name"), "{body}");
    sim.shutdown();
}

/// A bad identity file stops start-up with a message naming the file,
/// and never with the key it holds.
#[tokio::test]
async fn teleport_bad_identity_file_stops_start_up_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("identity");
    // A private key and nothing else: no certificate to present.
    let key = rcgen::KeyPair::generate().expect("key").serialize_pem();
    write_private(&path, &key).expect("written");
    let mut cfg = lifeline::config::Config::default();
    cfg.storage.path = dir.path().join("l.db");
    cfg.cluster.source = SourceKind::Teleport;
    cfg.cluster.addr = "127.0.0.1:1".into();
    cfg.cluster.identity_file = Some(path.clone());
    let Err(e) = Lifeline::start(&cfg, Clock::system()).await else {
        panic!("a bad identity must stop start-up")
    };
    let msg = e.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("certificate"), "says what is missing: {msg}");
    assert!(!msg.to_lowercase().contains("private key-----"), "{msg}");
    let body = key.lines().nth(1).unwrap_or("-");
    assert!(!msg.contains(body), "key material in the message: {msg}");
}

/// Guards agentless nodes: registered OpenSSH hosts (`node` of SubKind
/// `openssh`, no expiry) are not agents: skipped without a rejection or a
/// warning per listing, and counted in the summary.
#[tokio::test(start_paused = true)]
async fn agentless_openssh_nodes_are_counted_not_watched() {
    let c = Cluster::new()
        .teleport(TeleportSpec {
            agentless_nodes: 3,
            ..TeleportSpec::default()
        })
        .start()
        .await;
    c.ready().await;
    let summary = c.ok("/api/v1/summary").await;
    assert_eq!(summary["ingest"]["agentless_nodes"], 3, "{summary}");
    assert_eq!(
        summary["ingest"]["rejected"]["missing_expires"],
        serde_json::Value::Null,
        "no rejection for a host without a heartbeat: {summary}"
    );
    let agents = c.ok("/api/v1/agents?limit=1000").await;
    let names = strs(&agents["items"], "name");
    assert_eq!(names.len(), 6, "only the agents: {names:?}");
    assert!(
        names.iter().all(|n| !n.starts_with("openssh-")),
        "{names:?}"
    );
    c.shutdown().await;
}

/// Guards refused kinds: a kind the identity's role cannot read is left
/// out of the watch by Teleport; Lifeline watches the rest, stays ready,
/// and says which kind it does not watch and why in the summary, in
/// `/readyz` (without failing it) and in the dashboard's header.
#[tokio::test(start_paused = true)]
async fn a_kind_the_role_cannot_read_is_said_to_be_unwatched() {
    let c = Cluster::new()
        .teleport(TeleportSpec {
            denied_kinds: vec!["windows_desktop_service".into()],
            ..TeleportSpec::default()
        })
        .start()
        .await;
    c.ready().await;
    let summary = c.ok("/api/v1/summary").await;
    let unwatched = &summary["ingest"]["unwatched_kinds"];
    assert_eq!(unwatched[0]["kind"], "windows_desktop_service", "{summary}");
    assert!(
        unwatched[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("role"),
        "{unwatched}"
    );
    let (status, ready) = c.get("/readyz").await;
    assert_eq!(status, 200, "the rest is watched: {ready}");
    assert!(
        ready["problems"]
            .to_string()
            .contains("windows_desktop_service"),
        "{ready}"
    );
    let (_, page) = c.get_text("/").await;
    assert!(
        page.contains("not watching windows_desktop_service"),
        "the header says so"
    );
    assert_eq!(c.agents_in("healthy").await.len(), 6);
    c.shutdown().await;
}

/// Database services carrying cloud CA bundles (~150 KB each), 40 of them
/// against a 1 MiB message limit, with the default page size of 500.
fn big_databases(sizes: Vec<usize>) -> Cluster {
    Cluster::new()
        .teleport(TeleportSpec {
            db_servers: sizes,
            ..TeleportSpec::default()
        })
        .config(|cfg| cfg.cluster.max_message_bytes = 1024 * 1024)
}

/// Guards listings that fit: a page too large for one message is asked
/// for again in halves until it fits, and Lifeline becomes ready with
/// every database service folded into its host.
#[tokio::test(start_paused = true)]
async fn pages_too_large_for_a_message_are_asked_for_in_halves() {
    let c = big_databases(vec![154_000; 40]).start().await;
    c.ready().await;
    let agent = c.ok("/api/v1/agents/agent-00001").await;
    let services = agent["labels"]["teleport.dev/services"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(services.contains("db_server"), "{agent}");
    c.shutdown().await;
}

/// Guards a resource too large for any page: `/readyz` names the kind and
/// the size, and the failing sessions back off towards the cap instead of
/// listing the whole cluster again every few hundred milliseconds.
#[tokio::test(start_paused = true)]
async fn a_resource_too_large_for_any_page_is_named_and_retries_back_off() {
    let c = big_databases(vec![2 * 1024 * 1024]).start().await;
    c.eventually("/readyz names the resource that does not fit", || async {
        let (status, v) = c.get("/readyz").await;
        let p = v["problems"].to_string();
        status == 503 && p.contains("db_server") && p.contains("does not fit")
    })
    .await;
    let sessions = || {
        c.ll()
            .stats
            .watch_generations
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // A minute for the backoff to grow (250 ms doubling to 30 s) ...
    for _ in 0..60 {
        c.advance(Duration::from_secs(1)).await;
        support::real_sleep(Duration::from_millis(20)).await;
    }
    // ... then a minute in which it stays near its cap: a few sessions,
    // where a backoff that restarted from its base would make dozens.
    let before = sessions();
    for _ in 0..60 {
        c.advance(Duration::from_secs(1)).await;
        support::real_sleep(Duration::from_millis(20)).await;
    }
    let late = sessions() - before;
    assert!(late <= 8, "{late} sessions in the second minute");
    c.shutdown().await;
}

async fn metric(c: &support::Running, series: &str) -> f64 {
    let (_, text) = c.get_text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Guards renewed identities (Machine ID rewrites its identity every ~20
/// minutes with a one-hour certificate): a rewritten identity file is
/// taken up without a restart and new sessions present it; a file that
/// changed but cannot be used leaves the previous identity in place. The
/// certificate's expiry is a metric and on `/readyz`.
#[tokio::test(start_paused = true)]
async fn a_renewed_identity_file_is_taken_up_without_a_restart() {
    use lifeline::ingest::teleport::renew::RECHECK;
    let c = Cluster::new().teleport(peering()).start().await;
    c.ready().await;
    let path = c
        .cfg
        .cluster
        .identity_file
        .clone()
        .expect("an identity file");
    let expiry = metric(&c, "lifeline_cluster_identity_expiry_timestamp_seconds").await;
    assert!(expiry > 0.0, "the expiry is a metric");
    let (_, ready) = c.get("/readyz").await;
    assert!(
        ready["cluster_identity"]["seconds_left"]
            .as_i64()
            .unwrap_or(0)
            > 0,
        "{ready}"
    );

    write_private(&path, "not an identity\n").expect("written");
    c.advance(RECHECK + Duration::from_secs(1)).await;
    support::real_sleep(Duration::from_millis(50)).await;
    assert_eq!(
        metric(&c, "lifeline_cluster_identity_renewals_total").await,
        0.0,
        "an unusable file is not taken"
    );

    c.sim.write_identity(&path).expect("tbot writes a new one");
    c.eventually("the renewed identity is taken up", || async {
        c.advance(Duration::from_secs(1)).await;
        metric(&c, "lifeline_cluster_identity_renewals_total").await == 1.0
    })
    .await;
    let before = c
        .ll()
        .stats
        .watch_generations
        .load(std::sync::atomic::Ordering::Relaxed);
    c.sim.kill_streams();
    c.eventually("a new session, with the new identity, is ready", || async {
        c.advance(Duration::from_millis(500)).await;
        let now = c
            .ll()
            .stats
            .watch_generations
            .load(std::sync::atomic::Ordering::Relaxed);
        now > before && c.get("/readyz").await.0 == 200
    })
    .await;
    c.shutdown().await;
}

/// Guards Machine ID's identities end to end: the simulated `tbot`
/// issues a one-hour certificate every twenty minutes and the Auth checks
/// it against the cluster's clock. Three hours on, with the watch
/// re-opened after each hour, Lifeline still reaches the cluster: every
/// new session presents a certificate that has not expired.
#[tokio::test(start_paused = true)]
async fn a_tbot_identity_renewed_every_twenty_minutes_keeps_the_cluster() {
    let spec = TeleportSpec {
        identity_renewal: Some((Duration::from_secs(20 * 60), Duration::from_secs(3600))),
        ..peering()
    };
    let c = Cluster::new().teleport(spec).start().await;
    c.ready().await;
    let generations = || {
        c.ll()
            .stats
            .watch_generations
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    for hour in 1..=3 {
        // An hour in steps the identity check (every 10 s) keeps up with.
        for _ in 0..360 {
            tokio::time::advance(Duration::from_secs(10)).await;
            c.quiesce().await;
        }
        let before = generations();
        c.sim.kill_streams();
        c.eventually("a new session with an unexpired certificate", || async {
            c.advance(Duration::from_millis(500)).await;
            generations() > before && c.get("/readyz").await.0 == 200
        })
        .await;
        let renewals = metric(&c, "lifeline_cluster_identity_renewals_total").await;
        assert!(
            renewals >= f64::from(3 * hour - 1),
            "hour {hour}: {renewals} renewals"
        );
        let expiry = metric(&c, "lifeline_cluster_identity_expiry_timestamp_seconds").await;
        let now = c.sim.clock().now().as_millis() as f64 / 1000.0;
        assert!(
            expiry > now,
            "hour {hour}: the certificate in use is unexpired"
        );
    }
    c.shutdown().await;
}

/// Guards an older Auth's watch permissions: one kind the role cannot
/// read refuses the whole watch even with partial success asked for.
/// Lifeline finds the kind, watches the others, becomes ready, and says
/// which kind it does not watch and why.
#[tokio::test(start_paused = true)]
async fn an_older_auth_refusing_the_whole_watch_for_one_kind_is_watched_without_it() {
    let c = Cluster::new()
        .teleport(TeleportSpec {
            denied_kinds: vec!["kube_server".into()],
            whole_watch_denied: true,
            ..TeleportSpec::default()
        })
        .start()
        .await;
    c.ready().await;
    let summary = c.ok("/api/v1/summary").await;
    let unwatched = &summary["ingest"]["unwatched_kinds"];
    assert_eq!(unwatched.as_array().map(Vec::len), Some(1), "{unwatched}");
    assert_eq!(unwatched[0]["kind"], "kube_server");
    assert!(
        unwatched[0]["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("whole watch"),
        "{unwatched}"
    );
    assert_eq!(c.agents_in("healthy").await.len(), 6);
    c.shutdown().await;
}

/// Guards `lifeline demo --source teleport --teleport-version 16`: the
/// simulated Auth serves no grpc.health.v1 and an INIT without
/// WatchStatus, as clusters older than v18 do; Lifeline watches it, rests
/// each Auth's state on its heartbeat, and strands nobody for it.
#[tokio::test]
async fn the_demo_plays_an_older_teleport_without_a_false_alarm() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_lifeline"))
        .args([
            "demo",
            "--source",
            "teleport",
            "--teleport-version",
            "16",
            "--listen",
            "127.0.0.1:0",
            "--grpc-listen",
            "127.0.0.1:0",
            "--agents",
            "6",
            "--ttl",
            "2s",
            "--chaos-period",
            "0",
            "--token",
            "older-teleport",
            "--db",
        ])
        .arg(dir.path().join("demo.db"))
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("lifeline demo starts");
    let out = child.stdout.take().expect("stdout");
    let mut lines = tokio::io::BufReader::new(out).lines();
    let base = support::real_timeout(Duration::from_secs(60), async {
        while let Ok(Some(l)) = lines.next_line().await {
            if let Some(u) = l.trim().strip_prefix("dashboard") {
                return Some(u.trim().trim_end_matches('/').to_string());
            }
        }
        None
    })
    .await
    .flatten()
    .expect("the demo prints its dashboard URL");
    let http = reqwest::Client::new();
    let get = |path: &str| {
        let url = format!("{base}{path}");
        let http = http.clone();
        async move {
            let r = http.get(url).send().await.ok()?;
            r.json::<serde_json::Value>().await.ok()
        }
    };
    // A real process: real time.
    let start = lifeline::clock::Stopwatch::start();
    loop {
        let auths = get("/api/v1/auth-servers").await.unwrap_or_default();
        let items = auths["items"].as_array().cloned().unwrap_or_default();
        if !items.is_empty()
            && items
                .iter()
                .all(|a| a["health"] == "NOT_SERVED" && a["evidence"] == "heartbeat")
        {
            break;
        }
        assert!(start.elapsed() < Duration::from_secs(60), "{auths}");
        support::real_sleep(Duration::from_millis(200)).await;
    }
    // Past the grace (2 s here) several times over: nobody is stranded
    // for an Auth whose health is not served.
    for _ in 0..25 {
        let summary = get("/api/v1/summary").await.unwrap_or_default();
        assert_eq!(summary["agents"]["stranded"], 0, "{summary}");
        assert_eq!(summary["ingest"]["agentless_nodes"], 2, "{summary}");
        support::real_sleep(Duration::from_millis(200)).await;
    }
    let _ = child.kill().await;
}

/// Guards filtered roles: a role whose `node_labels` are not `'*': '*'`
/// gets every heartbeat on the watch but partial listings. Services the
/// watch shows that a listing made since still lacks are counted in the
/// summary and said on `/readyz` (without failing it), naming the fix.
#[tokio::test(start_paused = true)]
async fn services_the_listing_hides_but_the_watch_shows_are_said() {
    let c = Cluster::new()
        .teleport(TeleportSpec {
            hidden_from_listing: 2,
            ..TeleportSpec::default()
        })
        .start()
        .await;
    c.ready().await;
    c.eventually("the hidden services are counted", || async {
        c.advance(Duration::from_secs(5)).await;
        c.ok("/api/v1/summary").await["ingest"]["listing_hidden"] == 2
    })
    .await;
    let (status, ready) = c.get("/readyz").await;
    assert_eq!(status, 200, "{ready}");
    let problems = ready["problems"].to_string();
    assert!(
        problems.contains("hides 2") && problems.contains("node_labels"),
        "{ready}"
    );
    c.shutdown().await;
}

/// Teleport's agents hold no signal stream; a sidecar beside some of them
/// does. When an auth server turns NOT_SERVING, the agents it strands that
/// have a sidecar are restarted (a reconnect the sidecar carries out as a
/// graceful restart: fresh tunnels, a serving auth server, a heartbeat)
/// and recover; the ones without stay stranded until it heals.
#[tokio::test(start_paused = true)]
async fn sidecars_restart_the_agents_an_unserving_auth_strands() {
    use lifeline::config::Ratio;
    let c = Cluster::new()
        .teleport(peering())
        .signals(|s| s.storm_share = Ratio::ONE)
        .start()
        .await;
    c.ready().await;
    let stop = tokio_util::sync::CancellationToken::new();
    let sidecars = lifeline_sim::SimAgent::start_sidecars(
        &c.sim,
        c.ll().grpc_addr,
        0.5,
        Duration::from_secs(3),
        &stop,
    )
    .await
    .expect("sidecars start");
    let with: Vec<String> = sidecars.iter().map(|a| a.name.clone()).collect();
    assert!(
        !with.is_empty() && with.len() < 6,
        "some hosts have one: {with:?}"
    );
    c.eventually("every sidecar connected", || async {
        c.ll().hub.connected() == with.len()
    })
    .await;
    c.sim
        .set_auth_status("auth-1", ServingStatus::NotServing)
        .await;
    let stranded = ["agent-00001", "agent-00003", "agent-00005"];
    let restarted: Vec<&str> = stranded
        .iter()
        .copied()
        .filter(|a| with.iter().any(|w| w == a))
        .collect();
    let left: Vec<&str> = stranded
        .iter()
        .copied()
        .filter(|a| !restarted.contains(a))
        .collect();
    c.advance_until(
        "the agents with a sidecar restarted and healthy",
        Duration::from_secs(60),
        || async {
            let now = c.agents_in("stranded").await;
            restarted.iter().all(|a| !now.iter().any(|s| s == a))
                && left.iter().all(|a| now.iter().any(|s| s == a))
        },
    )
    .await;
    // The agent's heartbeat can reach the fleet before its sidecar's ack
    // reaches the audit.
    c.eventually("every restart acked", || async {
        let v = c.ok("/api/v1/signals?kind=reconnect").await;
        v["items"]
            .as_array()
            .is_some_and(|s| !s.is_empty() && s.iter().all(|s| s["outcome"] != "delivered"))
    })
    .await;
    let signals = c.ok("/api/v1/signals?kind=reconnect").await;
    let acked: Vec<&Value> = signals["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter(|s| s["outcome"] == "acked")
        .collect();
    assert!(!acked.is_empty(), "{signals}");
    assert!(
        acked.iter().all(|s| s["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("restarted (simulated)")
            && s["reason"] == "auth_unhealthy"),
        "{signals}"
    );
    assert!(
        acked
            .iter()
            .all(|s| restarted.contains(&s["agent"].as_str().unwrap_or_default())),
        "only agents with a sidecar: {signals}"
    );
    stop.cancel();
    c.shutdown().await;
}

/// A sidecar whose restarts take five minutes (a Kubernetes eviction:
/// Teleport's drain, then the replacement's readiness) says so when its
/// stream opens. Lifeline waits that long for the ack rather than its own
/// three-minute `signals.restart_ack_timeout`: the restart is acked, never
/// counted as timed out, and holds its place under the cap until then.
#[tokio::test(start_paused = true)]
async fn a_restart_its_sidecar_says_takes_five_minutes_is_acked_not_timed_out() {
    use lifeline::config::Ratio;
    let c = Cluster::new()
        .teleport(peering())
        .signals(|s| {
            s.storm_share = Ratio::ONE;
            s.auto_reconnect = false;
        })
        .start()
        .await;
    c.ready().await;
    assert_eq!(c.cfg.signals.restart_ack_timeout, Duration::from_secs(180));
    let stop = tokio_util::sync::CancellationToken::new();
    let restart = Duration::from_secs(300);
    let sidecars =
        lifeline_sim::SimAgent::start_sidecars(&c.sim, c.ll().grpc_addr, 1.0, restart, &stop)
            .await
            .expect("sidecars start");
    c.eventually("every sidecar connected", || async {
        c.ll().hub.connected() == sidecars.len()
    })
    .await;
    let agent = sidecars[0].name.clone();
    let (status, body) = c
        .post(
            &format!("/api/v1/agents/{agent}/reconnect"),
            r#"{"reason":"slow eviction"}"#,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("id");
    let row = c.ok(&format!("/api/v1/signals/{id}")).await;
    assert_eq!(row["restart"], true, "{row}");
    let (created, deadline) = (
        lifeline::Ts::parse_rfc3339(row["created"].as_str().expect("created")).expect("time"),
        lifeline::Ts::parse_rfc3339(row["deadline"].as_str().expect("deadline")).expect("time"),
    );
    assert_eq!(
        deadline.since(created),
        restart + Duration::from_secs(30),
        "the sidecar's own wait, past restart_ack_timeout: {row}"
    );
    // Past Lifeline's own 180 s, still awaited.
    c.advance(Duration::from_secs(200)).await;
    let row = c.ok(&format!("/api/v1/signals/{id}")).await;
    assert_eq!(row["outcome"], "delivered", "still awaited at 200 s: {row}");
    c.advance_until(
        "the five-minute restart acked",
        Duration::from_secs(150),
        || async { c.ok(&format!("/api/v1/signals/{id}")).await["outcome"] == "acked" },
    )
    .await;
    let m = c.get_text("/metrics").await.1;
    assert!(
        m.contains(r#"lifeline_signals_total{kind="reconnect",outcome="timeout"} 0"#),
        "no timeout counted:\n{}",
        m.lines()
            .filter(|l| l.contains("outcome="))
            .collect::<Vec<_>>()
            .join("\n")
    );
    stop.cancel();
    c.shutdown().await;
}
