//! `lifeline bench ui`: server time to render the dashboard's overview and
//! stranded-agents page against a large fleet, and the bytes a browser
//! downloads for the overview (HTML + CSS + JS).
//!
//! The fleet comes through the real pipeline (simulator → watcher → fleet);
//! a run of consecutive proxies expires so agents on two of them strand.
//! Render time is the page's own `Server-Timing` (handler start → HTML
//! rendered), so loopback and compression are not counted; the client's
//! round trip is reported beside it.

// Benchmarks and tests measure and bound real time: timing sites.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::{config, peak_rss_kib, percentile, spec, wait_until_async, BenchError, Scratch};
use crate::app::{Lifeline, Tuning};
use crate::clock::Clock;
use crate::model::Kind;
use crate::sim::cluster::proxy_name;
use crate::sim::SimCluster;

fn server_timing_ms(h: &reqwest::header::HeaderMap) -> Option<f64> {
    let v = h.get("server-timing")?.to_str().ok()?;
    v.split(';')
        .find_map(|p| p.trim().strip_prefix("dur="))
        .and_then(|d| d.parse().ok())
}

struct Measured {
    render_ms: Vec<f64>,
    round_trip_ms: Vec<f64>,
    bytes: usize,
    rows: usize,
}

async fn measure(
    http: &reqwest::Client,
    url: &str,
    requests: usize,
) -> Result<Measured, BenchError> {
    let mut m = Measured {
        render_ms: Vec::with_capacity(requests),
        round_trip_ms: Vec::with_capacity(requests),
        bytes: 0,
        rows: 0,
    };
    for i in 0..requests + 5 {
        let t = Instant::now();
        let resp = http
            .get(url)
            .send()
            .await
            .map_err(|e| BenchError::Agents(format!("GET {url}: {e}")))?;
        if !resp.status().is_success() {
            return Err(BenchError::Agents(format!("GET {url}: {}", resp.status())));
        }
        let render = server_timing_ms(resp.headers())
            .ok_or_else(|| BenchError::Agents(format!("GET {url}: no Server-Timing header")))?;
        let body = resp
            .text()
            .await
            .map_err(|e| BenchError::Agents(format!("GET {url}: {e}")))?;
        let rt = t.elapsed().as_secs_f64() * 1000.0;
        // The first few warm caches and the allocator.
        if i >= 5 {
            m.render_ms.push(render);
            m.round_trip_ms.push(rt);
        }
        m.bytes = body.len();
        m.rows = body.matches("<tr data-agent=").count();
    }
    m.render_ms.sort_by(|a, b| a.total_cmp(b));
    m.round_trip_ms.sort_by(|a, b| a.total_cmp(b));
    Ok(m)
}

fn summary(m: &Measured) -> Value {
    json!({
        "render_ms": {
            "p50": percentile(&m.render_ms, 0.50),
            "p99": percentile(&m.render_ms, 0.99),
            "max": m.render_ms.last().copied().unwrap_or(0.0),
        },
        "round_trip_ms": {
            "p50": percentile(&m.round_trip_ms, 0.50),
            "p99": percentile(&m.round_trip_ms, 0.99),
        },
        "html_bytes": m.bytes,
        "agent_rows": m.rows,
    })
}

async fn gzipped_len(http: &reqwest::Client, url: &str) -> Result<usize, BenchError> {
    // reqwest is built without decompression: this is the wire size.
    let resp = http
        .get(url)
        .header("accept-encoding", "gzip")
        .send()
        .await
        .map_err(|e| BenchError::Agents(format!("GET {url}: {e}")))?;
    let b = resp
        .bytes()
        .await
        .map_err(|e| BenchError::Agents(format!("GET {url}: {e}")))?;
    Ok(b.len())
}

pub async fn ui(
    agents: usize,
    proxies: usize,
    expiring: usize,
    requests: usize,
) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let scratch = Scratch::new("ui");
    let sim = SimCluster::start(spec(agents, proxies, 2, 1 << 16), clock)
        .await
        .map_err(BenchError::Sim)?;
    let ll = Lifeline::start_tuned(
        &config(&sim, scratch.db("ui.db"), 5000),
        clock,
        Tuning::default(),
    )
    .await?;
    ll.fleet.wait_ready().await?;

    // Proxies 1..=expiring expire in a second: agents on two of them strand.
    let at = clock.now().saturating_add(Duration::from_secs(1));
    let expiring = expiring.min(proxies);
    for i in 0..expiring {
        if let Some(mut s) = sim.get_server(Kind::Proxy, &proxy_name(i)).await {
            s.expires = Some(crate::proto::to_timestamp(at));
            sim.put_server(s).await;
        }
    }
    let fleet = ll.fleet.clone();
    wait_until_async("agents to strand", Duration::from_secs(30), || {
        let fleet = fleet.clone();
        async move {
            fleet
                .recent()
                .await
                .map(|p| {
                    let s = &p.summary;
                    s.proxies.expired >= expiring && s.agents.stranded > 0
                })
                .unwrap_or(false)
        }
    })
    .await?;
    ll.fleet.flush().await?;
    ll.fleet.settled().await?;
    let counts = ll.fleet.published().counts().clone();
    let (total, stranded) = (counts.total, counts.stranded);

    let http = reqwest::Client::new();
    let base = ll.base_url();
    let overview = measure(&http, &format!("{base}/"), requests).await?;
    let stranded_page = measure(&http, &format!("{base}/agents?state=stranded"), requests).await?;
    // The worst case for paging: a filter nothing matches scans every agent.
    let no_match = measure(&http, &format!("{base}/agents?q=no-such-agent"), requests).await?;
    let css = crate::http::ui::CSS.len();
    let js = crate::http::ui::JS.len();
    let overview_gz = gzipped_len(&http, &format!("{base}/")).await?;
    let css_gz = gzipped_len(&http, &format!("{base}/static/lifeline.css")).await?;
    let js_gz = gzipped_len(&http, &format!("{base}/static/lifeline.js")).await?;
    let total_bytes = overview.bytes + css + js;
    ll.shutdown().await;
    sim.shutdown();
    Ok(json!({
        "scenario": "ui",
        "agents": total,
        "proxies": proxies,
        "stranded": stranded,
        "requests_each": requests,
        "overview": summary(&overview),
        "stranded_agents_page": summary(&stranded_page),
        "agents_page_filter_matching_nothing": summary(&no_match),
        "overview_download_bytes": {
            "html": overview.bytes,
            "css": css,
            "js": js,
            "total": total_bytes,
            "total_gzip": overview_gz + css_gz + js_gz,
        },
        "target": {"render_p99_ms": 30, "overview_total_bytes": 200_000},
        "peak_rss_kib": peak_rss_kib(),
    }))
}
