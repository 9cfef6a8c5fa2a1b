//! The gRPC listener: agents' `AgentSignals` streams (behind the join
//! check), the client load-balancing policy (`ServiceConfig`) and the
//! standard health service, as `[server]` says.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tonic::service::interceptor::InterceptedService;
use tower_http::trace::{DefaultMakeSpan, DefaultOnFailure, DefaultOnResponse, TraceLayer};
use tracing::Level;

use super::hub::Hub;
use super::service_config;
use crate::access::Access;
use crate::config::ServerConfig;
use crate::supervise::Runtime;
use crate::tls::ServerTls;

/// Most streams one HTTP/2 connection may hold open: far above what one
/// agent needs (its signal stream, a health watch, a config call), and
/// room for a stream-balancing proxy that carries many agents on one
/// connection, while no single peer can open streams without end.
const GRPC_MAX_STREAMS_PER_CONNECTION: u32 = 1000;

/// How long a gRPC keepalive ping may go unanswered.
const GRPC_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves the gRPC services on `listener` (TLS with `tls`), a critical
/// task on `rt`. The load-balancing policy follows `lb_policy`.
pub async fn start(
    cfg: &ServerConfig,
    listener: TcpListener,
    tls: Option<&ServerTls>,
    hub: &Arc<Hub>,
    access: Arc<Access>,
    lb_policy: tokio::sync::watch::Receiver<crate::domain::LbPolicy>,
    rt: &mut Runtime,
) {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    // The service shares the statuses: SERVING stays after the reporter
    // is gone.
    reporter
        .set_service_status("", tonic_health::ServingStatus::Serving)
        .await;
    let client_cert = tls.is_some_and(|t| t.agent_client_ca);
    let router = tonic::transport::Server::builder()
        // A connection gone silent is found and closed, so the agents'
        // streams on it end and their names are free again.
        .http2_keepalive_interval(cfg.grpc_keepalive)
        .http2_keepalive_timeout(Some(GRPC_KEEPALIVE_TIMEOUT))
        .max_concurrent_streams(GRPC_MAX_STREAMS_PER_CONNECTION)
        .layer(
            TraceLayer::new_for_grpc()
                .make_span_with(DefaultMakeSpan::new().level(Level::INFO))
                .on_response(DefaultOnResponse::new().level(Level::DEBUG))
                .on_failure(DefaultOnFailure::new().level(Level::DEBUG)),
        )
        .add_service(health_service)
        .add_service(service_config::Service::server(lb_policy))
        .add_service(InterceptedService::new(
            hub.server(),
            crate::access::join_check(access, client_cert, rt.stats.clone()),
        ));
    let served = crate::tls::serve::grpc(
        listener,
        tls,
        router,
        cfg.grpc_max_connections,
        rt.stats.clone(),
        rt.shutdown.clone(),
    );
    rt.tasks.critical("grpc server", served);
}
