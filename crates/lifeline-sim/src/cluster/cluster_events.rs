//! The simulated cluster as Lifeline's open `ClusterEvents` protocol
//! shows it: the watch (INIT, then every change, with the kinds the spec
//! refuses left out) and the paged listing, from the cluster's state.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};
use tracing::debug;

use super::{page_of, Inner, Subscription};
use lifeline::domain::Kind;
use lifeline::proto::v1 as pb;
use lifeline::proto::v1::cluster_events_server::ClusterEvents;

/// The simulated cluster's `ClusterEvents` server.
pub(super) struct Service {
    pub(super) inner: Arc<Inner>,
}

fn event_kind(ev: &pb::Event) -> Option<Kind> {
    match &ev.resource {
        Some(pb::event::Resource::Server(s)) => s.kind.parse().ok(),
        Some(pb::event::Resource::Tunnel(_)) => Some(Kind::TunnelConnection),
        _ => None,
    }
}

#[tonic::async_trait]
impl ClusterEvents for Service {
    type WatchEventsStream = ReceiverStream<Result<pb::Event, Status>>;

    async fn watch_events(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchEventsStream>, Status> {
        if !self.inner.accepting.load(Ordering::SeqCst) {
            return Err(Status::unavailable("cluster is not accepting watches"));
        }
        let req = req.into_inner();
        let mut requested = Vec::new();
        for k in &req.kinds {
            match k.parse::<Kind>() {
                Ok(k) => requested.push(k),
                Err(_) if req.allow_rejected_kinds => {}
                Err(e) => return Err(Status::invalid_argument(e.to_string())),
            }
        }
        let rejected: Vec<Kind> = self
            .inner
            .rejected
            .read()
            .map(|r| r.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|k| requested.contains(k))
            .collect();
        if !rejected.is_empty() && !req.allow_rejected_kinds {
            return Err(Status::invalid_argument(format!(
                "kinds not supported: {rejected:?}"
            )));
        }
        let mut unknown: Vec<String> = req
            .kinds
            .iter()
            .filter(|k| k.parse::<Kind>().is_err())
            .cloned()
            .collect();
        unknown.extend(rejected.iter().map(|k| k.as_str().to_string()));
        let wanted: HashSet<Kind> = requested
            .into_iter()
            .filter(|k| !rejected.contains(k))
            .collect();
        let Subscription {
            events: mut sub,
            mut kill,
            ..
        } = self.inner.subscribe();
        let (tx, rx) = mpsc::channel(1024);
        let init = pb::Event {
            r#type: pb::EventType::Init as i32,
            resource: if self.inner.spec.legacy_init {
                None
            } else {
                Some(pb::event::Resource::Status(pb::WatchStatus {
                    rejected_kinds: unknown,
                }))
            },
        };
        let stop = self.inner.stop.clone();
        let inner = self.inner.clone();
        debug!(watcher = %req.watcher_name, "sim: watch opened");
        tokio::spawn(async move {
            if tx.send(Ok(init)).await.is_err() {
                return;
            }
            loop {
                let ev = tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = kill.changed() => {
                        let _ = tx.send(Err(Status::unavailable("stream killed by the simulator"))).await;
                        return;
                    }
                    ev = sub.recv() => ev,
                };
                match ev {
                    Ok(ev) => {
                        // Raw injected events (no kind) pass through.
                        if event_kind(&ev).is_some_and(|k| !wanted.contains(&k)) {
                            inner.taken.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                        // The last receiver of a broadcast slot owns its
                        // event: no copy unless several streams are open.
                        if tx.send(Ok(Arc::unwrap_or_clone(ev))).await.is_err() {
                            return;
                        }
                        inner.delivered.fetch_add(1, Ordering::SeqCst);
                        inner.taken.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx
                            .send(Err(Status::aborted(format!(
                                "watcher fell behind by {n} events; resync"
                            ))))
                            .await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    async fn list_resources(
        &self,
        req: Request<pb::ListResourcesRequest>,
    ) -> Result<Response<pb::ListResourcesResponse>, Status> {
        let req = req.into_inner();
        let kind: Kind = req
            .kind
            .parse()
            .map_err(|e: lifeline::domain::UnknownKind| Status::invalid_argument(e.to_string()))?;
        let page = req.page_size.clamp(1, 10_000) as usize;
        let st = self.inner.state.lock().await;
        let mut resp = pb::ListResourcesResponse::default();
        let after = req.page_token;
        if kind == Kind::TunnelConnection {
            let from = if after.is_empty() {
                std::ops::Bound::Unbounded
            } else {
                std::ops::Bound::Excluded(&after)
            };
            let tunnels = st
                .tunnels
                .range::<String, _>((from, std::ops::Bound::Unbounded))
                .map(|(_, t)| t.clone());
            (resp.tunnels, resp.next_page_token) = page_of(tunnels, page, |t| t.name.clone());
        } else {
            let from = if after.is_empty() {
                std::ops::Bound::Included((kind, String::new()))
            } else {
                std::ops::Bound::Excluded((kind, after))
            };
            let servers = st
                .servers
                .range((from, std::ops::Bound::Unbounded))
                .take_while(|((k, _), _)| *k == kind)
                .map(|(_, s)| s.clone());
            (resp.servers, resp.next_page_token) = page_of(servers, page, |s| s.name.clone());
        }
        Ok(Response::new(resp))
    }
}
