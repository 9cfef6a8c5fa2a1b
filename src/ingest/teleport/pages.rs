//! Agent services through `ListResources`, a page ahead. Teleport pages
//! one request at a time: the key of the next page is in the answer. Each
//! answer is therefore taken as bytes, its `NextKey` read without decoding
//! the resources, and the next request sent before they are read, so
//! the Auth server prepares page n + 1 while Lifeline reads page n
//! instead of each side waiting for the other. At most one request per
//! kind is ahead; a page too large for a message is asked for again in
//! halves, as Teleport's own clients do. A page's nodes are read where
//! they lie in its bytes (`heartbeat::page_entries`), its other entries
//! decoded.

use std::collections::BTreeSet;
use std::marker::PhantomData;

use prost::bytes::Bytes;
use prost::Message;
use tokio::sync::mpsc;
use tokio_util::task::AbortOnDropHandle;
use tonic::codec::{DecodeBuf, Decoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::{GrpcMethod, Request, Status};
use tracing::{debug, Instrument};

use super::call::Call;
use super::convert;
use super::heartbeat::{page_entries, Entry};
use crate::domain::AgentService;
use crate::ingest::watcher::WatchError;
use crate::proto::teleport::auth as tp;

/// One page of an agent kind, or why listing it failed.
pub(super) type Page = Result<(AgentService, Vec<Entry>), WatchError>;

const SERVICE: &str = "proto.AuthService";
const METHOD: &str = "ListResources";
const PATH: &str = "/proto.AuthService/ListResources";

/// Calls `ListResources` on a connection, answers as bytes.
#[derive(Clone)]
pub(super) struct Lister {
    channel: Channel,
    /// `cluster.max_message_bytes`, both ways.
    max: usize,
}

impl Lister {
    pub(super) fn new(channel: Channel, max: usize) -> Lister {
        Lister { channel, max }
    }

    async fn call(self, req: tp::ListResourcesRequest) -> Result<Bytes, Status> {
        let mut grpc = ready_client(self.channel, self.max).await?;
        let answer = grpc
            .unary(
                method(req, METHOD),
                PathAndQuery::from_static(PATH),
                Answer::default(),
            )
            .await?;
        Ok(answer.into_inner())
    }
}

/// A client of `channel` for an Auth API method called with a codec of
/// Lifeline's own (the generated client fixes its codec), with the
/// generated clients' message limits, once the channel can take a call.
pub(super) async fn ready_client(
    channel: Channel,
    max_message_bytes: usize,
) -> Result<tonic::client::Grpc<Channel>, Status> {
    let mut grpc = tonic::client::Grpc::new(channel)
        .max_decoding_message_size(max_message_bytes)
        .max_encoding_message_size(max_message_bytes);
    grpc.ready()
        .await
        .map_err(|e| Status::unavailable(format!("the connection to Auth is not ready: {e}")))?;
    Ok(grpc)
}

/// `message` as a call of `AuthService`'s `method`, named as the
/// generated client names it.
pub(super) fn method<T>(message: T, method: &'static str) -> Request<T> {
    let mut req = Request::new(message);
    req.extensions_mut()
        .insert(GrpcMethod::new(SERVICE, method));
    req
}

/// `ListResources` with each answer kept as its bytes.
type Answer = Call<tp::ListResourcesRequest, Whole<Bytes>>;

/// What an answer taken whole (a split of tonic's buffer, not a copy) is
/// read into: its bytes as they are, or a message decoded from the one
/// contiguous slice, where prost reads varints and skips unread fields in
/// place (through tonic's buffer each of those is a call).
pub(super) trait FromWhole: Sized {
    fn from_whole(bytes: Bytes) -> Result<Self, Status>;
}

impl FromWhole for Bytes {
    fn from_whole(bytes: Bytes) -> Result<Bytes, Status> {
        Ok(bytes)
    }
}

/// A decoder handing each answer whole to `T`.
pub(super) struct Whole<T>(PhantomData<T>);

impl<T> Default for Whole<T> {
    fn default() -> Self {
        Whole(PhantomData)
    }
}

impl<T: FromWhole + Send + 'static> Decoder for Whole<T> {
    type Item = T;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<T>, Status> {
        use prost::bytes::Buf;
        T::from_whole(buf.copy_to_bytes(buf.remaining())).map(Some)
    }
}

/// `ListResourcesResponse` with only its `NextKey`: decoding it skips the
/// resources (a length and a jump each).
#[derive(Clone, PartialEq, prost::Message)]
struct NextKey {
    #[prost(string, tag = "2")]
    next_key: String,
}

pub(super) fn undecodable(e: prost::DecodeError) -> Status {
    Status::internal(format!("failed to decode Protobuf message: {e}"))
}

/// A page the message limit refused, on either side: tonic's decoder says
/// OutOfRange ("decoded message length too large"), a server that cannot
/// send it ResourceExhausted.
fn too_large(s: &Status) -> bool {
    matches!(
        s.code(),
        tonic::Code::OutOfRange | tonic::Code::ResourceExhausted
    )
}

fn request(kind: AgentService, limit: u32, key: &str) -> tp::ListResourcesRequest {
    tp::ListResourcesRequest {
        resource_type: kind.as_str().to_string(),
        namespace: "default".to_string(),
        limit: limit as i32,
        start_key: key.to_string(),
    }
}

/// One agent kind through `ListResources`, paged, each page sent on.
pub(super) async fn fetch_agents(
    lister: Lister,
    kind: AgentService,
    page_size: u32,
    pages: mpsc::Sender<Page>,
) {
    let mut key = String::new();
    let mut limit = page_size.max(1);
    let mut ahead: Option<AbortOnDropHandle<Result<Bytes, Status>>> = None;
    loop {
        let answer = match ahead.take() {
            Some(call) => call
                .await
                .unwrap_or_else(|e| Err(Status::internal(format!("the listing call ended: {e}")))),
            None => lister.clone().call(request(kind, limit, &key)).await,
        };
        let bytes = match answer {
            Ok(b) => b,
            Err(s) if too_large(&s) && limit > 1 => {
                limit /= 2;
                debug!(kind = kind.as_str(), limit, error = %s.message(), "a listing page did not fit in a message; asking for smaller pages");
                continue;
            }
            Err(s) if too_large(&s) => {
                let after = if key.is_empty() {
                    "the first".to_string()
                } else {
                    format!("the one after {key:?}")
                };
                let e = WatchError::List {
                    kind: kind.as_str().to_string(),
                    detail: format!(
                        "{after} alone does not fit in cluster.max_message_bytes ({} bytes): {}",
                        lister.max,
                        s.message()
                    ),
                };
                let _ = pages.send(Err(e)).await;
                return;
            }
            Err(s) => {
                let _ = pages.send(Err(WatchError::list(kind.as_str(), &s))).await;
                return;
            }
        };
        let next = match NextKey::decode(bytes.clone()) {
            Ok(n) => n.next_key,
            Err(e) => {
                let e = WatchError::list(kind.as_str(), &undecodable(e));
                let _ = pages.send(Err(e)).await;
                return;
            }
        };
        let last = next.is_empty() || next == key;
        if !last {
            let call = lister.clone().call(request(kind, limit, &next));
            ahead = Some(AbortOnDropHandle::new(tokio::spawn(call.in_current_span())));
        }
        let entries = match page_entries(&bytes) {
            Ok(e) => e,
            Err(e) => {
                let e = WatchError::list(kind.as_str(), &undecodable(e));
                let _ = pages.send(Err(e)).await;
                return;
            }
        };
        key = next;
        if pages.send(Ok((kind, entries))).await.is_err() || last {
            return;
        }
    }
}

/// Every service name of `kinds` a listing holds now.
pub(super) async fn list_names(
    lister: Lister,
    kinds: BTreeSet<AgentService>,
    page_size: u32,
) -> Result<BTreeSet<(AgentService, String)>, WatchError> {
    let (tx, mut rx) = mpsc::channel::<Page>(4);
    let _fetchers: Vec<_> = kinds
        .iter()
        .map(|k| {
            let task = fetch_agents(lister.clone(), *k, page_size, tx.clone());
            AbortOnDropHandle::new(tokio::spawn(task.in_current_span()))
        })
        .collect();
    drop(tx);
    let mut names = BTreeSet::new();
    while let Some(page) = rx.recv().await {
        let (kind, page) = page?;
        for e in page {
            let name = match e {
                Entry::Node(n) => n.read().map(|put| put.name.to_string()),
                Entry::Decoded(r) => r
                    .resource
                    .and_then(|r| convert::Resource::of_page(r).name()),
            };
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                names.insert((kind, name));
            }
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_key_is_read_without_the_resources() {
        let page = tp::ListResourcesResponse {
            resources: vec![tp::PaginatedResource::default(); 3],
            next_key: "node-0042".into(),
            total_count: 7,
        };
        let bytes = Bytes::from(page.encode_to_vec());
        assert_eq!(
            NextKey::decode(bytes.clone()).unwrap().next_key,
            "node-0042"
        );
        assert_eq!(tp::ListResourcesResponse::decode(bytes).unwrap(), page);
        // The last page says none.
        let last = tp::ListResourcesResponse::default().encode_to_vec();
        assert_eq!(NextKey::decode(Bytes::from(last)).unwrap().next_key, "");
        // Bytes that are not a message are an error, not a panic.
        assert!(NextKey::decode(Bytes::from_static(&[0x0a, 0xff])).is_err());
    }
}
