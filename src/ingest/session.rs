//! The steps every source's session takes, whichever API it speaks: a
//! stream opened (a new generation), its first message INIT, the listing
//! handed to the fleet, the events that follow in bursts, each bad input
//! rejected and counted.
//!
//! Owns: those steps. Must not touch: how a source connects or lists.

use futures::FutureExt;
use tonic::Code;
use tracing::{info, info_span, warn};

use super::watcher::WatchError;
use crate::domain::{Change, RejectCode, Rejection};
use crate::fleet::{Command, FleetHandle, Ingested, Resync, Snapshot};
use crate::stats::{SourcePhase, Stats};

/// Events forwarded to the fleet in one command, at most.
const MAX_BATCH: usize = 1024;

/// Counts a stream's error that says a message was too large.
pub fn count_stream_error(stats: &Stats, status: &tonic::Status) {
    // tonic reports a message over max_decoding_message_size as OutOfRange.
    if status.code() == Code::OutOfRange || status.message().contains("message length too large") {
        stats.reject(RejectCode::OversizedMessage);
    }
}

/// A watch stream opened: the next generation, counted, resyncing.
pub fn opened(stats: &Stats, generation: &mut u64) -> u64 {
    *generation += 1;
    Stats::inc(&stats.watch_generations);
    stats.set_source_phase(SourcePhase::Resyncing);
    *generation
}

/// The stream's first message, which must be INIT (`is_init`).
pub async fn first_init<T>(
    stream: &mut tonic::Streaming<T>,
    stats: &Stats,
    is_init: impl FnOnce(&T) -> bool,
) -> Result<T, WatchError> {
    let first = stream.message().await.map_err(|s| {
        count_stream_error(stats, &s);
        WatchError::Stream(s)
    })?;
    let Some(first) = first else {
        return Err(WatchError::Ended);
    };
    if !is_init(&first) {
        stats.reject(RejectCode::StreamProtocol);
        return Err(WatchError::NoInit);
    }
    Ok(first)
}

/// Hands the fleet a session's listing: the rejections met while listing,
/// then the `Resync` that makes its kinds ready.
pub async fn hand_over(
    fleet: &FleetHandle,
    stats: &Stats,
    list_rejections: Vec<Ingested>,
    resync: Resync,
    list_started: crate::clock::Stopwatch,
) -> Result<(), WatchError> {
    let generation = resync.generation;
    let listed: usize = resync.snapshots.iter().map(Snapshot::len).sum();
    let rejected: Vec<&'static str> = resync.rejected.iter().map(|k| k.as_str()).collect();
    if !list_rejections.is_empty() {
        fleet
            .send(Command::Apply(list_rejections))
            .await
            .map_err(|_| WatchError::FleetGone)?;
    }
    fleet
        .send(Command::Resync(resync))
        .await
        .map_err(|_| WatchError::FleetGone)?;
    stats.set_source_phase(SourcePhase::Following);
    info!(
        generation,
        listed,
        list_ms = list_started.elapsed().as_millis() as u64,
        ?rejected,
        "cluster watch ready"
    );
    Ok(())
}

/// The next burst of a stream: waits for one message, then takes whatever
/// else already arrived (up to `MAX_BATCH`), so a burst becomes one fleet
/// command. The end of the stream, if met, comes after the messages before
/// it. Cancel-safe: it awaits only for the first message.
pub async fn burst<T>(
    stream: &mut tonic::Streaming<T>,
    stats: &Stats,
) -> (Vec<T>, Option<WatchError>) {
    let mut out = Vec::new();
    let mut next = match stream.message().await {
        Ok(Some(m)) => Some(m),
        Ok(None) => return (out, Some(WatchError::Ended)),
        Err(s) => {
            count_stream_error(stats, &s);
            return (out, Some(WatchError::Stream(s)));
        }
    };
    while let Some(m) = next.take() {
        out.push(m);
        if out.len() >= MAX_BATCH {
            break;
        }
        match stream.message().now_or_never() {
            Some(Ok(Some(m))) => next = Some(m),
            Some(Ok(None)) => return (out, Some(WatchError::Ended)),
            Some(Err(s)) => {
                count_stream_error(stats, &s);
                return (out, Some(WatchError::Stream(s)));
            }
            None => {}
        }
    }
    (out, None)
}

/// One sampled `ingest.event` span: what the event was, or why refused.
pub(super) fn trace_event(seq: u64, validated: &Result<Change, Rejection>) {
    match validated {
        Ok(c) => {
            let (kind, ty, name) = c.describe();
            info_span!(parent: None, "ingest.event", seq, kind = kind.as_str(), r#type = ty.as_str(), name);
        }
        Err(r) => {
            info_span!(parent: None, "ingest.event", seq, kind = %r.kind, rejected = r.code.as_str());
        }
    }
}

pub fn rejected(stats: &Stats, r: Rejection) -> Ingested {
    stats.reject(r.code);
    warn!(code = r.code.as_str(), kind = %r.kind, name = %r.name, "rejected input: {}", r.message);
    Ingested::Rejected(r)
}
