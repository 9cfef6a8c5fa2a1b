//! The cluster watcher. Protocol (Teleport's cache): open `WatchEvents`, wait
//! for INIT, list every accepted kind (paged), hand the fleet one `Resync`
//! that replaces those kinds, then apply the events that follow. Every stream
//! is a new generation; a lost stream turns the data stale and reconnects
//! with exponential backoff and full jitter.
//!
//! `run` is that loop for any [`Source`]; this file also holds the
//! `lifeline` source (`ClusterEvents`). Teleport's Auth API is the sibling
//! in `teleport::source`.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Code;
use tracing::{info, info_span, warn, Instrument};

use super::dial::{explain, DialError, Dialer};
use super::validate::{self, Limits};
use crate::backoff::Backoff;
use crate::clock::Clock;
use crate::fleet::{Command, FleetHandle, Ingested, Resync, Snapshot};
use crate::model::Kind;
use crate::model::{Change, RejectCode, Rejection};
use crate::proto::v1 as pb;
use crate::proto::v1::cluster_events_client::ClusterEventsClient;
use crate::stats::{SourcePhase, Stats};

/// Events forwarded to the fleet in one command, at most.
const MAX_BATCH: usize = 1024;

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

/// The `lifeline` source: `ClusterEvents`.
pub struct Lifeline {
    pub cfg: WatcherConfig,
    pub clock: Clock,
    pub fleet: FleetHandle,
    pub stats: Arc<Stats>,
}

impl Source for Lifeline {
    fn target(&self) -> &str {
        &self.cfg.uri
    }

    async fn session(
        &mut self,
        generation: &mut u64,
        reached_ready: &mut bool,
    ) -> Result<(), WatchError> {
        session(
            &self.cfg,
            self.clock,
            &self.fleet,
            &self.stats,
            generation,
            reached_ready,
        )
        .await
    }
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

async fn connect(cfg: &WatcherConfig) -> Result<ClusterEventsClient<Channel>, WatchError> {
    let channel = cfg.dialer.channel(&cfg.uri, cfg.connect_timeout).await?;
    Ok(ClusterEventsClient::new(channel)
        .max_decoding_message_size(cfg.max_message_bytes)
        .max_encoding_message_size(cfg.max_message_bytes))
}

pub fn count_stream_error(stats: &Stats, status: &tonic::Status) {
    // tonic reports a message over max_decoding_message_size as OutOfRange.
    if status.code() == Code::OutOfRange || status.message().contains("message length too large") {
        stats.reject(RejectCode::OversizedMessage);
    }
}

async fn session(
    cfg: &WatcherConfig,
    clock: Clock,
    fleet: &FleetHandle,
    stats: &Stats,
    generation: &mut u64,
    reached_ready: &mut bool,
) -> Result<(), WatchError> {
    stats.session_events.store(0, Ordering::SeqCst);
    let mut client = connect(cfg).await?;
    let req = pb::WatchRequest {
        kinds: cfg.kinds.iter().map(|k| k.as_str().to_string()).collect(),
        allow_rejected_kinds: true,
        watcher_name: cfg.watcher_name.clone(),
    };
    let mut stream = client
        .watch_events(req)
        .await
        .map_err(WatchError::Watch)?
        .into_inner();
    let generation = opened(stats, generation);

    let first = first_init(&mut stream, stats, |e: &pb::Event| {
        pb::EventType::try_from(e.r#type) == Ok(pb::EventType::Init)
    })
    .await?;
    let mut rejected = Vec::new();
    if let Some(pb::event::Resource::Status(st)) = first.resource {
        for name in st.rejected_kinds {
            match name.parse::<Kind>() {
                Ok(k) if cfg.kinds.contains(&k) => rejected.push(k),
                _ => {
                    warn!(kind = %name, "source rejected a kind Lifeline did not ask for; ignored")
                }
            }
        }
    }
    let accepted: Vec<Kind> = cfg
        .kinds
        .iter()
        .copied()
        .filter(|k| !rejected.contains(k))
        .collect();

    #[allow(clippy::disallowed_methods)] // list duration, for the log and histogram
    let list_started = std::time::Instant::now();
    // Kinds are listed concurrently: HTTP/2 multiplexes the calls, so the
    // source's encoding and our decoding overlap.
    let lists = accepted.iter().map(|kind| {
        let mut client = client.clone();
        let kind = *kind;
        async move {
            let mut rejections = Vec::new();
            let snap = list_kind(&mut client, cfg, clock, stats, kind, &mut rejections)
                .instrument(info_span!("watcher.list", kind = %kind))
                .await?;
            Ok::<_, WatchError>((snap, rejections))
        }
    });
    let mut snapshots = Vec::with_capacity(accepted.len());
    let mut list_rejections = Vec::new();
    for (snap, rejections) in futures::future::try_join_all(lists).await? {
        snapshots.push(snap);
        list_rejections.extend(rejections);
    }
    hand_over(
        fleet,
        stats,
        list_rejections,
        Resync {
            generation,
            snapshots,
            rejected,
        },
        list_started,
    )
    .await?;
    *reached_ready = true;

    loop {
        let (events, end) = burst(&mut stream, stats).await;
        let n = events.len() as u64;
        let mut batch = Vec::with_capacity(events.len());
        for ev in events {
            push_event(&mut batch, ev, clock, cfg, stats);
        }
        fleet
            .send(Command::Apply(batch))
            .await
            .map_err(|_| WatchError::FleetGone)?;
        Stats::add(&stats.stream_events, n);
        Stats::add(&stats.session_events, n);
        if let Some(e) = end {
            return Err(e);
        }
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
    list_started: std::time::Instant,
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

fn push_event(
    batch: &mut Vec<Ingested>,
    ev: pb::Event,
    clock: Clock,
    cfg: &WatcherConfig,
    stats: &Stats,
) {
    if pb::EventType::try_from(ev.r#type) == Ok(pb::EventType::Init) {
        stats.reject(RejectCode::StreamProtocol);
        warn!("INIT in the middle of a stream; ignored");
        return;
    }
    let validated = validate::event(ev, clock.now(), &cfg.limits);
    // Sampled: a span per event would cost more than the event.
    let every = cfg.ingest_span_every;
    if every > 0 && crate::telemetry::exporting() {
        let seq = stats.stream_events.load(Ordering::Relaxed) + batch.len() as u64;
        if seq % every == 0 {
            trace_event(seq, &validated);
        }
    }
    match validated {
        Ok(c) => batch.push(Ingested::Change(c)),
        Err(r) => batch.push(rejected(stats, r)),
    }
}

/// One sampled `ingest.event` span: what the event was, or why refused.
fn trace_event(seq: u64, validated: &Result<Change, Rejection>) {
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

async fn list_kind(
    client: &mut ClusterEventsClient<Channel>,
    cfg: &WatcherConfig,
    clock: Clock,
    stats: &Stats,
    kind: Kind,
    rejections: &mut Vec<Ingested>,
) -> Result<Snapshot, WatchError> {
    let mut servers = Vec::new();
    let mut tunnels = Vec::new();
    let mut token = String::new();
    loop {
        let resp = client
            .list_resources(pb::ListResourcesRequest {
                kind: kind.as_str().to_string(),
                page_size: cfg.page_size,
                page_token: token.clone(),
            })
            .await
            .map_err(|status| {
                count_stream_error(stats, &status);
                WatchError::list(kind, &status)
            })?
            .into_inner();
        let now = clock.now();
        for s in resp.servers {
            match validate::server(s, now, &cfg.limits) {
                Ok(s) if s.kind == kind => servers.push(s),
                Ok(s) => rejections.push(rejected(
                    stats,
                    Rejection {
                        code: RejectCode::UnknownKind,
                        kind: s.kind.as_str().into(),
                        name: s.name,
                        message: format!("listed under {kind}"),
                    },
                )),
                Err(r) => rejections.push(rejected(stats, r)),
            }
        }
        for t in resp.tunnels {
            match validate::tunnel(t, now, &cfg.limits) {
                Ok(t) => tunnels.push(t),
                Err(r) => rejections.push(rejected(stats, r)),
            }
        }
        if resp.next_page_token.is_empty() || resp.next_page_token == token {
            break;
        }
        token = resp.next_page_token;
    }
    Ok(match kind {
        Kind::TunnelConnection => Snapshot::Tunnels(tunnels),
        k => Snapshot::Servers(k, servers),
    })
}
