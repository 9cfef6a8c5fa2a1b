//! The hub's background tasks: the audit writer (outcomes and deliveries
//! to the store, batched), the inbound channel's reader, and the
//! ack-timeout sweep.

use super::*;

/// Commits delivery and ack updates in batches; never blocks the hub.
pub(super) async fn audit_writer(
    db: Db,
    mut rx: mpsc::Receiver<SignalUpdate>,
    stats: Arc<Stats>,
    (health, clock): (Arc<StoreHealth>, Clock),
    stop: CancellationToken,
) {
    let mut buf = Vec::with_capacity(512);
    loop {
        let n = tokio::select! {
            n = rx.recv_many(&mut buf, 512) => n,
            _ = stop.cancelled() => {
                // Last updates on the way out.
                while buf.len() < 4096 {
                    match rx.try_recv() {
                        Ok(u) => buf.push(u),
                        Err(_) => break,
                    }
                }
                if let Err(e) = audit::update(&db, &buf).await {
                    warn!(error = %e, updates = buf.len(), "signal audit updates lost at shutdown");
                }
                return;
            }
        };
        if n == 0 {
            return;
        }
        // An update is never dropped here: it is retried until the database
        // takes it (while it waits, the bounded channel in front may fill,
        // and what does not fit is counted as dropped where it is sent).
        let mut retry = health.retry(clock, "signal audit updates");
        // One at a time once the database has refused an update for what
        // it holds: that one is set aside, the others are written.
        let mut isolate = false;
        loop {
            let done = if isolate {
                audit::update_isolating(&db, &buf).await.map(|refused| {
                    Stats::add(&stats.store_rows_refused, refused);
                })
            } else {
                audit::update(&db, &buf).await
            };
            match done {
                Ok(()) => {
                    retry.succeeded();
                    break;
                }
                Err(e) if crate::store::is_permanent(&e) && !isolate => {
                    isolate = true;
                }
                Err(e) => {
                    if !retry.failed(&e, &stop).await {
                        Stats::add(&stats.signal_updates_dropped, buf.len() as u64);
                        warn!(error = %e, updates = buf.len(), "signal audit updates lost at shutdown: the database refused them");
                        return;
                    }
                }
            }
        }
        buf.clear();
    }
}

/// Signals not acked by their deadline are recorded as `timeout`.
/// Takes what reaches the hub from outside its streams, in order.
pub(super) async fn receive(
    hub: Arc<Hub>,
    mut rx: mpsc::Receiver<Inbound>,
    stop: CancellationToken,
) {
    loop {
        let msg = tokio::select! {
            _ = stop.cancelled() => return,
            m = rx.recv() => m,
        };
        match msg {
            Some(Inbound::Relayed(ids)) => hub.deliver_relayed(&ids).await,
            None => return,
        }
    }
}

pub(super) async fn timeouts(hub: Arc<Hub>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
        let now = hub.rt.clock.now();
        for (id, f) in hub.flights.expired(now) {
            if f.restart {
                hub.restart_ended(Some(false));
            }
            hub.rt.stats.signal(f.kind, SignalOutcome::Timeout);
            let _span = propagate::child(
                f.trace.as_ref(),
                || info_span!(parent: None, "signal.timeout", signal.id = id, agent = %f.agent),
            );
            info!(agent = %f.agent, id, "signal not acked before its deadline");
            hub.update(SignalUpdate::Outcome {
                id,
                at: hub.audit_now(),
                outcome: Outcome::Timeout,
                detail: "no ack before the deadline".into(),
                acked: false,
                latency_us: None,
            });
        }
    }
}
