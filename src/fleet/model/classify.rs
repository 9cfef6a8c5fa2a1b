//! The stranded rules as one pure function: given what is known about an
//! agent's own heartbeat, its auth server and its tunnels, say whether it is
//! healthy, degraded or stranded, why, since when, and what root cause it
//! belongs to. No state, no clock: callers pass `now`.

use crate::clock::Ts;
use crate::domain::{AgentState, Cause, CauseKind, Reason, Reasons};

/// One tunnel of the agent as the classifier sees it.
#[derive(Clone, Debug)]
pub struct TunnelView<'a> {
    pub proxy: &'a str,
    /// Why and since when this tunnel is dead; `None` when live.
    pub dead: Option<(CauseKind, Ts)>,
}

#[derive(Clone, Debug)]
pub struct Inputs<'a> {
    pub now: Ts,
    /// `Some(expires)` when the agent's own heartbeat expired.
    pub agent_expired: Option<Ts>,
    /// The agent's auth server name (groups `agent_expired`).
    pub auth_server: &'a str,
    /// `Some((cause, since))` when its auth server is unhealthy.
    pub auth_unhealthy: Option<(CauseKind, Ts)>,
    /// False when tunnel or proxy data is unavailable (kind rejected):
    /// then no tunnel reason is raised at all.
    pub tunnels_known: bool,
    pub tunnels: Vec<TunnelView<'a>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub state: AgentState,
    pub reasons: Reasons,
    /// The moment the verdict's condition began (for a new state).
    pub since: Ts,
    pub cause: Option<Cause>,
}

pub fn classify(i: &Inputs<'_>) -> Verdict {
    let mut reasons = Reasons::default();
    let mut since: Option<Ts> = None;
    let mut earliest = |t: Ts| since = Some(since.map_or(t, |s: Ts| s.min(t)));
    let mut cause: Option<Cause> = None;

    if let Some((kind, at)) = i.auth_unhealthy {
        reasons.insert(Reason::AuthUnhealthy);
        earliest(at);
        cause = Some(Cause {
            kind,
            resource: i.auth_server.to_string(),
            planned: None,
        });
    }

    let mut degraded_cause = None;
    if i.tunnels_known {
        let live = i.tunnels.iter().filter(|t| t.dead.is_none()).count();
        if live == 0 {
            reasons.insert(Reason::NoLiveTunnel);
            // The tunnel that died last is what tipped the agent over.
            let last = i
                .tunnels
                .iter()
                .filter_map(|t| t.dead.map(|(k, at)| (at, k, t.proxy)))
                .max();
            let (at, c) = match last {
                Some((at, kind, proxy)) => (
                    at,
                    Cause {
                        kind,
                        resource: proxy.to_string(),
                        planned: None,
                    },
                ),
                None => (
                    i.now,
                    Cause {
                        kind: CauseKind::NoTunnels,
                        resource: String::new(),
                        planned: None,
                    },
                ),
            };
            earliest(at);
            cause.get_or_insert(c);
        } else if let Some(dead) = i.tunnels.iter().find(|t| t.dead.is_some()) {
            reasons.insert(Reason::TunnelToExpiredProxy);
            if let Some((kind, at)) = dead.dead {
                degraded_cause = Some((
                    at,
                    Cause {
                        kind,
                        resource: dead.proxy.to_string(),
                        planned: None,
                    },
                ));
            }
        }
    }

    if let Some(at) = i.agent_expired {
        reasons.insert(Reason::AgentExpired);
        earliest(at);
        cause.get_or_insert(Cause {
            kind: CauseKind::AgentExpired,
            resource: i.auth_server.to_string(),
            planned: None,
        });
    }

    let stranded = reasons.contains(Reason::AuthUnhealthy)
        || reasons.contains(Reason::NoLiveTunnel)
        || reasons.contains(Reason::AgentExpired);
    if stranded {
        Verdict {
            state: AgentState::Stranded,
            reasons,
            since: since.unwrap_or(i.now),
            cause,
        }
    } else if let Some((at, c)) = degraded_cause {
        Verdict {
            state: AgentState::Degraded,
            reasons,
            since: at,
            cause: Some(c),
        }
    } else {
        Verdict {
            state: AgentState::Healthy,
            reasons,
            since: i.now,
            cause: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Ts = Ts(1_000_000);

    fn inputs<'a>(tunnels: Vec<TunnelView<'a>>) -> Inputs<'a> {
        Inputs {
            now: NOW,
            agent_expired: None,
            auth_server: "auth-1",
            auth_unhealthy: None,
            tunnels_known: true,
            tunnels,
        }
    }

    fn live(p: &str) -> TunnelView<'_> {
        TunnelView {
            proxy: p,
            dead: None,
        }
    }

    fn expired(p: &str, at: i64) -> TunnelView<'_> {
        TunnelView {
            proxy: p,
            dead: Some((CauseKind::ProxyExpired, Ts(at))),
        }
    }

    #[test]
    fn all_live_is_healthy() {
        let v = classify(&inputs(vec![live("p1"), live("p2")]));
        assert_eq!(v.state, AgentState::Healthy);
        assert!(v.reasons.is_empty());
        assert_eq!(v.cause, None);
    }

    #[test]
    fn one_dead_tunnel_degrades() {
        let v = classify(&inputs(vec![live("p1"), expired("p2", 500)]));
        assert_eq!(v.state, AgentState::Degraded);
        assert!(v.reasons.contains(Reason::TunnelToExpiredProxy));
        assert_eq!(v.since, Ts(500));
        assert_eq!(v.cause.unwrap().resource, "p2");
    }

    #[test]
    fn all_dead_strands_since_the_last_death_blaming_that_proxy() {
        let v = classify(&inputs(vec![expired("p1", 300), expired("p2", 700)]));
        assert_eq!(v.state, AgentState::Stranded);
        assert!(v.reasons.contains(Reason::NoLiveTunnel));
        assert_eq!(v.since, Ts(700));
        let c = v.cause.unwrap();
        assert_eq!(
            (c.kind, c.resource.as_str()),
            (CauseKind::ProxyExpired, "p2")
        );
    }

    #[test]
    fn no_tunnels_at_all_strands_now() {
        let v = classify(&inputs(vec![]));
        assert_eq!(v.state, AgentState::Stranded);
        assert_eq!(v.since, NOW);
        assert_eq!(v.cause.unwrap().kind, CauseKind::NoTunnels);
    }

    #[test]
    fn unknown_tunnel_data_raises_no_tunnel_reason() {
        let mut i = inputs(vec![]);
        i.tunnels_known = false;
        assert_eq!(classify(&i).state, AgentState::Healthy);
    }

    #[test]
    fn auth_cause_wins_over_tunnel_and_expiry() {
        let mut i = inputs(vec![expired("p1", 300)]);
        i.auth_unhealthy = Some((CauseKind::AuthNotServing, Ts(100)));
        i.agent_expired = Some(Ts(900));
        let v = classify(&i);
        assert_eq!(v.state, AgentState::Stranded);
        assert_eq!(v.reasons.iter().count(), 3);
        assert_eq!(v.since, Ts(100));
        let c = v.cause.unwrap();
        assert_eq!(
            (c.kind, c.resource.as_str()),
            (CauseKind::AuthNotServing, "auth-1")
        );
    }

    #[test]
    fn own_expiry_alone_strands_grouped_by_auth_server() {
        let mut i = inputs(vec![live("p1")]);
        i.agent_expired = Some(Ts(900));
        let v = classify(&i);
        assert_eq!(v.state, AgentState::Stranded);
        assert_eq!(v.since, Ts(900));
        let c = v.cause.unwrap();
        assert_eq!(
            (c.kind, c.resource.as_str()),
            (CauseKind::AgentExpired, "auth-1")
        );
    }
}
