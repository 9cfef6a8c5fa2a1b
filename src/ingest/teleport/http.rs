//! Proxies and auth servers over HTTPS, for Auth servers that predate
//! `PresenceService`: `GET /v2/proxies` and `GET /v2/authservers` on the
//! same listener and the same mutual TLS, answered with Teleport's JSON
//! form of `ServerV2`.

use std::collections::HashMap;

use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde::Deserialize;

use super::convert::GO_ZERO_SECONDS;
use crate::clock::Ts;
use crate::domain::Kind;
use crate::ingest::dial::{DialError, Dialer};
use crate::proto::teleport::types;

#[derive(Debug, thiserror::Error)]
pub enum HttpListError {
    #[error(transparent)]
    Dial(#[from] DialError),
    #[error("HTTPS request {path} failed: {detail}")]
    Request { path: &'static str, detail: String },
    #[error("{path} answered {status}")]
    Status { path: &'static str, status: u16 },
    #[error("{path}: the answer is not a list of servers: {detail}")]
    Body { path: &'static str, detail: String },
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonServer {
    kind: String,
    sub_kind: String,
    version: String,
    metadata: JsonMetadata,
    spec: JsonSpec,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonMetadata {
    name: String,
    namespace: String,
    description: String,
    labels: HashMap<String, String>,
    expires: Option<String>,
    revision: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct JsonSpec {
    addr: String,
    hostname: String,
    version: String,
}

/// `expires` as the wire timestamp, Go's zero time kept as such (so one
/// rule reads it as unset), anything unreadable dropped.
fn timestamp(s: &str) -> Option<prost_types::Timestamp> {
    if s.starts_with("0001-01-01") {
        return Some(prost_types::Timestamp {
            seconds: GO_ZERO_SECONDS,
            nanos: 0,
        });
    }
    Ts::parse_rfc3339(s).map(crate::proto::to_timestamp)
}

impl From<JsonServer> for types::ServerV2 {
    fn from(j: JsonServer) -> Self {
        types::ServerV2 {
            kind: j.kind,
            sub_kind: j.sub_kind,
            version: j.version,
            metadata: Some(types::Metadata {
                name: j.metadata.name,
                namespace: j.metadata.namespace,
                description: j.metadata.description,
                labels: j.metadata.labels,
                expires: j.metadata.expires.as_deref().and_then(timestamp),
                revision: j.metadata.revision,
            }),
            spec: Some(types::ServerSpecV2 {
                addr: j.spec.addr,
                hostname: j.spec.hostname,
                version: j.spec.version,
                ..Default::default()
            }),
        }
    }
}

/// The HTTPS path serving `kind`'s list.
pub fn path(kind: Kind) -> &'static str {
    if kind == Kind::Proxy {
        "/v2/proxies"
    } else {
        "/v2/authservers"
    }
}

/// `GET`s `kind`'s list from `addr`, reading at most `max_bytes`.
pub async fn list_servers(
    dialer: &Dialer,
    addr: &str,
    kind: Kind,
    max_bytes: usize,
) -> Result<Vec<types::ServerV2>, HttpListError> {
    let path = path(kind);
    let req_err = |detail: String| HttpListError::Request { path, detail };
    let tls = dialer.tls_stream(addr).await?;
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| req_err(crate::backoff::chain(&e)))?;
    let conn = tokio::spawn(conn);
    let req = hyper::Request::get(path)
        .header(hyper::header::HOST, "teleport.cluster.local")
        .header(hyper::header::ACCEPT, "application/json")
        .body(Empty::<Bytes>::new())
        .map_err(|e| req_err(e.to_string()))?;
    let resp = send
        .send_request(req)
        .await
        .map_err(|e| req_err(crate::backoff::chain(&e)))?;
    let status = resp.status().as_u16();
    if status != 200 {
        conn.abort();
        return Err(HttpListError::Status { path, status });
    }
    let body = Limited::new(resp.into_body(), max_bytes)
        .collect()
        .await
        .map_err(|e| HttpListError::Body {
            path,
            detail: e.to_string(),
        })?
        .to_bytes();
    conn.abort();
    let list: Vec<JsonServer> = serde_json::from_slice(&body).map_err(|e| HttpListError::Body {
        path,
        detail: e.to_string(),
    })?;
    Ok(list.into_iter().map(types::ServerV2::from).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `GET /v2/...` answers for `s`, in Teleport's JSON form.
    fn to_json(s: &types::ServerV2) -> serde_json::Value {
        let meta = s.metadata.clone().unwrap_or_default();
        let spec = s.spec.clone().unwrap_or_default();
        let expires = meta.expires.map(|t| {
            if t.seconds == GO_ZERO_SECONDS {
                "0001-01-01T00:00:00Z".to_string()
            } else {
                crate::proto::timestamp(&t)
                    .map(Ts::rfc3339)
                    .unwrap_or_default()
            }
        });
        serde_json::json!({
            "kind": s.kind,
            "sub_kind": s.sub_kind,
            "version": s.version,
            "metadata": {
                "name": meta.name,
                "namespace": meta.namespace,
                "labels": meta.labels,
                "expires": expires,
            },
            "spec": { "addr": spec.addr, "hostname": spec.hostname, "version": spec.version },
        })
    }

    #[test]
    fn json_servers_round_trip_and_go_zero_stays_recognisable() {
        let s = types::ServerV2 {
            kind: "proxy".into(),
            version: "v2".into(),
            metadata: Some(types::Metadata {
                name: "p1".into(),
                expires: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 0,
                }),
                ..Default::default()
            }),
            spec: Some(types::ServerSpecV2 {
                addr: "p1:3080".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let j: JsonServer = serde_json::from_value(to_json(&s)).unwrap_or_default();
        let back = types::ServerV2::from(j);
        assert_eq!(
            back.metadata
                .as_ref()
                .and_then(|m| m.expires)
                .map(|t| t.seconds),
            Some(1_700_000_000)
        );
        assert_eq!(back.spec.map(|s| s.addr).as_deref(), Some("p1:3080"));
        assert_eq!(
            timestamp("0001-01-01T00:00:00Z").map(|t| t.seconds),
            Some(GO_ZERO_SECONDS)
        );
        assert_eq!(timestamp("not a time"), None);
    }
}
