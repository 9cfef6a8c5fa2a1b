//! Simulated auth servers: each serves `grpc.health.v1.Health` on its own
//! loopback port. `Standard` is tonic-health's own service; `CheckOnly`
//! answers `Watch` with UNIMPLEMENTED, like an older server, so Lifeline must
//! poll; `NoHealth` answers both with UNIMPLEMENTED, like a Teleport Auth
//! from before it served health. `stop()` crashes the server: open streams
//! break, new calls fail.

use std::net::SocketAddr;
use std::pin::Pin;

use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_stream::StreamExt;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};
use tonic_health::server::{HealthReporter, HealthService};
use tonic_health::ServingStatus;

use lifeline::proto::health::health_server::{Health, HealthServer};
use lifeline::proto::health::{health_check_response, HealthCheckRequest, HealthCheckResponse};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthFlavor {
    /// tonic-health: Watch streams, NOT_FOUND for an unknown service.
    Standard,
    /// Watch is UNIMPLEMENTED; only Check works.
    CheckOnly,
    /// Neither is served (Teleport's Auth before January 2026, v17 and
    /// older): only the `auth_server` heartbeat says anything.
    NoHealth,
}

pub struct SimAuth {
    pub name: String,
    pub addr: SocketAddr,
    pub flavor: AuthFlavor,
    reporter: Option<HealthReporter>,
    check_only: Option<watch::Sender<ServingStatus>>,
    crashed: watch::Sender<bool>,
    stop: CancellationToken,
}

impl SimAuth {
    /// Serves health on a port of its own; over mutual TLS when `tls`.
    pub async fn start(
        name: String,
        flavor: AuthFlavor,
        tls: Option<Arc<rustls::ServerConfig>>,
        parent: &CancellationToken,
    ) -> std::io::Result<SimAuth> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let stop = parent.child_token();
        let (crashed, crashed_rx) = watch::channel(false);
        let mut server = tonic::transport::Server::builder();
        let (router, reporter, check_only) = match flavor {
            AuthFlavor::Standard => {
                let reporter = HealthReporter::new();
                let inner = HealthService::from_health_reporter(reporter.clone());
                let svc = HealthServer::new(Crashable {
                    inner,
                    crashed: crashed_rx,
                });
                (server.add_service(svc), Some(reporter), None)
            }
            AuthFlavor::NoHealth => {
                let svc = HealthServer::new(NoHealth {
                    crashed: crashed_rx,
                });
                (server.add_service(svc), None, None)
            }
            AuthFlavor::CheckOnly => {
                let (tx, rx) = watch::channel(ServingStatus::Serving);
                let svc = HealthServer::new(CheckOnly {
                    status: rx,
                    crashed: crashed_rx,
                });
                (server.add_service(svc), None, Some(tx))
            }
        };
        tokio::spawn(super::serve::serve(
            router,
            listener,
            tls.map(super::serve::Front::Direct),
            None,
            stop.clone(),
            false,
        ));
        Ok(SimAuth {
            name,
            addr,
            flavor,
            reporter,
            check_only,
            crashed,
            stop,
        })
    }

    pub async fn set_status(&self, status: ServingStatus) {
        if let Some(r) = &self.reporter {
            r.set_service_status("", status).await;
        }
        if let Some(tx) = &self.check_only {
            tx.send_replace(status);
        }
    }

    /// Stops serving entirely (a crashed auth server).
    pub fn stop(&self) {
        self.crashed.send_replace(true);
        self.stop.cancel();
    }
}

fn crash_error() -> Status {
    Status::unavailable("auth server crashed")
}

/// tonic-health's service, plus a crash switch.
struct Crashable {
    inner: HealthService,
    crashed: watch::Receiver<bool>,
}

#[tonic::async_trait]
impl Health for Crashable {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if *self.crashed.borrow() {
            return Err(crash_error());
        }
        self.inner.check(req).await
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if *self.crashed.borrow() {
            return Err(crash_error());
        }
        let mut inner = self.inner.watch(req).await?.into_inner();
        let mut crashed = self.crashed.clone();
        let stream = async_stream::stream! {
            loop {
                let item = tokio::select! {
                    r = crashed.wait_for(|c| *c) => { drop(r); None }
                    item = inner.next() => Some(item),
                };
                match item {
                    None => {
                        yield Err(crash_error());
                        return;
                    }
                    Some(Some(item)) => yield item,
                    Some(None) => return,
                }
            }
        };
        Ok(Response::new(Box::pin(stream)))
    }
}

/// What an Auth without `grpc.health.v1` answers: tonic's own answer for
/// a service it does not serve.
struct NoHealth {
    crashed: watch::Receiver<bool>,
}

fn unserved() -> Status {
    Status::unimplemented("unknown service grpc.health.v1.Health")
}

#[tonic::async_trait]
impl Health for NoHealth {
    async fn check(
        &self,
        _req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if *self.crashed.borrow() {
            return Err(crash_error());
        }
        Err(unserved())
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        if *self.crashed.borrow() {
            return Err(crash_error());
        }
        Err(unserved())
    }
}

struct CheckOnly {
    status: watch::Receiver<ServingStatus>,
    crashed: watch::Receiver<bool>,
}

type WatchStream =
    Pin<Box<dyn futures::Stream<Item = Result<HealthCheckResponse, Status>> + Send + 'static>>;

#[tonic::async_trait]
impl Health for CheckOnly {
    async fn check(
        &self,
        req: Request<HealthCheckRequest>,
    ) -> Result<Response<HealthCheckResponse>, Status> {
        if *self.crashed.borrow() {
            return Err(crash_error());
        }
        if !req.get_ref().service.is_empty() {
            return Err(Status::not_found("service not registered"));
        }
        let s = match *self.status.borrow() {
            ServingStatus::Serving => health_check_response::ServingStatus::Serving,
            ServingStatus::NotServing => health_check_response::ServingStatus::NotServing,
            ServingStatus::Unknown => health_check_response::ServingStatus::Unknown,
        };
        Ok(Response::new(HealthCheckResponse { status: s as i32 }))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _req: Request<HealthCheckRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        Err(Status::unimplemented(
            "Watch is not implemented by this server",
        ))
    }
}
