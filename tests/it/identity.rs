//! Agent identity: the name a signal stream says is bound by its join
//! token's listed names or by its client certificate, and a second stream
//! never takes a connected agent's name (and with it, its signals).

use crate::support::{bounded, Cluster, Running};
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::agent_signals_client::AgentSignalsClient;
use lifeline_sim::agent::{join_request, lifeline_channel, LifelineAddr};
use tokio_stream::wrappers::ReceiverStream;

/// Opens a stream saying `agent` with `token` over `addr`; `Ok` once its
/// first Discovery arrived. The sender keeps the stream open.
async fn open(
    addr: LifelineAddr,
    token: &str,
    agent: &str,
) -> (
    Result<tonic::Streaming<pb::Signal>, tonic::Status>,
    tokio::sync::mpsc::Sender<pb::AgentMessage>,
) {
    open_with(addr, token, pb::AgentMessage::hello(agent, "test", 2)).await
}

/// [`open`] with the Hello `hello`.
async fn open_with(
    addr: LifelineAddr,
    token: &str,
    hello: pb::AgentMessage,
) -> (
    Result<tonic::Streaming<pb::Signal>, tonic::Status>,
    tokio::sync::mpsc::Sender<pb::AgentMessage>,
) {
    let ch = lifeline_channel(addr).expect("channel");
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tx.send(hello).await.expect("hello queued");
    let r = async {
        let mut inbound = AgentSignalsClient::new(ch)
            .connect(join_request(ReceiverStream::new(rx), token))
            .await?
            .into_inner();
        inbound.message().await?;
        Ok(inbound)
    }
    .await;
    (r, tx)
}

async fn refused(c: &Running) -> f64 {
    let m = c.get_text("/metrics").await.1;
    m.lines()
        .find_map(|l| l.strip_prefix("lifeline_agent_join_refused_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// With the shared join token, a second stream saying a connected agent's
/// name is refused (counted), and that agent keeps its signals: the next
/// manual reconnect reaches the real one and is acked.
#[tokio::test(start_paused = true)]
async fn a_second_stream_cannot_take_a_connected_agents_name() {
    let c = Cluster::new().quiet().sim_agents(0.0).start().await;
    c.ready().await;
    c.eventually("agent-00001 holds its stream", || async {
        c.ok("/api/v1/agents/agent-00001").await["link"].is_object()
    })
    .await;
    let grpc = LifelineAddr::from(c.ll().grpc_addr);
    let before = refused(&c).await;
    let (r, _keep) = bounded(
        "a second stream for agent-00001",
        open(grpc, lifeline_sim::SIM_JOIN_TOKEN, "agent-00001"),
    )
    .await;
    let e = r.expect_err("a connected agent's name is taken");
    assert_eq!(e.code(), tonic::Code::AlreadyExists, "{e:?}");
    assert!(e.message().contains("already holds"), "{}", e.message());
    assert_eq!(refused(&c).await, before + 1.0);

    let (status, body) = c.post("/api/v1/agents/agent-00001/reconnect", "").await;
    assert_eq!(status, 202, "{body}");
    let id = body["id"].as_i64().expect("signal id");
    c.eventually("the real agent acks", || async {
        c.ok(&format!("/api/v1/signals/{id}")).await["outcome"] == "acked"
    })
    .await;
    c.shutdown().await;
}

/// A join token listed with `agents = "web-*"` admits those names only;
/// a refusal says why and is counted.
#[tokio::test(start_paused = true)]
async fn a_join_token_admits_only_the_names_it_lists() {
    let c = Cluster::new()
        .quiet()
        .config(|cfg| {
            cfg.access
                .join_tokens
                .push(lifeline::config::JoinToken::Bound {
                    sha256: lifeline::access::hash_hex("web-token"),
                    agents: Some(lifeline::config::AgentNames::One("web-*".into())),
                    clusters: None,
                })
        })
        .start()
        .await;
    c.ready().await;
    let grpc = || LifelineAddr::from(c.ll().grpc_addr);
    let (r, _a) = bounded(
        "web-1 with the web token",
        open(grpc(), "web-token", "web-1"),
    )
    .await;
    r.expect("the web token admits web-1");
    let (r, _b) = bounded(
        "agent-00002 with the web token",
        open(grpc(), "web-token", "agent-00002"),
    )
    .await;
    let e = r.expect_err("the web token does not admit agent-00002");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("web-*"), "{}", e.message());
    assert!(refused(&c).await >= 1.0);
    c.shutdown().await;
}

/// Guards "a stream that claims an agent of another cluster is refused":
/// a Hello naming no cluster is of the one watched, one naming it is
/// admitted, one naming a cluster not watched here is refused (said and
/// counted), and a token bound to the watched cluster admits its agents.
#[tokio::test(start_paused = true)]
async fn a_stream_that_names_another_cluster_is_refused() {
    let c = Cluster::new()
        .quiet()
        .sim_agents(0.0)
        .config(|cfg| {
            cfg.cluster.name = "eu-west".into();
            cfg.access
                .join_tokens
                .push(lifeline::config::JoinToken::Bound {
                    sha256: lifeline::access::hash_hex("eu-token"),
                    agents: None,
                    clusters: Some(lifeline::config::AgentNames::One("eu-west".into())),
                })
        })
        .start()
        .await;
    c.ready().await;
    let grpc = || LifelineAddr::from(c.ll().grpc_addr);
    let token = lifeline_sim::SIM_JOIN_TOKEN;
    let hello =
        |agent: &str, cluster: &str| pb::AgentMessage::hello(agent, "test", 2).in_cluster(cluster);
    let (r, _a) = bounded(
        "no cluster named",
        open_with(grpc(), token, hello("x-1", "")),
    )
    .await;
    r.expect("no cluster: the one watched");
    let (r, _b) = bounded(
        "its cluster",
        open_with(grpc(), token, hello("x-2", "eu-west")),
    )
    .await;
    r.expect("the cluster watched");
    let (r, _c) = bounded(
        "the cluster's token",
        open_with(grpc(), "eu-token", hello("x-3", "eu-west")),
    )
    .await;
    r.expect("a token bound to the cluster admits its agents");
    let before = refused(&c).await;
    let (r, _d) = bounded(
        "another cluster",
        open_with(grpc(), token, hello("x-4", "us-east")),
    )
    .await;
    let e = r.expect_err("another cluster's agent");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message().contains("\"us-east\"") && e.message().contains("watched: eu-west"),
        "{}",
        e.message()
    );
    let hostile = format!("a\0{}", "b".repeat(100_000));
    let (r, _e) = bounded(
        "a hostile cluster",
        open_with(grpc(), token, hello("x-5", &hostile)),
    )
    .await;
    let e = r.expect_err("a cluster name of NULs and bulk");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().len() < 1_000, "bounded: {}", e.message().len());
    assert_eq!(refused(&c).await, before + 2.0);
    c.shutdown().await;
}

/// With `access.agent_identity = "certificate"`, `Hello.agent` must be the
/// client certificate's CN or a SAN: the shared join token no longer lets
/// one agent speak for another.
#[tokio::test(start_paused = true)]
async fn with_certificate_identity_the_name_is_the_certificates() {
    let c = Cluster::new()
        .quiet()
        .tls(true)
        .config(|cfg| cfg.access.agent_identity = lifeline::config::AgentIdentity::Certificate)
        .start()
        .await;
    c.ready().await;
    let tls = c.tls.as_ref().expect("TLS");
    let grpc = c.ll().grpc_addr;
    let a7 = tls
        .ca
        .issue("agent-00007", &["agent-00008.agents.test"])
        .expect("cert");
    let with = |cert: &lifeline_sim::pki::Issued| {
        LifelineAddr::tls(grpc, tls.ca.pem(), Some((&cert.cert_pem, &cert.key_pem)))
    };
    let token = lifeline_sim::SIM_JOIN_TOKEN;
    let (r, _a) = bounded("its CN", open(with(&a7), token, "agent-00007")).await;
    r.expect("the certificate's CN is its name");
    let (r, _b) = bounded("its SAN", open(with(&a7), token, "agent-00008.agents.test")).await;
    r.expect("a DNS SAN is a name too");
    let (r, _c) = bounded("another name", open(with(&a7), token, "agent-00009")).await;
    let e = r.expect_err("a name the certificate does not hold");
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("certificate"), "{}", e.message());
    c.shutdown().await;
}

async fn metric(c: &Running, name: &str) -> f64 {
    let m = c.get_text("/metrics").await.1;
    m.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Guards `server.grpc_max_connections`: at the limit a new connection is
/// closed at once (counted), the ones held keep their streams, and a place
/// freed by a connection that ends is taken by the next.
#[tokio::test(start_paused = true)]
async fn grpc_connections_past_the_limit_are_refused_and_counted() {
    let c = Cluster::new()
        .quiet()
        .config(|cfg| cfg.server.grpc_max_connections = 2)
        .start()
        .await;
    c.ready().await;
    let grpc = || LifelineAddr::from(c.ll().grpc_addr);
    let token = lifeline_sim::SIM_JOIN_TOKEN;
    let (first, keep_first) = bounded("first", open(grpc(), token, "agent-00001")).await;
    let first = first.expect("the first connection is served");
    let (second, keep_second) = bounded("second", open(grpc(), token, "agent-00002")).await;
    let second = second.expect("the second connection is served");
    assert_eq!(metric(&c, "lifeline_grpc_connections").await, 2.0);

    let (third, _keep) = bounded("third", open(grpc(), token, "agent-00003")).await;
    let e = third.expect_err("a third connection is past the limit");
    // Closed before HTTP/2 began: the client sees the connection go.
    assert!(
        matches!(e.code(), tonic::Code::Unavailable | tonic::Code::Cancelled),
        "{e:?}"
    );
    assert!(metric(&c, "lifeline_grpc_connections_refused_total").await >= 1.0);
    c.eventually("the held streams are still served", || async {
        c.ok("/api/v1/agents/agent-00002").await["link"].is_object()
    })
    .await;

    drop((first, keep_first));
    c.eventually("the place is given back", || async {
        metric(&c, "lifeline_grpc_connections").await == 1.0
    })
    .await;
    let (again, _keep_again) = bounded("again", open(grpc(), token, "agent-00003")).await;
    again.expect("a freed place is taken");
    drop((second, keep_second));
    c.shutdown().await;
}
