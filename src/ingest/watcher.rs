//! The cluster watcher. Protocol (Teleport's cache): open `WatchEvents`, wait
//! for INIT, list every accepted kind (paged), hand the fleet one `Resync`
//! that replaces those kinds, then apply the events that follow. Every stream
//! is a new generation; a lost stream turns the data stale and reconnects
//! with exponential backoff and full jitter.
//!
//! `run` is that loop for any [`Source`]. The sources are siblings: the
//! `lifeline` one (`ClusterEvents`) in `cluster_events.rs`, Teleport's
//! Auth API in `teleport::source`; the steps every session takes are in
//! `session.rs`.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info_span, warn, Instrument};

use super::dial::{explain, DialError, Dialer};
use super::validate::Limits;
use crate::backoff::Backoff;
use crate::domain::Kind;
use crate::fleet::{Command, FleetHandle};
use crate::stats::{SourcePhase, Stats};

#[derive(Clone, Debug)]
pub struct WatcherConfig {
    pub uri: String,
    /// Plaintext, or TLS for an `https://` source.
    pub dialer: Dialer,
    pub watcher_name: String,
    pub kinds: Vec<Kind>,
    pub page_size: u32,
    pub max_message_bytes: usize,
    pub connect_timeout: Duration,
    pub limits: Limits,
    /// One `ingest.event` span per this many stream events (0: none).
    pub ingest_span_every: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("WatchEvents failed: {}", explain(.0))]
    Watch(tonic::Status),
    #[error("the first event was not INIT")]
    NoInit,
    #[error("listing {kind} failed: {detail}")]
    List { kind: String, detail: String },
    #[error("the event stream ended")]
    Ended,
    #[error("the event stream failed: {}", explain(.0))]
    Stream(tonic::Status),
    #[error("the fleet has stopped")]
    FleetGone,
}

impl WatchError {
    pub fn list(kind: impl std::fmt::Display, status: &tonic::Status) -> WatchError {
        WatchError::List {
            kind: kind.to_string(),
            detail: explain(status),
        }
    }
}

/// A cluster source: what `run` connects, resyncs and follows.
pub trait Source: Send {
    /// Where it connects, for spans and logs.
    fn target(&self) -> &str;
    /// One stream's life: connect, watch, wait for INIT, list, hand the
    /// fleet a `Resync` for `generation + 1` (then set `reached_ready`),
    /// follow. Returns when the stream is lost.
    fn session(
        &mut self,
        generation: &mut u64,
        reached_ready: &mut bool,
    ) -> impl Future<Output = Result<(), WatchError>> + Send;
}

/// Runs until `shutdown`: connect, resync, follow; on any loss, mark stale,
/// back off, repeat.
pub async fn run(
    mut source: impl Source,
    backoff: Backoff,
    fleet: FleetHandle,
    stats: Arc<Stats>,
    shutdown: CancellationToken,
) {
    // A generation is one opened stream; failed connects do not count.
    let mut generation = 0u64;
    let mut attempt = 0u32;
    loop {
        let span =
            info_span!("watcher.session", next_generation = generation + 1, uri = %source.target());
        let mut reached_ready = false;
        stats.set_source_phase(SourcePhase::Connecting);
        let result = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = source.session(&mut generation, &mut reached_ready).instrument(span) => r,
        };
        let err = match result {
            Ok(()) => WatchError::Ended,
            Err(WatchError::FleetGone) => return,
            Err(e) => e,
        };
        Stats::inc(&stats.watch_failures);
        stats.set_source_error(Some(err.to_string()));
        stats.set_source_phase(SourcePhase::Retrying);
        if fleet
            .send(Command::WatchDown {
                generation,
                error: err.to_string(),
            })
            .await
            .is_err()
        {
            return;
        }
        if reached_ready {
            attempt = 0;
        }
        let delay = backoff.delay(attempt);
        let retry_in_ms = delay.as_millis() as u64;
        match &err {
            WatchError::Dial(_) | WatchError::Watch(_) => {
                warn!(error = %err, attempt, retry_in_ms, "cannot open the cluster watch; retrying")
            }
            _ => warn!(error = %err, generation, retry_in_ms, "cluster watch lost; will resync"),
        }
        attempt = attempt.saturating_add(1);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}
