//! The client load-balancing policy agents use for their auth connection,
//! in RFD 0226's JSON form.

use serde::Deserialize;

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
        // Clients take the first entry; every entry must still be one
        // this policy knows, so a typo further down is not kept silently.
        let mut modes = j.load_balancing_config.iter().map(|lb| {
            match lb.teleport_pick_healthy.mode.as_deref() {
                None | Some("") | Some("pick_first") => Ok(LbMode::PickFirst),
                Some("reconnect") => Ok(LbMode::Reconnect),
                Some(other) => Err(PolicyError::Mode(other.to_string())),
            }
        });
        let mode = modes.next().ok_or(PolicyError::NoPolicy)??;
        modes.try_for_each(|m| m.map(drop))?;
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
}
