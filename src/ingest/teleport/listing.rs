//! A session's listing: proxies and auth servers first, then every agent
//! kind a page ahead, each page converted and folded into hosts while the
//! next is on its way; what the listing no longer shows, counted.
//!
//! Owns: the listing a session hands the fleet. Must not touch: the watch
//! that follows it (`source.rs`).

use super::state::{Teleport, TeleportConfig};

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tonic::transport::Channel;
use tonic::Code;
use tracing::{info, info_span, warn, Instrument};

use super::convert::{self, Item, Seen};
use super::heartbeat::Entry;
use super::hosts::{AuthOf, Hosts};
use super::http;
use super::pages::{fetch_agents, Lister, Page};
use crate::domain::{AgentService, Kind, RejectCode, Server};
use crate::fleet::Ingested;
use crate::ingest::session::rejected;
use crate::ingest::validate::reject;
use crate::ingest::watcher::WatchError;
use crate::proto::teleport::presence::presence_service_client::PresenceServiceClient;
use crate::proto::teleport::presence::{ListAuthServersRequest, ListProxyServersRequest};
use crate::proto::teleport::types;

/// A session's listing, validated: proxies and auth servers as they are,
/// agents folded into hosts.
pub(super) struct Listed {
    pub(super) proxies: Vec<Server>,
    pub(super) auth_servers: Vec<Server>,
    pub(super) hosts: Hosts,
    /// The hosts' agents and tunnels, for the resync.
    pub(super) agents: Vec<Server>,
    pub(super) tunnels: Vec<crate::domain::Tunnel>,
    pub(super) rejections: Vec<Ingested>,
}

/// Lists every confirmed kind: proxies and auth servers first (a page or
/// two: agent-mesh hosts need the proxies), then the agent kinds, each
/// fetched by a task of its own so that a page is converted and folded
/// while the next is on its way.
pub(super) async fn list_all(
    src: &mut Teleport,
    channel: Channel,
    lister: &Lister,
    rejected_kinds: &[Kind],
    agents_ok: &[AgentService],
    instances: &mut mpsc::Receiver<AuthOf>,
) -> Result<Listed, WatchError> {
    let (tx, mut pages) = mpsc::channel::<Page>(4);
    let _fetchers: Vec<_> = agents_ok
        .iter()
        .map(|k| {
            let span = info_span!("watcher.list", kind = k.as_str());
            let task = fetch_agents(lister.clone(), *k, src.cfg.page_size, tx.clone());
            AbortOnDropHandle::new(tokio::spawn(task.instrument(span)))
        })
        .collect();
    drop(tx);

    let cfg = &src.cfg;
    let max = cfg.max_message_bytes;
    let presence = PresenceServiceClient::new(channel)
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let server_lists = [Kind::Proxy, Kind::AuthServer]
        .into_iter()
        .filter(|k| !rejected_kinds.contains(k))
        .map(|kind| {
            let presence = presence.clone();
            async move { list_servers(cfg, presence, kind).await.map(|v| (kind, v)) }
                .instrument(info_span!("watcher.list", kind = %kind))
        });
    let servers = futures::future::try_join_all(server_lists).await?;
    let seen = Seen {
        now: src.clock.now(),
        live: false,
        limits: src.cfg.limits,
    };
    let stats = src.stats.clone();
    let (mut proxies, mut auth_servers, mut rejections) = (Vec::new(), Vec::new(), Vec::new());
    let mut keep = |kind: &'static str, item: Result<Item, crate::domain::Rejection>| match item {
        Ok(item) if item.kind() == kind => Some(item),
        Ok(item) => {
            let r = reject(
                RejectCode::UnknownKind,
                item.kind(),
                "",
                format!("listed under {kind}"),
            );
            rejections.push(rejected(&stats, r));
            None
        }
        Err(r) => {
            rejections.push(rejected(&stats, r));
            None
        }
    };
    for (kind, list) in servers {
        for s in list {
            let item = convert::Resource::Server(s).validate(&seen, &mut src.ttls);
            match keep(kind.as_str(), item) {
                Some(Item::Server(s)) if kind == Kind::Proxy => proxies.push(s),
                Some(Item::Server(s)) => auth_servers.push(s),
                _ => {}
            }
        }
    }
    let mut hosts = Hosts::new(proxies.iter().map(|s| s.name.clone()), &src.hosts);
    while let Some(page) = pages.recv().await {
        let (kind, page) = page?;
        for entry in page {
            let item = listed(entry, kind, &seen, &mut src.ttls);
            match keep(kind.as_str(), item) {
                Some(Item::Beat(b)) => hosts.load(b, &seen, &src.hosts),
                Some(Item::Agentless(name)) => hosts.put_agentless(name),
                _ => {}
            }
        }
    }
    let (agents, tunnels) = attach(src, &mut hosts, instances).await;
    Ok(Listed {
        proxies,
        auth_servers,
        hosts,
        agents,
        tunnels,
        rejections,
    })
}

/// One entry of an agent page, read into an item.
fn listed(
    entry: Entry,
    kind: AgentService,
    seen: &Seen,
    ttls: &mut convert::Ttls,
) -> Result<Item, crate::domain::Rejection> {
    match entry {
        Entry::Node(node) => match node.read() {
            Some(put) => convert::listed_node(&put, seen),
            // Read once already: not met.
            None => Err(reject(
                RejectCode::StreamProtocol,
                kind.as_str(),
                "",
                "a listed node could not be read again",
            )),
        },
        Entry::Decoded(r) => match r.resource {
            Some(r) => convert::Resource::of_page(r).validate(seen, ttls),
            None => Err(reject(
                RejectCode::EmptyEvent,
                kind.as_str(),
                "",
                "an empty list entry",
            )),
        },
    }
}

/// Each host's Auth before the snapshot is built. The poll started with
/// the lists and streams while the pages are folded; without an answer in
/// time, hosts keep the attachments last known (a host new since starts
/// with no Auth and gains it when the poll answers).
async fn attach(
    src: &Teleport,
    hosts: &mut Hosts,
    instances: &mut mpsc::Receiver<AuthOf>,
) -> (Vec<Server>, Vec<crate::domain::Tunnel>) {
    // Step durations, for the log.
    let folded = crate::clock::Stopwatch::start();
    let auth_of = match tokio::time::timeout(src.cfg.connect_timeout, instances.recv()).await {
        Ok(Some(m)) => m,
        _ => src.hosts.auth_of().clone(),
    };
    let waited = folded.elapsed();
    let (agents, tunnels) = hosts.attach(auth_of);
    tracing::debug!(
        hosts = agents.len(),
        instances_wait_ms = waited.as_millis() as u64,
        attach_ms = folded.elapsed().saturating_sub(waited).as_millis() as u64,
        "listing folded; hosts attached to their Auth"
    );
    (agents, tunnels)
}

/// Services the watch showed and a listing made since still lacks are
/// hidden from listings (the role's `*_labels` filter them; the watch does
/// not): counted, and said on `/readyz` and in the summary. The ones the
/// listing holds were new arrivals.
pub(super) fn hidden_from_listing(src: &mut Teleport, listed: &BTreeSet<(AgentService, String)>) {
    src.unlisted.retain(|k| !listed.contains(k));
    let hidden = src.unlisted.len() as u64;
    let before = src.stats.listing_hidden.swap(hidden, Ordering::Relaxed);
    if hidden > 0 && before != hidden {
        let kinds: BTreeSet<&str> = src.unlisted.iter().map(|(k, _)| k.as_str()).collect();
        warn!(hidden, kinds = ?kinds, "the listing hides services the watch shows: check the role's *_labels (node_labels, app_labels, db_labels, kubernetes_labels, windows_desktop_labels)");
    }
}

/// Proxies or auth servers through `PresenceService`, paged; `GET
/// /v2/proxies` or `/v2/authservers` where Auth is too old for it.
async fn list_servers(
    cfg: &TeleportConfig,
    mut presence: PresenceServiceClient<Channel>,
    kind: Kind,
) -> Result<Vec<types::ServerV2>, WatchError> {
    let mut out = Vec::new();
    let mut token = String::new();
    loop {
        let page = if kind == Kind::Proxy {
            presence
                .list_proxy_servers(ListProxyServersRequest {
                    page_size: cfg.page_size as i32,
                    page_token: token.clone(),
                })
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (r.servers, r.next_page_token)
                })
        } else {
            presence
                .list_auth_servers(ListAuthServersRequest {
                    page_size: cfg.page_size as i32,
                    page_token: token.clone(),
                })
                .await
                .map(|r| {
                    let r = r.into_inner();
                    (r.servers, r.next_page_token)
                })
        };
        match page {
            Ok((servers, next)) => {
                out.extend(servers);
                if next.is_empty() || next == token {
                    return Ok(out);
                }
                token = next;
            }
            Err(s) if s.code() == Code::Unimplemented && token.is_empty() => {
                info!(%kind, "PresenceService is not served; listing over HTTPS");
                return http::list_servers(&cfg.dialer, &cfg.addr, kind, cfg.max_message_bytes)
                    .await
                    .map_err(|e| WatchError::List {
                        kind: kind.to_string(),
                        detail: e.to_string(),
                    });
            }
            Err(s) => return Err(WatchError::list(kind, &s)),
        }
    }
}
