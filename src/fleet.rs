//! The fleet room: the one owner of current state.
//!
//! Owns: every proxy, auth server, agent and tunnel as last seen; per-kind
//! watcher state (initializing / ready / rejected / stale); the expiry
//! schedule; each agent's classification and open episode.
//!
//! Three layers, each only reading the one below:
//! - `model`: the pure core. Its methods take an input or the time and
//!   record their effects (history rows, episode changes, state changes,
//!   discovery records, readiness); no channel, task or clock in it.
//! - `view` and `published`: read models computed from the model (pages,
//!   TTL windows, root causes, and the aggregates readers share).
//! - `shell` and `handle`: the actor that owns the model and every channel,
//!   feeds it commands in order, carries out its effects (`outbox` to the
//!   store, `board` to discovery) and answers typed [`Query`]s; and the
//!   cloneable handle other rooms hold.
//!
//! Receives: validated changes, resyncs and health updates over one bounded
//! command channel (`FleetHandle`); queries arrive on the same channel, so
//! every read sees a settled, consistent state.
//! Emits: write batches to the store (never waiting on a commit), state
//! changes on a broadcast channel, readiness and the auth servers to watch on
//! `watch` channels, and after it settles the read model (`published`) that
//! the dashboard and `/metrics` read without asking it.
//! Must not touch: the network or the database directly.

pub mod board;
mod handle;
pub mod model;
mod outbox;
pub mod published;
mod shell;
pub mod view;

pub use handle::{
    AgentFacts, AgentList, Command, FleetError, FleetHandle, Query, MAX_QUEUED_READS,
};
pub use model::{
    Adopted, Changes, HealthUpdate, Ingested, KindStatus, Link, PeerReport, Readiness, Restarter,
    Resync, Rules, Selection, Sizes, Snapshot, StateChange, Surplus, WatchState,
};
pub use shell::start;
