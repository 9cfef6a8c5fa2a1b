//! A stand-in Kubernetes API server, written from the API reference for
//! what `lifeline-agent`'s `restart = "kubernetes"` asks: a StatefulSet's
//! pods (get, list, watch by field), their state Secrets, and
//! evictions (`policy/v1`). An eviction deletes the pod; the StatefulSet
//! "controller" here brings it back with the same name, a new UID and a new
//! container ID, Ready after a delay (or never). A PodDisruptionBudget that
//! allows none answers 429. Objects are k8s-openapi's own types, so the
//! wire is the API's. Beside it, the pods' Teleport `/readyz` (each
//! incarnation its own PID). Real time: the sidecar's tests run in it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodCondition, PodSpec, PodStatus, Secret,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::ByteString;
use serde_json::{json, Value};
use tokio::sync::broadcast;

pub const NAMESPACE: &str = "teleport";
pub const STATEFULSET: &str = "teleport-kube-agent";
const LABEL: (&str, &str) = ("app", "teleport-kube-agent");

/// How the "StatefulSet controller" brings a pod back.
#[derive(Clone, Copy, Debug)]
pub struct Replacement {
    pub ready_after: Duration,
    pub never_ready: bool,
}

impl Replacement {
    /// Ready `ms` milliseconds after it is created.
    pub fn after(ms: u64) -> Replacement {
        Replacement {
            ready_after: Duration::from_millis(ms),
            never_ready: false,
        }
    }

    /// Created, never Ready.
    pub const NEVER: Replacement = Replacement {
        ready_after: Duration::ZERO,
        never_ready: true,
    };
}

struct World {
    /// Pod name → (pod, its Teleport PID).
    pods: BTreeMap<String, (Pod, u32)>,
    secrets: BTreeMap<String, Secret>,
    pdb_allows: bool,
    replacement: Replacement,
    generation: u64,
    resource_version: u64,
    evictions: Vec<String>,
    /// The StatefulSet replaces the pod just as an eviction arrives: the
    /// race the eviction's UID precondition closes.
    replaced_on_evict: bool,
    /// Every watch ends at once, with no event (a proxy in between that
    /// closes long requests).
    watches_end_at_once: bool,
    /// Watches asked for.
    watches: usize,
}

#[derive(Clone)]
struct Shared {
    world: Arc<Mutex<World>>,
    events: broadcast::Sender<(String, Pod)>,
}

pub struct KubeApi {
    pub url: String,
    /// The pods' `/readyz` port (every pod's IP is 127.0.0.1).
    pub diag_port: u16,
    shared: Shared,
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(NAMESPACE.into()),
        ..ObjectMeta::default()
    }
}

fn pod(name: &str, generation: u64, ready: bool) -> Pod {
    Pod {
        metadata: ObjectMeta {
            uid: Some(format!("uid-{name}-{generation}")),
            resource_version: Some(generation.to_string()),
            labels: Some(BTreeMap::from([(LABEL.0.into(), LABEL.1.into())])),
            owner_references: Some(vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: "StatefulSet".into(),
                name: STATEFULSET.into(),
                uid: "uid-statefulset".into(),
                controller: Some(true),
                ..OwnerReference::default()
            }]),
            ..meta(name)
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "teleport".into(),
                ..Container::default()
            }],
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Running".into()),
            pod_ip: Some("127.0.0.1".into()),
            conditions: Some(vec![PodCondition {
                type_: "Ready".into(),
                status: if ready { "True" } else { "False" }.into(),
                ..PodCondition::default()
            }]),
            container_statuses: Some(vec![ContainerStatus {
                name: "teleport".into(),
                container_id: Some(format!("containerd://{name}-{generation}")),
                image: "public.ecr.aws/gravitational/teleport-distroless:18".into(),
                image_id: "sha256:0".into(),
                ready,
                restart_count: 0,
                ..ContainerStatus::default()
            }]),
            ..PodStatus::default()
        }),
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": if code < 300 { "Success" } else { "Failure" },
        "message": message, "reason": reason, "code": code,
    });
    (
        StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        Json(body),
    )
        .into_response()
}

fn lock(w: &Mutex<World>) -> std::sync::MutexGuard<'_, World> {
    w.lock().unwrap_or_else(|e| e.into_inner())
}

impl KubeApi {
    /// Serves the StatefulSet with `pods` (name, host ID); a pod whose host
    /// ID is `None` has no state Secret yet.
    pub async fn start(pods: &[(&str, Option<&str>)], replacement: Replacement) -> KubeApi {
        let mut world = World {
            pods: BTreeMap::new(),
            secrets: BTreeMap::new(),
            pdb_allows: true,
            replacement,
            generation: 1,
            resource_version: 1,
            evictions: Vec::new(),
            replaced_on_evict: false,
            watches_end_at_once: false,
            watches: 0,
        };
        for (name, host) in pods {
            world
                .pods
                .insert(name.to_string(), (pod(name, 1, true), 100));
            if let Some(h) = host {
                let secret_name = format!("{name}-state");
                world.secrets.insert(
                    secret_name.clone(),
                    Secret {
                        metadata: meta(&secret_name),
                        data: Some(BTreeMap::from([(
                            ".host_uuid".into(),
                            ByteString(h.as_bytes().to_vec()),
                        )])),
                        ..Secret::default()
                    },
                );
            }
        }
        let shared = Shared {
            world: Arc::new(Mutex::new(world)),
            events: broadcast::channel(256).0,
        };
        let api = Router::new()
            .route("/api/v1/namespaces/{ns}/pods", get(pods_list))
            .route("/api/v1/namespaces/{ns}/pods/{name}", get(pod_get))
            .route("/api/v1/namespaces/{ns}/pods/{name}/eviction", post(evict))
            .route("/api/v1/namespaces/{ns}/secrets/{name}", get(secret_get))
            .with_state(shared.clone());
        let diag = Router::new()
            .route("/readyz", get(readyz))
            .with_state(shared.clone());
        let url = serve(api).await;
        let diag_url = serve(diag).await;
        let diag_port = diag_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .expect("a port");
        KubeApi {
            url,
            diag_port,
            shared,
        }
    }

    /// From now on every watch ends at once, with no event.
    pub fn end_watches_at_once(&self) {
        lock(&self.shared.world).watches_end_at_once = true;
    }

    /// How many watches were asked for.
    pub fn watches(&self) -> usize {
        lock(&self.shared.world).watches
    }

    /// Whether a PodDisruptionBudget lets a pod go now.
    pub fn pdb_allows(&self, allows: bool) {
        lock(&self.shared.world).pdb_allows = allows;
    }

    /// The pod's state Secret now names `host` (the pod runs another
    /// agent than the one a stream was opened for).
    pub fn set_host(&self, pod: &str, host: &str) {
        let mut w = lock(&self.shared.world);
        if let Some(data) = w
            .secrets
            .get_mut(&format!("{pod}-state"))
            .and_then(|s| s.data.as_mut())
        {
            data.insert(".host_uuid".into(), ByteString(host.as_bytes().to_vec()));
        }
    }

    /// The pod is being deleted (it has a deletion timestamp).
    pub fn terminating(&self, pod: &str) {
        let mut w = lock(&self.shared.world);
        if let Some((p, _)) = w.pods.get_mut(pod) {
            p.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::chrono::DateTime::UNIX_EPOCH,
                ));
        }
    }

    /// The next eviction finds the pod already replaced by a new one.
    pub fn replace_on_evict(&self) {
        lock(&self.shared.world).replaced_on_evict = true;
    }

    /// The pods evicted so far, in order.
    pub fn evictions(&self) -> Vec<String> {
        lock(&self.shared.world).evictions.clone()
    }

    /// The pod's UID now.
    pub fn uid(&self, name: &str) -> Option<String> {
        lock(&self.shared.world)
            .pods
            .get(name)
            .and_then(|(p, _)| p.metadata.uid.clone())
    }
}

async fn serve(router: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, router).await;
    });
    format!("http://{addr}")
}

async fn pods_list(
    State(s): State<Shared>,
    Path(ns): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    if ns != NAMESPACE {
        return Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}))
            .into_response();
    }
    let by_name = q
        .get("fieldSelector")
        .and_then(|f| f.strip_prefix("metadata.name="))
        .map(str::to_string);
    let by_label = q.get("labelSelector").cloned();
    let wanted = move |p: &Pod| {
        let name_ok = by_name
            .as_deref()
            .is_none_or(|n| p.metadata.name.as_deref() == Some(n));
        let label_ok = by_label.as_deref().is_none_or(|sel| {
            sel.split(',').all(|kv| {
                let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                p.metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.get(k).map(String::as_str) == Some(v))
            })
        });
        name_ok && label_ok
    };
    let (items, rv) = {
        let w = lock(&s.world);
        let items: Vec<Pod> = w
            .pods
            .values()
            .map(|(p, _)| p.clone())
            .filter(|p| wanted(p))
            .collect();
        (items, w.resource_version)
    };
    if q.get("watch").map(String::as_str) != Some("true") {
        return Json(json!({
            "apiVersion": "v1", "kind": "PodList",
            "metadata": {"resourceVersion": rv.to_string()},
            "items": items,
        }))
        .into_response();
    }
    {
        let mut w = lock(&s.world);
        w.watches += 1;
        if w.watches_end_at_once {
            return Body::empty().into_response();
        }
    }
    // A watch from "0": the pods now as ADDED, then every change.
    let line = |kind: &str, p: &Pod| -> Result<Bytes, std::io::Error> {
        let mut v = serde_json::to_vec(&json!({"type": kind, "object": p})).unwrap_or_default();
        v.push(b'\n');
        Ok(Bytes::from(v))
    };
    let now: Vec<_> = items.iter().map(|p| line("ADDED", p)).collect();
    let later =
        tokio_stream::wrappers::BroadcastStream::new(s.events.subscribe()).filter_map(move |e| {
            let out = match e {
                Ok((kind, p)) if wanted(&p) => Some(line(&kind, &p)),
                _ => None,
            };
            async move { out }
        });
    Body::from_stream(futures::stream::iter(now).chain(later)).into_response()
}

async fn pod_get(State(s): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let w = lock(&s.world);
    match w.pods.get(&name) {
        Some((p, _)) if ns == NAMESPACE => Json(p.clone()).into_response(),
        _ => status(404, "NotFound", &format!("pods \"{name}\" not found")),
    }
}

async fn secret_get(State(s): State<Shared>, Path((ns, name)): Path<(String, String)>) -> Response {
    let w = lock(&s.world);
    match w.secrets.get(&name) {
        Some(sec) if ns == NAMESPACE => Json(sec.clone()).into_response(),
        _ => status(404, "NotFound", &format!("secrets \"{name}\" not found")),
    }
}

async fn readyz(State(s): State<Shared>) -> Response {
    let w = lock(&s.world);
    // One pod in these tests: the first.
    match w.pods.values().next() {
        Some((p, pid)) => {
            let ready = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
            let code = if ready {
                StatusCode::OK
            } else {
                StatusCode::BAD_REQUEST
            };
            let word = if ready { "ok" } else { "starting" };
            (code, Json(json!({"status": word, "pid": pid}))).into_response()
        }
        None => (StatusCode::SERVICE_UNAVAILABLE, "no pod").into_response(),
    }
}

async fn evict(
    State(s): State<Shared>,
    Path((ns, name)): Path<(String, String)>,
    Json(body): Json<Value>,
) -> Response {
    let uid = body["deleteOptions"]["preconditions"]["uid"]
        .as_str()
        .map(str::to_string);
    let replacement = {
        let mut w = lock(&s.world);
        if std::mem::take(&mut w.replaced_on_evict) {
            w.generation += 1;
            let g = w.generation;
            if let Some(entry) = w.pods.get_mut(&name) {
                entry.0 = pod(&name, g, true);
            }
        }
        let Some((p, _)) = w.pods.get(&name).filter(|_| ns == NAMESPACE) else {
            return status(404, "NotFound", &format!("pods \"{name}\" not found"));
        };
        if uid.is_some() && uid != p.metadata.uid {
            return status(
                409,
                "Conflict",
                &format!(
                    "Precondition failed: UID in precondition: {uid:?}, UID in object meta: {:?}",
                    p.metadata.uid
                ),
            );
        }
        if !w.pdb_allows {
            return status(
                429,
                "TooManyRequests",
                "Cannot evict pod as it would violate the pod's disruption budget.",
            );
        }
        let (gone, _) = w.pods.remove(&name).expect("checked above");
        w.evictions.push(name.clone());
        w.generation += 1;
        w.resource_version += 1;
        let _ = s.events.send(("DELETED".into(), gone));
        (w.generation, w.replacement)
    };
    let (generation, r) = replacement;
    let (shared, pod_name) = (s.clone(), name.clone());
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let fresh = pod(&pod_name, generation, false);
        {
            let mut w = lock(&shared.world);
            w.resource_version += 1;
            let pid = 100 + u32::try_from(generation).unwrap_or(0);
            w.pods.insert(pod_name.clone(), (fresh.clone(), pid));
        }
        let _ = shared.events.send(("ADDED".into(), fresh));
        if r.never_ready {
            return;
        }
        tokio::time::sleep(r.ready_after).await;
        let ready = pod(&pod_name, generation, true);
        {
            let mut w = lock(&shared.world);
            w.resource_version += 1;
            if let Some(entry) = w.pods.get_mut(&pod_name) {
                entry.0 = ready.clone();
            }
        }
        let _ = shared.events.send(("MODIFIED".into(), ready));
    });
    status(201, "", "")
}
