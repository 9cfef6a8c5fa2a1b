//! Where an agent could move: the one rule that decides whether a Reconnect
//! can help it. A Reconnect asks the agent to open a tunnel to a live proxy
//! it is not on, then leave a dead one; with no such proxy the agent can only
//! fail, so it is *waiting for a live proxy* instead of being signalled.
//!
//! "Live" and "on" are as far as Lifeline knows: proxies from the watcher,
//! tunnels from the cluster's records merged with the agent's own reports.

use super::{AgentEntry, Model};
use crate::domain::{AgentState, Reason, Reasons};

/// Whether an agent in this state is one automatic reconnects try to move:
/// it has no live tunnel, or holds a tunnel to an expired proxy.
pub fn wants_move(state: AgentState, reasons: Reasons) -> bool {
    state != AgentState::Healthy
        && (reasons.contains(Reason::NoLiveTunnel)
            || reasons.contains(Reason::TunnelToExpiredProxy))
}

/// The live proxies, counted once for a batch of questions.
#[derive(Clone, Copy, Debug)]
pub struct LiveProxies(usize);

impl Model {
    /// A proxy in a maintenance window is no destination: nothing
    /// automatic sends an agent towards it.
    fn destination(&self, name: &str, p: &super::ResEntry) -> bool {
        !p.expired && (self.windows.is_empty() || !self.windows.covers_proxy(name, self.now))
    }

    pub fn live_proxies(&self) -> LiveProxies {
        LiveProxies(
            self.proxies
                .iter()
                .filter(|(n, p)| self.destination(n, p))
                .count(),
        )
    }

    /// True when `agent` holds no tunnel to at least one live proxy (one
    /// outside every maintenance window).
    pub fn has_destination(&self, agent: &str, live: LiveProxies) -> bool {
        // Distinct live proxies the agent is on; an agent holds a handful.
        let mut on: Vec<&str> = Vec::new();
        for t in self.tunnels_of(agent) {
            let proxy = t.tunnel.proxy.as_str();
            let live_proxy = self
                .proxies
                .get(proxy)
                .is_some_and(|p| self.destination(proxy, p));
            if live_proxy && !on.contains(&proxy) {
                on.push(proxy);
            }
        }
        live.0 > on.len()
    }

    /// A proxy `agent` holds a tunnel to that has expired (or is gone), if
    /// any: what an automatic reconnect should name now. The one its cause
    /// names while it still holds it (what its episode and trace say),
    /// else the first.
    pub fn expired_proxy_of(&self, agent: &str) -> Option<String> {
        let cause = self
            .agents
            .get(agent)
            .and_then(|a| a.cause.as_ref())
            .map(|c| c.resource.as_str());
        let expired: Vec<&str> = self
            .tunnels_of(agent)
            .map(|t| t.tunnel.proxy.as_str())
            .filter(|p| self.proxies.get(*p).is_none_or(|e| e.expired))
            .collect();
        let pick = expired
            .iter()
            .find(|p| Some(**p) == cause)
            .or(expired.first())?;
        Some(pick.to_string())
    }

    /// An agent automatic reconnects would move, but that has nowhere to go.
    pub fn waiting_for_live_proxy(&self, name: &str, a: &AgentEntry, live: LiveProxies) -> bool {
        wants_move(a.state, a.reasons) && !self.has_destination(name, live)
    }
}
