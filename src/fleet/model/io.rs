//! What goes into the model and what comes out of it: the watcher's
//! changes, listings and health, and the effects of each step that the
//! shell carries out (writes, state changes, discovery records, readiness,
//! counters).

use std::collections::BTreeMap;

use serde::Serialize;

use crate::clock::Ts;
use crate::domain::Record;
use crate::domain::{named_enum, Change, Rejection};
use crate::domain::{AgentState, CauseKind, Health, HealthMode, Kind, Reasons, Server, Tunnel};

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

impl Readiness {
    /// Where the watch stands over every kind: stale when any kind is,
    /// else initializing while any kind is (or readiness is not reached),
    /// else ready (a kind the source rejects counts as ready).
    pub fn overall(&self) -> WatchState {
        let states = || self.kinds.values().map(|k| k.state);
        if states().any(|s| s == WatchState::Stale) {
            WatchState::Stale
        } else if !self.ready || states().any(|s| s == WatchState::Initializing) {
            WatchState::Initializing
        } else {
            WatchState::Ready
        }
    }
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
    /// When Lifeline classified it: the model's time of the pass; the
    /// shell stamps the moment the pass ended.
    pub detected_at: Ts,
    pub episode: Option<i64>,
    /// Planned (a maintenance window, a rollout): shown, never acted on.
    /// A change of plan alone is a change (`from == to`).
    #[serde(skip)]
    pub planned: Option<crate::domain::Plan>,
    /// The failure trace this change belongs to (while exporting traces).
    #[serde(skip)]
    pub trace: Option<crate::telemetry::propagate::TraceRef>,
}

/// A change to the proxy records discovery serves (`board`).
#[derive(Clone, Debug)]
pub enum BoardOp {
    /// A proxy's current record.
    Put(Server),
    /// A proxy is gone.
    Remove(String),
    /// A full listing of the proxies.
    Replace(Vec<Server>),
}

/// What the model counted; the shell adds it to the process's metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    pub events_applied: u64,
    /// By kind and by operation (put, delete).
    pub ingested: [[u64; 2]; 4],
    pub heartbeats: u64,
    pub timers_fired: u64,
    pub state_changes: u64,
    pub agent_messages_rejected: u64,
}

/// What the model produced since the shell last took it. The model only
/// records; the shell carries each out (the sans-IO shape: the state
/// machine queues its outputs, its driver takes them).
#[derive(Debug, Default)]
pub struct Effects {
    /// Rows the store owes: history, health, episode changes and current
    /// state, coalesced per resource.
    pub writes: Record,
    /// Agents' state changes, in classification order.
    pub changes: Vec<StateChange>,
    /// When the condition began, for each agent that left healthy in a
    /// pass that measures detection (not a resync's catching up): the
    /// shell records how long it took to classify.
    pub detections: Vec<Ts>,
    /// Changes to the proxy records discovery serves, in order.
    pub board: Vec<BoardOp>,
    /// The watcher's readiness, when it may have changed.
    pub readiness: Option<Readiness>,
    /// The auth servers to watch (name → health address), when the set may
    /// have changed.
    pub auth_targets: Option<BTreeMap<String, String>>,
    pub tally: Tally,
    /// Tables a resync replaced, for the shell to free off the fleet's
    /// step (a million tunnels take a tenth of a second to free).
    pub replaced: Replaced,
}

/// The tunnel tables a resync replaced, kept only to be freed.
#[derive(Default)]
pub struct Replaced(pub Vec<Box<dyn Send + Sync>>);

impl std::fmt::Debug for Replaced {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Replaced({} tables)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(ready: bool, states: &[WatchState]) -> WatchState {
        let kinds = ["proxy", "auth_server", "agent"]
            .into_iter()
            .zip(states)
            .map(|(k, s)| {
                (
                    k,
                    KindStatus {
                        state: *s,
                        generation: 1,
                        since: Ts::from_micros(0),
                    },
                )
            })
            .collect();
        Readiness { ready, kinds }.overall()
    }

    #[test]
    fn the_watch_is_stale_if_any_kind_is_then_initializing_then_ready() {
        use WatchState::*;
        assert_eq!(of(true, &[Ready, Rejected, Ready]), Ready);
        assert_eq!(of(true, &[Ready, Initializing, Ready]), Initializing);
        assert_eq!(of(false, &[Ready, Ready, Ready]), Initializing);
        assert_eq!(of(true, &[Initializing, Stale, Ready]), Stale);
        assert_eq!(of(false, &[Stale, Rejected, Ready]), Stale);
    }
}
