//! What the watcher hands the fleet: validated changes, and rejections with
//! a stable code.

use super::named_enum;
use std::time::Duration;

use super::{Kind, Server, Tunnel};
use crate::clock::Ts;

/// The longest resource name accepted (a DNS name's limit).
pub const MAX_NAME_LEN: usize = 253;

named_enum! {
    "snake_case";
    /// Stable codes for rejected inputs (metric labels; API field names).
    pub enum RejectCode {
        UnknownKind,
        EmptyName,
        NameTooLong,
        /// A name holding a NUL or another control character.
        ControlCharacter,
        BadTtl,
        MissingExpires,
        ExpiredTooLongAgo,
        ExpiresTooFar,
        BadTimestamp,
        MissingField,
        EmptyEvent,
        BadEventType,
        OversizedMessage,
        StreamProtocol,
    }
}

impl RejectCode {
    pub const COUNT: usize = RejectCode::ALL.len();
}

/// A rejected input: what it was (as far as known) and why.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{kind}/{name}: {message}")]
pub struct Rejection {
    pub code: RejectCode,
    /// The kind as sent (may be unknown).
    pub kind: String,
    /// The name as sent (may be empty), cut to a printable length.
    pub name: String,
    pub message: String,
}

named_enum! {
    "snake_case";
    /// What a change does to its resource; the discriminants index
    /// `Stats::ingested`.
    pub enum Op {
        Put = 0,
        Delete = 1,
    }
}

impl Op {}

/// A validated upstream change.
#[derive(Clone, Debug)]
pub enum Change {
    PutServer(Server),
    /// A server the fleet holds, heartbeating with nothing but its expiry
    /// and TTL moved: what a source that folds its input (Teleport's
    /// services into agents) knows of most heartbeats, sent without
    /// building the whole server again.
    Expiry {
        kind: Kind,
        name: String,
        expires: Ts,
        ttl: Duration,
    },
    DeleteServer(Kind, String),
    PutTunnel(Tunnel),
    DeleteTunnel(String),
}

impl Change {
    /// Kind, operation and resource name.
    pub fn describe(&self) -> (Kind, Op, &str) {
        match self {
            Change::PutServer(s) => (s.kind, Op::Put, &s.name),
            Change::Expiry { kind, name, .. } => (*kind, Op::Put, name),
            Change::DeleteServer(k, n) => (*k, Op::Delete, n),
            Change::PutTunnel(t) => (Kind::TunnelConnection, Op::Put, &t.name),
            Change::DeleteTunnel(n) => (Kind::TunnelConnection, Op::Delete, n),
        }
    }
}
