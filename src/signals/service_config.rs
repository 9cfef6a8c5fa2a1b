//! `GetServiceConfig`: the `grpc_client_lb_policy` setting, as RFD 0226's
//! JSON form (`{"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":
//! "reconnect"}}],"healthCheckConfig":{"serviceName":""}}`), parsed once and
//! served as the `ServiceConfig` message. The mode is an enum, as Teleport
//! shipped it. A client whose call fails treats its connection as healthy.

use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::domain::{LbMode, LbPolicy};
use crate::proto::v1 as pb;
use crate::proto::v1::service_config_discovery_service_server::{
    ServiceConfigDiscoveryService, ServiceConfigDiscoveryServiceServer,
};
use pb::teleport_pick_healthy_config::Mode;

/// The policy as the `ServiceConfig` message.
pub fn to_proto(policy: &LbPolicy) -> pb::ServiceConfig {
    let mode = match policy.mode {
        LbMode::PickFirst => Mode::PickFirst,
        LbMode::Reconnect => Mode::Reconnect,
    };
    pb::ServiceConfig {
        load_balancing_config: vec![pb::LoadBalancerConfig {
            config: Some(pb::load_balancer_config::Config::TeleportPickHealthy(
                pb::TeleportPickHealthyConfig { mode: mode as i32 },
            )),
        }],
        health_check_config: Some(pb::HealthCheckConfig {
            service_name: policy.health_service.clone(),
        }),
    }
}

/// Reads a `ServiceConfig` as an agent does. Anything it does not
/// understand means pick_first.
pub fn from_proto(c: &pb::ServiceConfig) -> LbPolicy {
    let mode = c
        .load_balancing_config
        .iter()
        .find_map(|l| match &l.config {
            Some(pb::load_balancer_config::Config::TeleportPickHealthy(p)) => {
                Mode::try_from(p.mode).ok()
            }
            None => None,
        })
        .map_or(LbMode::PickFirst, |m| match m {
            Mode::Reconnect => LbMode::Reconnect,
            _ => LbMode::PickFirst,
        });
    LbPolicy {
        mode,
        health_service: c
            .health_check_config
            .as_ref()
            .map(|h| h.service_name.clone())
            .unwrap_or_default(),
    }
}

/// The gRPC front: answers from the current policy (a `watch` so dynamic
/// settings can change it without a restart).
pub struct Service {
    policy: watch::Receiver<LbPolicy>,
}

impl Service {
    pub fn server(
        policy: watch::Receiver<LbPolicy>,
    ) -> ServiceConfigDiscoveryServiceServer<Service> {
        ServiceConfigDiscoveryServiceServer::new(Service { policy })
            .max_decoding_message_size(64 * 1024)
    }
}

#[tonic::async_trait]
impl ServiceConfigDiscoveryService for Service {
    async fn get_service_config(
        &self,
        _req: Request<pb::GetServiceConfigRequest>,
    ) -> Result<Response<pb::ServiceConfig>, Status> {
        Ok(Response::new(to_proto(&self.policy.borrow())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proto_round_trip() {
        let p = LbPolicy {
            mode: LbMode::Reconnect,
            health_service: "x".into(),
        };
        assert_eq!(from_proto(&to_proto(&p)), p);
        assert_eq!(
            from_proto(&pb::ServiceConfig::default()),
            LbPolicy::default()
        );
    }
}
