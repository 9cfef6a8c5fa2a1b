//! `lifeline-bench ui`: server time to render the dashboard's pages (the
//! overview, stranded agents, a filter matching nothing, incidents and an
//! incident) against a large fleet with days of incidents behind it, the
//! `history` API's round trip, and the bytes a browser downloads for the
//! overview (HTML + CSS + JS); on SQLite and, given a server, PostgreSQL.
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

use super::history::{seed, History};
use super::{
    config, peak_rss_kib, percentile, spec, wait_until_async, BenchError, PgScratch, Scratch,
};
use lifeline::app::{Lifeline, Tuning};
use lifeline::clock::Clock;
use lifeline::config::DbUrl;
use lifeline::domain::Kind;
use lifeline_sim::cluster::proxy_name;
use lifeline_sim::SimCluster;

fn server_timing_ms(h: &reqwest::header::HeaderMap) -> Option<f64> {
    let v = h.get("server-timing")?.to_str().ok()?;
    v.split(';')
        .find_map(|p| p.trim().strip_prefix("dur="))
        .and_then(|d| d.parse().ok())
}

/// One successful GET: its headers and body.
async fn get(
    http: &reqwest::Client,
    url: &str,
) -> Result<(reqwest::header::HeaderMap, String), BenchError> {
    let fail = |e: &dyn std::fmt::Display| BenchError::Agents(format!("GET {url}: {e}"));
    let resp = http.get(url).send().await.map_err(|e| fail(&e))?;
    if !resp.status().is_success() {
        return Err(fail(&resp.status()));
    }
    let headers = resp.headers().clone();
    let body = resp.text().await.map_err(|e| fail(&e))?;
    Ok((headers, body))
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
        let (headers, body) = get(http, url).await?;
        let render = server_timing_ms(&headers)
            .ok_or_else(|| BenchError::Agents(format!("GET {url}: no Server-Timing header")))?;
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

/// Round trips of an API read (the API sends no `Server-Timing`): loopback
/// and JSON included.
async fn measure_api(
    http: &reqwest::Client,
    url: &str,
    requests: usize,
) -> Result<Value, BenchError> {
    let mut rt = Vec::with_capacity(requests);
    let mut bytes = 0;
    for i in 0..requests + 5 {
        let t = Instant::now();
        let (_, body) = get(http, url).await?;
        if i >= 5 {
            rt.push(t.elapsed().as_secs_f64() * 1000.0);
        }
        bytes = body.len();
    }
    rt.sort_by(|a, b| a.total_cmp(b));
    Ok(json!({
        "round_trip_ms": {
            "p50": percentile(&rt, 0.50),
            "p99": percentile(&rt, 0.99),
            "max": rt.last().copied().unwrap_or(0.0),
        },
        "json_bytes": bytes,
    }))
}

/// The dashboard against a large fleet and `history` days of incidents,
/// on SQLite and, given a server, on PostgreSQL.
pub async fn ui(
    agents: usize,
    proxies: usize,
    expiring: usize,
    requests: usize,
    history: History,
    postgres: Option<&DbUrl>,
) -> Result<Value, BenchError> {
    let scratch = Scratch::new("ui");
    let mut out = leg(agents, proxies, expiring, requests, history, &scratch, None).await?;
    if let Some(server) = postgres {
        let db = PgScratch::create(server, "ui").await?;
        let pg = leg(
            agents,
            proxies,
            expiring,
            requests,
            history,
            &scratch,
            Some(&db.url),
        )
        .await;
        db.remove().await;
        out["postgres"] = pg?;
    }
    out["peak_rss_kib"] = json!(peak_rss_kib());
    Ok(out)
}

/// Proxies 1..=`expiring` expire in a second; returns once agents on them
/// are stranded.
async fn strand(
    sim: &SimCluster,
    ll: &Lifeline,
    clock: Clock,
    proxies: usize,
    expiring: usize,
) -> Result<(), BenchError> {
    let at = clock.now().saturating_add(Duration::from_secs(1));
    let expiring = expiring.min(proxies);
    for i in 0..expiring {
        if let Some(mut s) = sim.get_server(Kind::Proxy, &proxy_name(i)).await {
            s.expires = Some(lifeline::proto::to_timestamp(at));
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
    Ok(())
}

async fn leg(
    agents: usize,
    proxies: usize,
    expiring: usize,
    requests: usize,
    history: History,
    scratch: &Scratch,
    postgres: Option<&DbUrl>,
) -> Result<Value, BenchError> {
    let clock = Clock::system();
    let sim = SimCluster::start(spec(agents, proxies, 2, 1 << 16), clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db("ui.db"), 5000);
    cfg.storage.url = postgres.cloned();
    // The past, written as a leader would have, before Lifeline starts.
    let engine = match postgres {
        Some(url) => lifeline::store::Engine::Postgres(url.clone()),
        None => lifeline::store::Engine::Sqlite(cfg.storage.path.clone()),
    };
    let db = lifeline::store::open(&engine, lifeline::store::Waits::PRODUCTION).await?;
    let auths = sim.spec().auth_servers;
    let seeded = seed(
        &db,
        &cfg.cluster.cluster(),
        history,
        clock.now(),
        agents,
        proxies,
        auths,
    )
    .await?;
    db.close().await;
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;

    strand(&sim, &ll, clock, proxies, expiring).await?;
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
    // A substring a few names hold (the packed scan, then a sort) and one
    // that many hold (the ordered walk, which stops at a page).
    let few = measure(&http, &format!("{base}/agents?q=77777"), requests).await?;
    let many = measure(&http, &format!("{base}/agents?q=-1"), requests).await?;
    let api_no_match = measure_api(
        &http,
        &format!("{base}/api/v1/agents?q=no-such-agent"),
        requests,
    )
    .await?;
    let api_many = measure_api(&http, &format!("{base}/api/v1/agents?q=-1"), requests).await?;
    let incidents_page = measure(&http, &format!("{base}/incidents"), requests).await?;
    let incident_page = measure(
        &http,
        &format!("{base}/incidents/{}", seeded.sample_incident),
        requests,
    )
    .await?;
    let history_api = measure_api(
        &http,
        &format!("{base}/api/v1/history?series=stranded,degraded&step=1m&since=24h"),
        requests,
    )
    .await?;
    let css = lifeline::http::ui::CSS.len();
    let js = lifeline::http::ui::JS.len();
    let overview_gz = gzipped_len(&http, &format!("{base}/")).await?;
    let css_gz = gzipped_len(&http, &format!("{base}/static/lifeline.css")).await?;
    let js_gz = gzipped_len(&http, &format!("{base}/static/lifeline.js")).await?;
    let total_bytes = overview.bytes + css + js;
    ll.shutdown().await;
    sim.shutdown();
    Ok(json!({
        "scenario": "ui",
        "engine": if postgres.is_some() { "postgres" } else { "sqlite" },
        "agents": total,
        "proxies": proxies,
        "stranded": stranded,
        "requests_each": requests,
        "history": {
            "days": history.days,
            "incidents": seeded.incidents,
            "episodes": seeded.episodes,
            "signals": seeded.signals,
            "minute_counts": seeded.samples,
        },
        "overview": summary(&overview),
        "stranded_agents_page": summary(&stranded_page),
        "agents_page_filter_matching_nothing": summary(&no_match),
        "agents_page_filter_matching_few": summary(&few),
        "agents_page_filter_matching_many": summary(&many),
        "agents_api_filter_matching_nothing": api_no_match,
        "agents_api_filter_matching_many": api_many,
        "incidents_page": summary(&incidents_page),
        "incident_page": summary(&incident_page),
        "history_24h_1m": history_api,
        "overview_download_bytes": {
            "html": overview.bytes,
            "css": css,
            "js": js,
            "total": total_bytes,
            "total_gzip": overview_gz + css_gz + js_gz,
        },
        "target": {
            "render_p99_ms": 30,
            "overview_render_p99_ms": 5,
            "incident_pages_render_p99_ms": 30,
            "history_p99_ms": 50,
            "agent_search_p99_ms": 50,
            "overview_total_bytes": 200_000,
        },
    }))
}
