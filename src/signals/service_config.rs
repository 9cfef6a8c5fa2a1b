//! `GetServiceConfig`: the `grpc_client_lb_policy` setting, as RFD 0226's
//! JSON form (`{"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":
//! "reconnect"}}],"healthCheckConfig":{"serviceName":""}}`), parsed once and
//! served as the `ServiceConfig` message. The mode is an enum, as Teleport
//! shipped it. A client whose call fails treats its connection as healthy.

use serde::Deserialize;
use tokio::sync::watch;
use tonic::{Request, Response, Status};

use crate::proto::v1 as pb;
use crate::proto::v1::service_config_discovery_service_server::{
    ServiceConfigDiscoveryService, ServiceConfigDiscoveryServiceServer,
};
use pb::teleport_pick_healthy_config::Mode;

/// The client load-balancing policy agents use for their auth connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LbPolicy {
    pub mode: LbMode,
    /// grpc.health.v1 service the client watches in reconnect mode.
    pub health_service: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LbMode {
    /// Stay on the first connected auth server (the default).
    PickFirst,
    /// Watch the auth server's health; on NOT_SERVING move to a healthy one.
    Reconnect,
}

impl Default for LbPolicy {
    fn default() -> Self {
        LbPolicy {
            mode: LbMode::PickFirst,
            health_service: String::new(),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PolicyError {
    #[error("not valid JSON for a service config: {0}")]
    Json(String),
    #[error("loadBalancingConfig has no teleport_pick_healthy entry")]
    NoPolicy,
    #[error("teleport_pick_healthy mode {0:?} is not pick_first or reconnect")]
    Mode(String),
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsonConfig {
    #[serde(default)]
    load_balancing_config: Vec<JsonLb>,
    #[serde(default)]
    health_check_config: Option<JsonHealthCheck>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonLb {
    teleport_pick_healthy: JsonPickHealthy,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonPickHealthy {
    #[serde(default)]
    mode: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct JsonHealthCheck {
    #[serde(default)]
    service_name: String,
}

impl LbPolicy {
    /// `teleport_pick_healthy` in reconnect mode, health of the default service.
    pub fn reconnect() -> LbPolicy {
        LbPolicy {
            mode: LbMode::Reconnect,
            health_service: String::new(),
        }
    }

    /// Parses the RFD's JSON form. Empty text is the default (pick_first).
    pub fn parse(text: &str) -> Result<LbPolicy, PolicyError> {
        if text.trim().is_empty() {
            return Ok(LbPolicy::default());
        }
        let j: JsonConfig =
            serde_json::from_str(text).map_err(|e| PolicyError::Json(e.to_string()))?;
        let lb = j
            .load_balancing_config
            .first()
            .ok_or(PolicyError::NoPolicy)?;
        let mode = match lb.teleport_pick_healthy.mode.as_deref() {
            None | Some("") | Some("pick_first") => LbMode::PickFirst,
            Some("reconnect") => LbMode::Reconnect,
            Some(other) => return Err(PolicyError::Mode(other.to_string())),
        };
        Ok(LbPolicy {
            mode,
            health_service: j
                .health_check_config
                .map(|h| h.service_name)
                .unwrap_or_default(),
        })
    }

    /// The RFD's JSON form of this policy.
    pub fn to_json(&self) -> String {
        let mode = match self.mode {
            LbMode::PickFirst => "pick_first",
            LbMode::Reconnect => "reconnect",
        };
        serde_json::json!({
            "loadBalancingConfig": [{"teleport_pick_healthy": {"mode": mode}}],
            "healthCheckConfig": {"serviceName": self.health_service},
        })
        .to_string()
    }

    pub fn to_proto(&self) -> pb::ServiceConfig {
        let mode = match self.mode {
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
                service_name: self.health_service.clone(),
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
        Ok(Response::new(self.policy.borrow().to_proto()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_pick_first() {
        assert_eq!(LbPolicy::parse("").unwrap(), LbPolicy::default());
    }

    #[test]
    fn rfd_json_form_parses() {
        let p = LbPolicy::parse(
            r#"{"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":"reconnect"}}],"healthCheckConfig":{"serviceName":"auth"}}"#,
        )
        .unwrap();
        assert_eq!(p.mode, LbMode::Reconnect);
        assert_eq!(p.health_service, "auth");
        assert_eq!(LbPolicy::parse(&p.to_json()).unwrap(), p);
    }

    #[test]
    fn bad_forms_say_what_is_wrong() {
        assert!(matches!(LbPolicy::parse("{"), Err(PolicyError::Json(_))));
        assert_eq!(
            LbPolicy::parse(r#"{"loadBalancingConfig":[]}"#),
            Err(PolicyError::NoPolicy)
        );
        assert_eq!(
            LbPolicy::parse(
                r#"{"loadBalancingConfig":[{"teleport_pick_healthy":{"mode":"random"}}]}"#
            ),
            Err(PolicyError::Mode("random".into()))
        );
        let e = LbPolicy::parse(r#"{"loadBalancingConfig":[{"round_robin":{}}]}"#).unwrap_err();
        assert!(e.to_string().contains("round_robin"), "{e}");
    }

    #[test]
    fn proto_round_trip() {
        let p = LbPolicy {
            mode: LbMode::Reconnect,
            health_service: "x".into(),
        };
        assert_eq!(LbPolicy::from_proto(&p.to_proto()), p);
        assert_eq!(
            LbPolicy::from_proto(&pb::ServiceConfig::default()),
            LbPolicy::default()
        );
    }
}
