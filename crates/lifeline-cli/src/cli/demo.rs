//! `lifeline demo`: a Lifeline beside a simulated cluster, and the banner
//! that says where everything is.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use lifeline::clock::Clock;
use lifeline::config::SourceKind;
use lifeline::telemetry::SpanCounters;
use lifeline_sim::demo::{Demo, DemoOptions, TELEPORT_HEALTH_SINCE};

use super::args::DemoArgs;
use super::stop::run_until_stopped;

/// Starts the demo, prints where everything is, and runs until stopped.
pub async fn run(a: DemoArgs, spans: Arc<SpanCounters>) -> anyhow::Result<ExitCode> {
    let token = a.token.clone().unwrap_or_else(lifeline::access::generate);
    anyhow::ensure!(!a.ttl.is_zero(), "--ttl must be greater than zero");
    anyhow::ensure!(
        (0.0..=1.0).contains(&a.legacy_share),
        "--legacy-share must be between 0 and 1"
    );
    let file = match &a.config {
        Some(p) => Some(lifeline::config::Config::load_demo(p).context("demo --config")?),
        None => None,
    };
    let opts = DemoOptions {
        listen: a.listen,
        grpc_listen: a.grpc_listen,
        agents: a.agents,
        proxies: a.proxies,
        auth_servers: a.auth_servers,
        ttl: a.ttl,
        chaos_period: (!a.chaos_period.is_zero()).then_some(a.chaos_period),
        seed: a.seed,
        db: a.db.clone(),
        legacy_share: a.legacy_share,
        auto_reconnect: !a.no_auto_reconnect,
        token: token.clone(),
        spans,
        source: a.source,
        tls: a.tls,
        teleport_version: a.teleport_version,
        notify: file.as_ref().map(|c| c.notify.clone()).unwrap_or_default(),
        access: file.map(|c| c.access),
    };
    let demo = Demo::start(&opts, Clock::system())
        .await
        .context("demo start-up failed")?;
    banner(&demo, &opts, &token);
    let code = run_until_stopped(demo.lifeline.failed()).await;
    demo.shutdown().await;
    Ok(code)
}

/// What the demo prints at start: where the dashboard, the API, gRPC, the
/// cluster and the database are, how to sign in, and what chaos will do.
fn banner(demo: &Demo, o: &DemoOptions, token: &str) {
    let base = demo.lifeline.base_url();
    println!(
        "Lifeline demo is running ({} agents, {} proxies, {} auth servers, TTL {}).",
        o.agents,
        o.proxies,
        o.auth_servers,
        humantime::format_duration(o.ttl)
    );
    println!("  dashboard  {base}/");
    println!("  API        {base}/api/v1/summary");
    println!("             {base}/api/v1/agents?state=stranded");
    println!(
        "  gRPC       {}{}",
        demo.lifeline.grpc_addr,
        if o.tls {
            " (TLS; agents present client certificates)"
        } else {
            ""
        }
    );
    match o.source {
        SourceKind::Teleport => println!(
            "  cluster    {} (simulated Teleport {}: its Auth API over mutual TLS; identity renewed every 5 min)",
            demo.sim.addr(),
            o.teleport_version
        ),
        SourceKind::Lifeline => println!("  cluster    {} (simulated)", demo.sim.uri()),
    }
    println!("  database   {}", o.db.display());
    let (hooks, ams) = (o.notify.webhooks.len(), o.notify.alertmanager.urls.len());
    if hooks + ams > 0 {
        // Names only: a URL may carry a secret.
        let names: Vec<&str> = o.notify.webhooks.iter().map(|w| w.name.as_str()).collect();
        println!(
            "  notify     {ams} Alertmanager(s){}",
            if names.is_empty() {
                String::new()
            } else {
                format!(", webhooks {}", names.join(", "))
            }
        );
    }
    println!("  sign in    {base}/signin with token {token}");
    println!("             (CLI: export LIFELINE_TOKEN={token})");
    if let Some(ca) = &demo.ca_file {
        let ca = ca.display();
        println!("  TLS        a throwaway CA made for this run signed Lifeline's certificate; trust it:");
        println!("             curl --cacert {ca} {base}/api/v1/summary");
        println!("             lifeline reconnect --server {base} --ca-file {ca} --stranded");
        println!("             browsers: import {ca} as an authority, or accept the warning once");
    }
    let period = o.chaos_period.map(humantime::format_duration);
    match period {
        Some(p)
            if o.source == SourceKind::Teleport && o.teleport_version < TELEPORT_HEALTH_SINCE =>
        {
            println!("Chaos every {p}: a proxy stops heartbeating, then heals (this Auth serves no health: its own heartbeat decides).")
        }
        Some(p) => {
            println!("Chaos every {p}, one step at a time, round after round:");
            for (i, step) in lifeline_sim::chaos::STEPS.iter().enumerate() {
                println!("  {}. {step}", i + 1);
            }
        }
        None => println!("Chaos is off."),
    }
    println!("Press Ctrl-C to stop.");
}
