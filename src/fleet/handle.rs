//! The fleet's front: the cloneable handle other rooms hold, the commands
//! it sends the shell, and every question they may ask, by name. A
//! question is a [`Query`] with a typed answer: no code crosses into the
//! actor, and no room outside `fleet` walks the model's indexes. Each is
//! answered on settled state, so an answer is consistent with itself.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc, oneshot, watch};

use super::model::{
    Adopted, Changes, HealthUpdate, Ingested, Link, Model, Readiness, Resync, Selection, Sizes,
    StateChange, Surplus,
};
use super::published::{Published, MAX_AGE};
use super::view::{self, AgentCounts, AgentDetail, AgentFilter, AgentPage, ProxyDetail, TtlPage};
use crate::clock::Ts;
use crate::domain::Kind;

/// Where a query's answer goes.
pub type Reply<T> = oneshot::Sender<T>;

pub enum Command {
    Apply(Vec<Ingested>),
    Resync(Resync),
    /// The watch stream of `generation` ended: its kinds turn stale.
    WatchDown {
        generation: u64,
        error: String,
    },
    Health(HealthUpdate),
    /// An agent's signal stream opened (`Some`) or closed (`None`).
    Link {
        agent: String,
        link: Option<Link>,
    },
    /// An agent's own tunnel report.
    Report {
        agent: String,
        proxies: Vec<String>,
        auth_server: String,
    },
    /// What a sidecar read of the agent beside it.
    PeerReport {
        agent: String,
        report: crate::fleet::model::PeerReport,
    },
    /// Audited signals (agent, id) were sent at `at`: one command per
    /// request, however many agents it names.
    Signaled {
        signals: Vec<(String, i64)>,
        at: Ts,
    },
    /// This replica leads under `fence` (see `model::lead`).
    Lead {
        fence: crate::store::Fence,
        open: Vec<crate::domain::Episode>,
        next_episode: i64,
        /// The open incidents and the next incident id.
        incidents: (Vec<crate::domain::IncidentRecord>, i64),
        reply: Reply<Adopted>,
    },
    /// Another replica leads: nothing this one makes is written.
    Follow(Reply<()>),
    /// The maintenance windows not yet over.
    Windows(crate::domain::Windows),
    /// A question, answered on settled state.
    Query(Query),
    /// Answers once every write produced so far is committed.
    Flush(Reply<()>),
}

/// Every question another room may ask the fleet, each with its answer's
/// type.
pub enum Query {
    /// Publishes what changed; answers the fleet's current time.
    Settled(Reply<Ts>),
    /// Publishes now.
    Publish(Reply<()>),
    Sizes(Reply<Sizes>),
    Agents(AgentFilter, Reply<AgentPage>),
    Agent(String, Reply<Option<(AgentDetail, Ts)>>),
    Proxy(String, Reply<Option<ProxyDetail>>),
    TtlWindows {
        kind: Option<Kind>,
        after: Option<String>,
        limit: usize,
        reply: Reply<(TtlPage, Ts)>,
    },
    AgentList(AgentFilter, Reply<AgentList>),
    Select(Selection, Reply<Option<Vec<String>>>),
    KnownTargets(Vec<crate::domain::Target>, Reply<Vec<bool>>),
    /// For each (agent, proxy it names): what admitting a signal needs.
    Facts(
        Vec<(String, Option<String>)>,
        Reply<Vec<Option<AgentFacts>>>,
    ),
    KnowsAddress(String, Reply<bool>),
    NotHealthy(Reply<(Vec<StateChange>, usize)>),
    SurplusTunnels(Reply<Vec<Surplus>>),
}

impl Query {
    /// Answers a question that reads the model only; gives back the ones
    /// that publish (`Settled`, `Publish`), which are the shell's.
    pub(super) fn answer(self, f: &Model) -> Option<Query> {
        // A reader that gave up is no error: its answer is dropped.
        match self {
            Query::Settled(_) | Query::Publish(_) => return Some(self),
            Query::Sizes(r) => drop(r.send(f.sizes())),
            Query::Agents(filter, r) => drop(r.send(view::agents(f, &filter))),
            Query::Agent(name, r) => {
                drop(r.send(view::agent(f, &name).map(|d| (d, f.now()))));
            }
            Query::Proxy(name, r) => drop(r.send(view::proxy(f, &name))),
            Query::TtlWindows {
                kind,
                after,
                limit,
                reply,
            } => {
                let page = view::ttl_windows(f, kind, after.as_deref(), limit);
                drop(reply.send((page, f.now())));
            }
            Query::AgentList(filter, r) => {
                let (page, last_signals) = view::agents_with_last_signal(f, &filter);
                let (at, counts) = view::summary_counts(f);
                drop(r.send(AgentList {
                    page,
                    last_signals,
                    counts,
                    auth_servers: f.auth_names(),
                    at,
                }));
            }
            Query::Select(sel, r) => drop(r.send(f.select(&sel))),
            Query::KnownTargets(t, r) => drop(r.send(f.known_targets(&t))),
            Query::Facts(asks, r) => {
                let live = f.live_proxies();
                let answer = asks
                    .iter()
                    .map(|(agent, proxy)| {
                        let holds_tunnel = f.holds_tunnel(agent, proxy.as_deref())?;
                        let has_destination = f.has_destination(agent, live);
                        Some(AgentFacts {
                            holds_tunnel,
                            has_destination,
                            restart_helps: f.restart_helps(agent),
                            expired_proxy: f.expired_proxy_of(agent),
                        })
                    })
                    .collect();
                drop(r.send(answer));
            }
            Query::KnowsAddress(addr, r) => drop(r.send(f.knows_address(&addr))),
            Query::NotHealthy(r) => drop(r.send((f.not_healthy(), f.sizes().agents))),
            Query::SurplusTunnels(r) => drop(r.send(f.surplus_tunnels())),
        }
        None
    }
}

/// What admitting a signal needs to know of one agent (`None` instead:
/// the fleet does not know it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentFacts {
    /// It holds a tunnel to the proxy the signal names (any, when none).
    pub holds_tunnel: bool,
    /// A live proxy it is not on exists: a Reconnect can move it.
    pub has_destination: bool,
    /// A graceful restart can help it (see `Model::restart_helps`).
    pub restart_helps: bool,
    /// A proxy it holds a tunnel to that has expired, if any.
    pub expired_proxy: Option<String>,
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

#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error("the fleet has stopped")]
    Stopped,
    /// A read did not get its turn in time (a handle made with
    /// [`FleetHandle::with_read_timeout`]).
    #[error("the fleet did not answer within {0:?}: it is busy")]
    Busy(std::time::Duration),
}

/// Most request handlers' reads waiting in the fleet's queue at once;
/// beyond it a read waits for a turn within its timeout, then is `Busy`.
pub const MAX_QUEUED_READS: usize = 64;

/// The cloneable front of the fleet actor.
#[derive(Clone)]
pub struct FleetHandle {
    /// The cluster whose resources this fleet holds.
    pub(super) cluster: crate::domain::ClusterName,
    pub(super) tx: mpsc::Sender<Command>,
    pub(super) clock: crate::clock::Clock,
    pub(super) published: watch::Receiver<Arc<Published>>,
    pub(super) readiness: watch::Receiver<Readiness>,
    pub(super) changes: broadcast::Sender<Changes>,
    pub(super) auth_targets: watch::Receiver<BTreeMap<String, String>>,
    /// Reads give up after this long (`None`: wait as long as it takes).
    pub(super) read_timeout: Option<std::time::Duration>,
    /// Request handlers' reads in the actor's queue at once: a flood of
    /// reads cannot crowd out the changes the fleet must apply.
    pub(super) reads: Arc<tokio::sync::Semaphore>,
}

impl FleetHandle {
    /// The cluster whose resources this fleet holds.
    pub fn cluster(&self) -> &crate::domain::ClusterName {
        &self.cluster
    }

    /// The clock the fleet decides by.
    pub fn clock(&self) -> crate::clock::Clock {
        self.clock
    }

    pub async fn send(&self, cmd: Command) -> Result<(), FleetError> {
        self.tx.send(cmd).await.map_err(|_| FleetError::Stopped)
    }

    /// The same fleet, but reads give up after `d` with
    /// [`FleetError::Busy`]: what request handlers use, so that a busy
    /// fleet makes a clear 503 instead of a hung request.
    pub fn with_read_timeout(&self, d: std::time::Duration) -> FleetHandle {
        FleetHandle {
            read_timeout: Some(d),
            ..self.clone()
        }
    }

    /// Sends the command `make` builds around a reply, and waits for the
    /// answer: the one door of every question.
    async fn ask<R>(&self, make: impl FnOnce(Reply<R>) -> Command) -> Result<R, FleetError> {
        let read = async {
            let (tx, rx) = oneshot::channel();
            self.send(make(tx)).await?;
            rx.await.map_err(|_| FleetError::Stopped)
        };
        match self.read_timeout {
            None => read.await,
            Some(d) => tokio::time::timeout(d, async {
                let _turn = self
                    .reads
                    .acquire()
                    .await
                    .map_err(|_| FleetError::Stopped)?;
                read.await
            })
            .await
            .unwrap_or(Err(FleetError::Busy(d))),
        }
    }

    async fn query<R>(&self, make: impl FnOnce(Reply<R>) -> Query) -> Result<R, FleetError> {
        self.ask(|r| Command::Query(make(r))).await
    }

    /// This replica leads under `fence`: the fleet goes on from the stored
    /// open episodes (see `model::lead`) before this returns.
    pub async fn lead(
        &self,
        fence: crate::store::Fence,
        open: Vec<crate::domain::Episode>,
        next_episode: i64,
        incidents: (Vec<crate::domain::IncidentRecord>, i64),
    ) -> Result<Adopted, FleetError> {
        self.ask(|reply| Command::Lead {
            fence,
            open,
            next_episode,
            incidents,
            reply,
        })
        .await
    }

    /// Another replica leads: nothing this one makes is written.
    pub async fn follow(&self) -> Result<(), FleetError> {
        self.ask(Command::Follow).await
    }

    /// Waits until everything applied so far is committed to the store.
    /// Hands the fleet the maintenance windows not yet over: the
    /// strandings they explain turn planned, those they no longer do turn
    /// unplanned. A stopped fleet has nothing to judge.
    pub async fn set_windows(&self, windows: crate::domain::Windows) {
        let _ = self.send(Command::Windows(windows)).await;
    }

    pub async fn flush(&self) -> Result<(), FleetError> {
        let (tx, rx) = oneshot::channel();
        self.send(Command::Flush(tx)).await?;
        rx.await.map_err(|_| FleetError::Stopped)
    }

    pub fn readiness(&self) -> Readiness {
        self.readiness.borrow().clone()
    }

    /// True when every kind is ready or rejected (cheap: no clone).
    pub fn is_ready(&self) -> bool {
        self.readiness.borrow().ready
    }

    pub fn readiness_watch(&self) -> watch::Receiver<Readiness> {
        self.readiness.clone()
    }

    /// Waits until every kind is ready or rejected.
    pub async fn wait_ready(&self) -> Result<(), FleetError> {
        let mut rx = self.readiness.clone();
        rx.wait_for(|r| r.ready)
            .await
            .map(|_| ())
            .map_err(|_| FleetError::Stopped)
    }

    /// Waits until no kind is ready any more (e.g. the stream died).
    pub async fn wait_not_ready(&self) -> Result<(), FleetError> {
        let mut rx = self.readiness.clone();
        rx.wait_for(|r| !r.ready)
            .await
            .map(|_| ())
            .map_err(|_| FleetError::Stopped)
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Changes> {
        self.changes.subscribe()
    }

    /// Auth servers the cluster announces: name → health address.
    pub fn auth_targets(&self) -> watch::Receiver<BTreeMap<String, String>> {
        self.auth_targets.clone()
    }

    /// Answers once every command sent before it has been applied (and
    /// due timers fired) and what the fleet publishes shows it: the fleet's
    /// current time.
    pub async fn settled(&self) -> Result<Ts, FleetError> {
        self.query(Query::Settled).await
    }

    /// The read model the fleet last published (no wait, no actor).
    pub fn published(&self) -> Arc<Published> {
        self.published.borrow().clone()
    }

    /// Wakes on every read model the fleet publishes (at most every
    /// [`PUBLISH_EVERY`], and only when something changed).
    pub fn watch_published(&self) -> watch::Receiver<Arc<Published>> {
        self.published.clone()
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
        self.query(Query::Publish).await?;
        Ok(self.published())
    }

    pub async fn sizes(&self) -> Result<Sizes, FleetError> {
        self.query(Query::Sizes).await
    }

    pub async fn agents(&self, filter: AgentFilter) -> Result<AgentPage, FleetError> {
        self.query(|r| Query::Agents(filter, r)).await
    }

    /// One agent in full, and when it was read.
    pub async fn agent(&self, name: String) -> Result<Option<(AgentDetail, Ts)>, FleetError> {
        self.query(|r| Query::Agent(name, r)).await
    }

    pub async fn proxy(&self, name: String) -> Result<Option<ProxyDetail>, FleetError> {
        self.query(|r| Query::Proxy(name, r)).await
    }

    /// TTL windows (see [`view::ttl_windows`]), and when they were read.
    pub async fn ttl_windows(
        &self,
        kind: Option<Kind>,
        after: Option<String>,
        limit: usize,
    ) -> Result<(TtlPage, Ts), FleetError> {
        self.query(|reply| Query::TtlWindows {
            kind,
            after,
            limit,
            reply,
        })
        .await
    }

    pub async fn agent_list(&self, filter: AgentFilter) -> Result<AgentList, FleetError> {
        self.query(|r| Query::AgentList(filter, r)).await
    }

    /// The agents `sel` names, in name order; `None` when it names a proxy
    /// or auth server the fleet does not know.
    /// For each target, whether it names a resource the fleet knows.
    pub async fn known_targets(
        &self,
        targets: Vec<crate::domain::Target>,
    ) -> Result<Vec<bool>, FleetError> {
        self.query(|r| Query::KnownTargets(targets, r)).await
    }

    pub async fn select(&self, sel: Selection) -> Result<Option<Vec<String>>, FleetError> {
        self.query(|r| Query::Select(sel, r)).await
    }

    /// For each (agent, proxy the signal names), in order: what admitting
    /// the signal needs, or `None` when the agent is unknown.
    pub async fn facts(
        &self,
        asks: Vec<(String, Option<String>)>,
    ) -> Result<Vec<Option<AgentFacts>>, FleetError> {
        self.query(|r| Query::Facts(asks, r)).await
    }

    /// True when `addr` is a known proxy's or auth server's address.
    pub async fn knows_address(&self, addr: String) -> Result<bool, FleetError> {
        self.query(|r| Query::KnowsAddress(addr, r)).await
    }

    /// Every agent not healthy now, as a change to its current state, and
    /// how many agents there are.
    pub async fn not_healthy(&self) -> Result<(Vec<StateChange>, usize), FleetError> {
        self.query(Query::NotHealthy).await
    }

    /// Connected agents holding more tunnels than they asked for.
    pub async fn surplus_tunnels(&self) -> Result<Vec<Surplus>, FleetError> {
        self.query(Query::SurplusTunnels).await
    }
}
