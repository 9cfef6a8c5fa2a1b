//! Lifeline: finds agents stranded by unhealthy auth servers or proxies, says
//! why, and keeps the history. See README.md's Architecture section for the
//! rooms (`ingest` → `fleet` → `store` / `http`) and `sim` for the demo cluster.

#![forbid(unsafe_code)]
// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod access;
pub mod app;
pub mod backoff;
pub mod bench;
pub mod cli;
pub mod clock;
pub mod config;
pub mod demo;
pub mod fleet;
pub mod http;
pub mod ingest;
pub mod model;
pub mod proto;
pub mod replica;
pub mod settings;
pub mod signals;
pub mod sim;
pub mod stats;
pub mod store;
pub mod supervise;
pub mod telemetry;
pub mod tls;

pub use app::Lifeline;
pub use clock::{Clock, Ts};
pub use config::Config;
