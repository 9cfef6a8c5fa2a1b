//! TLS listeners: one task accepts TCP connections and runs each handshake
//! in its own task (bounded in number and in time, so a slow or silent
//! client holds up no one), and hands finished ones to the server: axum
//! through [`HttpsListener`], tonic through [`incoming`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info_span, Instrument};

use crate::stats::Stats;

/// A handshake not finished by then is dropped.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Handshakes in progress at once per listener; beyond it, accepting waits.
pub const MAX_HANDSHAKES: usize = 256;
/// Finished connections waiting for the server to take them.
const READY_QUEUE: usize = 64;

/// Which listener, for the handshake failure counter's label.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    Http = 0,
    Grpc = 1,
}

impl Which {
    pub const ALL: [Which; 2] = [Which::Http, Which::Grpc];

    pub fn as_str(self) -> &'static str {
        match self {
            Which::Http => "http",
            Which::Grpc => "grpc",
        }
    }
}

pub type Conn = (TlsStream<TcpStream>, SocketAddr);

/// Accepts on `listener` until `stop`, handshaking with `config`.
pub fn accept(
    listener: TcpListener,
    config: Arc<rustls::ServerConfig>,
    which: Which,
    stats: Arc<Stats>,
    stop: CancellationToken,
) -> mpsc::Receiver<Conn> {
    let (tx, rx) = mpsc::channel(READY_QUEUE);
    let acceptor = TlsAcceptor::from(config);
    let slots = Arc::new(Semaphore::new(MAX_HANDSHAKES));
    let span = info_span!("tls.accept", listener = which.as_str());
    tokio::spawn(
        async move {
            loop {
                let slot = tokio::select! {
                    _ = stop.cancelled() => return,
                    s = slots.clone().acquire_owned() => match s {
                        Ok(s) => s,
                        Err(_) => return,
                    },
                };
                let (tcp, peer) = tokio::select! {
                    _ = stop.cancelled() => return,
                    r = listener.accept() => match r {
                        Ok(c) => c,
                        // Out of file descriptors and the like: wait, retry.
                        Err(e) => {
                            Stats::inc(&stats.accept_errors);
                            debug!(error = %e, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    },
                };
                let _ = tcp.set_nodelay(true);
                let (acceptor, tx, stats) = (acceptor.clone(), tx.clone(), stats.clone());
                tokio::spawn(async move {
                    let _slot = slot;
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        // The client sees the alert; a refused client
                        // certificate, an untrusted server one, plaintext
                        // spoken to a TLS port all end here.
                        Ok(Err(e)) => {
                            Stats::inc(&stats.tls_handshake_failures[which as usize]);
                            debug!(%peer, error = %e, "TLS handshake failed");
                        }
                        Err(_) => {
                            Stats::inc(&stats.tls_handshake_failures[which as usize]);
                            debug!(%peer, "TLS handshake timed out");
                        }
                    }
                });
            }
        }
        .instrument(span),
    );
    rx
}

/// Finished handshakes as tonic's incoming stream.
pub fn incoming(
    rx: mpsc::Receiver<Conn>,
) -> impl Stream<Item = Result<TlsStream<TcpStream>, std::io::Error>> {
    ReceiverStream::new(rx).map(|(tls, _)| Ok(tls))
}

/// Finished handshakes as an axum listener.
pub struct HttpsListener {
    rx: mpsc::Receiver<Conn>,
    local: SocketAddr,
}

impl HttpsListener {
    pub fn new(rx: mpsc::Receiver<Conn>, local: SocketAddr) -> HttpsListener {
        HttpsListener { rx, local }
    }
}

impl axum::serve::Listener for HttpsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The acceptor stopped: so is the server, by its own shutdown.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}
