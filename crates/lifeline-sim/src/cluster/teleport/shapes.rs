//! How Teleport shapes what the simulated cluster holds: its servers as
//! `ServerV2`, agents as nodes named by host ID (or registered OpenSSH
//! hosts), services as their typed messages (and their DELETE as Teleport
//! sends it), agents as the Auth's inventory instances, and servers as
//! `GET /v2/...` answers them in JSON. Builders only: no state, no I/O.

use crate::wire::timestamp as to_timestamp;
use lifeline::clock::Ts;
use lifeline::domain::Kind;
use lifeline::proto::teleport::auth::{self as tp, event::Resource, paginated_resource};
use lifeline::proto::teleport::types;
use lifeline::proto::v1 as pb;

pub(super) fn meta(
    name: &str,
    expires: Option<prost_types::Timestamp>,
    labels: &std::collections::HashMap<String, String>,
) -> types::Metadata {
    types::Metadata {
        name: name.to_string(),
        namespace: "default".into(),
        labels: labels.clone(),
        expires,
        ..Default::default()
    }
}

/// A proxy or auth server as Teleport's `ServerV2`.
pub(super) fn server_v2(s: &pb::Server) -> types::ServerV2 {
    let mut labels = s.labels.clone();
    if s.kind == Kind::Proxy.as_str() {
        labels.insert("teleport.internal/proxygroup-id".into(), s.group_id.clone());
        labels.insert(
            "teleport.internal/proxygroup-gen".into(),
            s.group_generation.to_string(),
        );
    }
    types::ServerV2 {
        kind: s.kind.clone(),
        version: "v2".into(),
        metadata: Some(meta(&s.name, s.expires, &labels)),
        spec: Some(types::ServerSpecV2 {
            addr: s.addr.clone(),
            hostname: s.name.clone(),
            version: s.version.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An agent as a node named by its host ID.
pub(super) fn node(s: &pb::Server, proxies: Vec<String>) -> types::ServerV2 {
    types::ServerV2 {
        kind: "node".into(),
        version: "v2".into(),
        metadata: Some(meta(&s.name, s.expires, &s.labels)),
        spec: Some(types::ServerSpecV2 {
            hostname: sim_hostname(&s.name),
            version: s.version.clone(),
            use_tunnel: true,
            proxy_i_ds: proxies,
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The hostname an agent's host reports: its name under `.sim`.
pub(super) fn sim_hostname(name: &str) -> String {
    let mut hostname = String::with_capacity(name.len() + 4);
    hostname.push_str(name);
    hostname.push_str(".sim");
    hostname
}

/// The name of the `i`th agentless node: after every agent's in key order.
pub(super) fn agentless_name(i: usize) -> String {
    format!("openssh-{i:05}")
}

/// A registered OpenSSH host: no expiry, no tunnel, no agent.
pub(super) fn agentless(name: &str) -> types::ServerV2 {
    types::ServerV2 {
        kind: "node".into(),
        sub_kind: "openssh".into(),
        version: "v2".into(),
        metadata: Some(types::Metadata {
            name: name.into(),
            namespace: "default".into(),
            ..Default::default()
        }),
        spec: Some(types::ServerSpecV2 {
            addr: "10.0.0.1:22".into(),
            hostname: sim_hostname(name),
            ..Default::default()
        }),
    }
}

/// A database service on `host` whose database carries a CA bundle of
/// `ca_bytes`.
pub(super) fn db(
    s: &pb::Server,
    name: &str,
    ca_bytes: usize,
    proxies: Vec<String>,
) -> types::DatabaseServerV3 {
    types::DatabaseServerV3 {
        kind: "db_server".into(),
        version: "v3".into(),
        metadata: Some(types::Metadata {
            name: name.to_string(),
            namespace: "default".into(),
            expires: s.expires,
            ..Default::default()
        }),
        spec: Some(types::DatabaseServerSpecV3 {
            version: s.version.clone(),
            hostname: sim_hostname(&s.name),
            host_id: s.name.clone(),
            database: Some(types::DatabaseV3 {
                kind: "db".into(),
                version: "v3".into(),
                metadata: Some(types::Metadata {
                    name: name.to_string(),
                    ..Default::default()
                }),
                status: Some(types::DatabaseStatusV3 {
                    ca_cert: "-----BEGIN CERTIFICATE-----\n".repeat(ca_bytes / 28 + 1),
                }),
                ..Default::default()
            }),
            proxy_i_ds: proxies,
        }),
        ..Default::default()
    }
}

/// The services a host may run beside its node, as the simulator plays
/// them (put, listed and deleted by name).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimService {
    App,
    Db,
    Kube,
}

impl SimService {
    pub fn kind(self) -> &'static str {
        match self {
            SimService::App => "app_server",
            SimService::Db => "db_server",
            SimService::Kube => "kube_server",
        }
    }
}

/// How Teleport sends a service's DELETE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteShape {
    /// A `ResourceHeader` naming the host in `Metadata.Description`.
    Header,
    /// The typed message (`AppServerV3`, …) with no `Spec` and the host
    /// in `Metadata.Description`, as Teleport's backends send it.
    Typed,
}

/// `name` on `host`, heartbeating until `expires`; with no `expires`, the
/// shape of its DELETE (no Spec, the host in `Description`).
pub(super) fn service_event(
    kind: SimService,
    host: &str,
    name: &str,
    expires: Option<Ts>,
    proxies: Vec<String>,
) -> Resource {
    let metadata = Some(types::Metadata {
        name: name.to_string(),
        namespace: "default".into(),
        description: if expires.is_none() {
            host.to_string()
        } else {
            String::new()
        },
        expires: expires.map(to_timestamp),
        ..Default::default()
    });
    let hostname = format!("{host}.sim");
    let live = expires.is_some();
    match kind {
        SimService::App => Resource::AppServer(Box::new(types::AppServerV3 {
            kind: kind.kind().into(),
            version: "v3".into(),
            metadata,
            spec: live.then(|| types::AppServerSpecV3 {
                version: "17.0.0".into(),
                hostname,
                host_id: host.to_string(),
                proxy_i_ds: proxies,
            }),
            ..Default::default()
        })),
        SimService::Db => Resource::DatabaseServer(Box::new(types::DatabaseServerV3 {
            kind: kind.kind().into(),
            version: "v3".into(),
            metadata,
            spec: live.then(|| types::DatabaseServerSpecV3 {
                version: "17.0.0".into(),
                hostname,
                host_id: host.to_string(),
                proxy_i_ds: proxies,
                ..Default::default()
            }),
            ..Default::default()
        })),
        SimService::Kube => Resource::KubernetesServer(Box::new(types::KubernetesServerV3 {
            kind: kind.kind().into(),
            version: "v3".into(),
            metadata,
            spec: live.then(|| types::KubernetesServerSpecV3 {
                version: "17.0.0".into(),
                hostname,
                host_id: host.to_string(),
                proxy_i_ds: proxies,
            }),
            ..Default::default()
        })),
    }
}

/// A live service as a `ListResources` item.
pub(super) fn service_item(
    kind: SimService,
    host: &str,
    name: &str,
    expires: Ts,
    proxies: Vec<String>,
) -> Option<paginated_resource::Resource> {
    use paginated_resource::Resource as P;
    Some(
        match service_event(kind, host, name, Some(expires), proxies) {
            Resource::AppServer(a) => P::AppServer(*a),
            Resource::DatabaseServer(d) => P::DatabaseServer(*d),
            Resource::KubernetesServer(k) => P::KubernetesServer(*k),
            _ => return None,
        },
    )
}

pub(super) fn put(r: Resource) -> tp::Event {
    tp::Event {
        r#type: tp::Operation::Put as i32,
        resource: Some(r),
    }
}

pub(super) fn header(kind: &str, name: &str, description: &str) -> Resource {
    Resource::ResourceHeader(Box::new(types::ResourceHeader {
        kind: kind.to_string(),
        version: "v2".into(),
        metadata: Some(types::Metadata {
            name: name.to_string(),
            description: description.to_string(),
            ..Default::default()
        }),
        ..Default::default()
    }))
}

/// Teleport's JSON form of a server, as `GET /v2/...` answers it.
pub(super) fn to_json(s: &types::ServerV2) -> serde_json::Value {
    let meta = s.metadata.clone().unwrap_or_default();
    let spec = s.spec.clone().unwrap_or_default();
    let expires = meta
        .expires
        .map(|t| Ts::from_micros(t.seconds * 1_000_000 + i64::from(t.nanos) / 1000).rfc3339());
    serde_json::json!({
        "kind": s.kind,
        "version": s.version,
        "metadata": { "name": meta.name, "namespace": meta.namespace, "labels": meta.labels, "expires": expires },
        "spec": { "addr": spec.addr, "hostname": spec.hostname, "version": spec.version },
    })
}

/// An agent as the Auth's inventory knows it.
pub(super) fn instance(name: &str, s: &pb::Server) -> types::InstanceV1 {
    types::InstanceV1 {
        header: Some(types::ResourceHeader {
            kind: "instance".into(),
            version: "v1".into(),
            metadata: Some(types::Metadata {
                name: name.to_string(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        spec: Some(types::InstanceSpecV1 {
            version: s.version.clone(),
            services: vec!["node".into()],
            hostname: sim_hostname(name),
            auth_id: s.auth_server.clone(),
            last_seen: s.expires,
        }),
    }
}
