//! Automatic, periodic and graceful signals, and the storm guard.
//!
//! - automatic: an agent that turns stranded with `no_live_tunnel`, or holds
//!   a tunnel to an expired proxy, gets a Reconnect at once and again with
//!   backoff (1 s base, 16 s cap, up to 50 % jitter) until it recovers, but
//!   only while it has somewhere to go (a live proxy it is not on). Without
//!   one it is *waiting for a live proxy*: no signal, no timer, until a proxy
//!   turns live (the board says so) or its own state changes;
//! - storm guard: automatic reconnects pause while any watched kind is stale
//!   or initialising, or while more than a share of all agents turned
//!   stranded within one window; manual signals are never paused;
//! - periodic: every connected agent gets a Reconnect each interval (plus
//!   jitter), at a bounded rate per second;
//! - graceful: an agent with more tunnels than it wants gets a CloseTunnel
//!   once the proxy topology has been still for a (randomised) threshold,
//!   never for its last live tunnel.
//!
//! - replicas: every replica tracks who needs what; only the leader sends.
//!
//! Reads fleet state through `FleetHandle` and changes from its broadcast;
//! sends only through the dispatch (`dispatch`), which admits every
//! signal alike. Must not touch SQLite or agent streams.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use rand::{Rng, SeedableRng};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tokio_util::time::{delay_queue, DelayQueue};
use tracing::{debug, info, info_span, warn, Instrument};

use super::dispatch::{Dispatch, Origin, Refusal};
use super::hub::{Ask, Hub, SendError, SignalRequest};
use crate::backoff::Backoff;
use crate::clock::{Clock, Ts};
use crate::domain::{AgentState, Plan, Reason};
use crate::fleet::model::destination::wants_move;
use crate::fleet::Surplus;
use crate::fleet::{FleetHandle, StateChange};
use crate::telemetry::propagate::TraceRef;

#[derive(Clone, Debug)]
pub struct ReconnectConfig {
    pub backoff_base: Duration,
    pub backoff_cap: Duration,
    pub storm_window: Duration,
    pub periodic_max_per_second: u32,
    pub graceful_threshold: Duration,
    /// The least time between two automatic restarts of one agent.
    pub restart_retry: Duration,
}

impl From<&crate::config::SignalsConfig> for ReconnectConfig {
    fn from(c: &crate::config::SignalsConfig) -> Self {
        ReconnectConfig {
            backoff_base: c.reconnect_backoff_base,
            backoff_cap: c.reconnect_backoff_cap,
            storm_window: c.storm_window,
            periodic_max_per_second: c.periodic_max_per_second,
            graceful_threshold: c.graceful_threshold,
            restart_retry: c.restart_retry,
        }
    }
}

pub use super::dispatch::Guard;

struct Need {
    /// Its entry in the delay queue; `None` while waiting for a live proxy.
    key: Option<delay_queue::Key>,
    attempt: u32,
    /// Why (`no_live_tunnel`, `auth_unhealthy`, …). Which proxy to leave
    /// is not kept here: the dispatch names the expired one the agent
    /// holds when the signal goes.
    reason: &'static str,
    /// The failure trace the agent's episode belongs to.
    trace: Option<TraceRef>,
}

/// Which of an agent's surplus tunnels to close: a dead one first; a live
/// one (the last by proxy name) only if another live one stays.
fn pick_surplus(s: Surplus) -> Option<Excess> {
    let live = s.tunnels.iter().filter(|(_, l)| *l).count();
    let pick = s.tunnels.iter().find(|(_, l)| !*l).or_else(|| {
        (live > 1)
            .then(|| s.tunnels.iter().max_by_key(|(p, _)| p.as_str()))
            .flatten()
    })?;
    Some(Excess {
        proxy: pick.0.clone(),
        reason: format!(
            "{} tunnels, {} wanted; topology still",
            s.tunnels.len(),
            s.desired
        ),
        agent: s.agent,
    })
}

/// Why automatic reconnects would move the agent of a change, if they
/// would.
fn wants_reconnect(c: &StateChange) -> Option<&'static str> {
    if !wants_move(c.to, c.reasons) {
        return None;
    }
    Some(if c.reasons.contains(Reason::NoLiveTunnel) {
        "no_live_tunnel"
    } else {
        "tunnel_to_expired_proxy"
    })
}

/// Starts the automatic, periodic and graceful loops on `rt`, from
/// `[signals]`; every signal they send goes through `dispatch`.
pub fn start(
    cfg: &crate::config::SignalsConfig,
    dispatch: &Arc<Dispatch>,
    fleet: &FleetHandle,
    rt: &mut crate::supervise::Runtime,
) {
    for t in spawn(
        ReconnectConfig::from(cfg),
        dispatch.clone(),
        fleet.clone(),
        rt.clock,
        rt.shutdown.clone(),
    ) {
        rt.tasks.track("reconnect loops", t);
    }
}

/// Starts the automatic, periodic and graceful loops.
fn spawn(
    cfg: ReconnectConfig,
    dispatch: Arc<Dispatch>,
    fleet: FleetHandle,
    clock: Clock,
    stop: CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    vec![
        tokio::spawn(
            automatic(
                cfg.clone(),
                dispatch.clone(),
                fleet.clone(),
                clock,
                stop.clone(),
            )
            .instrument(info_span!("signals.auto_reconnect")),
        ),
        tokio::spawn(
            periodic(cfg.clone(), dispatch.clone(), stop.clone())
                .instrument(info_span!("signals.periodic_reconnect")),
        ),
        tokio::spawn(
            graceful(cfg, dispatch, fleet, clock, stop)
                .instrument(info_span!("signals.graceful_close")),
        ),
    ]
}

struct Auto {
    cfg: ReconnectConfig,
    dispatch: Arc<Dispatch>,
    hub: Arc<Hub>,
    fleet: FleetHandle,
    clock: Clock,
    needs: HashMap<String, Need>,
    queue: DelayQueue<String>,
    /// When agents turned stranded, within the storm window.
    recent: VecDeque<Ts>,
    agents: usize,
    rng: rand::rngs::SmallRng,
}

impl Auto {
    /// A stranded agent whose peer restarts it (a sidecar) is also
    /// reconnected when its Auth is unhealthy or its own heartbeats
    /// expired: a restart dials a fresh Auth connection and heartbeats
    /// anew, where moving a tunnel could not help.
    fn restart_wanted(&self, c: &StateChange) -> Option<&'static str> {
        if c.to != AgentState::Stranded {
            return None;
        }
        let why = if c.reasons.contains(Reason::AuthUnhealthy) {
            "auth_unhealthy"
        } else if c.reasons.contains(Reason::AgentExpired) {
            "agent_expired"
        } else {
            return None;
        };
        let restarts = self
            .hub
            .restarted_by_sidecar(std::slice::from_ref(&c.agent));
        (!restarts.is_empty()).then_some(why)
    }

    fn note(&mut self, c: &StateChange) {
        // What the plan's one rule lets automatic actions do.
        let handling = Plan::handling(c.planned);
        if !handling.reconnected {
            self.forget(&c.agent);
            return;
        }
        if !handling.restarted
            && !self
                .hub
                .restarted_by_sidecar(std::slice::from_ref(&c.agent))
                .is_empty()
        {
            self.forget(&c.agent);
            return;
        }
        // A planned stranding is no part of a storm.
        if c.planned.is_none() && c.to == AgentState::Stranded && c.from != AgentState::Stranded {
            self.recent.push_back(self.clock.now());
        }
        // A restart's own reason first: it is what the restart is for.
        match self.restart_wanted(c).or_else(|| wants_reconnect(c)) {
            Some(reason) => match self.needs.get_mut(&c.agent) {
                Some(n) => {
                    n.reason = reason;
                    n.trace = c.trace.clone();
                    // Its tunnels changed: it may have somewhere to go now.
                    if n.key.is_none() {
                        n.key = Some(self.queue.insert(c.agent.clone(), Duration::ZERO));
                    }
                }
                None => {
                    let key = self.queue.insert(c.agent.clone(), Duration::ZERO);
                    self.needs.insert(
                        c.agent.clone(),
                        Need {
                            key: Some(key),
                            attempt: 0,
                            reason,
                            trace: c.trace.clone(),
                        },
                    );
                }
            },
            None => self.forget(&c.agent),
        }
    }

    fn forget(&mut self, agent: &str) {
        if let Some(Need { key: Some(k), .. }) = self.needs.remove(agent) {
            self.queue.remove(&k);
        }
    }

    /// A proxy turned live: every agent waiting for one is due now.
    fn proxy_up(&mut self) {
        let mut woken = 0usize;
        for (agent, n) in self.needs.iter_mut() {
            if n.key.is_none() {
                n.key = Some(self.queue.insert(agent.clone(), Duration::ZERO));
                woken += 1;
            }
        }
        if woken > 0 {
            info!(
                agents = woken,
                "a proxy turned live: agents waiting for one are due"
            );
        }
    }

    /// This replica took the lead: every agent it holds back is due now
    /// (the old leader's backoff is not known here, and time matters more).
    fn took_lead(&mut self) {
        let mut due = 0usize;
        for (agent, n) in self.needs.iter_mut() {
            if let Some(k) = n.key.take() {
                self.queue.remove(&k);
            }
            n.key = Some(self.queue.insert(agent.clone(), Duration::ZERO));
            due += 1;
        }
        info!(
            agents = due,
            "leading now: agents that need a reconnect are due"
        );
    }

    /// Re-reads who needs a reconnect (after missing changes).
    async fn resync(&mut self) {
        let Ok(list) = self.fleet.not_healthy().await else {
            return;
        };
        self.agents = list.1;
        let keep: std::collections::HashSet<String> =
            list.0.iter().map(|c| c.agent.clone()).collect();
        let gone: Vec<String> = self
            .needs
            .keys()
            .filter(|a| !keep.contains(*a))
            .cloned()
            .collect();
        for a in gone {
            self.forget(&a);
        }
        for c in &list.0 {
            self.note(c);
        }
    }

    fn evaluate(&mut self) -> bool {
        let now = self.clock.now();
        while self
            .recent
            .front()
            .is_some_and(|t| now.since(*t) > self.cfg.storm_window)
        {
            self.recent.pop_front();
        }
        let share = self.hub.settings.storm_share();
        let readiness = self.fleet.readiness();
        let stale: Vec<&str> = readiness
            .kinds
            .iter()
            .filter(|(_, s)| {
                !matches!(
                    s.state,
                    crate::fleet::WatchState::Ready | crate::fleet::WatchState::Rejected
                )
            })
            .map(|(k, _)| *k)
            .collect();
        // Still listing for the first time (some kind initialising, none
        // gone stale): expected, not worth a warning or a notification.
        let listing = !stale.is_empty()
            && readiness
                .kinds
                .values()
                .all(|s| s.state != crate::fleet::WatchState::Stale);
        let limit = (share * self.agents as f64).floor() as usize;
        let reason = if !stale.is_empty() {
            Some(format!(
                "cluster data is not current for {}: Lifeline cannot tell stranded from unseen, so it sends no automatic signal",
                stale.join(", ")
            ))
        } else if self.agents > 0 && self.recent.len() > limit {
            Some(format!(
                "storm guard: {} of {} agents ({:.0}%) turned stranded within {:?}, more than the {:.0}% limit; automatic reconnects pause until the window passes (manual ones still work). \
                 Expected when most of the fleet shares the server that failed: a stranding this wide is cluster-wide, or Lifeline's view of it \
                 is wrong, and the pause lets a wrong view correct itself before the whole fleet is moved",
                self.recent.len(),
                self.agents,
                100.0 * self.recent.len() as f64 / self.agents as f64,
                self.cfg.storm_window,
                share * 100.0
            ))
        } else {
            None
        };
        let paused = reason.is_some();
        let restarts_paused = self.hub.restarts_failing();
        let stranded_in_window = self.recent.len();
        let agents = self.agents;
        let waiting = self.needs.values().filter(|n| n.key.is_none()).count();
        let retrying = self.needs.len() - waiting;
        let clock_now = self.clock.now();
        self.dispatch.guard().send_if_modified(|g| {
            let flipped = g.paused != paused || g.reason.is_some() != reason.is_some();
            if flipped {
                if paused && listing {
                    info!("automatic reconnects wait until the cluster data is listed");
                } else if paused {
                    warn!(
                        reason = reason.as_deref().unwrap_or(""),
                        "automatic reconnects paused"
                    );
                } else {
                    info!("automatic reconnects resumed");
                }
                g.since = Some(clock_now);
            }
            let next = Guard {
                paused,
                waiting_for_listing: paused && listing,
                reason: reason.clone(),
                since: g.since,
                stranded_in_window,
                agents,
                share_limit: share,
                agents_retrying: retrying,
                agents_waiting_for_live_proxy: waiting,
                restarts_paused: restarts_paused.clone(),
            };
            if *g == next {
                false
            } else {
                *g = next;
                true
            }
        });
        paused
    }

    /// Sends one Reconnect to every due agent through the dispatch, as one
    /// batch (one audit transaction), and re-arms each sent with its next
    /// backoff. One with no live proxy to move to waits, unsignalled, for
    /// one to turn live. While paused, following, or for an agent without
    /// a stream, it holds: looks again soon, and the attempt count does
    /// not grow.
    async fn attempt(&mut self, due: Vec<String>) {
        let backoff = Backoff::at_least_step(self.cfg.backoff_base, self.cfg.backoff_cap);
        let reqs: Vec<SignalRequest> = due
            .iter()
            .filter_map(|agent| {
                let n = self.needs.get_mut(agent)?;
                n.key = None;
                Some(SignalRequest {
                    agent: agent.clone(),
                    // The dispatch names the proxy to leave.
                    ask: Ask::Reconnect {
                        proxy: String::new(),
                    },
                    reason: n.reason.to_string(),
                    requested_by: "auto".into(),
                    trace: n.trace.clone(),
                })
            })
            .collect();
        let agents: Vec<String> = reqs.iter().map(|r| r.agent.clone()).collect();
        // Held: looked at again soon, the attempt count unchanged. Waiting:
        // out of the queue until a proxy turns live.
        let mut held: Vec<String> = Vec::new();
        let mut waiting = 0usize;
        let sent: Vec<String> = match self.dispatch.send(Origin::Automatic, reqs).await {
            Ok(d) => {
                if !d.sent.is_empty() {
                    debug!(signals = d.sent.len(), "automatic reconnects sent");
                }
                for (agent, why) in d.refused {
                    match why {
                        Refusal::NoDestination => waiting += 1,
                        // Until its state changes.
                        Refusal::RestartWouldNotHelp => {}
                        _ => held.push(agent),
                    }
                }
                d.sent.into_iter().map(|r| r.agent).collect()
            }
            // The leader sends them, or the guard holds: all wait.
            Err(SendError::NotLeader | SendError::Paused(_)) => {
                held = agents;
                Vec::new()
            }
            Err(e) => {
                warn!(agents = agents.len(), error = %e, "automatic reconnects not sent");
                agents
            }
        };
        for agent in held {
            if let Some(n) = self.needs.get_mut(&agent) {
                let d = backoff.delay_with(0, &mut self.rng);
                n.key = Some(self.queue.insert(agent, d));
            }
        }
        if waiting > 0 {
            debug!(
                agents = waiting,
                "no live proxy to move to: waiting for one"
            );
        }
        let restarting = self.hub.restarted_by_sidecar(&sent);
        for agent in sent {
            if let Some(n) = self.needs.get_mut(&agent) {
                // The first retry comes after the base (1 s), then doubles;
                // a restarted agent gets its restart's time first.
                let mut d = backoff.delay_with(n.attempt, &mut self.rng);
                if restarting.contains(&agent) {
                    d = d.max(self.cfg.restart_retry);
                }
                n.attempt += 1;
                n.key = Some(self.queue.insert(agent, d));
            }
        }
    }
}

async fn automatic(
    cfg: ReconnectConfig,
    dispatch: Arc<Dispatch>,
    fleet: FleetHandle,
    clock: Clock,
    stop: CancellationToken,
) {
    let hub = dispatch.hub().clone();
    let mut changes = fleet.subscribe();
    let mut readiness = fleet.readiness_watch();
    let mut proxy_up = hub.board().subscribe_proxy_up();
    let mut leadership = hub.leadership();
    let mut lead_may_change = true;
    let mut auto = Auto {
        cfg,
        dispatch,
        hub,
        fleet,
        clock,
        needs: HashMap::new(),
        queue: DelayQueue::new(),
        recent: VecDeque::new(),
        agents: 0,
        rng: rand::rngs::SmallRng::from_os_rng(),
    };
    auto.resync().await;
    auto.evaluate();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            c = changes.recv() => match c {
                Ok(batch) => {
                    if let Ok(n) = auto.fleet.sizes().await.map(|s| s.agents) {
                        auto.agents = n;
                    }
                    for ch in batch.iter() {
                        auto.note(ch);
                    }
                    auto.evaluate();
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    warn!(missed = n, "automatic reconnects missed state changes; re-reading the fleet");
                    auto.resync().await;
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            r = readiness.changed() => {
                if r.is_err() { return; }
                auto.evaluate();
            }
            r = proxy_up.changed() => {
                if r.is_err() { return; }
                auto.proxy_up();
            }
            // Alone on its database nobody changes who leads: the
            // sender is gone from the start.
            r = leadership.changed(), if lead_may_change => {
                if r.is_err() {
                    lead_may_change = false;
                } else if leadership.borrow_and_update().leading {
                    auto.took_lead();
                }
            }
            Some(exp) = auto.queue.next(), if !auto.queue.is_empty() => {
                // Everything due now goes out together.
                let mut due = vec![exp.into_inner()];
                while let Some(Some(e)) = auto.queue.next().now_or_never() {
                    due.push(e.into_inner());
                }
                auto.attempt(due).await;
            }
            _ = tick.tick() => { auto.evaluate(); }
        }
    }
}

async fn periodic(cfg: ReconnectConfig, dispatch: Arc<Dispatch>, stop: CancellationToken) {
    let hub = dispatch.hub();
    let mut rng: rand::rngs::SmallRng = rand::rngs::SmallRng::from_os_rng();
    loop {
        let wait = match hub.settings.reconnect_interval() {
            Some(i) => i + i.mul_f64(rng.random_range(0.0..0.1)),
            // Off: look again in a while (the setting can change at run time).
            None => Duration::from_secs(5),
        };
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(wait) => {}
        }
        if hub.settings.reconnect_interval().is_none() || !hub.leads() {
            continue;
        }
        let agents = hub.reachable_agents();
        info!(
            agents = agents.len(),
            rate = cfg.periodic_max_per_second,
            "periodic reconnect round"
        );
        let per_tick = cfg.periodic_max_per_second.max(1) as usize;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        for chunk in agents.chunks(per_tick) {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tick.tick() => {}
            }
            // A round runs for minutes: it ends when this replica stops
            // leading (and each batch is fenced by the term besides).
            if !hub.leads() {
                info!("periodic reconnect round stopped: this replica no longer leads");
                break;
            }
            let reqs = chunk
                .iter()
                .map(|a| SignalRequest {
                    agent: a.clone(),
                    ask: Ask::Reconnect {
                        proxy: String::new(),
                    },
                    reason: "periodic reconnect".into(),
                    requested_by: "periodic".into(),
                    trace: None,
                })
                .collect();
            match dispatch.send(Origin::Periodic, reqs).await {
                Ok(d) if !d.refused.is_empty() => {
                    debug!(refused = ?d.refused, "periodic reconnects refused for some agents");
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "periodic reconnects not sent"),
            }
        }
    }
}

/// One agent's excess tunnel to close.
struct Excess {
    agent: String,
    proxy: String,
    reason: String,
}

async fn graceful(
    cfg: ReconnectConfig,
    dispatch: Arc<Dispatch>,
    fleet: FleetHandle,
    clock: Clock,
    stop: CancellationToken,
) {
    let hub = dispatch.hub();
    let mut rng: rand::rngs::SmallRng = rand::rngs::SmallRng::from_os_rng();
    let mut seen_change = Ts::ZERO;
    let mut threshold = cfg.graceful_threshold;
    let mut recently: HashMap<String, Ts> = HashMap::new();
    let check =
        (cfg.graceful_threshold / 10).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(check) => {}
        }
        if !hub.settings.graceful_tunnel_closing() || !hub.leads() {
            continue;
        }
        let changed = hub.board().topology_changed();
        if changed != seen_change {
            // A new still period: roll its threshold (30 min up to 60 by default).
            seen_change = changed;
            threshold =
                cfg.graceful_threshold + cfg.graceful_threshold.mul_f64(rng.random_range(0.0..1.0));
        }
        let now = clock.now();
        if now.since(changed) < threshold || !fleet.readiness().ready {
            continue;
        }
        recently.retain(|_, at| now.since(*at) < threshold);
        let Ok(surplus) = fleet.surplus_tunnels().await else {
            return;
        };
        let list = surplus.into_iter().filter_map(pick_surplus);
        let mut reqs: Vec<SignalRequest> = Vec::new();
        for e in list {
            if reqs.len() >= cfg.periodic_max_per_second.max(1) as usize {
                break;
            }
            if recently.contains_key(&e.agent) {
                continue;
            }
            recently.insert(e.agent.clone(), now);
            reqs.push(SignalRequest {
                agent: e.agent,
                ask: Ask::CloseTunnel { proxy: e.proxy },
                reason: e.reason,
                requested_by: "graceful".into(),
                trace: None,
            });
        }
        if !reqs.is_empty() {
            info!(agents = reqs.len(), "closing excess tunnels");
            match dispatch.send(Origin::Graceful, reqs).await {
                Ok(d) if !d.refused.is_empty() => {
                    debug!(refused = ?d.refused, "graceful tunnel closing refused for some agents");
                }
                Ok(_) => {}
                Err(e) => warn!(error = %e, "graceful tunnel closing not sent"),
            }
        }
    }
}
