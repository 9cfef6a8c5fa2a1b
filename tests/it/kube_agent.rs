//! `lifeline-agent` with `restart = "kubernetes"`, for Teleport's kube
//! agents: one sidecar for a StatefulSet's pods, against a real Lifeline
//! (gRPC over TLS, its join token) and a stand-in Kubernetes API server
//! (`support::kube_api`). Real time: the stand-in's pods come back after
//! real delays.

use std::time::Duration;

use lifeline_agent::config::{FileConfig, List, Method};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::support::kube_api::{KubeApi, Replacement, NAMESPACE, STATEFULSET};
use crate::support::{Cluster, Running};

const HOST: &str = "agent-00001";
const POD: &str = "teleport-kube-agent-0";

/// The sidecar's configuration for the running Lifeline and the stand-in.
fn sidecar(c: &Running, kube: &KubeApi, dir: &std::path::Path) -> FileConfig {
    FileConfig {
        restart: Method::Kubernetes,
        statefulset: STATEFULSET.into(),
        namespace: Some(NAMESPACE.into()),
        kube_api: Some(kube.url.clone()),
        diag_port: kube.diag_port,
        ready_timeout: Duration::from_secs(20),
        report_interval: Duration::from_millis(500),
        ..crate::sidecar::joining(c, dir)
    }
}

/// A Lifeline (TLS on gRPC, manual reconnects every second), a stand-in
/// API server with one agent pod, and the sidecar between them, its
/// stream open for the pod's host ID.
async fn setup(
    replacement: Replacement,
    tweak: impl FnOnce(&mut FileConfig),
) -> (Running, KubeApi, CancellationToken, tempfile::TempDir) {
    let c = Cluster::new()
        .agents(2)
        .tls(false)
        .config(|cfg| cfg.access.manual_reconnect_interval = Duration::from_secs(1))
        .start()
        .await;
    c.ready().await;
    let kube = KubeApi::start(&[(POD, Some(HOST))], replacement).await;
    let dir = tempfile::tempdir().expect("dir");
    let mut file = sidecar(&c, &kube, dir.path());
    tweak(&mut file);
    let cfg = file.check().expect("the sidecar's configuration checks");
    let stop = CancellationToken::new();
    tokio::spawn(lifeline_agent::run(cfg, stop.clone()));
    c.eventually("the pod's stream open", || async {
        c.ll().hub.reachable(HOST)
    })
    .await;
    (c, kube, stop, dir)
}

async fn reconnect(c: &Running) -> i64 {
    let (status, body) = c
        .post(
            &format!("/api/v1/agents/{HOST}/reconnect"),
            r#"{"reason":"test"}"#,
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_i64().expect("signal id")
}

async fn outcome(c: &Running, id: i64, want: &str) -> Value {
    c.eventually(&format!("signal {id} {want}"), || async {
        c.ok(&format!("/api/v1/signals/{id}")).await["outcome"] == want
    })
    .await;
    c.ok(&format!("/api/v1/signals/{id}")).await
}

fn detail(row: &Value) -> String {
    row["detail"].as_str().unwrap_or_default().to_string()
}

/// A Reconnect evicts the pod (its UID a precondition); the ack comes when
/// the StatefulSet's replacement is Ready with a new container, and names
/// both pods. A second within the cooldown is refused, nothing evicted.
#[tokio::test]
async fn a_reconnect_evicts_the_pod_and_is_acked_when_its_replacement_is_ready() {
    let (c, kube, stop, _dir) = setup(Replacement::after(500), |_| {}).await;
    let old = kube.uid(POD).expect("the pod");

    let id = reconnect(&c).await;
    let row = outcome(&c, id, "acked").await;
    let said = detail(&row);
    let new = kube.uid(POD).expect("the replacement");
    assert_ne!(old, new);
    assert!(
        said.contains(&format!("uid {old}")),
        "the old pod named: {said}"
    );
    assert!(
        said.contains(&format!("uid {new}")),
        "the new pod named: {said}"
    );
    assert!(
        said.contains("containerd://teleport-kube-agent-0-1")
            && said.contains("containerd://teleport-kube-agent-0-2"),
        "both containers named: {said}"
    );
    assert!(said.contains("/readyz pid 102"), "{said}");
    assert_eq!(row["restart"], true, "{row}");
    assert_eq!(kube.evictions(), vec![POD.to_string()]);

    tokio::time::sleep(Duration::from_millis(1100)).await;
    let id = reconnect(&c).await;
    let row = outcome(&c, id, "refused").await;
    assert!(detail(&row).contains("cooling down"), "{row}");
    assert_eq!(kube.evictions().len(), 1, "no second eviction");
    stop.cancel();
}

/// A PodDisruptionBudget that allows no disruption now: the API server's
/// 429 is `refused` with its reason, nothing is evicted, and no cooldown
/// starts (the next try, once the budget allows, goes).
#[tokio::test]
async fn a_disruption_budget_429_is_refused_with_its_reason() {
    let quick = Replacement::after(200);
    let (c, kube, stop, _dir) = setup(quick, |_| {}).await;
    kube.pdb_allows(false);
    let id = reconnect(&c).await;
    let row = outcome(&c, id, "refused").await;
    let said = detail(&row);
    assert!(
        said.contains("PodDisruptionBudget") && said.contains("429"),
        "{said}"
    );
    assert!(kube.evictions().is_empty());

    kube.pdb_allows(true);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let id = reconnect(&c).await;
    outcome(&c, id, "acked").await;
    assert_eq!(kube.evictions().len(), 1);
    stop.cancel();
}

/// A replacement that never turns Ready: the restart fails once
/// `ready_timeout` has passed, saying what it last saw.
#[tokio::test]
async fn a_replacement_that_never_turns_ready_fails_after_the_timeout() {
    let (c, kube, stop, _dir) = setup(Replacement::NEVER, |f| {
        f.ready_timeout = Duration::from_secs(2)
    })
    .await;
    let id = reconnect(&c).await;
    let row = outcome(&c, id, "failed").await;
    let said = detail(&row);
    assert!(
        said.contains("no replacement was Ready with a new container within 2s")
            && said.contains("not Ready"),
        "{said}"
    );
    assert_eq!(kube.evictions().len(), 1, "it was evicted");
    stop.cancel();
}

/// Before an eviction the target is proven: a pod that now runs another
/// agent (its state Secret names another host), one already terminating,
/// and one the StatefulSet replaced between the proof and the eviction
/// (the eviction's UID precondition: 409) are each refused, and nothing
/// is evicted.
#[tokio::test]
async fn a_pod_that_is_not_the_one_proven_is_never_evicted() {
    let quick = Replacement::after(200);
    let (c, kube, stop, _dir) = setup(quick, |_| {}).await;

    kube.set_host(POD, "agent-00002");
    let id = reconnect(&c).await;
    let said = detail(&outcome(&c, id, "refused").await);
    assert!(
        said.contains("now runs host agent-00002, not agent-00001"),
        "{said}"
    );
    kube.set_host(POD, HOST);

    kube.terminating(POD);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let id = reconnect(&c).await;
    let said = detail(&outcome(&c, id, "refused").await);
    assert!(said.contains("already terminating"), "{said}");
    assert!(kube.evictions().is_empty());
    stop.cancel();

    // A fresh pod, replaced as the eviction arrives.
    let (c, kube, stop, _dir) = setup(quick, |_| {}).await;
    kube.replace_on_evict();
    let id = reconnect(&c).await;
    let said = detail(&outcome(&c, id, "refused").await);
    assert!(
        said.contains("was replaced before the eviction") && said.contains("409"),
        "{said}"
    );
    assert!(
        kube.evictions().is_empty(),
        "the replacement was not evicted"
    );
    stop.cancel();
}

/// A dry run evicts nothing and says what it would have evicted.
#[tokio::test]
async fn a_dry_run_says_which_pod_it_would_evict() {
    let quick = Replacement::after(200);
    let (c, kube, stop, _dir) = setup(quick, |f| f.dry_run = true).await;
    let id = reconnect(&c).await;
    let row = outcome(&c, id, "refused").await;
    let said = detail(&row);
    assert!(
        said.contains("dry run: would evict pod teleport-kube-agent-0"),
        "{said}"
    );
    assert!(kube.evictions().is_empty());
    stop.cancel();
}

/// A pod whose state Secret names no host yet is not spoken for (its
/// stream would have no name); the others are.
#[tokio::test]
async fn a_pod_without_a_host_id_is_not_spoken_for() {
    let c = Cluster::new().agents(2).tls(false).start().await;
    let quick = Replacement::after(200);
    let kube = KubeApi::start(&[(POD, Some(HOST)), ("teleport-kube-agent-1", None)], quick).await;
    let dir = tempfile::tempdir().expect("dir");
    let cfg = sidecar(&c, &kube, dir.path()).check().expect("checks");
    let stop = CancellationToken::new();
    tokio::spawn(lifeline_agent::run(cfg, stop.clone()));
    c.eventually("the first pod's stream open", || async {
        c.ll().hub.reachable(HOST)
    })
    .await;
    // No stream under any other name: not the second host, and not a
    // name made up for the pod without one (its own name, say).
    assert!(!c.ll().hub.reachable("agent-00002"));
    let names = c.ll().hub.connected_agents();
    assert!(
        !names.iter().any(|n| n.starts_with("teleport-kube-agent")),
        "{names:?}"
    );
    stop.cancel();
}

/// The configuration: a StatefulSet name that is no Kubernetes name, a
/// host_id given beside it, and plain http:// to another machine are
/// refused, each naming its field.
#[test]
fn a_kubernetes_configuration_is_checked() {
    let base = || FileConfig {
        lifeline: List::One("http://127.0.0.1:1".into()),
        restart: Method::Kubernetes,
        statefulset: "teleport-kube-agent".into(),
        ..FileConfig::default()
    };
    assert!(base().check().is_ok());
    for (field, f) in [
        (
            "statefulset",
            FileConfig {
                statefulset: "Bad_Name".into(),
                ..base()
            },
        ),
        (
            "statefulset",
            FileConfig {
                statefulset: String::new(),
                ..base()
            },
        ),
        (
            "host_id",
            FileConfig {
                host_id: Some("agent-1".into()),
                ..base()
            },
        ),
        (
            "kube_api",
            FileConfig {
                kube_api: Some("http://10.0.0.1:6443".into()),
                ..base()
            },
        ),
        (
            "namespace",
            FileConfig {
                namespace: Some("a/b".into()),
                ..base()
            },
        ),
    ] {
        let e = f.check().expect_err(field).to_string();
        assert!(e.starts_with(&format!("{field}:")), "{e}");
    }
}

/// A pod watch the API server ends at once, with no event (as a proxy in
/// between may), is asked again after a backoff, never in a hot loop:
/// over a 4 s `ready_timeout`, a handful of watches, and the restart
/// fails with what was last seen.
#[tokio::test]
async fn a_watch_that_ends_at_once_is_asked_again_after_a_backoff() {
    let (c, kube, stop, _dir) = setup(Replacement::NEVER, |f| {
        f.ready_timeout = Duration::from_secs(4)
    })
    .await;
    kube.end_watches_at_once();
    let before = kube.watches();
    let id = reconnect(&c).await;
    let row = outcome(&c, id, "failed").await;
    let asked = kube.watches() - before;
    assert!(
        (1..=24).contains(&asked),
        "{asked} watches in 4 s: backed off, not a hot loop ({row})"
    );
    stop.cancel();
}

/// A pod whose state Secret comes to name another host (its state was
/// reset) is spoken for under the new host ID at the next round, and the
/// stream under the old one ends.
#[tokio::test]
async fn a_pod_whose_host_id_changes_is_spoken_for_under_the_new_one() {
    let (c, kube, stop, _dir) = setup(Replacement::after(200), |_| {}).await;
    assert!(c.ll().hub.reachable(HOST));
    kube.set_host(POD, "agent-00002");
    // The sidecar reads the Secrets every 30 s.
    crate::support::real_timeout(Duration::from_secs(45), async {
        while !c.ll().hub.reachable("agent-00002") || c.ll().hub.reachable(HOST) {
            crate::support::real_sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("within a round (30 s): the stream under the new host ID, none under the old");
    stop.cancel();
}
