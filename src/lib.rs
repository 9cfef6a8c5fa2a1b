//! Lifeline: finds agents stranded by unhealthy auth servers or proxies, says
//! why, and keeps the history. See the book's Architecture page (docs/src/architecture/) for the
//! rooms (`ingest` → `fleet` → `store` / `http`). The simulator, the benches
//! and the `lifeline` command are crates of their own (`crates/`).

#![forbid(unsafe_code)]
// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod access;
pub mod app;
pub mod backoff;
pub mod clock;
pub mod config;
pub mod domain;
pub mod fleet;
pub mod http;
pub mod ingest;
pub mod maintenance;
pub mod notify;
pub mod proto;
pub mod replica;
pub mod settings;
pub mod signals;
pub mod stats;
pub mod store;
pub mod supervise;
pub mod telemetry;
pub mod tls;

pub use app::Lifeline;
pub use clock::{Clock, Ts};
pub use config::Config;
