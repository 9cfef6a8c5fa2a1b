//! The `lifeline` source: `ClusterEvents` (Lifeline's open protocol), a
//! sibling of Teleport's Auth API source (`teleport::source`).
//!
//! Owns: its connection, its session and its paged listing. Must not
//! touch: what the steps of a session are (`session.rs`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tonic::transport::Channel;
use tracing::{info_span, warn, Instrument};

use super::session::{
    burst, count_stream_error, first_init, hand_over, opened, rejected, trace_event,
};
use super::validate::{self};
use super::watcher::{Source, WatchError, WatcherConfig};
use crate::clock::Clock;
use crate::domain::Kind;
use crate::domain::{RejectCode, Rejection};
use crate::fleet::{Command, FleetHandle, Ingested, Resync, Snapshot};
use crate::proto::v1 as pb;
use crate::proto::v1::cluster_events_client::ClusterEventsClient;
use crate::stats::Stats;

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

async fn connect(cfg: &WatcherConfig) -> Result<ClusterEventsClient<Channel>, WatchError> {
    let channel = cfg.dialer.channel(&cfg.uri, cfg.connect_timeout).await?;
    Ok(ClusterEventsClient::new(channel)
        .max_decoding_message_size(cfg.max_message_bytes)
        .max_encoding_message_size(cfg.max_message_bytes))
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

    // List duration, for the log and histogram.
    let list_started = crate::clock::Stopwatch::start();
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
