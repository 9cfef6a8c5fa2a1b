//! Serving a listener, plain or TLS alike: one function per listener, the
//! TLS handshakes (when `server.tls_cert` is set) in front of the same
//! server. What the connections carry is the caller's (an axum router, a
//! tonic router).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::serve::ListenerExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tonic::body::Body;
use tonic::service::Routes;
use tonic::transport::server::{Connected, Router};
use tower::{Layer, Service};
use tracing::error;

use super::{coalesce, held, limit, listen, ServerTls, Which};
use crate::stats::Stats;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves `app` (the API and dashboard) on `listener` until `stop`: HTTPS
/// with `tls`, plain HTTP without, each connection held within `bounds`
/// (see [`held`]); a failure is logged once.
pub fn http(
    listener: TcpListener,
    local: SocketAddr,
    tls: Option<&ServerTls>,
    app: axum::Router,
    bounds: held::Bounds,
    stats: Arc<Stats>,
    stop: CancellationToken,
) -> JoinHandle<()> {
    match tls {
        None => {
            // As on the TLS path: a live view's small frames go out at
            // once, not behind Nagle's algorithm and a delayed ACK.
            let listener = listener.tap_io(|tcp| {
                let _ = tcp.set_nodelay(true);
            });
            tokio::spawn(held::serve(listener, app, bounds, stats, stop))
        }
        Some(t) => {
            let ready = listen::accept(
                listener,
                t.http.clone(),
                Which::Http,
                stats.clone(),
                stop.clone(),
            );
            let listener = listen::HttpsListener::new(ready, local);
            tokio::spawn(held::serve(listener, app, bounds, stats, stop))
        }
    }
}

/// Serves `router` (`AgentSignals`, health, service config) on `listener`
/// until `stop`, at most `max_connections` at once: TLS with `tls`,
/// plaintext HTTP/2 without; a failure is logged once.
pub fn grpc<L, B>(
    listener: TcpListener,
    tls: Option<&ServerTls>,
    router: Router<L>,
    max_connections: usize,
    stats: Arc<Stats>,
    stop: CancellationToken,
) -> JoinHandle<()>
where
    L: Layer<Routes> + Send + 'static,
    L::Service:
        Service<hyper::Request<Body>, Response = hyper::Response<B>> + Clone + Send + 'static,
    <L::Service as Service<hyper::Request<Body>>>::Future: Send,
    <L::Service as Service<hyper::Request<Body>>>::Error: Into<BoxError> + Send,
    B: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    match tls {
        None => {
            // As on the TLS path: a signal or discovery delta is a small
            // frame, sent at once rather than held by Nagle's algorithm
            // until the agent's delayed ACK (up to 40 ms).
            let incoming = TcpListenerStream::new(listener).map(|conn| {
                conn.inspect(|tcp| {
                    let _ = tcp.set_nodelay(true);
                })
            });
            let incoming = limit::patient(incoming, stats.clone());
            serve_grpc(
                router,
                limit::limit(incoming, max_connections, stats),
                stop,
                "gRPC",
            )
        }
        Some(t) => {
            let ready = listen::accept(
                listener,
                t.grpc.clone(),
                Which::Grpc,
                stats.clone(),
                stop.clone(),
            );
            serve_grpc(
                router,
                limit::limit(listen::incoming(ready), max_connections, stats),
                stop,
                "gRPC (TLS)",
            )
        }
    }
}

fn serve_grpc<L, B, I, IO>(
    router: Router<L>,
    incoming: I,
    stop: CancellationToken,
    what: &'static str,
) -> JoinHandle<()>
where
    L: Layer<Routes> + Send + 'static,
    L::Service:
        Service<hyper::Request<Body>, Response = hyper::Response<B>> + Clone + Send + 'static,
    <L::Service as Service<hyper::Request<Body>>>::Future: Send,
    <L::Service as Service<hyper::Request<Body>>>::Error: Into<BoxError> + Send,
    B: hyper::body::Body<Data = hyper::body::Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
    I: Stream<Item = Result<IO, std::io::Error>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Connected + Unpin + Send + 'static,
    IO::ConnectInfo: Clone + Send + Sync + 'static,
{
    use tokio_stream::StreamExt;
    let incoming = incoming.map(|c| c.map(coalesce::Coalesced::new));
    tokio::spawn(async move {
        let served = router
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await;
        if let Err(e) = served {
            error!(error = %e, "{what} server failed");
        }
    })
}
