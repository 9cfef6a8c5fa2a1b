//! Lifeline's integration tests, one binary: each module starts real
//! servers (tonic, axum, SQLite) against the simulator, on a paused clock.
//!
//! One binary, because linking the whole stack is most of a test build on a
//! small machine. The one exception is `tests/telemetry.rs`: it installs
//! tracing subscribers, and tracing's callsite cache is process-wide.

#[macro_use]
mod support;

mod access;
mod api;
mod bench;
mod book;
mod browser;
mod cli;
mod clusters;
mod config_keys;
mod demo;
mod deploy;
mod discovery;
mod faults;
mod hostile;
mod identity;
mod incidents;
mod kube_agent;
mod listeners;
mod maintenance;
mod metrics;
mod notify;
mod one_truth;
mod openapi;
mod outbox_order;
mod partition;
mod reconnect;
mod replicas;
mod rollout;
mod schema;
mod settings;
mod sidecar;
mod signals;
mod signin_teleport;
mod storage;
mod stranded;
mod teleport;
mod tls;
mod ui;
mod upgrade;
mod walls;
mod watcher;
