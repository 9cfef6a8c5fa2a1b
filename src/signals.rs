//! The signals room: what Lifeline tells agents.
//!
//! Owns: the gRPC services agents call — `ServiceConfigDiscoveryService`
//! (the client load-balancing policy, RFD 0226) now; `AgentSignals` (delta
//! discovery, reconnect and close-tunnel signals) next.
//! Reads: settings and fleet snapshots. Must not touch: fleet state or
//! SQLite directly.

pub mod service_config;
