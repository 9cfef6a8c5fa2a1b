//! Serving the simulator's gRPC on a listener, plaintext or over mutual
//! TLS. Over TLS, a connection that negotiated `http/1.1` goes to an HTTP
//! router instead (Teleport serves its HTTPS API on the Auth listener).

use std::sync::Arc;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::server::Router;
use tracing::debug;

/// Serves `router` on `listener` until `stop`: plaintext without `tls`;
/// with it, TLS connections, `http/1.1` ones to `http` when given.
pub async fn serve(
    router: Router,
    listener: TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    http: Option<axum::Router>,
    stop: CancellationToken,
) {
    let Some(tls) = tls else {
        let _ = router
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), stop.cancelled_owned())
            .await;
        return;
    };
    let (tx, rx) = mpsc::channel::<
        std::io::Result<tokio_rustls::server::TlsStream<tokio::net::TcpStream>>,
    >(64);
    let acceptor = TlsAcceptor::from(tls);
    let stop2 = stop.clone();
    tokio::spawn(async move {
        loop {
            let (tcp, peer) = tokio::select! {
                _ = stop2.cancelled() => return,
                r = listener.accept() => match r {
                    Ok(c) => c,
                    Err(e) => { debug!(error = %e, "sim: accept failed"); continue; }
                },
            };
            let _ = tcp.set_nodelay(true);
            let (acceptor, tx, http) = (acceptor.clone(), tx.clone(), http.clone());
            tokio::spawn(async move {
                match acceptor.accept(tcp).await {
                    Ok(tls) => {
                        let http1 = tls.get_ref().1.alpn_protocol() == Some(b"http/1.1");
                        match (http1, http) {
                            (true, Some(app)) => {
                                let svc = TowerToHyperService::new(app);
                                let _ = hyper::server::conn::http1::Builder::new()
                                    .serve_connection(TokioIo::new(tls), svc)
                                    .await;
                            }
                            _ => {
                                let _ = tx.send(Ok(tls)).await;
                            }
                        }
                    }
                    // The client's certificate refused, a wrong ALPN: the
                    // client sees the alert.
                    Err(e) => debug!(%peer, error = %e, "sim: TLS handshake failed"),
                }
            });
        }
    });
    let _ = router
        .serve_with_incoming_shutdown(ReceiverStream::new(rx), stop.cancelled_owned())
        .await;
}
