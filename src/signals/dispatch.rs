//! The one door of every signal. Manual (API, dashboard, CLI), automatic,
//! periodic and graceful signals pass the same admission here, in one
//! order, before the hub records and delivers what is admitted:
//!
//! 1. leadership: only the leader sends what Lifeline decides itself
//!    (automatic, periodic, graceful; the hub checks the term again in the
//!    transaction that records them); manual signals go from any replica;
//! 2. pause: automatic reconnects wait while the storm guard holds or the
//!    `auto_reconnect` setting is off;
//! 3. the agent is one the fleet knows, and holds a tunnel to the proxy
//!    the signal names, if it names one;
//! 4. an automatic reconnect needs somewhere to go: a live proxy the agent
//!    is not on;
//! 5. the agent is reachable: its stream is on this replica or on a live
//!    other one;
//! 6. rate: one manual reconnect of an agent per
//!    `access.manual_reconnect_interval`;
//! 7. a restart-only peer (a sidecar beside a Teleport agent) takes only
//!    reconnects, which restart its agent: never a periodic one or a
//!    CloseTunnel, an automatic one only when a restart can help, and no
//!    more restarts in flight at once than `signals.max_restarts_in_flight`
//!    allows.
//!
//! The first two refuse a whole batch; the rest refuse an agent, named
//! with why. Must not touch: agent streams or the audit (the hub's).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tracing::warn;

use super::hub::{Ask, Hub, SendError, SignalRequest, RESTART_FAILURES_PAUSE};
use crate::access::Access;
use crate::clock::Ts;
use crate::config::RestartLimit;
use crate::fleet::FleetHandle;
use crate::stats::Stats;
use crate::store::signals::{self as audit, SignalRecord};

/// Who asks for a signal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A person, through the API, the dashboard or the CLI.
    Manual,
    /// The automatic reconnect of a stranded or degraded agent.
    Automatic,
    /// The periodic reconnect of every agent.
    Periodic,
    /// Closing a tunnel an agent holds beyond what it wants.
    Graceful,
}

/// Why one agent's signal was not sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The fleet does not know the agent.
    UnknownAgent,
    /// It holds no tunnel to the proxy the signal names.
    NoSuchTunnel,
    /// No live proxy it is not on: a Reconnect cannot move it.
    NoDestination,
    /// No replica holds its signal stream.
    NotConnected,
    /// A manual reconnect of it went out less than the interval ago; the
    /// next is admitted after this wait.
    RateLimited(Duration),
    /// Its peer restarts the agent, and a restart cannot help here (or
    /// the signal is not one a restart carries out).
    RestartWouldNotHelp,
    /// As many restarts as `signals.max_restarts_in_flight` allows are
    /// already awaiting their agents.
    RestartsInFlight,
    /// The last restarts did not bring their agents back: automatic ones
    /// wait until one does.
    RestartsFailing,
}

impl Refusal {
    /// Why, as the API's `skipped` list says it.
    pub fn text(self) -> &'static str {
        match self {
            Refusal::UnknownAgent => "not an agent of the cluster",
            Refusal::NoSuchTunnel => "no tunnel to that proxy",
            Refusal::NoDestination => "no live proxy to move to",
            Refusal::NotConnected => "not connected to Lifeline",
            Refusal::RateLimited(_) => {
                "rate limited: asked to reconnect less than access.manual_reconnect_interval ago"
            }
            Refusal::RestartWouldNotHelp => {
                "a sidecar restarts this agent, and a restart would not help it now"
            }
            Refusal::RestartsFailing => {
                "automatic restarts wait: the last restarts did not bring their agents back"
            }
            Refusal::RestartsInFlight => {
                "too many restarts in flight (signals.max_restarts_in_flight); try again when they are done"
            }
        }
    }
}

/// What a dispatch did: the signals recorded (and sent, or found
/// undeliverable), and the agents refused.
#[derive(Debug, Default)]
pub struct Dispatched {
    pub sent: Vec<SignalRecord>,
    pub refused: Vec<(String, Refusal)>,
}

/// The storm guard as the summary and the dashboard show it.
#[derive(Clone, Debug, Default, Serialize, PartialEq, utoipa::ToSchema)]
pub struct Guard {
    /// Automatic reconnects are paused.
    pub paused: bool,
    /// The pause is only the wait for the cluster's first listing (at
    /// start): no news to anyone.
    pub waiting_for_listing: bool,
    /// Why, in words an operator can act on.
    pub reason: Option<String>,
    pub since: Option<Ts>,
    /// Agents that turned stranded within the window.
    pub stranded_in_window: usize,
    pub agents: usize,
    pub share_limit: f64,
    /// Agents waiting for their next automatic reconnect.
    pub agents_retrying: usize,
    /// Agents automatic reconnects hold back: no live proxy to move them
    /// to. The loop's own queue, as of its last pass: once it has reached
    /// them, the same agents as the fleet's `waiting_for_live_proxy`.
    pub agents_waiting_for_live_proxy: usize,
    /// Why automatic restarts (of agents a sidecar restarts) wait, if they
    /// do: the last restarts did not bring their agents back.
    pub restarts_paused: Option<String>,
}

/// Admission, in front of the hub.
pub struct Dispatch {
    hub: Arc<Hub>,
    fleet: FleetHandle,
    access: Arc<Access>,
    stats: Arc<Stats>,
    /// The storm guard: the automatic loop decides it, admission reads it.
    guard: watch::Sender<Guard>,
    /// Restarts in flight at once.
    restart_limit: RestartLimit,
}

impl Dispatch {
    pub fn new(
        hub: Arc<Hub>,
        fleet: FleetHandle,
        access: Arc<Access>,
        stats: Arc<Stats>,
        restart_limit: RestartLimit,
    ) -> Arc<Dispatch> {
        let guard = watch::Sender::new(Guard {
            share_limit: hub.settings.storm_share(),
            ..Guard::default()
        });
        Arc::new(Dispatch {
            hub,
            fleet,
            access,
            stats,
            guard,
            restart_limit,
        })
    }

    pub fn hub(&self) -> &Arc<Hub> {
        &self.hub
    }

    /// The storm guard's state (the automatic loop updates it).
    pub fn guard(&self) -> &watch::Sender<Guard> {
        &self.guard
    }

    /// Admits what may go and hands it to the hub as one batch (one audit
    /// transaction). Errors refuse the whole batch: this replica does not
    /// lead (for Lifeline's own signals), automatic reconnects are paused,
    /// or the signals cannot be recorded.
    pub async fn send(
        &self,
        origin: Origin,
        reqs: Vec<SignalRequest>,
    ) -> Result<Dispatched, SendError> {
        let leaders = origin != Origin::Manual;
        if leaders && !self.hub.leads() {
            return Err(SendError::NotLeader);
        }
        if origin == Origin::Automatic {
            if let Some(why) = self.paused() {
                return Err(SendError::Paused(why));
            }
        }
        if reqs.is_empty() {
            return Ok(Dispatched::default());
        }
        let asks = reqs
            .iter()
            .map(|r| {
                let proxy = r.ask.proxy();
                (
                    r.agent.clone(),
                    (!proxy.is_empty()).then(|| proxy.to_string()),
                )
            })
            .collect();
        let facts = self
            .fleet
            .facts(asks)
            .await
            .map_err(|_| SendError::FleetGone)?;
        let agents: Vec<String> = reqs.iter().map(|r| r.agent.clone()).collect();
        let reach = self.hub.reachable_of(&agents).await;
        let (reachable, restart_only) = (reach.streams, reach.restart_only);
        if !restart_only.is_empty() {
            // Among replicas the cap counts the restarts every replica has
            // in flight, read fresh before any is admitted.
            if let Err(e) = self.hub.refresh_restarts().await {
                warn!(error = %e, "cannot read the restarts in flight on the other replicas: the cap counts them as last read");
            }
        }
        let (mut restarts, sidecars) = self.hub.restarts();
        let restart_limit = self.restart_limit.of(sidecars);
        let restarts_failing = self.hub.restarts_failing().is_some();
        let mut out = Dispatched::default();
        let mut admitted = Vec::with_capacity(reqs.len());
        for (mut req, facts) in reqs.into_iter().zip(facts) {
            if let (Origin::Automatic, Some(f)) = (origin, &facts) {
                if !restart_only.contains(&req.agent) {
                    name_expired_proxy(&mut req, f);
                }
            }
            let refusal = match facts {
                None => Some(Refusal::UnknownAgent),
                Some(_) if !reachable.contains(&req.agent) => Some(Refusal::NotConnected),
                Some(f) if restart_only.contains(&req.agent) => {
                    restart_refusal(origin, &f, restarts_failing, restarts >= restart_limit)
                        .or_else(|| self.manual_rate(origin, &req.agent))
                }
                Some(f) if !f.holds_tunnel && origin != Origin::Automatic => {
                    Some(Refusal::NoSuchTunnel)
                }
                Some(f) if !f.has_destination && origin == Origin::Automatic => {
                    Some(Refusal::NoDestination)
                }
                Some(_) => self.manual_rate(origin, &req.agent),
            };
            if refusal.is_none() && restart_only.contains(&req.agent) {
                restarts += 1;
            }
            match refusal {
                Some(r) => {
                    if matches!(r, Refusal::RateLimited(_)) {
                        Stats::inc(&self.stats.http_rate_limited);
                    }
                    out.refused.push((req.agent, r));
                }
                None => admitted.push(req),
            }
        }
        // The counts above turn most away at once; the transaction that
        // records restarts admits them again against the audit under a
        // lock, so racing sends (two replicas, a manual one beside the
        // automatic loop) never pass the cap together.
        let admit = audit::Admission {
            limit: restart_limit,
            pause_after: (origin == Origin::Automatic).then_some(RESTART_FAILURES_PAUSE),
        };
        let sent = if leaders {
            self.hub.send_as_leader(admitted, admit).await?
        } else {
            self.hub.send(admitted, admit).await?
        };
        out.sent = sent.rows;
        out.refused.extend(
            sent.at_cap
                .into_iter()
                .map(|a| (a, Refusal::RestartsInFlight))
                .chain(
                    sent.paused
                        .into_iter()
                        .map(|a| (a, Refusal::RestartsFailing)),
                ),
        );
        Ok(out)
    }

    /// A manual reconnect waits out `access.manual_reconnect_interval`.
    fn manual_rate(&self, origin: Origin, agent: &str) -> Option<Refusal> {
        (origin == Origin::Manual)
            .then(|| self.access.admit_reconnect(agent).err())
            .flatten()
            .map(Refusal::RateLimited)
    }

    /// Why automatic reconnects wait now, if they do.
    fn paused(&self) -> Option<String> {
        if !self.hub.settings.auto_reconnect() {
            return Some("automatic reconnects are turned off (auto_reconnect)".into());
        }
        let g = self.guard.borrow();
        g.paused
            .then(|| g.reason.clone().unwrap_or_else(|| "storm guard".into()))
    }

    /// The least time between two manual reconnects of one agent.
    pub fn manual_interval(&self) -> Duration {
        self.access.reconnect_every()
    }
}

/// An automatic reconnect names the proxy to leave as the fleet has it
/// when the signal goes: an expired one the agent holds now (its reason
/// then says so), or none, and the agent leaves its least healthy tunnel.
/// Named when the need arose instead, it went stale as soon as the agent
/// moved onto another expired proxy with its state unchanged, and every
/// retry moved nothing. A restart (a restart-only peer) moves no single
/// tunnel: it names none.
fn name_expired_proxy(req: &mut SignalRequest, f: &crate::fleet::AgentFacts) {
    let (Ask::Reconnect { proxy }, Some(expired)) = (&mut req.ask, &f.expired_proxy) else {
        return;
    };
    if proxy.is_empty() {
        req.reason = format!("{}: {expired} expired", req.reason);
        proxy.clone_from(expired);
    }
}

/// Why a restart-only peer's agent is not restarted, if it is not: a
/// restart is not what the signal asks for or cannot help, automatic ones
/// wait after failures, or the restart cap is reached.
fn restart_refusal(
    origin: Origin,
    f: &crate::fleet::AgentFacts,
    restarts_failing: bool,
    at_cap: bool,
) -> Option<Refusal> {
    let helps = match origin {
        Origin::Manual => f.holds_tunnel,
        Origin::Automatic => f.restart_helps,
        Origin::Periodic | Origin::Graceful => false,
    };
    if !helps {
        Some(Refusal::RestartWouldNotHelp)
    } else if origin == Origin::Automatic && restarts_failing {
        Some(Refusal::RestartsFailing)
    } else if at_cap {
        Some(Refusal::RestartsInFlight)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::AgentFacts;

    fn auto(proxy: &str) -> SignalRequest {
        SignalRequest {
            agent: "agent-1".into(),
            ask: Ask::Reconnect {
                proxy: proxy.into(),
            },
            reason: "tunnel_to_expired_proxy".into(),
            requested_by: "auto".into(),
            trace: None,
        }
    }

    fn facts(expired_proxy: Option<&str>) -> AgentFacts {
        AgentFacts {
            holds_tunnel: true,
            has_destination: true,
            restart_helps: false,
            expired_proxy: expired_proxy.map(str::to_string),
        }
    }

    #[test]
    fn an_automatic_reconnect_names_the_expired_proxy_the_agent_holds_when_it_goes() {
        // (expired proxy the fleet sees, proxy the request named) →
        // (proxy named, reason)
        let cases = [
            (
                Some("proxy-2"),
                "",
                "proxy-2",
                "tunnel_to_expired_proxy: proxy-2 expired",
            ),
            (None, "", "", "tunnel_to_expired_proxy"),
            (
                Some("proxy-2"),
                "proxy-1",
                "proxy-1",
                "tunnel_to_expired_proxy",
            ),
        ];
        for (expired, named, proxy, reason) in cases {
            let mut r = auto(named);
            name_expired_proxy(&mut r, &facts(expired));
            assert_eq!(r.ask.proxy(), proxy, "{expired:?} {named:?}");
            assert_eq!(r.reason, reason, "{expired:?} {named:?}");
        }
    }
}
