//! The `teleport` source: Teleport's resource watcher over mutual TLS.
//! One session: `WatchEvents` for proxies, auth servers and the agent
//! kinds (partial success allowed); INIT's `WatchStatus` says which kinds
//! were confirmed; then proxies and auth servers are listed through
//! `PresenceService` (or `GET /v2/...` on servers too old for it), agents
//! through `ListResources`, and the fleet gets one `Resync`; then PUT and
//! DELETE events follow. `GetInstances` is polled alongside for each host's Auth.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tonic::transport::Channel;
use tracing::{debug, info_span, warn, Instrument};

use super::convert::{self, Item, Seen};
use super::heartbeat::{NodeBytes, WatchCodec, Watched};
use super::hosts::AuthOf;
use super::instances::poll_instances;
use super::pages::{list_names, method, ready_client, Lister};
use crate::domain::{AgentService, Change, Kind, RejectCode};
use crate::fleet::{Command, Ingested, Resync, Snapshot};
use crate::ingest::session::{burst, first_init, hand_over, opened, rejected};
use crate::ingest::validate::reject;
use crate::ingest::watcher::{Source, WatchError};
use crate::proto::teleport::auth::{self as tp, event::Resource};
use crate::proto::teleport::types;
use crate::stats::Stats;

use super::listing::{hidden_from_listing, list_all, Listed};
use super::state::MAX_UNLISTED;
pub use super::state::{Teleport, TeleportConfig, RELIST_AFTER, RELIST_HIDDEN};

impl Source for Teleport {
    fn target(&self) -> &str {
        &self.cfg.addr
    }

    async fn session(
        &mut self,
        generation: &mut u64,
        reached_ready: &mut bool,
    ) -> Result<(), WatchError> {
        session(self, generation, reached_ready).await
    }
}

fn wanted_kinds(cfg: &TeleportConfig) -> Vec<String> {
    let mut kinds = vec!["proxy".to_string(), "auth_server".to_string()];
    kinds.extend(cfg.agent_kinds.iter().map(|k| k.as_str().to_string()));
    kinds
}

/// One session, in its four phases: the watch opened (`open`), its INIT
/// read for the kinds Teleport confirmed (`confirm`), everything listed
/// and handed over as one resync (`list`), then events followed until the
/// stream ends (`Following`).
async fn session(
    src: &mut Teleport,
    generation: &mut u64,
    reached_ready: &mut bool,
) -> Result<(), WatchError> {
    let stats = src.stats.clone();
    stats.session_events.store(0, Ordering::SeqCst);
    let channel = src
        .cfg
        .dialer
        .channel(&src.cfg.addr, src.cfg.connect_timeout)
        .await?;
    let max = src.cfg.max_message_bytes;
    let lister = Lister::new(channel.clone(), max);
    let kinds = wanted_kinds(&src.cfg);
    let (mut stream, denied) = open(src, &channel, &kinds).await?;
    let generation = opened(&stats, generation);

    let first = match first_init(&mut stream, &stats, |w: &Watched| {
        matches!(w, Watched::Event(e) if tp::Operation::try_from(e.r#type) == Ok(tp::Operation::Init))
    })
    .await?
    {
        Watched::Event(e) => e,
        Watched::NodePut(_) => return Err(WatchError::NoInit),
    };
    let confirmed = confirm(src, first, &kinds, &denied);

    // List duration, for the log.
    let list_started = crate::clock::Stopwatch::start();
    // Auth attachments alongside the lists, so the agents' first listing
    // carries them.
    let (inst_tx, inst_rx) = mpsc::channel::<AuthOf>(1);
    let _poller = AbortOnDropHandle::new(tokio::spawn(
        poll_instances(channel.clone(), max, src.cfg.instances_poll, inst_tx)
            .instrument(info_span!("teleport.instances")),
    ));
    let mut following = Following {
        stream,
        lister,
        inst_rx,
        relist: None,
        relist_at: None,
    };
    let (resync, rejections) = list(src, channel, &mut following, confirmed, generation).await?;
    hand_over(&src.fleet, &stats, rejections, resync, list_started).await?;
    *reached_ready = true;
    src.unlisted.clear();
    following.follow(src).await
}

/// Opens the watch on `kinds`. An older Auth refuses the whole watch for
/// one kind its role cannot read, partial success or not: then which is
/// found a kind at a time, and the rest are watched. Returns the stream
/// and the kinds refused that way.
async fn open(
    src: &Teleport,
    channel: &Channel,
    kinds: &[String],
) -> Result<(tonic::Streaming<Watched>, BTreeSet<String>), WatchError> {
    let max = src.cfg.max_message_bytes;
    match open_watch(channel, max, kinds).await {
        Ok(s) => Ok((s, BTreeSet::new())),
        Err(s) if s.code() == tonic::Code::PermissionDenied => {
            let denied = probe_denied(channel, max, kinds, src.cfg.connect_timeout).await?;
            if denied.is_empty() {
                return Err(WatchError::Watch(s));
            }
            warn!(denied = ?denied, "the Auth refused the whole watch for kinds its role cannot read (an older Auth); watching the others");
            let allowed: Vec<String> = kinds
                .iter()
                .filter(|k| !denied.contains(*k))
                .cloned()
                .collect();
            let stream = open_watch(channel, max, &allowed)
                .await
                .map_err(WatchError::Watch)?;
            Ok((stream, denied))
        }
        Err(s) => Err(WatchError::Watch(s)),
    }
}

/// What INIT confirmed: the kinds the fleet will not get (`rejected`)
/// and the agent services that are watched.
struct Confirmed {
    rejected: Vec<Kind>,
    agents_ok: Vec<AgentService>,
}

/// Reads INIT's `WatchStatus` for the confirmed kinds (an INIT without
/// one, from an older server, confirms every kind not `denied`), and says
/// which are not watched and why (the log and `/readyz`).
fn confirm(
    src: &Teleport,
    first: tp::Event,
    kinds: &[String],
    denied: &BTreeSet<String>,
) -> Confirmed {
    let confirmed: BTreeSet<String> = match first.resource {
        Some(Resource::WatchStatus(ws)) => ws
            .spec
            .map(|s| s.kinds.into_iter().map(|k| k.kind).collect())
            .unwrap_or_default(),
        _ => kinds
            .iter()
            .filter(|k| !denied.contains(*k))
            .cloned()
            .collect(),
    };
    let refused: Vec<&String> = kinds.iter().filter(|k| !confirmed.contains(*k)).collect();
    let agents_ok: Vec<AgentService> = src
        .cfg
        .agent_kinds
        .iter()
        .copied()
        .filter(|k| confirmed.contains(k.as_str()))
        .collect();
    let mut rejected = Vec::new();
    if !confirmed.contains("proxy") {
        rejected.push(Kind::Proxy);
    }
    if !confirmed.contains("auth_server") {
        rejected.push(Kind::AuthServer);
    }
    if agents_ok.is_empty() {
        rejected.extend([Kind::Agent, Kind::TunnelConnection]);
    }
    if !refused.is_empty() {
        warn!(refused = ?refused, "Teleport did not confirm every watched kind (check the identity's role: it needs list and read on each)");
    }
    src.stats.set_unwatched(
        refused
            .iter()
            .map(|k| crate::stats::Unwatched {
                kind: (*k).clone(),
                reason: if denied.contains(*k) {
                    "the Auth refused the whole watch for it (an older Auth; the identity's role needs list and read on it)".into()
                } else {
                    "Teleport left it out of the watch (the identity's role needs list and read on it)".into()
                },
            })
            .collect(),
    );
    Confirmed {
        rejected,
        agents_ok,
    }
}

/// Lists every confirmed kind and makes the resync of `generation`; the
/// listing's hosts replace the last one's.
async fn list(
    src: &mut Teleport,
    channel: Channel,
    following: &mut Following,
    confirmed: Confirmed,
    generation: u64,
) -> Result<(Resync, Vec<Ingested>), WatchError> {
    let Confirmed {
        rejected,
        agents_ok,
    } = confirmed;
    src.ttls.begin_resync();
    let Listed {
        proxies,
        auth_servers,
        hosts,
        agents,
        tunnels,
        rejections,
    } = list_all(
        src,
        channel,
        &following.lister,
        &rejected,
        &agents_ok,
        &mut following.inst_rx,
    )
    .await?;
    // What was not listed is forgotten, so the learned TTLs stay bounded.
    src.ttls.end_resync();
    let mut snapshots = Vec::new();
    if !rejected.contains(&Kind::Proxy) {
        snapshots.push(Snapshot::Servers(Kind::Proxy, proxies));
    }
    if !rejected.contains(&Kind::AuthServer) {
        snapshots.push(Snapshot::Servers(Kind::AuthServer, auth_servers));
    }
    if !agents_ok.is_empty() {
        snapshots.push(Snapshot::Servers(Kind::Agent, agents));
        snapshots.push(Snapshot::Tunnels(tunnels));
    }
    // The last listing's hosts are freed off this task.
    crate::supervise::drop_elsewhere(std::mem::replace(&mut src.hosts, hosts));
    src.stats
        .agentless_nodes
        .store(src.hosts.agentless() as u64, Ordering::Relaxed);
    let resync = Resync {
        generation,
        snapshots,
        rejected,
    };
    Ok((resync, rejections))
}

/// Agent services and names, from a listing again.
type Names = BTreeSet<(AgentService, String)>;

/// The last phase: events followed, each host's Auth as the poller finds
/// it, and a listing again once services the listing lacked have shown
/// up (to tell new ones from ones the listing hides).
struct Following {
    stream: tonic::Streaming<Watched>,
    lister: Lister,
    inst_rx: mpsc::Receiver<AuthOf>,
    relist: Option<AbortOnDropHandle<Result<Names, WatchError>>>,
    relist_at: Option<tokio::time::Instant>,
}

impl Following {
    /// Runs until the stream ends or the fleet is gone.
    async fn follow(mut self, src: &mut Teleport) -> Result<(), WatchError> {
        let mut changes = Vec::new();
        loop {
            if self.relist.is_none() && self.relist_at.is_none() && !src.unlisted.is_empty() {
                let hiding = src.stats.listing_hidden.load(Ordering::Relaxed) > 0;
                let wait = if hiding { RELIST_HIDDEN } else { RELIST_AFTER };
                self.relist_at = Some(src.clock.deadline_in(wait));
            }
            let relist_at = self.relist_at;
            tokio::select! {
                _ = async { if let Some(at) = relist_at { tokio::time::sleep_until(at).await } }, if relist_at.is_some() && self.relist.is_none() => {
                    self.relist_at = None;
                    let kinds: BTreeSet<AgentService> = src.unlisted.iter().map(|(k, _)| *k).collect();
                    self.relist = Some(AbortOnDropHandle::new(tokio::spawn(
                        list_names(self.lister.clone(), kinds, src.cfg.page_size)
                            .instrument(info_span!("teleport.relist")),
                    )));
                }
                r = async { match self.relist.as_mut() { Some(t) => t.await, None => std::future::pending().await } }, if self.relist.is_some() => {
                    self.relist = None;
                    match r {
                        Ok(Ok(listed)) => hidden_from_listing(src, &listed),
                        Ok(Err(e)) => debug!(error = %e, "listing again to tell new services from hidden ones failed; next time"),
                        Err(e) => debug!(error = %e, "the listing task ended"),
                    }
                }
                m = self.inst_rx.recv() => {
                    let Some(m) = m else { continue };
                    auth_found(src, m).await?;
                }
                (events, end) = burst(&mut self.stream, &src.stats) => {
                    events_arrived(src, events, &mut changes).await?;
                    if let Some(e) = end {
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// The poller found each host's Auth: the hosts that moved are sent on.
async fn auth_found(src: &mut Teleport, m: AuthOf) -> Result<(), WatchError> {
    let mut changes = Vec::new();
    src.hosts.set_auth(m, &mut changes);
    if !changes.is_empty() {
        let batch = changes.into_iter().map(Ingested::Change).collect();
        src.fleet
            .send(Command::Apply(batch))
            .await
            .map_err(|_| WatchError::FleetGone)?;
    }
    Ok(())
}

/// A burst of events, applied and sent to the fleet as one batch.
async fn events_arrived(
    src: &mut Teleport,
    events: Vec<Watched>,
    changes: &mut Vec<Change>,
) -> Result<(), WatchError> {
    let n = events.len() as u64;
    let mut batch = Vec::with_capacity(events.len());
    for ev in events {
        match ev {
            Watched::NodePut(node) => apply_node(src, node, changes, &mut batch),
            Watched::Event(ev) => apply(src, ev, changes, &mut batch),
        }
    }
    if !batch.is_empty() {
        src.fleet
            .send(Command::Apply(batch))
            .await
            .map_err(|_| WatchError::FleetGone)?;
    }
    let stats = &src.stats;
    Stats::add(&stats.stream_events, n);
    Stats::add(&stats.session_events, n);
    // Once per burst, not per event: agentless nodes come and go rarely.
    stats
        .agentless_nodes
        .store(src.hosts.agentless() as u64, Ordering::Relaxed);
    Ok(())
}

/// A node's PUT kept as bytes: its host takes the new expiry in place
/// when nothing else changed; otherwise it is decoded and applied as any
/// event is.
fn apply_node(
    src: &mut Teleport,
    node: NodeBytes,
    changes: &mut Vec<Change>,
    batch: &mut Vec<Ingested>,
) {
    let seen = Seen {
        now: src.clock.now(),
        live: true,
        limits: src.cfg.limits,
    };
    if let Some(put) = node.read() {
        if src.hosts.node_heartbeat(&put, &seen, changes) {
            batch.extend(changes.drain(..).map(Ingested::Change));
            return;
        }
    }
    match <tp::Event as prost::Message>::decode(node.bytes().clone()) {
        Ok(ev) => apply(src, ev, changes, batch),
        // The decoder read it as a node's PUT, which decodes: not met.
        Err(e) => batch.push(rejected(
            &src.stats,
            reject(
                RejectCode::StreamProtocol,
                "node",
                "",
                format!("a node's PUT did not decode: {e}"),
            ),
        )),
    }
}

/// One event into changes (or a rejection) on `batch`; `changes` is
/// scratch space, empty between events.
fn apply(src: &mut Teleport, ev: tp::Event, changes: &mut Vec<Change>, batch: &mut Vec<Ingested>) {
    let seen = Seen {
        now: src.clock.now(),
        live: true,
        limits: src.cfg.limits,
    };
    let op = tp::Operation::try_from(ev.r#type).ok();
    let result = match (op, ev.resource) {
        (Some(tp::Operation::Init), _) => Err(reject(
            RejectCode::StreamProtocol,
            "",
            "",
            "INIT in the middle of a stream",
        )),
        (_, None) => Err(reject(
            RejectCode::EmptyEvent,
            "",
            "",
            "event carries no resource",
        )),
        (Some(tp::Operation::Put), Some(r)) => put(src, r, &seen).map(|item| match item {
            Item::Server(s) => {
                if s.kind == Kind::Proxy {
                    src.hosts.put_proxy(&s.name, changes);
                }
                changes.insert(0, Change::PutServer(s));
            }
            Item::Beat(b) => {
                let new = src.hosts.put_service(b, &seen, changes);
                if let Some(key) = new.filter(|_| src.unlisted.len() < MAX_UNLISTED) {
                    src.unlisted.insert(key);
                }
            }
            Item::Agentless(name) => src.hosts.put_agentless(name),
        }),
        (Some(tp::Operation::Delete), Some(r)) => delete(src, r, changes),
        (None, Some(_)) => Err(reject(
            RejectCode::BadEventType,
            "",
            "",
            format!("unknown operation {}", ev.r#type),
        )),
    };
    match result {
        Ok(()) => batch.extend(changes.drain(..).map(Ingested::Change)),
        Err(r) => {
            changes.clear();
            batch.push(rejected(&src.stats, r));
        }
    }
}

fn put(src: &mut Teleport, r: Resource, seen: &Seen) -> Result<Item, crate::domain::Rejection> {
    let what = match &r {
        Resource::ResourceHeader(_) => "a PUT carries a ResourceHeader",
        _ => "WatchStatus outside the INIT event",
    };
    match convert::Resource::of_event(r) {
        Some(r) => r.validate(seen, &mut src.ttls),
        None => Err(reject(RejectCode::BadEventType, "", "", what)),
    }
}

/// A DELETE: most arrive as `ResourceHeader`; app servers possibly as
/// `AppServerV3`. App servers name the app, and the host in `Description`.
fn delete(
    src: &mut Teleport,
    r: Resource,
    out: &mut Vec<Change>,
) -> Result<(), crate::domain::Rejection> {
    let (kind, meta, host_id) = match r {
        Resource::ResourceHeader(h) => (h.kind, h.metadata.unwrap_or_default(), String::new()),
        Resource::Server(s) => (s.kind, s.metadata.unwrap_or_default(), String::new()),
        Resource::AppServer(s) => (
            "app_server".to_string(),
            s.metadata.unwrap_or_default(),
            s.spec.map(|s| s.host_id).unwrap_or_default(),
        ),
        Resource::DatabaseServer(s) => (
            "db_server".to_string(),
            s.metadata.unwrap_or_default(),
            s.spec.map(|s| s.host_id).unwrap_or_default(),
        ),
        Resource::KubernetesServer(s) => (
            "kube_server".to_string(),
            s.metadata.unwrap_or_default(),
            s.spec.map(|s| s.host_id).unwrap_or_default(),
        ),
        Resource::WindowsDesktopService(s) => (
            "windows_desktop_service".to_string(),
            s.header.and_then(|h| h.metadata).unwrap_or_default(),
            String::new(),
        ),
        Resource::WatchStatus(_) => {
            return Err(reject(
                RejectCode::BadEventType,
                "",
                "",
                "WatchStatus outside the INIT event",
            ))
        }
    };
    if meta.name.trim().is_empty() {
        return Err(reject(
            RejectCode::EmptyName,
            &kind,
            "",
            "a DELETE names no resource",
        ));
    }
    match kind.as_str() {
        "proxy" => {
            src.ttls.forget(Kind::Proxy, &meta.name);
            out.push(Change::DeleteServer(Kind::Proxy, meta.name.clone()));
            src.hosts.delete_proxy(&meta.name, out);
        }
        "auth_server" => {
            src.ttls.forget(Kind::AuthServer, &meta.name);
            out.push(Change::DeleteServer(Kind::AuthServer, meta.name));
        }
        k => {
            let Ok(service) = k.parse::<AgentService>() else {
                return Err(reject(
                    RejectCode::UnknownKind,
                    k,
                    &meta.name,
                    format!("a DELETE of kind {k:?}, which Lifeline does not watch"),
                ));
            };
            let host = if !host_id.is_empty() {
                Some(host_id)
            } else if service != AgentService::Node && !meta.description.is_empty() {
                Some(meta.description)
            } else {
                None
            };
            src.hosts
                .delete_service(service, &meta.name, host.as_deref(), out);
        }
    }
    Ok(())
}

/// Opens the watch of `kinds`, partial success allowed.
async fn open_watch(
    channel: &Channel,
    max: usize,
    kinds: &[String],
) -> Result<tonic::Streaming<Watched>, tonic::Status> {
    let watch = tp::Watch {
        kinds: kinds
            .iter()
            .map(|k| types::WatchKind {
                kind: k.clone(),
                ..Default::default()
            })
            .collect(),
        allow_partial_success: true,
    };
    let mut grpc = ready_client(channel.clone(), max).await?;
    let path =
        tonic::codegen::http::uri::PathAndQuery::from_static("/proto.AuthService/WatchEvents");
    Ok(grpc
        .server_streaming(method(watch, "WatchEvents"), path, WatchCodec::default())
        .await?
        .into_inner())
}

/// The kinds among `kinds` whose watch alone is refused with
/// PermissionDenied (at the call or as the first message); any other
/// failure ends the probe as the session's error.
async fn probe_denied(
    channel: &Channel,
    max: usize,
    kinds: &[String],
    timeout: std::time::Duration,
) -> Result<BTreeSet<String>, WatchError> {
    let mut denied = BTreeSet::new();
    for kind in kinds {
        let one = std::slice::from_ref(kind);
        let first = match open_watch(channel, max, one).await {
            Ok(mut s) => match tokio::time::timeout(timeout, s.message()).await {
                Ok(r) => r.map(|_| ()),
                Err(_) => Err(tonic::Status::deadline_exceeded("no INIT in time")),
            },
            Err(s) => Err(s),
        };
        match first {
            Ok(()) => {}
            Err(s) if s.code() == tonic::Code::PermissionDenied => {
                denied.insert(kind.clone());
            }
            Err(s) => return Err(WatchError::Watch(s)),
        }
    }
    Ok(denied)
}
