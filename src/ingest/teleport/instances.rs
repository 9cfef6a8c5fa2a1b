//! Which Auth instance last saw each host: `GetInstances`, polled. The
//! stream carries every instance whole (version, services, hostname, last
//! seen, labels); Lifeline needs two strings of each, so its messages are
//! decoded into a type that names only those and prost skips the rest
//! without building it.

use std::sync::Arc;
use std::time::Duration;

use prost::bytes::Bytes;
use tokio::sync::mpsc;
use tonic::codegen::http::uri::PathAndQuery;
use tonic::transport::Channel;
use tonic::Status;
use tracing::warn;

use super::call::Call;
use super::hosts::AuthOf;
use super::pages::{method, ready_client, undecodable, FromWhole, Whole};
use crate::ingest::dial::explain;
use crate::proto::teleport::types;

/// Instances read from one `GetInstances` stream, at most.
const MAX_INSTANCES: usize = 1_000_000;
/// Auth IDs shared among hosts by one `GetInstances` answer; a cluster
/// has a handful, so a hostile answer cannot make the search long.
const MAX_AUTH_IDS: usize = 64;

const PATH: &str = "/proto.AuthService/GetInstances";

/// `types.InstanceV1` as far as Lifeline reads it: `Header.Metadata.Name`
/// and `Spec.AuthID` (the field numbers of Teleport's `types.proto`).
#[derive(Clone, PartialEq, prost::Message)]
struct Instance {
    #[prost(message, optional, tag = "1")]
    header: Option<Header>,
    #[prost(message, optional, tag = "2")]
    spec: Option<Spec>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Header {
    #[prost(message, optional, tag = "4")]
    metadata: Option<Metadata>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Metadata {
    #[prost(string, tag = "1")]
    name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Spec {
    #[prost(string, tag = "4")]
    auth_id: String,
}

/// Each streamed instance decoded from its bytes taken whole.
impl FromWhole for Instance {
    fn from_whole(bytes: Bytes) -> Result<Instance, Status> {
        use prost::Message;
        Instance::decode(bytes.as_ref()).map_err(undecodable)
    }
}

/// Polls `GetInstances` every `every`, sending host ID → Auth ID. A
/// failure is logged (once per kind of failure) and retried next time.
pub(super) async fn poll_instances(
    channel: Channel,
    max_message_bytes: usize,
    every: Duration,
    tx: mpsc::Sender<AuthOf>,
) {
    let mut last_error = String::new();
    // Room for as many hosts as the last answer named.
    let mut last_len = 0;
    loop {
        match instances(channel.clone(), max_message_bytes, last_len).await {
            Ok(m) => {
                last_error.clear();
                last_len = m.len();
                if tx.send(m).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                if e != last_error {
                    warn!(error = %e, "GetInstances failed: agents keep the Auth server last known (or none), so auth_unhealthy cannot be raised for hosts Lifeline cannot place");
                    last_error = e;
                }
            }
        }
        tokio::time::sleep(every).await;
    }
}

async fn open(channel: Channel, max: usize) -> Result<tonic::Streaming<Instance>, Status> {
    let mut grpc = ready_client(channel, max).await?;
    // The request encoded as the generated client does; each answer
    // decoded into `Instance`.
    let codec = Call::<types::InstanceFilter, Whole<Instance>>::default();
    let req = method(types::InstanceFilter::default(), "GetInstances");
    let stream = grpc
        .server_streaming(req, PathAndQuery::from_static(PATH), codec)
        .await?;
    Ok(stream.into_inner())
}

async fn instances(channel: Channel, max: usize, capacity: usize) -> Result<AuthOf, String> {
    let mut stream = open(channel, max).await.map_err(|s| explain(&s))?;
    let mut m = Vec::with_capacity(capacity);
    // Each Auth ID once, shared by every host it serves.
    let mut ids: Vec<Arc<str>> = Vec::new();
    while let Some(i) = stream.message().await.map_err(|s| explain(&s))? {
        if m.len() >= MAX_INSTANCES {
            return Err(format!(
                "more than {MAX_INSTANCES} instances; the rest are ignored"
            ));
        }
        let name = i
            .header
            .and_then(|h| h.metadata)
            .map(|m| m.name)
            .unwrap_or_default();
        let auth_id = i.spec.map(|s| s.auth_id).unwrap_or_default();
        if !name.is_empty() && !auth_id.is_empty() {
            let id = match ids.iter().find(|id| id.as_ref() == auth_id) {
                Some(id) => id.clone(),
                None if ids.len() < MAX_AUTH_IDS => {
                    let id: Arc<str> = Arc::from(auth_id);
                    ids.push(id.clone());
                    id
                }
                None => Arc::from(auth_id),
            };
            m.push((name, id));
        }
    }
    // In name order as Teleport streams them: kept so in one pass.
    Ok(AuthOf::new(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn an_instance_decodes_to_its_name_and_auth_alone() {
        let full = types::InstanceV1 {
            header: Some(types::ResourceHeader {
                kind: "instance".into(),
                sub_kind: String::new(),
                version: "v1".into(),
                metadata: Some(types::Metadata {
                    name: "host-7".into(),
                    namespace: "default".into(),
                    labels: [("env".to_string(), "prod".to_string())].into(),
                    ..Default::default()
                }),
            }),
            spec: Some(types::InstanceSpecV1 {
                version: "16.4.2".into(),
                services: vec!["node".into(), "app".into()],
                hostname: "web-7".into(),
                auth_id: "auth-2".into(),
                last_seen: None,
            }),
        };
        let lean = Instance::decode(full.encode_to_vec().as_slice()).unwrap();
        assert_eq!(lean.header.unwrap().metadata.unwrap().name, "host-7");
        assert_eq!(lean.spec.unwrap().auth_id, "auth-2");
    }
}
