//! `bench notify`: how soon an incident is told, from its start (the
//! expiry instant) to each answering webhook's `incident.opened` and to
//! the first Alertmanager post naming it, every receiver in-process, with
//! some webhooks going to a receiver that never answers; and what
//! configured notifications cost ingest (`bench ingest`'s leg, off and on).

use super::*;
use lifeline::config::{WebhookConfig, WebhookFormat};
use lifeline_sim::receiver::{Received, Receiver};
use std::collections::HashMap;

use ingest::ingest_leg;

/// The webhooks configured: `webhooks` in all, `hung` of them to a
/// receiver that never answers; the latency leg's fleet.
pub(super) struct Hooks {
    pub webhooks: usize,
    pub hung: usize,
    pub fleet: usize,
}

/// One incident every `3600 / per_hour` s: a proxy stops heartbeating.
pub(super) async fn notify(
    incidents: usize,
    per_hour: u32,
    agents: usize,
    events: usize,
    rounds: usize,
    hooks: Hooks,
) -> Result<Value, BenchError> {
    if incidents == 0 || rounds == 0 || events == 0 || agents == 0 || hooks.fleet == 0 {
        return Err(BenchError::Usage(
            "--incidents, --rounds, --agents, --events and --fleet must be at least 1".into(),
        ));
    }
    if hooks.webhooks == 0 || hooks.hung >= hooks.webhooks {
        return Err(BenchError::Usage(
            "--webhooks must be at least 1, and --hung fewer than --webhooks".into(),
        ));
    }
    let scratch = Scratch::new("notify");
    let hook = Receiver::start(Clock::system())
        .await
        .map_err(BenchError::Sim)?;
    let hung = Receiver::start(Clock::system())
        .await
        .map_err(BenchError::Sim)?;
    hung.answer(lifeline_sim::receiver::Answer::Hang);
    let am = Receiver::start(Clock::system())
        .await
        .map_err(BenchError::Sim)?;
    let secret = scratch.db("webhook-secret");
    std::fs::write(&secret, "bench-secret\n").map_err(BenchError::Sim)?;
    // The answering webhooks post to `/hook-<k>`; the hung ones to the
    // receiver that never answers.
    let told = |cfg: &mut Config| {
        cfg.notify.webhooks = (0..hooks.webhooks)
            .map(|k| WebhookConfig {
                name: format!("bench-{k}"),
                url: if k < hooks.hung {
                    hung.url(&format!("/hung-{k}"))
                } else {
                    hook.url(&format!("/hook-{k}"))
                },
                secret_file: secret.clone(),
                events: Vec::new(),
                format: WebhookFormat::Json,
                ca_file: None,
                timeout: Duration::from_secs(10),
                max_age: Duration::from_secs(3600),
            })
            .collect();
        cfg.notify.alertmanager.urls = vec![am.url("")];
    };
    let answering = hooks.webhooks - hooks.hung;
    let latency = latency_leg(
        incidents,
        per_hour,
        hooks.fleet,
        &scratch,
        told,
        (&hook, answering),
        &am,
    )
    .await?;

    // Ingest with and without both configured: rounds of an off and an on
    // leg, order alternating; the ratio is the median of the rounds'.
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        let mut pair = [0f64; 2];
        for with in order {
            let db = format!("ingest-{with}-{round}.db");
            let edit = |c: &mut Config| {
                if with {
                    told(c);
                }
            };
            let proxies = agents / 100 + 1;
            let leg = ingest_leg(
                agents,
                proxies,
                events,
                &scratch,
                &db,
                SourceKind::Lifeline,
                edit,
            )
            .await?;
            pair[usize::from(with)] = events as f64 / leg.pipeline.as_secs_f64();
        }
        off.push(pair[0].round());
        on.push(pair[1].round());
        ratios.push(thousandths(pair[1] / pair[0]));
    }
    Ok(json!({
        "scenario": "notify",
        "incidents": incidents,
        "incidents_per_hour": per_hour,
        "incidents_opened": latency.opened,
        "fleet": hooks.fleet,
        "webhooks": hooks.webhooks,
        "hung_webhooks": hooks.hung,
        "webhook_opened_ms": latency.webhook,
        "alertmanager_first_post_ms": latency.alertmanager,
        "ingest": {
            "agents": agents,
            "events": events,
            "off_events_per_s": off,
            "on_events_per_s": on,
            "ratio": median(&ratios),
            "round_ratios": ratios,
            "method": "rounds of a leg without and a leg with the webhooks (the hung ones too) and an Alertmanager configured, order alternating; ratio = median of the rounds' on/off",
        },
        "target": {"p99_ms": 1000, "ingest_ratio": 0.95},
    }))
}

struct Latency {
    opened: usize,
    webhook: Value,
    alertmanager: Value,
}

/// Incidents one after the other: each a proxy of its own stopping, in a
/// fleet of `fleet` agents on at least `incidents + 1` proxies (about 100
/// agents each). `hook` is the answering webhooks' receiver and how many
/// post to it: each incident's latency is its first telling on every one.
async fn latency_leg(
    incidents: usize,
    per_hour: u32,
    fleet: usize,
    scratch: &Scratch,
    told: impl FnOnce(&mut Config),
    (hook, answering): (&Receiver, usize),
    am: &Receiver,
) -> Result<Latency, BenchError> {
    let clock = Clock::system();
    let proxies = (incidents + 1).max(fleet / 100);
    let spec = SimSpec {
        agents: fleet.max(proxies * 2),
        proxies,
        auth_servers: 2,
        ttl: Duration::from_secs(2),
        agent_ttl: Duration::from_secs(600),
        tunnels_per_agent: 2,
        heartbeats: true,
        ..SimSpec::default()
    };
    let sim = SimCluster::start(spec, clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db("latency.db"), 5000);
    told(&mut cfg);
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    let every = Duration::from_secs_f64(3600.0 / f64::from(per_hour.max(1)));
    for k in 0..incidents {
        sim.pause_heartbeats(&proxy_name(k)).await;
        tokio::time::sleep(every).await;
    }
    // Each incident's first telling, from its start: the webhook's
    // `incident.opened`, and the first alert naming it (`POST
    // /api/v2/alerts` takes an array of alerts).
    // Each answering webhook's own telling of each incident: its id
    // scaled by the webhook's number, so one map holds them all.
    let opened = |got: &[Received]| {
        first_told(got, |r, v| {
            let hook: i64 = r
                .path
                .rsplit('-')
                .next()
                .and_then(|k| k.parse().ok())
                .unwrap_or(0);
            let i = &v["data"]["incident"];
            let opened = v["type"] == "incident.opened";
            opened
                .then(|| {
                    (
                        i["id"].as_i64().map(|id| id * 1000 + hook),
                        i["started"].as_str(),
                    )
                })
                .into_iter()
                .collect()
        })
    };
    let posted = |got: &[Received]| {
        first_told(got, |_, v| {
            v.as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    let id = a["labels"]["lifeline_incident"].as_str();
                    (id.and_then(|s| s.parse().ok()), a["startsAt"].as_str())
                })
                .collect()
        })
    };
    // The last proxy expires within its TTL; then every incident opened
    // (a proxy's agents can be stranded by an earlier one's) is told.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ll.fleet.flush().await?;
    let filter = lifeline::store::incidents::IncidentFilter {
        limit: 10_000,
        ..Default::default()
    };
    let opened_n = lifeline::store::incidents::list(&ll.db, &filter)
        .await?
        .len();
    if opened_n == 0 {
        return Err(BenchError::Timeout("no incident opened"));
    }
    wait_until("every incident told", Duration::from_secs(120), || {
        opened(&hook.got()).len() >= opened_n * answering && posted(&am.got()).len() >= opened_n
    })
    .await?;
    ll.shutdown().await;
    sim.shutdown();
    Ok(Latency {
        opened: opened_n,
        webhook: summary(opened(&hook.got()).into_values().collect()),
        alertmanager: summary(posted(&am.got()).into_values().collect()),
    })
}

/// For each key the requests name (`named` reads a request's (key,
/// start) pairs), the time from its start to the first request naming it,
/// in ms.
fn first_told(
    got: &[Received],
    named: impl for<'a> Fn(&Received, &'a Value) -> Vec<(Option<i64>, Option<&'a str>)>,
) -> HashMap<i64, f64> {
    let mut first = HashMap::new();
    for r in got {
        let v = r.json();
        for (id, start) in named(r, &v) {
            if let (Some(id), Some(start)) = (id, start.and_then(Ts::parse_rfc3339)) {
                first
                    .entry(id)
                    .or_insert(r.at.since(start).as_secs_f64() * 1000.0);
            }
        }
    }
    first
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "n": ms.len(),
        "p50": thousandths(percentile(&ms, 0.50)),
        "p99": thousandths(percentile(&ms, 0.99)),
        "max": thousandths(ms.last().copied().unwrap_or(0.0)),
    })
}
