//! What Lifeline tells agents: `GetServiceConfig` (RFD 0226).

use crate::support;
use lifeline::domain::{LbMode, LbPolicy};
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::service_config_discovery_service_client::ServiceConfigDiscoveryServiceClient;
use lifeline::signals::service_config::from_proto;
use support::Cluster;
use tonic::transport::{Channel, Endpoint};

async fn client(c: &support::Running) -> ServiceConfigDiscoveryServiceClient<Channel> {
    let ch = Endpoint::from_shared(format!("http://{}", c.ll().grpc_addr))
        .unwrap()
        .connect()
        .await
        .expect("Lifeline's gRPC port answers");
    ServiceConfigDiscoveryServiceClient::new(ch)
}

async fn policy(c: &support::Running) -> (LbPolicy, pb::ServiceConfig) {
    let cfg = client(c)
        .await
        .get_service_config(pb::GetServiceConfigRequest {})
        .await
        .expect("GetServiceConfig")
        .into_inner();
    (from_proto(&cfg), cfg)
}

/// Guards the default: pick_first, as an enum on the wire.
#[tokio::test(start_paused = true)]
async fn get_service_config_defaults_to_pick_first() {
    let c = Cluster::new().quiet().start().await;
    let (p, raw) = policy(&c).await;
    assert_eq!(p.mode, LbMode::PickFirst);
    match &raw.load_balancing_config[0].config {
        Some(pb::load_balancer_config::Config::TeleportPickHealthy(h)) => assert_eq!(
            h.mode,
            pb::teleport_pick_healthy_config::Mode::PickFirst as i32
        ),
        other => panic!("unexpected {other:?}"),
    }
    c.shutdown().await;
}

/// Guards the setting: the RFD's JSON form in the config file gives
/// reconnect mode with its health service; a live change is served at once.
#[tokio::test(start_paused = true)]
async fn get_service_config_serves_the_configured_policy() {
    let c = Cluster::new()
        .quiet()
        .lb_policy(
            r#"{"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":"reconnect"}}],"healthCheckConfig":{"serviceName":"auth"}}"#,
        )
        .start()
        .await;
    let (p, _) = policy(&c).await;
    assert_eq!(p.mode, LbMode::Reconnect);
    assert_eq!(p.health_service, "auth");

    // The file set it: overwriting needs force + confirm (and create).
    let (status, body) = c
        .call(
            reqwest::Method::PUT,
            "/api/v1/settings/grpc_client_lb_policy?force=true&confirm=true",
            Some(support::ADMIN),
            Some(r#"{"value":""}"#),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(policy(&c).await.0.mode, LbMode::PickFirst);
    c.shutdown().await;
}
