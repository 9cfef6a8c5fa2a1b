//! The `lifeline-agent` command: parses its arguments and configuration,
//! then holds its signal streams until SIGTERM or SIGINT.

// Input from outside never reaches a panic: outside tests, errors are
// returned, never unwrapped.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

use clap::Parser;
use lifeline_agent::args::{completions, man_page, Args};
use lifeline_agent::{FileConfig, EXIT_CONFIG};
use tokio_util::sync::CancellationToken;

fn main() {
    let args = Args::parse();
    if args.man {
        print!("{}", man_page());
        return;
    }
    if let Some(shell) = args.completions {
        print!("{}", completions(shell));
        return;
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("LIFELINE_AGENT_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cfg = match FileConfig::load(args.config.as_deref()).and_then(|mut f| {
        f.dry_run |= args.dry_run;
        f.check()
    }) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("lifeline-agent: bad configuration: {e}");
            std::process::exit(EXIT_CONFIG);
        }
    };
    if args.check {
        if let lifeline_agent::config::Restart::Kubernetes(k) = &cfg.restart {
            println!(
                "StatefulSet {} (namespace {}) · each pod's host ID from its state Secret · lifeline {} · {}",
                k.statefulset,
                k.namespace.as_deref().unwrap_or("this pod's"),
                cfg.lifeline.join(", "),
                if cfg.dry_run { "dry run" } else { "acting" }
            );
            return;
        }
        println!(
            "host {} · lifeline {} · restart: {} · {}",
            cfg.host_id,
            cfg.lifeline.join(", "),
            cfg.restart,
            if cfg.dry_run { "dry run" } else { "acting" }
        );
        match lifeline_agent::check_pid_source(&cfg) {
            Ok(said) => println!("{said}"),
            Err(e) => {
                eprintln!("lifeline-agent: bad configuration: {e}");
                std::process::exit(EXIT_CONFIG);
            }
        }
        return;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("lifeline-agent: cannot start its runtime: {e}");
            std::process::exit(71);
        }
    };
    rt.block_on(async {
        let stop = CancellationToken::new();
        let on_signal = stop.clone();
        tokio::spawn(async move {
            let mut term =
                match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                    Ok(s) => s,
                    Err(_) => return,
                };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            on_signal.cancel();
        });
        lifeline_agent::run(cfg, stop).await;
    });
}
