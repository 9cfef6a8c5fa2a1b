//! `restart = "kubernetes"`: Teleport's kube agents (the
//! `teleport-kube-agent` chart), a StatefulSet on a distroless image under
//! `dumb-init`, where a SIGHUP is no proven graceful restart. Kubernetes'
//! own restart is eviction: it respects PodDisruptionBudgets, Teleport
//! drains on SIGTERM, and the StatefulSet brings the pod back with the
//! same identity (kept in a Secret).
//!
//! One `lifeline-agent`, in a Deployment of its own, speaks for every pod
//! of one StatefulSet: one stream per pod and Lifeline address, each named
//! by the pod's Teleport host ID, which Teleport keeps in the pod's state
//! Secret (`<pod>-state`, key `.host_uuid`). A Reconnect evicts that pod
//! (`policy/v1` Eviction, with the pod's UID as a precondition, so a pod
//! replaced meanwhile is never evicted in its place); the ack comes when
//! the replacement is Ready with a new container.
//!
//! Owns the Kubernetes client: a StatefulSet's pods, their host IDs and
//! their eviction. Speaking for each pod is `pods`'s; the cooldown, dry
//! run and outcomes are `restart`'s, the streams `session`'s.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use tokio::time::Instant;
use tokio_stream::StreamExt;

use crate::config::{is_object_name, KubeTarget, MAX_HOST_ID};
use crate::probe::Seen;

/// The key of the host ID in a pod's state Secret: Teleport's backend key
/// `/host_uuid`, with `/` written `.` (Secret keys allow no `/`).
pub const HOST_ID_KEY: &str = ".host_uuid";
/// How often a replacement is looked at again while its watch is quiet.
const RELOOK: Duration = Duration::from_secs(2);
/// Longest one call to the API server may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(15);
/// Longest text kept from the API server's answers.
const MAX_WORDS: usize = 300;

#[derive(Debug, thiserror::Error)]
pub enum KubeError {
    #[error("the Kubernetes client: {0}")]
    Client(String),
    #[error("{what}: {message}")]
    Call { what: String, message: String },
}

/// Why an eviction did not happen, or failed.
#[derive(Debug)]
pub enum Evicted {
    /// Not done, and nothing changed: a PodDisruptionBudget (429), a pod
    /// replaced or gone meanwhile, a Role that does not allow it.
    Refused(String),
    /// Asked, and the API server failed it.
    Failed(String),
}

fn words(s: &str) -> String {
    crate::printable(s, MAX_WORDS)
}

/// What the API server said, in words (its message, never a token).
fn said(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(r) => words(&format!("{} ({}): {}", r.code, r.reason, r.message)),
        other => words(&other.to_string()),
    }
}

fn code_of(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(r) => Some(r.code),
        _ => None,
    }
}

/// A bounded call: an API server that never answers is an error, not a
/// hung restart.
async fn call<T>(
    what: impl Into<String>,
    f: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, KubeError> {
    let what = what.into();
    match tokio::time::timeout(CALL_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(KubeError::Call {
            what,
            message: said(&e),
        }),
        Err(_) => Err(KubeError::Call {
            what,
            message: format!("no answer within {CALL_TIMEOUT:?}"),
        }),
    }
}

/// The StatefulSet's pods, through the API server.
pub struct Members {
    client: kube::Client,
    pods: Api<Pod>,
    secrets: Api<Secret>,
    target: KubeTarget,
    pub(crate) namespace: String,
}

/// One incarnation of a pod: its UID and its Teleport container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Incarnation {
    pub name: String,
    pub uid: String,
    pub container_id: Option<String>,
    pub ready: bool,
    pub ip: Option<String>,
}

impl std::fmt::Display for Incarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (uid {}, container {})",
            self.name,
            self.uid,
            self.container_id.as_deref().unwrap_or("none")
        )
    }
}

fn incarnation(p: &Pod, container: &str) -> Incarnation {
    let status = p.status.as_ref();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let container_id = status
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.name == container))
        .and_then(|c| c.container_id.clone())
        .filter(|id| !id.is_empty())
        .map(|id| words(&id));
    Incarnation {
        name: words(p.metadata.name.as_deref().unwrap_or_default()),
        uid: words(p.metadata.uid.as_deref().unwrap_or_default()),
        container_id,
        ready,
        ip: status.and_then(|s| s.pod_ip.clone()),
    }
}

/// A host ID as Teleport stored it: UTF-8, trimmed, 1..=253 printable
/// characters; anything else is refused with why.
pub fn host_id_from(raw: &[u8]) -> Result<String, String> {
    let s = std::str::from_utf8(raw).map_err(|_| "is not UTF-8 text".to_string())?;
    let s = s.trim();
    if !crate::config::is_host_id(s) {
        return Err(format!("must be 1..={MAX_HOST_ID} printable characters"));
    }
    Ok(s.to_string())
}

impl Members {
    /// A client for the API server: `kube_api` when given (plain or TLS as
    /// its scheme says, no credentials: tests and `kubectl proxy`), else
    /// the pod's service account (or `KUBECONFIG`).
    pub async fn connect(target: &KubeTarget) -> Result<Members, KubeError> {
        let config = match &target.api {
            Some(url) => {
                let uri = url
                    .parse::<hyper::http::Uri>()
                    .map_err(|e| KubeError::Client(format!("kube_api {url:?}: {e}")))?;
                kube::Config::new(uri)
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| KubeError::Client(words(&e.to_string())))?,
        };
        let namespace = target
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client =
            kube::Client::try_from(config).map_err(|e| KubeError::Client(words(&e.to_string())))?;
        Ok(Members {
            client: client.clone(),
            pods: Api::namespaced(client.clone(), &namespace),
            secrets: Api::namespaced(client, &namespace),
            target: target.clone(),
            namespace,
        })
    }

    /// The StatefulSet's pods now, by name: the namespace's pods it
    /// controls (by their owner reference, so the Role needs nothing on
    /// the StatefulSet itself).
    pub async fn pods(&self) -> Result<Vec<String>, KubeError> {
        let name = &self.target.statefulset;
        let list = call(
            format!("listing the pods of StatefulSet {}/{name}", self.namespace),
            self.pods.list(&ListParams::default()),
        )
        .await?;
        let mut names: Vec<String> = list
            .items
            .iter()
            .filter(|p| self.controls(p))
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        names.sort();
        Ok(names)
    }

    /// The StatefulSet named in the config is this pod's controller.
    fn controls(&self, p: &Pod) -> bool {
        p.metadata.owner_references.as_ref().is_some_and(|refs| {
            refs.iter().any(|r| {
                r.kind == "StatefulSet"
                    && r.name == self.target.statefulset
                    && r.controller == Some(true)
            })
        })
    }

    /// The Teleport host ID the pod keeps in its state Secret.
    pub async fn host_id(&self, pod: &str) -> Result<String, KubeError> {
        let secret_name = format!("{pod}-state");
        let what = format!("the host ID in Secret {secret_name} (key {HOST_ID_KEY})");
        let secret = call(what.clone(), self.secrets.get(&secret_name)).await?;
        let raw = secret
            .data
            .as_ref()
            .and_then(|d| d.get(HOST_ID_KEY))
            .ok_or_else(|| KubeError::Call {
                what: what.clone(),
                message: "not there: Teleport has not joined yet, or keeps its state on a volume (an older chart)".into(),
            })?;
        host_id_from(&raw.0).map_err(|message| KubeError::Call { what, message })
    }

    async fn pod(&self, name: &str) -> Result<Option<Pod>, KubeError> {
        call(format!("reading pod {name}"), self.pods.get_opt(name)).await
    }
}

/// One pod of the StatefulSet, as the agent `host_id` it runs.
pub struct PodTarget {
    members: Arc<Members>,
    pod: String,
    host_id: String,
}

impl PodTarget {
    pub fn new(members: Arc<Members>, pod: String, host_id: String) -> PodTarget {
        PodTarget {
            members,
            pod,
            host_id,
        }
    }

    /// How it restarts, in words.
    pub fn method(&self) -> String {
        format!(
            "evict pod {} (StatefulSet {}/{})",
            self.pod, self.members.namespace, self.members.target.statefulset
        )
    }

    /// What the pod says of itself: its Ready condition, and Teleport's
    /// `/readyz` (its PID) where `diag_port` is set and the pod has an IP.
    pub async fn look(&self) -> Seen {
        match self.members.pod(&self.pod).await {
            Ok(Some(p)) => {
                self.seen(&incarnation(&p, &self.members.target.container))
                    .await
            }
            Ok(None) => Seen {
                ready: false,
                status: format!("pod {} does not exist", self.pod),
                pid: None,
                readyz_pid: None,
            },
            Err(e) => Seen {
                ready: false,
                status: words(&e.to_string()),
                pid: None,
                readyz_pid: None,
            },
        }
    }

    async fn seen(&self, inc: &Incarnation) -> Seen {
        let port = self.members.target.diag_port;
        let readyz = match (&inc.ip, port) {
            (Some(ip), p) if p != 0 => {
                let addr = match ip.parse::<std::net::IpAddr>() {
                    Ok(std::net::IpAddr::V6(v6)) => format!("[{v6}]:{p}"),
                    _ => format!("{ip}:{p}"),
                };
                Some(crate::probe::readyz_at(&addr).await)
            }
            _ => None,
        };
        let pod_words = format!(
            "pod {} {}",
            inc,
            if inc.ready { "Ready" } else { "not Ready" }
        );
        match readyz {
            Some(r) => Seen {
                ready: inc.ready && r.ready,
                status: words(&format!("{pod_words}; /readyz: {}", r.status)),
                pid: r.pid,
                readyz_pid: r.pid,
            },
            None => Seen {
                ready: inc.ready,
                status: pod_words,
                pid: None,
                readyz_pid: None,
            },
        }
    }

    /// The pod as it is now, proven to be the one to evict: it exists, is
    /// not already going, the StatefulSet controls it, and its state
    /// Secret still names the agent this stream speaks for.
    pub async fn before(&self) -> Result<Incarnation, String> {
        let p = self
            .members
            .pod(&self.pod)
            .await
            .map_err(|e| format!("not evicting: {e}"))?
            .ok_or_else(|| format!("not evicting: pod {} does not exist", self.pod))?;
        if p.metadata.deletion_timestamp.is_some() {
            return Err(format!(
                "not evicting: pod {} is already terminating",
                self.pod
            ));
        }
        if !self.members.controls(&p) {
            return Err(format!(
                "not evicting: pod {} is not controlled by StatefulSet {}",
                self.pod, self.members.target.statefulset
            ));
        }
        let now = self
            .members
            .host_id(&self.pod)
            .await
            .map_err(|e| format!("not evicting: {e}"))?;
        if now != self.host_id {
            return Err(format!(
                "not evicting: pod {} now runs host {now}, not {}",
                self.pod, self.host_id
            ));
        }
        let inc = incarnation(&p, &self.members.target.container);
        if inc.uid.is_empty() {
            return Err(format!("not evicting: pod {} has no UID", self.pod));
        }
        Ok(inc)
    }

    /// Evicts exactly `inc` (its UID a precondition). The Eviction is
    /// k8s-openapi's own object, posted as is: kube's `Api::evict` writes
    /// its delete options under a key the API server does not read
    /// (`delete_options`), which would drop the precondition unseen.
    pub async fn evict(&self, inc: &Incarnation) -> Result<(), Evicted> {
        let eviction = Eviction {
            metadata: ObjectMeta {
                name: Some(inc.name.clone()),
                namespace: Some(self.members.namespace.clone()),
                ..ObjectMeta::default()
            },
            delete_options: Some(DeleteOptions {
                preconditions: Some(Preconditions {
                    uid: Some(inc.uid.clone()),
                    resource_version: None,
                }),
                ..DeleteOptions::default()
            }),
        };
        let request = eviction_request(&self.members.namespace, &inc.name, &eviction)
            .map_err(Evicted::Refused)?;
        let asked = tokio::time::timeout(
            CALL_TIMEOUT,
            self.members.client.request::<kube::core::Status>(request),
        );
        match asked.await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => match code_of(&e) {
                // A PodDisruptionBudget allows none now: nothing happened.
                Some(429) => Err(Evicted::Refused(format!(
                    "eviction refused by a PodDisruptionBudget: {}",
                    said(&e)
                ))),
                Some(404) => Err(Evicted::Refused(format!(
                    "pod {} is gone: {}",
                    inc.name,
                    said(&e)
                ))),
                Some(409) => Err(Evicted::Refused(format!(
                    "pod {} was replaced before the eviction: {}",
                    inc.name,
                    said(&e)
                ))),
                Some(401 | 403) => Err(Evicted::Refused(format!(
                    "not allowed to evict (the Role grants create on pods/eviction): {}",
                    said(&e)
                ))),
                _ => Err(Evicted::Failed(format!("eviction failed: {}", said(&e)))),
            },
            Err(_) => Err(Evicted::Failed(format!(
                "the eviction had no answer within {CALL_TIMEOUT:?}"
            ))),
        }
    }

    /// Waits until the StatefulSet's replacement of `old` is Ready with a
    /// new container (and, where `/readyz` is read, says ready), watching
    /// the pod; `Err` is what was last seen when `deadline` passed.
    pub async fn replaced(
        &self,
        old: &Incarnation,
        deadline: Instant,
    ) -> Result<(Incarnation, Seen), String> {
        let container = self.members.target.container.clone();
        let mut last = format!("pod {} not seen again", old.name);
        // The pod as last seen: a quiet watch looks at it again, since a
        // replacement Ready before its /readyz says so sends no further
        // event.
        let mut seen_last: Option<Incarnation> = None;
        let params = WatchParams::default().fields(&format!("metadata.name={}", old.name));
        // Watches in a row that failed or ended without an event.
        let mut failed = 0u32;
        loop {
            if crate::clock::instant() >= deadline {
                return Err(last);
            }
            // A watch from "0" starts with the pod as it is now (a
            // synthetic ADDED), then its changes: nothing falls between.
            let left = deadline.saturating_duration_since(crate::clock::instant());
            let secs = u32::try_from(left.as_secs().clamp(1, 290)).unwrap_or(290);
            let this_watch = params.clone().timeout(secs);
            let asked = self.members.pods.watch(&this_watch, "0");
            let stream = match tokio::time::timeout_at(deadline, asked).await {
                Err(_) => return Err(last),
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    last = format!("watching pod {}: {}", old.name, said(&e));
                    failed = failed.saturating_add(1);
                    tokio::time::sleep_until(
                        deadline.min(crate::clock::instant() + watch_backoff(failed)),
                    )
                    .await;
                    continue;
                }
            };
            let mut stream = std::pin::pin!(stream);
            let mut heard = false;
            loop {
                let wake = deadline.min(crate::clock::instant() + RELOOK);
                let inc = match tokio::time::timeout_at(wake, stream.next()).await {
                    Err(_) if crate::clock::instant() >= deadline => return Err(last),
                    Err(_) => match &seen_last {
                        Some(inc) => inc.clone(),
                        None => continue,
                    },
                    // Ended (its timeout, or the server's): watched again.
                    Ok(None) | Ok(Some(Err(_))) => break,
                    Ok(Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)))) => {
                        heard = true;
                        incarnation(&p, &container)
                    }
                    Ok(Some(Ok(WatchEvent::Deleted(_)))) => {
                        last = format!("pod {} deleted; its replacement not yet created", old.name);
                        seen_last = None;
                        continue;
                    }
                    Ok(Some(Ok(_))) => continue,
                };
                match self.is_new(old, &inc).await {
                    Ok(seen) => return Ok((inc, seen)),
                    Err(why) => last = why,
                }
                seen_last = Some(inc);
            }
            // A watch that ended without a word (an API server that
            // closes them at once, a proxy in between) is asked again
            // after a backoff, never in a hot loop.
            if heard {
                failed = 0;
            } else {
                failed = failed.saturating_add(1);
                tokio::time::sleep_until(
                    deadline.min(crate::clock::instant() + watch_backoff(failed)),
                )
                .await;
            }
        }
    }

    /// `Ok` when `inc` is the replacement, Ready, with a new container.
    async fn is_new(&self, old: &Incarnation, inc: &Incarnation) -> Result<Seen, String> {
        if inc.uid == old.uid {
            return Err(format!("pod {inc} still the one evicted"));
        }
        let new_container = inc.container_id.is_some() && inc.container_id != old.container_id;
        if !inc.ready || !new_container {
            return Err(format!(
                "replacement {inc} {}",
                if inc.ready {
                    "Ready, same container"
                } else {
                    "not Ready"
                }
            ));
        }
        let seen = self.seen(inc).await;
        if !seen.ready {
            return Err(seen.status);
        }
        Ok(seen)
    }
}

/// `POST /api/v1/namespaces/{ns}/pods/{name}/eviction` with `eviction`;
/// a name that is no Kubernetes name never reaches the path.
fn eviction_request(
    namespace: &str,
    pod: &str,
    eviction: &Eviction,
) -> Result<hyper::http::Request<Vec<u8>>, String> {
    use k8s_openapi::Resource;
    for name in [namespace, pod] {
        if !is_object_name(name) {
            return Err(format!("not evicting: {name:?} is not a Kubernetes name"));
        }
    }
    let mut body = serde_json::to_value(eviction).map_err(|e| format!("the eviction: {e}"))?;
    body["apiVersion"] = Eviction::API_VERSION.into();
    body["kind"] = Eviction::KIND.into();
    let body = serde_json::to_vec(&body).map_err(|e| format!("the eviction: {e}"))?;
    hyper::http::Request::post(format!(
        "/api/v1/namespaces/{namespace}/pods/{pod}/eviction"
    ))
    .header(hyper::http::header::CONTENT_TYPE, "application/json")
    .body(body)
    .map_err(|e| format!("the eviction request: {e}"))
}

/// The wait before watching a pod again after `failed` watches in a row
/// failed or ended without an event: full jitter, 250 ms doubling to 8 s.
fn watch_backoff(failed: u32) -> Duration {
    crate::clock::backoff(Duration::from_millis(250), Duration::from_secs(8), failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eviction_names_the_pod_and_its_uid_as_the_api_reads_them() {
        let e = Eviction {
            metadata: ObjectMeta {
                name: Some("teleport-kube-agent-0".into()),
                ..ObjectMeta::default()
            },
            delete_options: Some(DeleteOptions {
                preconditions: Some(Preconditions {
                    uid: Some("u-1".into()),
                    resource_version: None,
                }),
                ..DeleteOptions::default()
            }),
        };
        let r = eviction_request("teleport", "teleport-kube-agent-0", &e).expect("request");
        assert_eq!(
            r.uri().path(),
            "/api/v1/namespaces/teleport/pods/teleport-kube-agent-0/eviction"
        );
        let body: serde_json::Value = serde_json::from_slice(r.body()).expect("json");
        assert_eq!(
            body["deleteOptions"]["preconditions"]["uid"], "u-1",
            "{body}"
        );
        assert_eq!(body["kind"], "Eviction");
        assert_eq!(body["apiVersion"], "policy/v1");
        for bad in ["", "a/b", "../x", "A", "a b", "a%2Fb"] {
            assert!(eviction_request("teleport", bad, &e).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_host_id_from_a_secret_is_checked() {
        assert_eq!(host_id_from(b" 5a8e-01\n").as_deref(), Ok("5a8e-01"));
        for bad in [&b""[..], b"   ", b"\xff\xfe", b"a\x00b", &[b'x'; 254][..]] {
            assert!(host_id_from(bad).is_err(), "{bad:?}");
        }
    }
}
