//! The notify room: tells people about incidents, from the leader.
//!
//! Owns: rendering and sending the outbox's notices, to signed webhooks
//! in order with retries (`webhook.rs`, signatures in `sign.rs`) and to
//! Alertmanagers (`alertmanager.rs`, the alert's shape in `alert.rs`);
//! maintenance windows as Alertmanager silences (`silences.rs`); the
//! storm guard's pauses written as notices (`pauses.rs`); the HTTP
//! clients they use (`client.rs`).
//!
//! Must not touch: incidents, or what a notice says. The fleet decides
//! incidents; `domain` says what each change tells (`Notice`) and the
//! plan's one rule (`Plan::handling`); the store writes each notice in
//! its cause's transaction (`store::outbox`). This room reads notices
//! typed, and writes only pause notices and each webhook's deliveries
//! and place, through the store's functions. Only the leading replica
//! sends; a new leader goes on from the database, so nothing is lost
//! with a restart or a change of leader.

pub mod alert;
mod alertmanager;
mod client;
mod pauses;
pub mod sign;
pub mod silences;
pub mod webhook;

use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::config::Config;
use crate::store::{outbox, Db, Leadership};
use crate::supervise::Runtime;

/// How often the leader looks for new events (and so how soon an
/// incident is told after it is written).
pub const POLL: Duration = Duration::from_millis(250);

/// A notification setup that cannot start; names the file or field.
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("notify: file {path} {why}")]
    File { path: String, why: String },
    #[error("notify: cannot build an HTTP client: {0}")]
    Client(String),
}

/// Starts the notifiers `cfg.notify` names (none: nothing runs).
pub fn start(
    cfg: &Config,
    db: &Db,
    leadership: watch::Receiver<Leadership>,
    rt: &mut Runtime,
) -> Result<(), NotifyError> {
    let n = &cfg.notify;
    if !n.any() {
        return Ok(());
    }
    let cx = alert::Context {
        home: cfg.cluster.cluster(),
        relabel: Some(n.cluster.clone()).filter(|c| !c.is_empty()),
        external_url: cfg.server.external_url(),
        runbook_url: n.runbook_url.clone(),
    };
    let (tx, newest) = watch::channel(0i64);
    rt.spawn(
        "notify: new events",
        watch_newest(db.clone(), leadership.clone(), tx, rt.shutdown.clone()),
    );
    if !n.alertmanager.urls.is_empty() {
        let poster = alertmanager::Poster::new(&n.alertmanager, cx.clone(), db.clone(), rt)?;
        rt.spawn(
            "notify: alertmanager",
            poster.run(leadership.clone(), newest.clone(), rt.shutdown.clone()),
        );
    }
    if !n.alertmanager.urls.is_empty() && !n.alertmanager.silences.is_empty() {
        let silencer = silences::Silencer::new(&n.alertmanager, db.clone(), rt)?;
        rt.spawn(
            "notify: alertmanager silences",
            silencer.run(leadership.clone(), newest.clone(), rt.shutdown.clone()),
        );
    }
    for w in &n.webhooks {
        let hook = webhook::Webhook::new(w.clone(), cx.clone(), db.clone(), rt)?;
        rt.spawn(
            "notify: webhook",
            hook.run(leadership.clone(), newest.clone(), rt.shutdown.clone()),
        );
    }
    Ok(())
}

/// Tells when automatic signals pause and resume (the storm guard, held
/// restarts), as outbox events; runs whether or not anyone listens, as the
/// incidents' events are written.
pub fn tell_pauses(
    db: &Db,
    leadership: watch::Receiver<Leadership>,
    guard: watch::Receiver<crate::signals::dispatch::Guard>,
    rt: &mut Runtime,
) {
    let run = pauses::run(db.clone(), rt.clock, leadership, guard, rt.shutdown.clone());
    rt.spawn("notify: pauses", run);
}

/// Returns when this replica's standing changes. Alone on SQLite it
/// never does (its sender is gone at start): this never returns.
async fn standing_changed(rx: &mut watch::Receiver<Leadership>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Returns when a new event is written; never, once the watcher is gone.
async fn written(rx: &mut watch::Receiver<i64>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Publishes the newest event's id while this replica leads, looked up
/// every [`POLL`].
async fn watch_newest(
    db: Db,
    leadership: watch::Receiver<Leadership>,
    tx: watch::Sender<i64>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(POLL) => {}
        }
        if !leadership.borrow().leading {
            continue;
        }
        match outbox::newest(&db).await {
            Ok(n) => {
                tx.send_if_modified(|v| std::mem::replace(v, n) != n);
            }
            // The loops that deliver say it when they fail themselves.
            Err(e) => debug!(error = %e, "reading the newest notification event failed"),
        }
    }
}
