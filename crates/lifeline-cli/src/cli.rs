//! The command line as a room of its own: its arguments ([`args`]), what
//! each subcommand runs ([`run`]: the server, the demo, a benchmark; how
//! a foreground one stops, [`stop`]), and
//! the clients of a running Lifeline ([`client`] for the REST API,
//! [`remote`] for the commands that use it). Owns the exit codes and
//! `anyhow`, the CLI's edge; every other room is reached through its
//! public face, and no room reaches back here.

mod args;
pub mod client;
mod demo;
mod remote;
mod run;
mod stop;

pub use args::Cli;
pub use run::main;
