//! Auth server health: one `grpc.health.v1.Health/Watch` stream per auth
//! server (addresses from the cluster's `auth_server` resources and from
//! static config). Servers differ from the spec, so answers are normalised:
//! NOT_FOUND from `Watch` (tonic-health's answer for an unknown service) is
//! SERVICE_UNKNOWN; UNIMPLEMENTED on `Watch` falls back to polling `Check`,
//! and UNIMPLEMENTED on `Check` too is NOT_SERVED (an Auth from before
//! Teleport served health), looked at again at the backoff's pace. Any
//! other end of the stream makes a server that has answered before
//! UNKNOWN (never NOT_SERVING), and one that never has NEVER_REACHED;
//! either is retried with backoff. NOT_SERVED and NEVER_REACHED leave the
//! verdict to the auth server's own heartbeat.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;
use tonic::Code;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::backoff::Backoff;
use crate::domain::{text, Health, HealthMode};
use crate::fleet::{Command, FleetHandle, HealthUpdate};
use crate::proto::health::health_check_response::ServingStatus;
use crate::proto::health::health_client::HealthClient;
use crate::proto::health::HealthCheckRequest;
use crate::stats::Stats;

#[derive(Clone, Debug)]
pub struct HealthWatchConfig {
    /// Plaintext, or the cluster's mutual TLS (Teleport).
    pub dialer: crate::ingest::dial::Dialer,
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

/// Where a session's observations go. `false`: nobody listens any more.
trait Report {
    async fn report(&mut self, health: Health, mode: HealthMode, detail: String) -> bool;
}

struct Reporter {
    name: String,
    addr: String,
    fleet: FleetHandle,
    last: Option<(Health, HealthMode)>,
}

impl Report for Reporter {
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
                // A status message is the auth server's text: bounded and
                // cleaned before the history or a log sees it.
                detail: text::bounded(&detail, 1024),
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
    /// UNIMPLEMENTED on `Watch` and on `Check`: health is not served.
    not_served: bool,
}

/// What an auth server's health service has shown since Lifeline started:
/// it decides what a failure means.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shown {
    /// No call has succeeded: NEVER_REACHED.
    Nothing,
    /// It answered: a failure is UNKNOWN, and the grace runs.
    Health,
    /// It does not serve health: failures change nothing, the heartbeat
    /// decides.
    NotServed,
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
    let mut shown = Shown::Nothing;
    loop {
        let end = tokio::select! {
            _ = cancel.cancelled() => return,
            e = session(&addr, &cfg, &mut rep) => e,
        };
        let Some(end) = end else { return };
        if end.not_served {
            if shown != Shown::NotServed {
                info!(detail = %text::excerpt(&end.detail), "auth server does not serve grpc.health.v1: its own heartbeat decides its health");
            }
            shown = Shown::NotServed;
            if !rep
                .report(Health::NotServed, HealthMode::Poll, end.detail.clone())
                .await
            {
                return;
            }
        } else {
            Stats::inc(&stats.health_failures);
            if end.answered {
                attempt = 0;
                shown = Shown::Health;
            }
            let mode = rep.last.map_or(HealthMode::Watch, |l| l.1);
            let health = match shown {
                Shown::Nothing => Some(Health::NeverReached),
                Shown::Health => Some(Health::Unknown),
                Shown::NotServed => None,
            };
            if let (false, Some(health)) = (end.already_reported, health) {
                if !rep.report(health, mode, end.detail.clone()).await {
                    return;
                }
            }
        }
        // A server that does not serve health is looked at again at the
        // backoff's pace too: it may be upgraded.
        let delay = cfg.backoff.delay(attempt);
        attempt = attempt.saturating_add(1);
        if !end.not_served {
            warn!(detail = %text::excerpt(&end.detail), retry_in_ms = delay.as_millis() as u64, shown = ?shown, "auth health not available; retrying");
        }
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

fn end(detail: String, answered: bool) -> Option<End> {
    Some(End {
        detail,
        answered,
        already_reported: false,
        not_served: false,
    })
}

/// One connection's worth of watching. `None`: the fleet is gone.
async fn session(addr: &str, cfg: &HealthWatchConfig, rep: &mut Reporter) -> Option<End> {
    let channel = match cfg.dialer.channel(addr, cfg.timeout).await {
        Ok(c) => c,
        Err(e) => return end(e.to_string(), false),
    };
    follow(channel, cfg, rep).await
}

/// Watches (or polls) one server's health over `channel` and reports what
/// it says, normalised, until the stream ends or nobody listens (`None`).
async fn follow(channel: Channel, cfg: &HealthWatchConfig, rep: &mut impl Report) -> Option<End> {
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
                not_served: false,
            })
        }
        Err(s) if s.code() == Code::Unimplemented => {
            // An older server: poll Check instead.
            let mut answered = false;
            loop {
                let r = tokio::time::timeout(cfg.timeout, client.check(req.clone())).await;
                let (h, detail) =
                    match r {
                        Ok(Ok(resp)) => (normalise(resp.into_inner().status), "check".to_string()),
                        Ok(Err(s)) if s.code() == Code::NotFound => (
                            Health::ServiceUnknown,
                            format!("service {:?} not found", cfg.service),
                        ),
                        Ok(Err(s)) if s.code() == Code::Unimplemented => return Some(End {
                            detail:
                                "grpc.health.v1 is not served (UNIMPLEMENTED on Watch and Check)"
                                    .into(),
                            answered: false,
                            already_reported: false,
                            not_served: true,
                        }),
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

/// The normalisation rules against real tonic servers, in process: each
/// test's channel runs over a `tokio::io::duplex` pipe, since a socket would
/// add nothing to what is tested here.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::health::health_server::{Health as HealthService, HealthServer};
    use crate::proto::health::HealthCheckResponse;
    use tokio::sync::mpsc;
    use tonic::{Request, Response, Status};

    type Seen = (Health, HealthMode, String);
    /// How a session ended: (detail, answered, already reported).
    type Ended = Option<(String, bool, bool)>;

    /// Reports into a channel; the test ends a session by dropping it.
    struct Recorder(mpsc::Sender<Seen>);

    impl Report for Recorder {
        async fn report(&mut self, health: Health, mode: HealthMode, detail: String) -> bool {
            self.0.send((health, mode, detail)).await.is_ok()
        }
    }

    /// A channel to `router`, served over an in-memory pipe.
    async fn in_process(router: tonic::transport::server::Router) -> Channel {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(
            router.serve_with_incoming(tokio_stream::once(Ok::<_, std::io::Error>(server))),
        );
        let mut client = Some(client);
        tonic::transport::Endpoint::from_static("http://in-process")
            .connect_with_connector(tower::service_fn(move |_| {
                let c = client.take();
                async move {
                    c.map(hyper_util::rt::TokioIo::new)
                        .ok_or_else(|| std::io::Error::other("one connection per pipe"))
                }
            }))
            .await
            .expect("in-process channel")
    }

    fn cfg(service: &str) -> HealthWatchConfig {
        HealthWatchConfig {
            dialer: crate::ingest::dial::Dialer::Plain,
            service: service.into(),
            timeout: Duration::from_secs(5),
            poll_interval: Duration::from_millis(10),
            backoff: Backoff::new(Duration::from_millis(10), Duration::from_secs(1)),
        }
    }

    /// Follows `channel` in a task; returns what it reports and how it ends.
    fn start(
        channel: Channel,
        service: &str,
    ) -> (mpsc::Receiver<Seen>, tokio::task::JoinHandle<Ended>) {
        let (tx, rx) = mpsc::channel(16);
        let cfg = cfg(service);
        let task = tokio::spawn(async move {
            follow(channel, &cfg, &mut Recorder(tx))
                .await
                .map(|e| (e.detail, e.answered, e.already_reported))
        });
        (rx, task)
    }

    #[tokio::test]
    async fn watch_reports_each_status_and_not_found_is_service_unknown() {
        let (reporter, svc) = tonic_health::server::health_reporter();
        reporter
            .set_service_status("auth", tonic_health::ServingStatus::Serving)
            .await;
        let router = tonic::transport::Server::builder().add_service(svc);
        let channel = in_process(router).await;

        let (mut seen, task) = start(channel.clone(), "auth");
        let first = seen.recv().await.expect("a report");
        assert_eq!(first.0, Health::Serving);
        assert_eq!(first.1, HealthMode::Watch);
        reporter
            .set_service_status("auth", tonic_health::ServingStatus::NotServing)
            .await;
        assert_eq!(seen.recv().await.map(|s| s.0), Some(Health::NotServing));
        drop(seen);
        // The next change finds nobody listening: the session says so.
        reporter
            .set_service_status("auth", tonic_health::ServingStatus::Serving)
            .await;
        assert_eq!(task.await.expect("task"), None);

        let (mut seen, task) = start(channel, "no-such-service");
        let s = seen.recv().await.expect("a report");
        assert_eq!((s.0, s.1), (Health::ServiceUnknown, HealthMode::Watch));
        assert!(s.2.contains("no-such-service"), "{}", s.2);
        let (detail, answered, already_reported) =
            task.await.expect("task").expect("the session ends");
        assert!(answered && already_reported, "{detail}");
    }

    /// An older server: `Watch` is UNIMPLEMENTED, `Check` answers.
    struct CheckOnly;

    #[tonic::async_trait]
    impl HealthService for CheckOnly {
        async fn check(
            &self,
            _: Request<HealthCheckRequest>,
        ) -> Result<Response<HealthCheckResponse>, Status> {
            Ok(Response::new(HealthCheckResponse {
                status: ServingStatus::NotServing as i32,
            }))
        }

        type WatchStream = tokio_stream::Empty<Result<HealthCheckResponse, Status>>;

        async fn watch(
            &self,
            _: Request<HealthCheckRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            Err(Status::unimplemented("watch is not served here"))
        }
    }

    #[tokio::test]
    async fn unimplemented_watch_falls_back_to_polling_check() {
        let router = tonic::transport::Server::builder().add_service(HealthServer::new(CheckOnly));
        let (mut seen, task) = start(in_process(router).await, "");
        let s = seen.recv().await.expect("a report");
        assert_eq!((s.0, s.1), (Health::NotServing, HealthMode::Poll));
        drop(seen);
        assert_eq!(task.await.expect("task"), None);
    }

    /// A server whose `Watch` stream ends after one answer.
    struct OneAnswer;

    #[tonic::async_trait]
    impl HealthService for OneAnswer {
        async fn check(
            &self,
            _: Request<HealthCheckRequest>,
        ) -> Result<Response<HealthCheckResponse>, Status> {
            Err(Status::unimplemented("check"))
        }

        type WatchStream =
            tokio_stream::Iter<std::vec::IntoIter<Result<HealthCheckResponse, Status>>>;

        async fn watch(
            &self,
            _: Request<HealthCheckRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            Ok(Response::new(tokio_stream::iter(vec![Ok(
                HealthCheckResponse { status: 99 },
            )])))
        }
    }

    #[tokio::test]
    async fn an_unknown_status_is_unknown_and_an_ended_stream_ends_the_session() {
        let router = tonic::transport::Server::builder().add_service(HealthServer::new(OneAnswer));
        let (mut seen, task) = start(in_process(router).await, "");
        assert_eq!(seen.recv().await.map(|s| s.0), Some(Health::Unknown));
        let (detail, answered, already_reported) =
            task.await.expect("task").expect("the session ends");
        assert_eq!(detail, "watch stream ended");
        assert!(answered && !already_reported);
    }

    /// An Auth from before Teleport served health: both calls are
    /// UNIMPLEMENTED. The session ends saying so, having reported nothing:
    /// the caller reports NOT_SERVED, which never strands.
    struct NoHealth;

    #[tonic::async_trait]
    impl HealthService for NoHealth {
        async fn check(
            &self,
            _: Request<HealthCheckRequest>,
        ) -> Result<Response<HealthCheckResponse>, Status> {
            Err(Status::unimplemented(
                "unknown service grpc.health.v1.Health",
            ))
        }

        type WatchStream = tokio_stream::Empty<Result<HealthCheckResponse, Status>>;

        async fn watch(
            &self,
            _: Request<HealthCheckRequest>,
        ) -> Result<Response<Self::WatchStream>, Status> {
            Err(Status::unimplemented(
                "unknown service grpc.health.v1.Health",
            ))
        }
    }

    #[tokio::test]
    async fn health_not_served_at_all_ends_the_session_as_not_served() {
        let router = tonic::transport::Server::builder().add_service(HealthServer::new(NoHealth));
        let (tx, mut seen) = mpsc::channel(16);
        let cfg = cfg("");
        let end = follow(in_process(router).await, &cfg, &mut Recorder(tx))
            .await
            .expect("the session ends");
        assert!(end.not_served && !end.answered && !end.already_reported);
        assert!(end.detail.contains("not served"), "{}", end.detail);
        assert!(seen.try_recv().is_err(), "nothing reported by the session");
    }
}
