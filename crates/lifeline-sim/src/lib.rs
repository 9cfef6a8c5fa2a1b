//! The sim room: a whole simulated cluster over real gRPC on loopback, used by
//! `lifeline demo`, the integration tests and the benchmarks.
//!
//! Owns: a `ClusterEvents` server (watch + paged list, Teleport's INIT
//! semantics, optional rejected kinds), auth servers serving
//! `grpc.health.v1` (tonic-health, or a Check-only flavour), proxies, agents
//! and their tunnels heartbeating at TTL/2 + random(TTL/10), and a chaos loop.
//! Must not touch: anything of Lifeline's but its public gRPC contracts.

pub mod agent;
pub mod auth;
pub mod chaos;
pub mod cluster;
pub mod demo;
pub mod pki;
mod serve;
pub mod wire;

pub use agent::{join_request, AgentEvent, AgentOptions, SimAgent};
pub use auth::AuthFlavor;
pub use cluster::{
    write_private, DeleteShape, SimCluster, SimService, SimSpec, TeleportSpec, SIM_JOIN_TOKEN,
};
