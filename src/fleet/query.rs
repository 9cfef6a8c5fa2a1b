//! The fleet's read API: every question another room may ask, by name.
//! Each runs inside the actor on settled state, so an answer is consistent
//! with itself; no room outside `fleet` walks the fleet's indexes.

use super::view::{self, AgentCounts, AgentDetail, AgentFilter, AgentPage, ProxyDetail, TtlPage};
use std::sync::Arc;

use super::published::{Published, MAX_AGE};
use super::{FleetError, FleetHandle, StateChange};
use crate::clock::Ts;
use crate::model::{AgentState, Kind};

/// Which agents a bulk action names.
#[derive(Clone, Debug)]
pub enum Selection {
    /// Every agent in this state.
    State(AgentState),
    /// Every agent with a tunnel to this proxy.
    Proxy(String),
    /// Every agent attached to this auth server.
    AuthServer(String),
}

/// One page of the agent list with what the page shows around it.
#[derive(Debug)]
pub struct AgentList {
    pub page: AgentPage,
    pub last_signals: Vec<Option<i64>>,
    pub counts: AgentCounts,
    /// Every auth server's name, in order (the filter's choices).
    pub auth_servers: Vec<String>,
    pub at: Ts,
}

/// A connected agent holding more tunnels than it asked for.
#[derive(Debug)]
pub struct Surplus {
    pub agent: String,
    pub desired: u32,
    /// Its tunnels' proxies, each with whether the tunnel is live.
    pub tunnels: Vec<(String, bool)>,
}

/// How much the fleet holds.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    pub agents: usize,
    pub proxies: usize,
    pub tunnels: usize,
}

impl FleetHandle {
    /// Answers once every command sent before it has been applied (and
    /// due timers fired) and what the fleet publishes shows it: the fleet's
    /// current time.
    pub async fn settled(&self) -> Result<Ts, FleetError> {
        self.ask_mut(|f| {
            f.publish_if_touched();
            f.now()
        })
        .await
    }

    /// The read model the fleet last published (no wait, no actor).
    pub fn published(&self) -> Arc<Published> {
        self.published.borrow().clone()
    }

    /// The last published read model if it is at most [`MAX_AGE`] old by
    /// the fleet's clock; otherwise asks the fleet for a fresh one. Under
    /// load the fleet publishes every [`PUBLISH_EVERY`] on its own, so this
    /// asks only of an idle fleet.
    ///
    /// [`PUBLISH_EVERY`]: super::published::PUBLISH_EVERY
    pub async fn recent(&self) -> Result<Arc<Published>, FleetError> {
        let p = self.published();
        if self.clock.now().since(p.at()) <= MAX_AGE {
            return Ok(p);
        }
        self.ask_mut(|f| f.publish()).await?;
        Ok(self.published())
    }

    pub async fn sizes(&self) -> Result<Sizes, FleetError> {
        self.ask(|f| f.sizes()).await
    }

    pub async fn agents(&self, filter: AgentFilter) -> Result<AgentPage, FleetError> {
        self.ask(move |f| view::agents(f, &filter)).await
    }

    /// One agent in full, and when it was read.
    pub async fn agent(&self, name: String) -> Result<Option<(AgentDetail, Ts)>, FleetError> {
        self.ask(move |f| view::agent(f, &name).map(|d| (d, f.now())))
            .await
    }

    pub async fn proxy(&self, name: String) -> Result<Option<ProxyDetail>, FleetError> {
        self.ask(move |f| view::proxy(f, &name)).await
    }

    /// TTL windows (see [`view::ttl_windows`]), and when they were read.
    pub async fn ttl_windows(
        &self,
        kind: Option<Kind>,
        after: Option<String>,
        limit: usize,
    ) -> Result<(TtlPage, Ts), FleetError> {
        self.ask(move |f| (view::ttl_windows(f, kind, after.as_deref(), limit), f.now()))
            .await
    }

    pub async fn agent_list(&self, filter: AgentFilter) -> Result<AgentList, FleetError> {
        self.ask(move |f| {
            let (page, last_signals) = view::agents_with_last_signal(f, &filter);
            let (at, counts) = view::summary_counts(f);
            AgentList {
                page,
                last_signals,
                counts,
                auth_servers: f.auth_names(),
                at,
            }
        })
        .await
    }

    /// The agents `sel` names, in name order; `None` when it names a proxy
    /// or auth server the fleet does not know.
    pub async fn select(&self, sel: Selection) -> Result<Option<Vec<String>>, FleetError> {
        self.ask(move |f| f.select(&sel)).await
    }

    /// Whether `agent` holds a tunnel to `proxy` (any tunnel when `None`);
    /// `None` when the agent is unknown.
    pub async fn holds_tunnel(
        &self,
        agent: String,
        proxy: Option<String>,
    ) -> Result<Option<bool>, FleetError> {
        self.ask(move |f| f.holds_tunnel(&agent, proxy.as_deref()))
            .await
    }

    /// True when `addr` is a known proxy's or auth server's address.
    pub async fn knows_address(&self, addr: String) -> Result<bool, FleetError> {
        self.ask(move |f| f.knows_address(&addr)).await
    }

    /// For each agent, whether a live proxy it is not on exists.
    pub async fn destinations(
        &self,
        agents: Vec<String>,
    ) -> Result<Vec<(String, bool)>, FleetError> {
        self.ask(move |f| {
            let live = f.live_proxies();
            agents
                .into_iter()
                .map(|a| {
                    let go = f.has_destination(&a, live);
                    (a, go)
                })
                .collect()
        })
        .await
    }

    /// Every agent not healthy now, as a change to its current state, and
    /// how many agents there are.
    pub async fn not_healthy(&self) -> Result<(Vec<StateChange>, usize), FleetError> {
        self.ask(|f| (f.not_healthy(), f.sizes().agents)).await
    }

    /// Connected agents holding more tunnels than they asked for.
    pub async fn surplus_tunnels(&self) -> Result<Vec<Surplus>, FleetError> {
        self.ask(|f| f.surplus_tunnels()).await
    }
}
