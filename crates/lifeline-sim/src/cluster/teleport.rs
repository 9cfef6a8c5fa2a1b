//! The simulated cluster as Teleport's Auth API shows it, over mutual TLS:
//! `proto.AuthService` (WatchEvents, ListResources, GetInstances),
//! `teleport.presence.v1.PresenceService` (unless the spec plays an older
//! Auth, which then lists over `GET /v2/...`), from the same state and
//! heartbeats as the `ClusterEvents` face. Agents are nodes named by host
//! ID; with proxy peering their `ProxyIDs` are their tunnels; extra app
//! services can run on an agent's host. The messages are built in
//! [`shapes`], a `ListResources` page in [`listing`]; here are the
//! services, the events and the identity file.

mod listing;
mod shapes;

use shapes::{header, instance, node, put, server_v2, service_event, to_json};
pub use shapes::{DeleteShape, SimService};

use std::collections::HashSet;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::info;

use super::{Inner, SimCluster};
use lifeline::domain::Kind;
use lifeline::proto::teleport::auth::auth_service_server::{AuthService, AuthServiceServer};
use lifeline::proto::teleport::auth::{self as tp, event::Resource};
use lifeline::proto::teleport::presence::presence_service_server::{
    PresenceService, PresenceServiceServer,
};
use lifeline::proto::teleport::presence::{
    ListAuthServersRequest, ListAuthServersResponse, ListProxyServersRequest,
    ListProxyServersResponse,
};
use lifeline::proto::teleport::types;
use lifeline::proto::v1 as pb;

/// How the simulated cluster plays Teleport.
#[derive(Clone, Debug)]
pub struct TeleportSpec {
    pub cluster_name: String,
    /// Proxy peering: agents' `ProxyIDs` name their tunnels. Off: agent
    /// mesh, `ProxyIDs` empty.
    pub proxy_peering: bool,
    /// Serve as a proxy's TLS routing does: the Auth route by ALPN, and
    /// the connection upgrade on the web address.
    pub tls_routing: bool,
    /// With `tls_routing`: a layer-7 load balancer in front of the proxy.
    /// It ends TLS (with the web certificate, `http/1.1` only) and passes
    /// only the connection upgrade.
    pub behind_balancer: bool,
    /// Serve `PresenceService`; off plays an older Auth (HTTPS lists).
    pub presence: bool,
    /// Registered OpenSSH hosts (`node` of SubKind `openssh`, no expiry)
    /// listed after the agents' nodes: hosts without an agent.
    pub agentless_nodes: usize,
    /// Teleport kinds the identity's role may not read (say
    /// `windows_desktop_service`): left out of INIT's WatchStatus, and
    /// PermissionDenied to `ListResources`.
    pub denied_kinds: Vec<String>,
    /// Database services, one per entry, each carrying a downloaded cloud
    /// CA bundle of that many bytes (`DatabaseStatusV3.CACert`; ~150 KB
    /// for a cloud provider's bundle). Served by the agents' hosts in turn.
    pub db_servers: Vec<usize>,
    /// An older Auth's watch permissions: a denied kind refuses the whole
    /// watch, even with partial success asked for.
    pub whole_watch_denied: bool,
    /// Machine ID's renewal: the identity file written by
    /// [`SimCluster::write_identity`] holds a certificate valid for `.1`
    /// and is written again every `.0` (tbot: 20 minutes, 1 hour). The
    /// Auth checks certificates against the cluster's clock.
    pub identity_renewal: Option<(Duration, Duration)>,
    /// A role whose `node_labels` do not match the first this many agents:
    /// `ListResources` leaves their nodes out, the watch still shows their
    /// heartbeats.
    pub hidden_from_listing: usize,
}

impl Default for TeleportSpec {
    fn default() -> Self {
        TeleportSpec {
            cluster_name: "sim.teleport".into(),
            proxy_peering: true,
            tls_routing: false,
            behind_balancer: false,
            presence: true,
            agentless_nodes: 0,
            denied_kinds: Vec::new(),
            db_servers: Vec::new(),
            whole_watch_denied: false,
            hidden_from_listing: 0,
            identity_renewal: None,
        }
    }
}

const AGENT_KINDS: [&str; 5] = [
    "node",
    "app_server",
    "db_server",
    "kube_server",
    "windows_desktop_service",
];

impl SimCluster {
    /// An app service on `host`, heartbeating once now (`expires = now +
    /// ttl`). Call again to heartbeat.
    pub async fn put_app(&self, host: &str, name: &str, ttl: Duration) {
        self.put_service(SimService::App, host, name, ttl).await;
    }

    /// A service of `kind` on `host`, heartbeating once now (`expires =
    /// now + ttl`). Call again to heartbeat.
    pub async fn put_service(&self, kind: SimService, host: &str, name: &str, ttl: Duration) {
        let expires = self.inner.clock.now().saturating_add(ttl);
        let proxies = self.peering_proxies(host).await;
        self.inner
            .state
            .lock()
            .await
            .services
            .insert((kind, host.to_string(), name.to_string()), expires);
        self.emit_teleport(put(service_event(kind, host, name, Some(expires), proxies)));
    }

    /// Deletes a service, in one of the shapes Teleport sends.
    pub async fn delete_service(
        &self,
        kind: SimService,
        host: &str,
        name: &str,
        shape: DeleteShape,
    ) {
        let removed = self.inner.state.lock().await.services.remove(&(
            kind,
            host.to_string(),
            name.to_string(),
        ));
        if removed.is_some() {
            let r = match shape {
                DeleteShape::Header => header(kind.kind(), name, host),
                DeleteShape::Typed => service_event(kind, host, name, None, Vec::new()),
            };
            self.emit_teleport(tp::Event {
                r#type: tp::Operation::Delete as i32,
                resource: Some(r),
            });
        }
    }

    /// A `ClusterEvents` event as this cluster's Teleport face would send
    /// it, if at all (the ingest benchmark builds its stream ahead, so the
    /// translation is not timed).
    pub async fn as_teleport(&self, ev: &pb::Event) -> Option<tp::Event> {
        Service {
            inner: self.inner.clone(),
        }
        .translate(ev)
        .await
    }

    /// The broadcast behind Teleport watch streams, for pre-built events
    /// (see [`SimCluster::sender`]).
    pub fn teleport_sender(&self) -> broadcast::Sender<Arc<tp::Event>> {
        self.inner.teleport_events.clone()
    }

    /// Publishes a raw Teleport event to Teleport watch streams (bad-input
    /// tests).
    pub fn inject_teleport(&self, ev: tp::Event) {
        self.emit_teleport(ev);
    }

    fn emit_teleport(&self, ev: tp::Event) {
        self.inner.emitted.fetch_add(1, Ordering::SeqCst);
        let _ = self.inner.teleport_events.send(Arc::new(ev));
    }

    async fn peering_proxies(&self, agent: &str) -> Vec<String> {
        if self
            .inner
            .spec
            .teleport
            .as_ref()
            .is_some_and(|t| t.proxy_peering)
        {
            self.agent_proxies(agent).await
        } else {
            Vec::new()
        }
    }

    /// Writes an identity file the cluster accepts (`tctl auth sign
    /// --format=file` layout). With `identity_renewal`, a short-lived one,
    /// written again on its period until the cluster stops, as `tbot`
    /// does.
    pub fn write_identity(&self, path: &std::path::Path) -> std::io::Result<()> {
        let renewal = self
            .inner
            .spec
            .teleport
            .as_ref()
            .and_then(|t| t.identity_renewal);
        let Some((every, ttl)) = renewal else {
            let pki = self
                .pki()
                .ok_or_else(|| std::io::Error::other("not a Teleport simulation"))?;
            let text = pki.identity("lifeline").map_err(std::io::Error::other)?;
            return write_private(path, &text);
        };
        self.renew_identity(path, ttl)?;
        let (sim, path) = (self.clone(), path.to_path_buf());
        let stop = self.inner.stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(every) => {}
                }
                if let Err(e) = sim.renew_identity(&path, ttl) {
                    tracing::warn!(error = %e, path = %path.display(), "sim: identity not renewed");
                }
            }
        });
        Ok(())
    }

    fn renew_identity(&self, path: &std::path::Path, ttl: Duration) -> std::io::Result<()> {
        let pki = self
            .pki()
            .ok_or_else(|| std::io::Error::other("not a Teleport simulation"))?;
        let text = pki
            .short_lived_identity("lifeline", ttl)
            .map_err(std::io::Error::other)?;
        // Written whole and renamed into place, as tbot writes.
        let tmp = path.with_extension("tmp");
        write_private(&tmp, &text)?;
        std::fs::rename(&tmp, path)
    }

    pub fn pki(&self) -> Option<&crate::pki::SimPki> {
        self.inner.pki.as_deref()
    }
}

/// Writes `text` readable by its owner only (it holds a private key).
pub fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    opts.open(path)?.write_all(text.as_bytes())
}

pub(super) struct Service {
    pub(super) inner: Arc<Inner>,
}

impl Service {
    fn spec(&self) -> TeleportSpec {
        self.inner.spec.teleport.clone().unwrap_or_default()
    }

    /// One ClusterEvents event as what Teleport would send, if anything.
    async fn translate(&self, ev: &pb::Event) -> Option<tp::Event> {
        let peering = self.spec().proxy_peering;
        let op = pb::EventType::try_from(ev.r#type).ok()?;
        match (op, ev.resource.as_ref()?) {
            (pb::EventType::Put, pb::event::Resource::Server(s))
                if s.kind == Kind::Agent.as_str() =>
            {
                let proxies = if peering {
                    let st = self.inner.state.lock().await;
                    st.proxies_of(&s.name)
                } else {
                    Vec::new()
                };
                Some(put(Resource::Server(Box::new(node(s, proxies)))))
            }
            (pb::EventType::Put, pb::event::Resource::Server(s)) => {
                Some(put(Resource::Server(Box::new(server_v2(s)))))
            }
            (pb::EventType::Delete, pb::event::Resource::Server(s)) => {
                let kind = if s.kind == Kind::Agent.as_str() {
                    "node"
                } else {
                    s.kind.as_str()
                };
                Some(tp::Event {
                    r#type: tp::Operation::Delete as i32,
                    resource: Some(header(kind, &s.name, "")),
                })
            }
            // A tunnel moved: with peering, the agent's node heartbeat
            // carries its new ProxyIDs; in agent mesh Teleport says nothing.
            (_, pb::event::Resource::Tunnel(t)) if peering => {
                let st = self.inner.state.lock().await;
                let s = st.servers.get(&(Kind::Agent, t.agent.clone()))?;
                Some(put(Resource::Server(Box::new(node(
                    s,
                    st.proxies_of(&t.agent),
                )))))
            }
            _ => None,
        }
    }
}

/// Kinds the simulated Auth refuses, in Teleport's names.
fn refused(inner: &Inner) -> HashSet<String> {
    let mut out = HashSet::new();
    for k in inner.rejected.read().map(|r| r.clone()).unwrap_or_default() {
        match k {
            Kind::Proxy | Kind::AuthServer => {
                out.insert(k.as_str().to_string());
            }
            Kind::Agent => out.extend(AGENT_KINDS.iter().map(|s| s.to_string())),
            Kind::TunnelConnection => {}
        }
    }
    if let Some(t) = &inner.spec.teleport {
        out.extend(t.denied_kinds.iter().cloned());
    }
    out
}

#[tonic::async_trait]
impl AuthService for Service {
    type WatchEventsStream = ReceiverStream<Result<tp::Event, Status>>;
    type GetInstancesStream = std::pin::Pin<
        Box<dyn tokio_stream::Stream<Item = Result<types::InstanceV1, Status>> + Send>,
    >;

    async fn watch_events(
        &self,
        req: Request<tp::Watch>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        if !self.inner.accepting.load(Ordering::SeqCst) {
            return Err(Status::unavailable("cluster is not accepting watches"));
        }
        let req = req.into_inner();
        let refused = refused(&self.inner);
        let confirmed: Vec<types::WatchKind> = req
            .kinds
            .iter()
            .filter(|k| !refused.contains(&k.kind))
            .cloned()
            .collect();
        if confirmed.len() < req.kinds.len()
            && (!req.allow_partial_success || self.spec().whole_watch_denied)
        {
            return Err(Status::permission_denied("access denied to some kinds"));
        }
        // A handful of kinds: a scan costs less per event than hashing.
        let wanted: Vec<String> = confirmed.iter().map(|k| k.kind.clone()).collect();
        let super::Subscription {
            events: mut sub,
            teleport: mut extra,
            mut kill,
        } = self.inner.subscribe();
        let (tx, rx) = mpsc::channel(1024);
        let init = tp::Event {
            r#type: tp::Operation::Init as i32,
            resource: if self.inner.spec.legacy_init {
                None
            } else {
                Some(Resource::WatchStatus(Box::new(types::WatchStatusV1 {
                    kind: "watch_status".into(),
                    version: "v1".into(),
                    spec: Some(types::WatchStatusSpecV1 { kinds: confirmed }),
                    ..Default::default()
                })))
            },
        };
        let svc = Service {
            inner: self.inner.clone(),
        };
        let stop = self.inner.stop.clone();
        tokio::spawn(async move {
            if tx.send(Ok(init)).await.is_err() {
                return;
            }
            let inner = svc.inner.clone();
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = kill.changed() => {
                        let _ = tx.send(Err(Status::unavailable("stream killed by the simulator"))).await;
                        return;
                    }
                    ev = sub.recv() => match ev {
                        Ok(ev) => svc.translate(&ev).await,
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            let _ = tx.send(Err(Status::aborted(format!("watcher fell behind by {n} events; resync")))).await;
                            return;
                        }
                        Err(broadcast::error::RecvError::Closed) => return,
                    },
                    ev = extra.recv() => match ev {
                        Ok(ev) => Some(Arc::unwrap_or_clone(ev)),
                        Err(_) => return,
                    },
                };
                let ev = ev.filter(|e| event_kind(e).is_none_or(|k| wanted.iter().any(|w| w == k)));
                if let Some(ev) = ev {
                    if tx.send(Ok(ev)).await.is_err() {
                        return;
                    }
                    inner.delivered.fetch_add(1, Ordering::SeqCst);
                }
                inner.taken.fetch_add(1, Ordering::SeqCst);
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_resources(
        &self,
        req: Request<tp::ListResourcesRequest>,
    ) -> Result<Response<tp::ListResourcesResponse>, Status> {
        let req = req.into_inner();
        if refused(&self.inner).contains(&req.resource_type) {
            return Err(Status::permission_denied(format!(
                "access denied to {}",
                req.resource_type
            )));
        }
        let page = req.limit.clamp(1, 10_000) as usize;
        let spec = self.spec();
        let st = self.inner.state.lock().await;
        listing::page(&st, &spec, &req.resource_type, &req.start_key, page).map(Response::new)
    }

    async fn get_instances(
        &self,
        _req: Request<types::InstanceFilter>,
    ) -> Result<Response<Self::GetInstancesStream>, Status> {
        // Streamed a chunk at a time, each read under the lock alone, as
        // Teleport streams from its cache: the listings go on meanwhile.
        // Whole chunks through the channel: one hand-over per chunk, not
        // per instance.
        let inner = self.inner.clone();
        let (tx, rx) = mpsc::channel::<Vec<types::InstanceV1>>(2);
        tokio::spawn(async move {
            let mut after: Option<String> = None;
            loop {
                let chunk: Vec<types::InstanceV1> = {
                    let st = inner.state.lock().await;
                    let from = match &after {
                        Some(a) => Bound::Excluded((Kind::Agent, a.clone())),
                        None => Bound::Included((Kind::Agent, String::new())),
                    };
                    st.servers
                        .range((from, Bound::Unbounded))
                        .take_while(|((k, _), _)| *k == Kind::Agent)
                        .take(INSTANCES_CHUNK)
                        .map(|((_, name), s)| instance(name, s))
                        .collect()
                };
                let Some(last) = chunk.last() else { return };
                after = last
                    .header
                    .as_ref()
                    .and_then(|h| h.metadata.as_ref())
                    .map(|m| m.name.clone());
                if tx.send(chunk).await.is_err() {
                    return;
                }
            }
        });
        use futures::StreamExt;
        let instances = ReceiverStream::new(rx)
            .flat_map(|chunk| futures::stream::iter(chunk.into_iter().map(Ok)));
        Ok(Response::new(Box::pin(instances)))
    }
}

fn event_kind(e: &tp::Event) -> Option<&str> {
    match e.resource.as_ref()? {
        Resource::ResourceHeader(h) => Some(&h.kind),
        Resource::Server(s) => Some(&s.kind),
        Resource::AppServer(_) => Some("app_server"),
        Resource::DatabaseServer(_) => Some("db_server"),
        Resource::KubernetesServer(_) => Some("kube_server"),
        Resource::WindowsDesktopService(_) => Some("windows_desktop_service"),
        Resource::WatchStatus(_) => None,
    }
}

impl Service {
    async fn servers(
        &self,
        kind: Kind,
        size: i32,
        token: &str,
    ) -> Result<(Vec<types::ServerV2>, String), Status> {
        if refused(&self.inner).contains(kind.as_str()) {
            return Err(Status::permission_denied(format!(
                "access denied to {kind}"
            )));
        }
        let page = size.clamp(1, 10_000) as usize;
        let st = self.inner.state.lock().await;
        let servers = st
            .servers
            .range((kind, token.to_string())..)
            .take_while(|((k, _), _)| *k == kind)
            .filter(|((_, n), _)| n != token)
            .map(|(_, s)| server_v2(s));
        Ok(super::page_of(servers, page, |s| {
            s.metadata
                .as_ref()
                .map(|m| m.name.clone())
                .unwrap_or_default()
        }))
    }

    /// Every proxy or auth server, for `GET /v2/...`.
    pub(super) async fn all_servers(&self, kind: Kind) -> Vec<types::ServerV2> {
        let st = self.inner.state.lock().await;
        st.servers
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|(_, s)| server_v2(s))
            .collect()
    }
}

#[tonic::async_trait]
impl PresenceService for Service {
    async fn list_proxy_servers(
        &self,
        req: Request<ListProxyServersRequest>,
    ) -> Result<Response<ListProxyServersResponse>, Status> {
        let r = req.into_inner();
        let (servers, next_page_token) = self
            .servers(Kind::Proxy, r.page_size, &r.page_token)
            .await?;
        Ok(Response::new(ListProxyServersResponse {
            servers,
            next_page_token,
        }))
    }

    async fn list_auth_servers(
        &self,
        req: Request<ListAuthServersRequest>,
    ) -> Result<Response<ListAuthServersResponse>, Status> {
        let r = req.into_inner();
        let (servers, next_page_token) = self
            .servers(Kind::AuthServer, r.page_size, &r.page_token)
            .await?;
        Ok(Response::new(ListAuthServersResponse {
            servers,
            next_page_token,
        }))
    }
}

/// The routers serving the Teleport face: gRPC, and HTTPS lists.
pub(super) fn routers(inner: Arc<Inner>) -> (tonic::transport::server::Router, axum::Router) {
    let max = inner.spec.max_message_bytes;
    let spec = inner.spec.teleport.clone().unwrap_or_default();
    let auth = AuthServiceServer::new(Service {
        inner: inner.clone(),
    })
    .max_encoding_message_size(max)
    .max_decoding_message_size(max);
    let mut builder = tonic::transport::Server::builder();
    let router = if spec.presence {
        let presence = PresenceServiceServer::new(Service {
            inner: inner.clone(),
        })
        .max_encoding_message_size(max)
        .max_decoding_message_size(max);
        builder.add_service(auth).add_service(presence)
    } else {
        builder.add_service(auth)
    };
    let http = axum::Router::new()
        .route("/v2/proxies", axum::routing::get(http_list))
        .route("/v2/authservers", axum::routing::get(http_list))
        .with_state(inner);
    info!(
        peering = spec.proxy_peering,
        presence = spec.presence,
        tls_routing = spec.tls_routing,
        "sim: serving Teleport's Auth API over mutual TLS"
    );
    (router, http)
}

async fn http_list(
    axum::extract::State(inner): axum::extract::State<Arc<Inner>>,
    uri: axum::http::Uri,
) -> axum::Json<Vec<serde_json::Value>> {
    let kind = if uri.path() == "/v2/proxies" {
        Kind::Proxy
    } else {
        Kind::AuthServer
    };
    let list = Service { inner }.all_servers(kind).await;
    axum::Json(list.iter().map(to_json).collect())
}

/// Instances read per hold of the state's lock.
const INSTANCES_CHUNK: usize = 1024;
