//! Liveness, readiness and virtual probes.
//!
//! `/readyz` is 200 once every watched kind is ready or rejected (a rejected
//! kind is not an error), 503 while any is initialising or stale; both
//! bodies say which.
//!
//! Virtual probes (Kuma MADR 047) turn an HTTP GET into a gRPC health
//! `Check` or a TCP connect, so a load balancer or kubelet that speaks
//! only HTTP can probe an auth server or proxy through Lifeline:
//! `/probes/grpc/{host:port}` (service from `X-Probe-GRPC-Service` or
//! `?service=`) and `/probes/tcp/{host:port}` answer 200 `HEALTHY`, or 503
//! `UNHEALTHY` / `UNKNOWN`, within `X-Probe-Timeout` seconds (default 1).
//! `X-Probe-Detail` says why. Targets are limited to the cluster's known
//! auth server and proxy addresses plus `probes.allow`, so the endpoint
//! cannot be used to scan a network.

use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tracing::debug;

use super::error::{ApiError, ApiQuery};
use super::AppState;
use crate::stats::Stats;

/// One kind of line in `/readyz`'s `problems`: the words it opens with
/// (fixed; what follows names the instance), whether it fails readiness,
/// what it means and what to do. The book's troubleshooting page is this
/// list ([`reasons_markdown`]); a test holds every line `readyz` writes
/// to an entry here.
pub struct ReadyReason {
    pub opens: &'static str,
    pub fails: bool,
    pub means: &'static str,
    pub action: &'static str,
}

/// Every kind of `/readyz` problem, in the order `readyz` checks them.
pub const READY_REASONS: &[ReadyReason] = &[
    ReadyReason {
        opens: "task ",
        fails: true,
        means: "a critical task (named, with why) stopped; the process exits 70 for its supervisor to restart it",
        action: "read the log line that names the task; systemd or Kubernetes restarts Lifeline, and the cause is in the lines before it",
    },
    ReadyReason {
        opens: "cluster source: ",
        fails: true,
        means: "the watch of the cluster is not ready, and this is the source's last error (a refused dial, a handshake, a role)",
        action: "check `cluster.addr`, the identity and CA files (`lifeline check-config`) and the role; `source_phase` says whether it is connecting, resyncing or retrying",
    },
    ReadyReason {
        opens: "the store refuses writes since ",
        fails: true,
        means: "the database refuses Lifeline's writes; current state and episodes are held and retried, history is shed once the queue is full",
        action: "check the disk (SQLite) or the database server and its logs (PostgreSQL); the error is quoted",
    },
    ReadyReason {
        opens: "the cluster identity's certificate expired at ",
        fails: true,
        means: "the client certificate in `cluster.identity_file` has expired, so Lifeline cannot reach the cluster",
        action: "renew it (tbot, or whoever signs it); Lifeline reads the new file at its next dial",
    },
    ReadyReason {
        opens: "the listing hides ",
        fails: false,
        means: "the role's listings omit services the watch shows: a `*_labels` rule filters them",
        action: "grant `'*': '*'` on the role's `node_labels`, `app_labels`, `db_labels`, `kubernetes_labels` and `windows_desktop_labels`",
    },
    ReadyReason {
        opens: "connection caps lowered: ",
        fails: false,
        means: "the process may open fewer files than the configured connection caps need, so they were lowered",
        action: "raise `LimitNOFILE` (systemd) or the container's limit, or lower the caps",
    },
    ReadyReason {
        opens: "cluster kind ",
        fails: false,
        means: "a Teleport kind is left out of the watch (the role cannot read it, say); agents of that kind are not watched",
        action: "let the role read that kind, or leave it out of `cluster.agent_kinds`",
    },
];

/// [`READY_REASONS`] as the book's table.
pub fn reasons_markdown() -> String {
    let mut out = String::from(
        "| a problem that opens with | fails `/readyz` | means | what to do |\n|---|---|---|---|\n",
    );
    for r in READY_REASONS {
        out.push_str(&format!(
            "| `{}…` | {} | {} | {} |\n",
            r.opens.trim_end(),
            if r.fails { "yes" } else { "no" },
            r.means,
            r.action
        ));
    }
    out
}

pub fn router() -> Router<AppState> {
    health_router()
        .route("/probes/grpc/{target}", get(grpc))
        .route("/probes/tcp/{target}", get(tcp))
}

/// `/healthz` and `/readyz` alone (the admin listener serves these).
pub fn health_router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

/// `/readyz`: the watcher's kinds, and whatever else keeps Lifeline from
/// doing its job: a critical task that stopped, a store that refuses writes.
#[derive(serde::Serialize)]
struct ReadyBody {
    #[serde(flatten)]
    watcher: crate::fleet::Readiness,
    /// Where the cluster source is: connecting, resyncing, following or
    /// retrying (after a failed session, waiting out its backoff).
    source_phase: crate::stats::SourcePhase,
    /// Each cluster watched, by name: where its watch stands.
    clusters: Vec<ClusterReady>,
    /// Why it is not ready beyond the watcher, in words; empty when fine.
    problems: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    failed_task: Option<crate::supervise::TaskFailure>,
    #[serde(skip_serializing_if = "Option::is_none")]
    store_failing: Option<crate::store::health::StoreFailure>,
    /// The cluster identity's client certificate, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    cluster_identity: Option<IdentityLeft>,
    /// The file descriptor limits and the connection caps they leave room
    /// for; `clamped` says when a configured cap was lowered.
    #[serde(skip_serializing_if = "Option::is_none")]
    descriptors: Option<crate::stats::Descriptors>,
}

/// One cluster's line in `/readyz`.
#[derive(serde::Serialize)]
struct ClusterReady {
    name: crate::domain::ClusterName,
    /// Every kind of its watch is ready (or rejected, and said).
    ready: bool,
    /// `ready`, `initializing` or `stale`: the fleet's reading of its kinds.
    watch: crate::fleet::model::WatchState,
}

/// When the cluster identity expires, and how long that is from now.
#[derive(serde::Serialize)]
struct IdentityLeft {
    expires_at: crate::clock::Ts,
    seconds_left: i64,
}

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    let watcher = s.fleet.readiness();
    let failed_task = s.failure.get();
    let store_failing = s.store_health.failure();
    let mut problems = Vec::new();
    if let Some(f) = &failed_task {
        problems.push(format!("task {} stopped: {}", f.task, f.why));
    }
    if !watcher.ready {
        if let Some(e) = s.stats.source_error() {
            problems.push(format!("cluster source: {e}"));
        }
    }
    if let Some(f) = &store_failing {
        problems.push(format!(
            "the store refuses writes since {} ({} attempts): {}; state and episodes are kept pending",
            f.since, f.attempts, f.error
        ));
    }
    let cluster_identity = match s
        .stats
        .cluster_identity_not_after
        .load(std::sync::atomic::Ordering::Relaxed)
    {
        0 => None,
        secs => {
            let expires_at = crate::clock::Ts::from_micros(
                i64::try_from(secs)
                    .unwrap_or(i64::MAX / 1_000_000)
                    .saturating_mul(1_000_000),
            );
            let now = s.fleet.clock().now();
            Some(IdentityLeft {
                expires_at,
                seconds_left: (expires_at.as_micros().saturating_sub(now.as_micros())) / 1_000_000,
            })
        }
    };
    if let Some(i) = cluster_identity.as_ref().filter(|i| i.seconds_left <= 0) {
        problems.push(format!(
            "the cluster identity's certificate expired at {}: renew cluster.identity_file (tbot)",
            i.expires_at
        ));
    }
    let ready = watcher.ready && problems.is_empty();
    // One cluster per fleet: its watch is the watcher's.
    let clusters = vec![ClusterReady {
        name: s.fleet.cluster().clone(),
        ready: watcher.ready,
        watch: watcher.overall(),
    }];
    // Said, but not failing readiness: the rest is watched.
    let hidden = s
        .stats
        .listing_hidden
        .load(std::sync::atomic::Ordering::Relaxed);
    if hidden > 0 {
        problems.push(format!(
            "the listing hides {hidden} resources the watch shows: check the role's *_labels (node_labels, app_labels, db_labels, kubernetes_labels, windows_desktop_labels: '*': '*')"
        ));
    }
    if let Some(why) = s.stats.descriptors.get().and_then(|d| d.clamped.as_ref()) {
        problems.push(format!("connection caps lowered: {why}"));
    }
    for u in s.stats.unwatched() {
        problems.push(format!(
            "cluster kind {} is not watched: {}",
            u.kind, u.reason
        ));
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        Json(ReadyBody {
            watcher: crate::fleet::Readiness {
                ready,
                kinds: watcher.kinds,
            },
            source_phase: s.stats.source_phase(),
            clusters,
            problems,
            failed_task,
            store_failing,
            cluster_identity,
            descriptors: s.stats.descriptors.get().cloned(),
        }),
    )
}

/// A probe's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    Unhealthy,
    Unknown,
}

impl Verdict {
    fn index(self) -> usize {
        match self {
            Verdict::Healthy => 0,
            Verdict::Unhealthy => 1,
            Verdict::Unknown => 2,
        }
    }
    fn word(self) -> &'static str {
        match self {
            Verdict::Healthy => "HEALTHY",
            Verdict::Unhealthy => "UNHEALTHY",
            Verdict::Unknown => "UNKNOWN",
        }
    }
}

fn answer(st: &AppState, kind: usize, v: Verdict, detail: &str) -> Response {
    Stats::inc(&st.stats.probes[kind][v.index()]);
    let status = if v == Verdict::Healthy {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut r = (status, v.word()).into_response();
    // A header value cannot hold control characters; keep it short.
    let clean: String = detail
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                ' '
            }
        })
        .take(200)
        .collect();
    if let Ok(h) = HeaderValue::from_str(&clean) {
        r.headers_mut().insert("x-probe-detail", h);
    }
    r
}

/// Checks the target's form, the allow-list and the timeout header.
async fn admit(st: &AppState, target: &str, h: &HeaderMap) -> Result<Duration, ApiError> {
    let refused = |e: ApiError| {
        Stats::inc(&st.stats.probes_refused);
        e
    };
    if crate::config::host_port("target", target).is_err() {
        return Err(refused(ApiError::BadParameter(format!(
            "probe target {target:?} is not host:port"
        ))));
    }
    let timeout = match h.get("x-probe-timeout") {
        None => Duration::from_secs(1),
        Some(v) => {
            let text = v.to_str().unwrap_or_default().trim();
            match text.parse::<f64>() {
                Ok(secs) if secs > 0.0 && secs <= st.probes.max_timeout.as_secs_f64() => {
                    Duration::from_secs_f64(secs)
                }
                _ => {
                    return Err(refused(ApiError::BadParameter(format!(
                        "X-Probe-Timeout must be seconds in (0, {}], got {text:?}",
                        st.probes.max_timeout.as_secs_f64()
                    ))))
                }
            }
        }
    };
    let allowed = st.probes.allow.iter().any(|a| a == target) || {
        let t = target.to_string();
        st.fleet.knows_address(t).await?
    };
    if !allowed {
        return Err(refused(ApiError::Forbidden {
            code: "probe_target_not_allowed",
            message: format!(
                "probe target {target:?} is neither a known auth server or proxy address nor in probes.allow"
            ),
        }));
    }
    Ok(timeout)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GrpcQuery {
    service: Option<String>,
}

async fn grpc(
    State(st): State<AppState>,
    Path(target): Path<String>,
    ApiQuery(q): ApiQuery<GrpcQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let timeout = admit(&st, &target, &headers).await?;
    let service = headers
        .get("x-probe-grpc-service")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(q.service)
        .unwrap_or_default();
    let (v, detail) = check_grpc(&target, &service, timeout).await;
    debug!(%target, %service, verdict = v.word(), %detail, "gRPC probe");
    Ok(answer(&st, 0, v, &detail))
}

/// One unary `Check` on a fresh connection, all within `timeout`.
pub async fn check_grpc(target: &str, service: &str, timeout: Duration) -> (Verdict, String) {
    let ep = match tonic::transport::Endpoint::from_shared(format!("http://{target}")) {
        Ok(ep) => ep.connect_timeout(timeout).timeout(timeout),
        Err(e) => return (Verdict::Unhealthy, format!("bad target: {e}")),
    };
    let call = async {
        let ch = ep.connect().await.map_err(|e| {
            let source = std::error::Error::source(&e).map(|s| s.to_string());
            format!(
                "cannot connect: {}",
                source.unwrap_or_else(|| e.to_string())
            )
        })?;
        HealthClient::new(ch)
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .map(|r| r.into_inner().status)
            .map_err(|s| format!("Check failed: {:?}: {}", s.code(), s.message()))
    };
    match tokio::time::timeout(timeout, call).await {
        Err(_) => (Verdict::Unknown, format!("no answer within {timeout:?}")),
        Ok(Err(e)) => (Verdict::Unhealthy, e),
        Ok(Ok(s)) => match ServingStatus::try_from(s) {
            Ok(ServingStatus::Serving) => (Verdict::Healthy, "SERVING".into()),
            Ok(ServingStatus::NotServing) => (Verdict::Unhealthy, "NOT_SERVING".into()),
            Ok(ServingStatus::ServiceUnknown) => (Verdict::Unhealthy, "SERVICE_UNKNOWN".into()),
            Ok(ServingStatus::Unknown) | Err(_) => (Verdict::Unknown, format!("status {s}")),
        },
    }
}

async fn tcp(
    State(st): State<AppState>,
    Path(target): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let timeout = admit(&st, &target, &headers).await?;
    let (v, detail) =
        match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(&target)).await {
            Err(_) => (
                Verdict::Unknown,
                format!("no connection within {timeout:?}"),
            ),
            Ok(Err(e)) => (Verdict::Unhealthy, format!("cannot connect: {e}")),
            Ok(Ok(s)) => {
                // Close at once with a reset (MADR 047: SO_LINGER 0), so
                // probing leaves no TIME_WAIT behind.
                let _ = s.set_zero_linger();
                (Verdict::Healthy, "connected".into())
            }
        };
    debug!(%target, verdict = v.word(), %detail, "TCP probe");
    Ok(answer(&st, 1, v, &detail))
}
