//! The sim room: a whole simulated cluster over real gRPC on loopback, used by
//! `lifeline demo`, the integration tests and the benchmarks.
//!
//! Owns: a `ClusterEvents` server (watch + paged list, Teleport's INIT
//! semantics, optional rejected kinds), auth servers serving
//! `grpc.health.v1` (tonic-health, or a Check-only flavour), proxies, agents
//! and their tunnels heartbeating at TTL/2 + random(TTL/10), a chaos loop,
//! and a webhook receiver (`receiver`: what sits behind a webhook or an
//! Alertmanager's `webhook_configs`).
//! Must not touch: anything of Lifeline's but its public gRPC contracts.

pub mod agent;
pub mod auth;
pub mod chaos;
pub mod cluster;
pub mod demo;
pub mod pki;
pub mod receiver;
mod serve;
pub mod wire;

pub use agent::{join_request, AgentEvent, AgentOptions, SimAgent};
pub use auth::AuthFlavor;
pub use cluster::{
    auth_name, proxy_name, write_private, DeleteShape, SimCluster, SimService, SimSpec,
    TeleportSpec, SIM_JOIN_TOKEN,
};
