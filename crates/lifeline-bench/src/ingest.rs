//! `bench ingest`: heartbeat events through validation, the fleet and into
//! the store, against raw inserts, on SQLite and (given a server) on
//! PostgreSQL in the same run; and the cost of exporting traces.

use super::*;
use std::sync::Arc;

/// One pass of the ingest pipeline: a fresh cluster and Lifeline, `events`
/// heartbeats streamed, timed until applied and until committed.
pub(super) struct IngestLeg {
    applied_at: Duration,
    pub(super) pipeline: Duration,
    dropped: u64,
    templates: Vec<pb::Server>,
    base: Ts,
}

pub(super) async fn ingest_leg(
    agents: usize,
    proxies: usize,
    events: usize,
    scratch: &Scratch,
    db: &str,
    source: SourceKind,
    edit: impl FnOnce(&mut Config),
) -> Result<IngestLeg, BenchError> {
    let clock = Clock::system();
    let mut spec = spec(agents, proxies, 2, events + 1024);
    spec.teleport = (source == SourceKind::Teleport).then(lifeline_sim::TeleportSpec::default);
    let sim = SimCluster::start(spec, clock)
        .await
        .map_err(BenchError::Sim)?;
    let mut cfg = config(&sim, scratch.db(db), 5000);
    edit(&mut cfg);
    lifeline_sim::demo::watch_sim(&mut cfg, &sim, &scratch.db(&format!("{db}.identity")))
        .map_err(BenchError::Sim)?;
    let ll = Lifeline::start_tuned(&cfg, clock, Tuning::default()).await?;
    ll.fleet.wait_ready().await?;
    ll.fleet.flush().await?;

    // The stream: heartbeats round-robin over every agent and proxy, each
    // moving `expires` so each is a real heartbeat.
    let names: Vec<(Kind, String)> = (0..agents)
        .map(|i| (Kind::Agent, agent_name(i)))
        .chain((0..proxies).map(|i| (Kind::Proxy, proxy_name(i))))
        .collect();
    let mut templates = Vec::with_capacity(names.len());
    for (k, n) in &names {
        if let Some(s) = sim.get_server(*k, n).await {
            templates.push(s);
        }
    }
    let base = clock.now().saturating_add(Duration::from_secs(600));
    let stream: Vec<Arc<pb::Event>> = (0..events)
        .map(|i| {
            let mut s = templates[i % templates.len()].clone();
            s.expires = Some(lifeline::proto::to_timestamp(Ts(
                base.as_micros() + i as i64
            )));
            Arc::new(put_server(s))
        })
        .collect();

    // The Teleport face's stream is built ahead too: the simulator's
    // translation is not Lifeline's work.
    let mut teleport = Vec::new();
    if source == SourceKind::Teleport {
        teleport.reserve(stream.len());
        for ev in &stream {
            teleport.extend(sim.as_teleport(ev).await.map(Arc::new));
        }
    }
    let applied0 = ll.stats.events_applied.load(Ordering::Relaxed);
    let t0 = Instant::now();
    if source == SourceKind::Teleport {
        let tx = sim.teleport_sender();
        for ev in teleport {
            let _ = tx.send(ev);
        }
    } else {
        let tx = sim.sender();
        for ev in stream {
            let _ = tx.send(ev);
        }
    }
    let stats = ll.stats.clone();
    wait_until("ingest pipeline", Duration::from_secs(600), || {
        stats.events_applied.load(Ordering::Relaxed) >= applied0 + events as u64
    })
    .await?;
    let applied_at = t0.elapsed();
    ll.fleet.flush().await?;
    let pipeline = t0.elapsed();
    let dropped = ll.stats.store_events_dropped.load(Ordering::Relaxed);
    ll.shutdown().await;
    sim.shutdown();
    Ok(IngestLeg {
        applied_at,
        pipeline,
        dropped,
        templates,
        base,
    })
}

/// Export off vs on in this process: the OTLP layer is installed by `main`
/// and switched, spans go to the local receiver `sink`. Off is what a
/// Lifeline without a collector pays. Each round runs an off and an on leg
/// back to back, in alternating order; the figure is the median of the
/// rounds' on/off ratios, since neighbouring legs share the machine's slow
/// drifts.
pub(super) async fn ingest_export(
    agents: usize,
    proxies: usize,
    events: usize,
    rounds: usize,
    scratch: &Scratch,
    Export { sink, spans }: Export<'_>,
) -> Result<Value, BenchError> {
    let received0 = sink.received();
    let exported0 = spans.exported.load(Ordering::Relaxed);
    let dropped0 = spans.dropped_queue_full.load(Ordering::Relaxed)
        + spans.export_failed.load(Ordering::Relaxed);
    let (mut off, mut on, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds.max(1) {
        let mut pair = [0f64; 2];
        // Alternate which leg goes first, so an order effect cancels.
        let order = if round % 2 == 0 {
            [false, true]
        } else {
            [true, false]
        };
        for export in order {
            otlp::set_enabled(export);
            let leg = ingest_leg(
                agents,
                proxies,
                events,
                scratch,
                &format!("export-{export}-{round}.db"),
                SourceKind::Lifeline,
                |_| {},
            )
            .await;
            otlp::set_enabled(false);
            pair[usize::from(export)] = events as f64 / leg?.pipeline.as_secs_f64();
        }
        off.push(pair[0].round());
        on.push(pair[1].round());
        ratios.push((pair[1] / pair[0] * 1000.0).round() / 1000.0);
    }
    // Count what reached the receiver once the exporter's queue is empty
    // (it sends in batches, on a delay), bounded in time.
    let settle = Instant::now()
        + lifeline::config::TelemetryConfig::default().batch_delay * 3
        + Duration::from_secs(5);
    let mut still = 0;
    while still < 5 && Instant::now() < settle {
        let idle = spans.queued.load(Ordering::Relaxed) == 0
            && sink.received() - received0 >= spans.exported.load(Ordering::Relaxed) - exported0;
        still = if idle { still + 1 } else { 0 };
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(json!({
        "collector": sink.endpoint(),
        "off_events_per_s": off,
        "on_events_per_s": on,
        "ratio": median(&ratios),
        "round_ratios": ratios,
        "spans_received": sink.received() - received0,
        "spans_lost": spans.dropped_queue_full.load(Ordering::Relaxed)
            + spans.export_failed.load(Ordering::Relaxed) - dropped0,
        "method": "rounds of an off and an on leg, order alternating; ratio = median of the rounds' on/off",
        "target": {"ratio": 0.9},
    }))
}

#[allow(clippy::too_many_arguments)] // the CLI's options, passed on
pub(super) async fn ingest(
    agents: usize,
    proxies: usize,
    events: usize,
    export_rounds: usize,
    source_rounds: usize,
    postgres: Option<&DbUrl>,
    postgres_rounds: usize,
    export: Option<Export<'_>>,
) -> Result<Value, BenchError> {
    let scratch = Scratch::new("ingest");
    let IngestLeg {
        applied_at,
        pipeline,
        dropped,
        templates,
        base,
    } = ingest_leg(
        agents,
        proxies,
        events,
        &scratch,
        "pipeline.db",
        SourceKind::Lifeline,
        |_| {},
    )
    .await?;
    let rows = validated(&templates);
    // The same rows, straight into the store in batches.
    let raw = raw_insert(
        &store::Engine::Sqlite(scratch.db("raw.db")),
        &rows,
        events,
        base,
    )
    .await?;
    let p_rate = events as f64 / pipeline.as_secs_f64();
    let r_rate = events as f64 / raw.as_secs_f64();
    Ok(json!({
        "scenario": "ingest",
        "agents": agents,
        "proxies": proxies,
        "events": events,
        "pipeline_seconds": pipeline.as_secs_f64(),
        "applied_in_fleet_seconds": applied_at.as_secs_f64(),
        "pipeline_events_per_s": p_rate.round(),
        "raw_insert_seconds": raw.as_secs_f64(),
        "raw_insert_events_per_s": r_rate.round(),
        "ratio": (p_rate / r_rate * 1000.0).round() / 1000.0,
        "history_rows_dropped": dropped,
        "target": {"pipeline_events_per_s": 100000, "ratio": 0.5},
        "teleport_source": if source_rounds == 0 {
            Value::Null
        } else {
            against_lifeline(source_rounds, "events/s", true, |source, db| {
                let scratch = &scratch;
                async move {
                    let leg =
                        ingest_leg(agents, proxies, events, scratch, &db, source, |_| {}).await?;
                    Ok((events as f64 / leg.pipeline.as_secs_f64()).into())
                }
            })
            .await?
        },
        "export": match export {
            Some(export) => {
                ingest_export(agents, proxies, events, export_rounds, &scratch, export).await?
            }
            None => Value::Null,
        },
        "postgres": match postgres {
            Some(server) => {
                on_postgres(agents, proxies, events, postgres_rounds, &scratch, server, raw)
                    .await?
            }
            None => Value::Null,
        },
        "peak_rss_kib": peak_rss_kib(),
    }))
}

/// The simulator's servers as the store keeps them.
fn validated(templates: &[pb::Server]) -> Vec<Server> {
    let now = Clock::system().now();
    templates
        .iter()
        .filter_map(|s| {
            lifeline::ingest::validate::server(
                s.clone(),
                now,
                &lifeline::ingest::validate::Limits {
                    default_ttl: Duration::from_secs(600),
                    max_expired_age: Duration::from_secs(3600),
                    max_ttl: Duration::from_secs(7 * 86400),
                },
            )
            .ok()
        })
        .collect()
}

/// `events` heartbeats of `rows` committed straight through the store's
/// writer code in batches of 5000, on a fresh database at `engine`: the
/// rate the pipeline is measured against.
async fn raw_insert(
    engine: &store::Engine,
    rows: &[Server],
    events: usize,
    base: Ts,
) -> Result<Duration, BenchError> {
    let db = store::open(engine, store::Waits::PRODUCTION).await?;
    let now = Clock::system().now();
    let batch_size = 5000;
    let t0 = Instant::now();
    let mut i = 0;
    while i < events {
        let mut b = WriteBatch::default();
        for j in i..(i + batch_size).min(events) {
            let mut s = rows[j % rows.len()].clone();
            s.expires = Ts(base.as_micros() + j as i64);
            b.event(
                HistoryEntry {
                    at: now,
                    kind: s.kind.into(),
                    name: s.name.clone(),
                    event: lifeline::domain::HistoryEvent::Heartbeat,
                    expires: Some(s.expires),
                    ttl_us: Some(lifeline::clock::dur_micros(s.ttl)),
                    detail: String::new(),
                },
                usize::MAX,
            );
            b.put_server(&s);
        }
        store::writer::commit(&db, &"default".into(), &b).await?;
        i += batch_size;
    }
    let raw = t0.elapsed();
    db.close().await;
    Ok(raw)
}

/// The same stream on PostgreSQL against SQLite: `rounds` rounds of a leg
/// on each engine (each on a fresh database), order alternating, since
/// neighbouring legs share the machine's slow drifts; the figure is the
/// median of the rounds' ratios. Then the raw insert on PostgreSQL.
#[allow(clippy::too_many_arguments)] // the CLI's options, passed on
async fn on_postgres(
    agents: usize,
    proxies: usize,
    events: usize,
    rounds: usize,
    scratch: &Scratch,
    server: &DbUrl,
    sqlite_raw: Duration,
) -> Result<Value, BenchError> {
    let rate = |d: Duration| (events as f64 / d.as_secs_f64()).round();
    let ratio = |a: f64, b: f64| (a / b * 1000.0).round() / 1000.0;
    let (mut pg, mut lite, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    let (mut dropped, mut first) = (0, None);
    for round in 0..rounds.max(1) {
        let mut pair = [0f64; 2];
        let order = if round % 2 == 0 {
            [true, false]
        } else {
            [false, true]
        };
        for on_pg in order {
            let (pg_db, db) = if on_pg {
                let pg_db = PgScratch::create(server, "pipeline").await?;
                (Some(pg_db), format!("pg-pipeline-{round}"))
            } else {
                (None, format!("sqlite-pipeline-{round}.db"))
            };
            let url = pg_db.as_ref().map(|d| &d.url);
            let leg = ingest_leg(
                agents,
                proxies,
                events,
                scratch,
                &db,
                SourceKind::Lifeline,
                |c| c.storage.url = url.cloned(),
            )
            .await;
            if let Some(d) = pg_db {
                d.remove().await;
            }
            let leg = leg?;
            pair[usize::from(on_pg)] = rate(leg.pipeline);
            if on_pg {
                dropped += leg.dropped;
                first.get_or_insert(leg);
            }
        }
        lite.push(pair[0]);
        pg.push(pair[1]);
        ratios.push(ratio(pair[1], pair[0]));
    }
    let Some(leg) = first else {
        return Err(BenchError::Unavailable("no PostgreSQL leg ran"));
    };
    let raw_db = PgScratch::create(server, "raw").await?;
    let rows = validated(&leg.templates);
    let raw = raw_insert(
        &store::Engine::Postgres(raw_db.url.clone()),
        &rows,
        events,
        leg.base,
    )
    .await;
    raw_db.remove().await;
    let raw = raw?;
    let pipeline = median(&pg);
    Ok(json!({
        "server": server.to_string(),
        "pipeline_events_per_s": pipeline,
        "raw_insert_events_per_s": rate(raw),
        "ratio": ratio(pipeline, rate(raw)),
        "history_rows_dropped": dropped,
        "sqlite_pipeline_events_per_s": median(&lite),
        "sqlite_raw_insert_events_per_s": rate(sqlite_raw),
        "rounds": {"postgres": pg, "sqlite": lite, "ratios": ratios},
        "postgres_to_sqlite_pipeline": median(&ratios),
        "method": "rounds of a leg on each engine, the same stream through a fresh Lifeline and a fresh database each, order alternating; postgres_to_sqlite_pipeline = median of the rounds' ratios, the rates are each engine's median",
        "target": {"postgres_to_sqlite_pipeline": 0.9},
    }))
}
