//! `lifeline-bench <scenario>`: runs one of Lifeline's benchmark scenarios
//! against the simulator and prints its report as JSON. A binary of its
//! own beside `lifeline`, so the shipped `lifeline` links none of the
//! benches. Use a release build: `cargo run --release --bin
//! lifeline-bench -- ingest`.

// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use std::process::ExitCode;

use clap::Parser;
use lifeline::telemetry::sink::Sink;
use lifeline::telemetry::{self, LogFormat, OtlpSettings, Pipeline};
use lifeline_bench::{Export, Scenario};

/// The same allocator as `lifeline`'s, so that what is measured is what
/// runs.
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Lifeline's benchmarks: each scenario drives the simulator against a
/// real Lifeline and prints JSON (use a release build).
#[derive(Parser)]
#[command(name = "lifeline-bench", version, about)]
struct Args {
    #[command(subcommand)]
    scenario: Scenario,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    // `ingest` exports to a local receiver, with export switched off
    // until the legs that measure it.
    let sink = if args.scenario.wants_export() {
        match Sink::start(0) {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("lifeline-bench: cannot start the local OTLP receiver: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let pipeline = match &sink {
        Some(s) => {
            telemetry::otlp::set_enabled(false);
            match Pipeline::start(&OtlpSettings::to(s.endpoint())) {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("lifeline-bench: {e}");
                    return ExitCode::FAILURE;
                }
            }
        }
        None => None,
    };
    telemetry::init(LogFormat::Text, "warn", pipeline.as_ref());
    let spans = pipeline
        .as_ref()
        .map(Pipeline::counters)
        .unwrap_or_default();
    let export = sink.as_ref().map(|sink| Export {
        sink,
        spans: &spans,
    });
    let code = match lifeline_bench::run(args.scenario, export).await {
        Ok(report) => match serde_json::to_string_pretty(&report) {
            Ok(json) => {
                println!("{json}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("lifeline-bench: the report: {e}");
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            eprintln!("lifeline-bench: {}", lifeline::backoff::chain(&e));
            ExitCode::FAILURE
        }
    };
    if let Some(p) = pipeline {
        // Flushes what is still queued; bounded by the export timeout.
        let _ = tokio::task::spawn_blocking(move || p.shutdown()).await;
    }
    code
}
