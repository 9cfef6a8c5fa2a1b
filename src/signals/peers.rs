//! The seam between the hub and the other Lifelines that may share its
//! database: who holds which agent's stream, how to wake the replica that
//! does, and the clock the audit records in. Two sides: [`Alone`] (one
//! process on its own database: every stream there is is here) and the
//! replica room's, among replicas on PostgreSQL. The hub knows only this
//! trait; signals those replicas relay come back through the hub's
//! inbound channel ([`Inbound`]).

use std::collections::HashMap;

use futures::future::BoxFuture;

use crate::clock::{Clock, Ts};

/// Why a question to the other replicas went unanswered.
#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// This process is alone on its database: there is nobody to ask.
    #[error("no replica {replica}: this process is alone")]
    Alone { replica: String },
    /// What the replicas share (their database) did not answer.
    #[error("the other replicas cannot be reached: {0}")]
    Unreachable(#[source] Box<dyn std::error::Error + Send + Sync>),
}

/// Which replica holds an agent's stream, and whether the peer on it is
/// restart-only (a sidecar, which a reconnect makes restart its agent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    pub replica: String,
    pub restart_only: bool,
    /// What the sidecar said its restart may take before the ack (zero:
    /// not said).
    pub restart_wait: std::time::Duration,
}

/// What a stream's peer is, as the replicas record it: a sidecar or not,
/// and how long its restart may take before the ack.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct PeerKind {
    pub restart_only: bool,
    pub restart_wait: std::time::Duration,
}

/// The other Lifelines, as the hub sees them.
pub trait Peers: Send + Sync + 'static {
    /// True when other replicas may hold agents' streams.
    fn replicated(&self) -> bool;

    /// The time the audit records: among replicas the database's clock,
    /// alone this process's.
    fn now(&self) -> Ts;

    /// Of `agents`, those another live replica holds: agent → holder.
    fn owners<'a>(
        &'a self,
        agents: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, Holder>, PeerError>>;

    /// Wakes `replica` to deliver the recorded signals `ids` (the
    /// `signals` rows are the outbox).
    fn wake<'a>(&'a self, replica: &'a str, ids: &'a [i64])
        -> BoxFuture<'a, Result<(), PeerError>>;
}

/// One process alone on its database.
pub struct Alone(pub Clock);

impl Peers for Alone {
    fn replicated(&self) -> bool {
        false
    }

    fn now(&self) -> Ts {
        self.0.now()
    }

    fn owners<'a>(
        &'a self,
        _agents: &'a [String],
    ) -> BoxFuture<'a, Result<HashMap<String, Holder>, PeerError>> {
        Box::pin(async { Ok(HashMap::new()) })
    }

    fn wake<'a>(
        &'a self,
        replica: &'a str,
        _ids: &'a [i64],
    ) -> BoxFuture<'a, Result<(), PeerError>> {
        Box::pin(async move {
            Err(PeerError::Alone {
                replica: replica.to_string(),
            })
        })
    }
}

/// What reaches the hub from outside its streams.
#[derive(Debug)]
pub enum Inbound {
    /// Another replica recorded these signals for agents whose streams
    /// are here: deliver them.
    Relayed(Vec<i64>),
}
