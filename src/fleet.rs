//! The fleet room: the one owner of current state.
//!
//! Owns: every proxy, auth server, agent and tunnel as last seen; per-kind
//! watcher state (initializing / ready / rejected / stale); the expiry
//! schedule; each agent's classification and open episode.
//! Receives: validated changes, resyncs and health updates over one bounded
//! command channel (`FleetHandle`); named reads (`query`) arrive on the
//! same channel, so every read sees a settled, consistent state.
//! Emits: write batches to the store (never waiting on a commit), state
//! changes on a broadcast channel, readiness and the auth servers to watch on
//! `watch` channels, and after it settles a read model of its aggregates
//! (`published`) that the dashboard and `/metrics` read without asking it.
//! Must not touch: the network or SQLite directly.

pub mod actor;
mod apply;
pub mod board;
pub mod classify;
pub mod destination;
mod expiry;
mod lead;
pub use lead::Adopted;
pub mod published;
pub mod query;
mod resync;
pub mod schedule;
mod settle;
pub mod state;
mod topology;
mod traces;
pub mod view;
mod writes;

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use crate::clock::Ts;
use crate::model::{named_enum, Change, Rejection};
use crate::model::{AgentState, CauseKind, Health, HealthMode, Kind, Reasons, Server, Tunnel};

pub use state::Fleet;

named_enum! {
    "snake_case";
    /// Where a kind's data stands (partial-cache-healthiness RFD).
    pub enum WatchState {
        /// Never listed yet.
        Initializing,
        /// Listed in the current generation and following events.
        Ready,
        /// The source cannot watch this kind; not an error.
        Rejected,
        /// The stream that fed it is down: nothing expires from this data.
        Stale,
    }
}

impl WatchState {}

#[derive(Clone, Copy, Debug, Serialize, utoipa::ToSchema)]
pub struct KindStatus {
    pub state: WatchState,
    pub generation: u64,
    pub since: Ts,
}

/// What `/readyz` and the summary report about the watcher.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct Readiness {
    pub ready: bool,
    pub kinds: BTreeMap<&'static str, KindStatus>,
}

/// One input from the watcher, in stream order.
#[derive(Debug)]
pub enum Ingested {
    Change(Change),
    Rejected(Rejection),
}

/// A kind's full listing, from a resync.
#[derive(Debug)]
pub enum Snapshot {
    Servers(Kind, Vec<Server>),
    Tunnels(Vec<Tunnel>),
}

#[derive(Debug)]
pub struct Resync {
    pub generation: u64,
    pub snapshots: Vec<Snapshot>,
    pub rejected: Vec<Kind>,
}

#[derive(Clone, Debug)]
pub struct HealthUpdate {
    pub auth_server: String,
    pub addr: String,
    pub health: Health,
    pub mode: HealthMode,
    pub detail: String,
}

/// State changes from one classification pass, published together so a
/// burst of thousands costs one broadcast, not thousands of wake-ups.
pub type Changes = std::sync::Arc<Vec<StateChange>>;

/// An agent changed state.
#[derive(Clone, Debug, Serialize)]
pub struct StateChange {
    pub agent: String,
    pub from: AgentState,
    pub to: AgentState,
    pub reasons: Reasons,
    pub cause: Option<CauseKind>,
    pub cause_resource: Option<String>,
    /// When the condition began (e.g. the expiry instant).
    pub since: Ts,
    /// When Lifeline classified it.
    pub detected_at: Ts,
    pub episode: Option<i64>,
    /// The failure trace this change belongs to (while exporting traces).
    #[serde(skip)]
    pub trace: Option<crate::telemetry::propagate::TraceRef>,
}

pub type ReadFn = Box<dyn FnOnce(&mut Fleet) + Send>;

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
        link: Option<state::Link>,
    },
    /// An agent's own tunnel report.
    Report {
        agent: String,
        proxies: Vec<String>,
        auth_server: String,
    },
    /// Audited signals (agent, id) were sent at `at`: one command per
    /// request, however many agents it names.
    Signaled {
        signals: Vec<(String, i64)>,
        at: Ts,
    },
    /// Runs against settled state; used for every query.
    Read(ReadFn),
    /// Answers once every write produced so far is committed.
    Flush(oneshot::Sender<()>),
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

/// The cloneable front of the fleet actor.
#[derive(Clone)]
pub struct FleetHandle {
    tx: mpsc::Sender<Command>,
    clock: crate::clock::Clock,
    published: watch::Receiver<std::sync::Arc<published::Published>>,
    readiness: watch::Receiver<Readiness>,
    changes: broadcast::Sender<Changes>,
    auth_targets: watch::Receiver<BTreeMap<String, String>>,
    /// Reads give up after this long (`None`: wait as long as it takes).
    read_timeout: Option<std::time::Duration>,
    /// Request handlers' reads in the actor's queue at once: a flood of
    /// reads cannot crowd out the changes the fleet must apply.
    reads: std::sync::Arc<tokio::sync::Semaphore>,
}

/// Most request handlers' reads waiting in the fleet's queue at once;
/// beyond it a read waits for a turn within its timeout, then is `Busy`.
pub const MAX_QUEUED_READS: usize = 64;

impl FleetHandle {
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

    /// Runs `f` on the settled state inside the actor and returns its
    /// result: the one door of the named reads in [`query`].
    async fn ask<R: Send + 'static>(
        &self,
        f: impl FnOnce(&Fleet) -> R + Send + 'static,
    ) -> Result<R, FleetError> {
        self.ask_mut(move |fleet| f(fleet)).await
    }

    /// [`Self::ask`] for the reads that may publish.
    async fn ask_mut<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Fleet) -> R + Send + 'static,
    ) -> Result<R, FleetError> {
        let read = async {
            let (tx, rx) = oneshot::channel();
            self.send(Command::Read(Box::new(move |fleet: &mut Fleet| {
                let _ = tx.send(f(fleet));
            })))
            .await?;
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

    /// This replica leads under `fence`: the fleet goes on from the stored
    /// open episodes (see `lead`) before this returns.
    pub async fn lead(
        &self,
        fence: crate::store::Fence,
        open: Vec<crate::store::read::Episode>,
        next_episode: i64,
    ) -> Result<Adopted, FleetError> {
        self.ask_mut(move |f| f.lead(fence, open, next_episode))
            .await
    }

    /// Another replica leads: nothing this one makes is written.
    pub async fn follow(&self) -> Result<(), FleetError> {
        self.ask_mut(|f| f.follow()).await
    }

    /// Waits until everything applied so far is committed to SQLite.
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
}
