//! Auth server health: one `grpc.health.v1.Health/Watch` stream per auth
//! server (addresses from the cluster's `auth_server` resources and from
//! static config). Servers differ from the spec, so answers are normalised:
//! NOT_FOUND from `Watch` (tonic-health's answer for an unknown service) is
//! SERVICE_UNKNOWN; UNIMPLEMENTED on `Watch` falls back to polling `Check`;
//! any other end of the stream makes the server UNKNOWN (never NOT_SERVING)
//! and is retried with backoff.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Endpoint;
use tonic::Code;
use tracing::{debug, info_span, warn, Instrument};

use crate::backoff::Backoff;
use crate::fleet::{Command, FleetHandle, HealthUpdate};
use crate::model::{Health, HealthMode};
use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_client::HealthClient;
use crate::proto::health::HealthCheckRequest;
use crate::stats::Stats;

#[derive(Clone, Debug)]
pub struct HealthWatchConfig {
    pub service: String,
    pub timeout: Duration,
    pub poll_interval: Duration,
    pub backoff: Backoff,
}

/// Keeps one watcher per auth server, following the announced set.
pub async fn run(
    cfg: HealthWatchConfig,
    static_targets: Vec<(String, String)>,
    mut cluster_targets: watch::Receiver<BTreeMap<String, String>>,
    fleet: FleetHandle,
    stats: Arc<Stats>,
    shutdown: CancellationToken,
) {
    let mut running: HashMap<String, (String, CancellationToken)> = HashMap::new();
    loop {
        let mut desired: BTreeMap<String, String> = cluster_targets.borrow_and_update().clone();
        // Static configuration wins for a name it lists.
        for (name, addr) in &static_targets {
            desired.insert(name.clone(), addr.clone());
        }
        running.retain(|name, (addr, token)| {
            let keep = desired.get(name) == Some(addr);
            if !keep {
                token.cancel();
            }
            keep
        });
        for (name, addr) in desired {
            if running.contains_key(&name) {
                continue;
            }
            let token = shutdown.child_token();
            let span = info_span!("health.watch", auth_server = %name, %addr);
            tokio::spawn(
                watch_one(
                    name.clone(),
                    addr.clone(),
                    cfg.clone(),
                    fleet.clone(),
                    stats.clone(),
                    token.clone(),
                )
                .instrument(span),
            );
            running.insert(name, (addr, token));
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            r = cluster_targets.changed() => if r.is_err() { return },
        }
    }
}

fn normalise(status: i32) -> Health {
    match ServingStatus::try_from(status) {
        Ok(ServingStatus::Serving) => Health::Serving,
        Ok(ServingStatus::NotServing) => Health::NotServing,
        Ok(ServingStatus::ServiceUnknown) => Health::ServiceUnknown,
        _ => Health::Unknown,
    }
}

struct Reporter {
    name: String,
    addr: String,
    fleet: FleetHandle,
    last: Option<(Health, HealthMode)>,
}

impl Reporter {
    async fn report(&mut self, health: Health, mode: HealthMode, detail: String) -> bool {
        if self.last == Some((health, mode)) {
            return true;
        }
        self.last = Some((health, mode));
        self.fleet
            .send(Command::Health(HealthUpdate {
                auth_server: self.name.clone(),
                addr: self.addr.clone(),
                health,
                mode,
                detail,
            }))
            .await
            .is_ok()
    }
}

/// Why a session ended, and whether it ever got an answer.
struct End {
    detail: String,
    answered: bool,
    already_reported: bool,
}

async fn watch_one(
    name: String,
    addr: String,
    cfg: HealthWatchConfig,
    fleet: FleetHandle,
    stats: Arc<Stats>,
    cancel: CancellationToken,
) {
    let mut rep = Reporter {
        name,
        addr: addr.clone(),
        fleet,
        last: None,
    };
    let mut attempt = 0u32;
    loop {
        let end = tokio::select! {
            _ = cancel.cancelled() => return,
            e = session(&addr, &cfg, &mut rep) => e,
        };
        let Some(end) = end else { return };
        Stats::inc(&stats.health_failures);
        if end.answered {
            attempt = 0;
        }
        if !end.already_reported {
            let mode = rep.last.map_or(HealthMode::Watch, |l| l.1);
            if !rep.report(Health::Unknown, mode, end.detail.clone()).await {
                return;
            }
        }
        let delay = cfg.backoff.delay(attempt);
        attempt = attempt.saturating_add(1);
        warn!(detail = %end.detail, retry_in_ms = delay.as_millis() as u64, "auth health not available (UNKNOWN); retrying");
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// One connection's worth of watching. `None`: the fleet is gone.
async fn session(addr: &str, cfg: &HealthWatchConfig, rep: &mut Reporter) -> Option<End> {
    let end = |detail: String, answered: bool| {
        Some(End {
            detail,
            answered,
            already_reported: false,
        })
    };
    let uri = format!("http://{addr}");
    let endpoint = match Endpoint::from_shared(uri) {
        Ok(e) => e.connect_timeout(cfg.timeout).tcp_nodelay(true),
        Err(e) => return end(format!("invalid address {addr:?}: {e}"), false),
    };
    let channel = match endpoint.connect().await {
        Ok(c) => c,
        Err(e) => {
            return end(
                format!("connect failed: {}", crate::backoff::chain(&e)),
                false,
            )
        }
    };
    let mut client = HealthClient::new(channel);
    let req = HealthCheckRequest {
        service: cfg.service.clone(),
    };
    match client.watch(req.clone()).await {
        Ok(resp) => {
            let mut stream = resp.into_inner();
            let mut answered = false;
            loop {
                match stream.message().await {
                    Ok(Some(msg)) => {
                        answered = true;
                        let h = normalise(msg.status);
                        debug!(health = h.as_str(), "health");
                        if !rep.report(h, HealthMode::Watch, "watch".into()).await {
                            return None;
                        }
                    }
                    Ok(None) => return end("watch stream ended".into(), answered),
                    Err(s) => return end(format!("watch stream failed: {s}"), answered),
                }
            }
        }
        Err(s) if s.code() == Code::NotFound => {
            if !rep
                .report(
                    Health::ServiceUnknown,
                    HealthMode::Watch,
                    format!("service {:?} not found", cfg.service),
                )
                .await
            {
                return None;
            }
            Some(End {
                detail: format!("service {:?} not found", cfg.service),
                answered: true,
                already_reported: true,
            })
        }
        Err(s) if s.code() == Code::Unimplemented => {
            // An older server: poll Check instead.
            let mut answered = false;
            loop {
                let r = tokio::time::timeout(cfg.timeout, client.check(req.clone())).await;
                let (h, detail) = match r {
                    Ok(Ok(resp)) => (normalise(resp.into_inner().status), "check".to_string()),
                    Ok(Err(s)) if s.code() == Code::NotFound => (
                        Health::ServiceUnknown,
                        format!("service {:?} not found", cfg.service),
                    ),
                    Ok(Err(s)) => return end(format!("check failed: {s}"), answered),
                    Err(_) => return end("check timed out".into(), answered),
                };
                answered = true;
                if !rep.report(h, HealthMode::Poll, detail).await {
                    return None;
                }
                tokio::time::sleep(cfg.poll_interval).await;
            }
        }
        Err(s) => end(format!("watch failed: {s}"), false),
    }
}
