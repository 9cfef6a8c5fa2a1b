//! The ingest room: Lifeline's two upstream subscriptions.
//!
//! Owns: the `ClusterEvents.WatchEvents` client (generations, resyncs,
//! reconnect backoff) and one `grpc.health.v1.Health/Watch` client per auth
//! server. Validates every input (`validate`) and sends changes to the fleet
//! over its bounded channel (backpressure reaches the upstream through HTTP/2
//! flow control). Must not touch: fleet state or SQLite.

pub mod connect;
pub mod dial;
pub mod health;
pub mod teleport;
pub mod upgrade;
pub mod validate;
pub mod watcher;
