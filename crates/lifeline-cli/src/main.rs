//! The `lifeline` command line: parses its arguments and hands them to
//! [`cli`]; nothing else lives here.

// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod cli;

use std::process::ExitCode;

use clap::Parser;

/// jemalloc: every stage allocates a few small strings per event, most
/// freed on another thread (the store's rows on SQLite's); glibc's arenas
/// spend much of the ingest path on that, and fragment under it.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    cli::main(cli::Cli::parse()).await
}
