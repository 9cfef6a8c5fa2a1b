//! The signals room: what Lifeline tells agents.
//!
//! Owns: the gRPC services agents call — `AgentSignals.Connect` (the hub:
//! every agent stream, delta discovery from the fleet's `board`, audited reconnect
//! and close-tunnel signals and their acks), the automatic / periodic /
//! graceful loops and the storm guard (`reconnect`), and
//! `ServiceConfigDiscoveryService` (the client load-balancing policy).
//! Reads: fleet snapshots and state changes, the board the fleet writes.
//! Writes: signal audit rows (through `store::signals`) and fleet commands.
//! Must not touch: fleet state directly, or history tables.

pub mod dispatch;
pub mod hub;
pub mod peers;
pub mod reconnect;
pub mod serve;
pub mod service_config;
