//! Serving the simulator's gRPC on a listener, plaintext or over mutual
//! TLS. Over TLS, a connection that negotiated `http/1.1` goes to an HTTP
//! router instead (Teleport serves its HTTPS API on the Auth listener).
//! In front of an Auth, a proxy's TLS routing ([`Front::Routing`]): the
//! ClientHello's ALPN picks the route and the Auth's own TLS finishes the
//! handshake, and the proxy's connection upgrade carries the same routed
//! TLS inside a WebSocket, straight or behind a layer-7 load balancer.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::{Sink, Stream};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_rustls::{LazyConfigAcceptor, TlsAcceptor};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{Connected, Router};
use tracing::debug;

/// A connection handed to the gRPC server: TLS over TCP, or over a
/// WebSocket the proxy's connection upgrade opened.
pub struct Conn(Pin<Box<dyn Io>>);

pub trait Io: AsyncRead + AsyncWrite + Send {}
impl<T: AsyncRead + AsyncWrite + Send> Io for T {}

impl Connected for Conn {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for Conn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.0.as_mut().poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0.as_mut().poll_shutdown(cx)
    }
}

type Incoming = mpsc::Sender<io::Result<Conn>>;

/// How connections reach the Auth's TLS.
#[derive(Clone)]
pub enum Front {
    /// Straight: the listener is the Auth's (`tls`).
    Direct(Arc<rustls::ServerConfig>),
    /// A proxy's TLS routing: a ClientHello whose first ALPN value is
    /// `auth_alpn` is handed to the Auth's TLS (which then negotiates
    /// `h2` itself); the upgrade probe's ALPN and plain HTTPS get the
    /// proxy's web TLS (`web`), where `GET /webapi/connectionupgrade`
    /// opens a WebSocket whose bytes are routed the same way. With
    /// `behind_balancer`, a layer-7 load balancer holds the listener: its
    /// TLS (`balancer`) ends every connection and only the upgrade passes.
    Routing {
        auth: Arc<rustls::ServerConfig>,
        web: Arc<rustls::ServerConfig>,
        balancer: Option<Arc<rustls::ServerConfig>>,
        auth_alpn: Vec<u8>,
        /// What came through the upgrade.
        upgrades: Arc<Upgrades>,
    },
}

/// Connections that came through the proxy's connection upgrade, and the
/// pongs their clients sent back to its pings.
#[derive(Default)]
pub struct Upgrades {
    pub connections: AtomicU64,
    pub pongs: AtomicU64,
}

/// The ALPN value Teleport's clients probe a proxy with.
const PROBE_ALPN: &[u8] = b"teleport-reversetunnel";
/// The proxy's WebSocket pings on an `alpn-ping` upgrade.
const PING_EVERY: Duration = Duration::from_secs(15);

/// Serves `router` on `listener` until `stop`: plaintext without `front`;
/// with it, TLS connections (straight or routed), `http/1.1` ones to
/// `http` when given. TLS connections always go without Nagle; plaintext
/// ones when `nodelay` (see `SimSpec::nodelay`).
pub async fn serve(
    router: Router,
    listener: TcpListener,
    front: Option<Front>,
    http: Option<axum::Router>,
    stop: CancellationToken,
    nodelay: bool,
) {
    let Some(front) = front else {
        // With Nagle, a listing's pages wait out the client's delayed ACK
        // now and then, and the simulator, not Lifeline, sets the pace of
        // a resync.
        let incoming = futures::StreamExt::map(TcpListenerStream::new(listener), move |r| {
            r.inspect(|tcp| {
                if nodelay {
                    let _ = tcp.set_nodelay(true);
                }
            })
        });
        let _ = router
            .serve_with_incoming_shutdown(incoming, stop.cancelled_owned())
            .await;
        return;
    };
    let (tx, rx) = mpsc::channel::<io::Result<Conn>>(64);
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
            let (front, tx, http) = (front.clone(), tx.clone(), http.clone());
            tokio::spawn(async move {
                // The client's certificate refused, a wrong ALPN: the
                // client sees the alert.
                if let Err(e) = accept(tcp, front, tx, http).await {
                    debug!(%peer, error = %e, "sim: connection refused");
                }
            });
        }
    });
    let _ = router
        .serve_with_incoming_shutdown(ReceiverStream::new(rx), stop.cancelled_owned())
        .await;
}

async fn accept(
    tcp: tokio::net::TcpStream,
    front: Front,
    tx: Incoming,
    http: Option<axum::Router>,
) -> io::Result<()> {
    match front {
        Front::Direct(tls) => auth(TlsAcceptor::from(tls).accept(tcp).await?, tx, http).await,
        Front::Routing {
            auth: auth_tls,
            web: _,
            balancer: Some(balancer),
            auth_alpn,
            upgrades,
        } => {
            let https = TlsAcceptor::from(balancer).accept(tcp).await?;
            let inner = upgraded(https, upgrades).await?;
            routed(inner, auth_tls, &auth_alpn, tx, http).await
        }
        Front::Routing {
            auth: auth_tls,
            web,
            balancer: None,
            auth_alpn,
            upgrades,
        } => {
            let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), tcp).await?;
            let alpn: Vec<Vec<u8>> = start
                .client_hello()
                .alpn()
                .map(|a| a.map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            if alpn.first() == Some(&auth_alpn) {
                return auth(start.into_stream(auth_tls).await?, tx, http).await;
            }
            let https = start.into_stream(web).await?;
            if alpn.iter().any(|a| a == PROBE_ALPN) {
                // The upgrade probe: the handshake was the answer.
                return Ok(());
            }
            let inner = upgraded(https, upgrades).await?;
            routed(inner, auth_tls, &auth_alpn, tx, http).await
        }
    }
}

/// TLS through the proxy's routing: only the Auth route is served.
async fn routed<S: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    s: S,
    auth_tls: Arc<rustls::ServerConfig>,
    auth_alpn: &[u8],
    tx: Incoming,
    http: Option<axum::Router>,
) -> io::Result<()> {
    let start = LazyConfigAcceptor::new(rustls::server::Acceptor::default(), s).await?;
    let first = start
        .client_hello()
        .alpn()
        .and_then(|mut a| a.next().map(<[u8]>::to_vec));
    if first.as_deref() != Some(auth_alpn) {
        return Err(io::Error::other("no route for this ALPN"));
    }
    auth(start.into_stream(auth_tls).await?, tx, http).await
}

/// An Auth's TLS connection: `http/1.1` to the HTTP API, the rest to gRPC.
async fn auth<S: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    tls: tokio_rustls::server::TlsStream<S>,
    tx: Incoming,
    http: Option<axum::Router>,
) -> io::Result<()> {
    let http1 = tls.get_ref().1.alpn_protocol() == Some(b"http/1.1");
    match (http1, http) {
        (true, Some(app)) => {
            let svc = TowerToHyperService::new(app);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), svc)
                .await;
        }
        _ => {
            let _ = tx.send(Ok(Conn(Box::pin(tls)))).await;
        }
    }
    Ok(())
}

/// The proxy's web API on `https`: `GET /webapi/connectionupgrade` as a
/// WebSocket with subprotocol `alpn` or `alpn-ping` (pinged), anything
/// else 404. Counted in `counts`, with the pongs that come back.
async fn upgraded<S: AsyncRead + AsyncWrite + Send + Unpin>(
    https: S,
    counts: Arc<Upgrades>,
) -> io::Result<WsBytes<S>> {
    let mut ping = false;
    // The shape tungstenite's handshake callback takes.
    #[allow(clippy::result_large_err)]
    let callback = |req: &Request, mut resp: Response| -> Result<Response, ErrorResponse> {
        let offered = req
            .headers()
            .get("Sec-WebSocket-Protocol")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        let protocol = offered
            .split(',')
            .map(str::trim)
            .find(|p| *p == "alpn-ping" || *p == "alpn");
        match (req.uri().path(), protocol) {
            ("/webapi/connectionupgrade", Some(p)) => {
                ping = p == "alpn-ping";
                if let Ok(v) = p.parse() {
                    resp.headers_mut().insert("Sec-WebSocket-Protocol", v);
                }
                Ok(resp)
            }
            _ => {
                let mut not_found = ErrorResponse::new(Some("not found".into()));
                *not_found.status_mut() = hyper::StatusCode::NOT_FOUND;
                Err(not_found)
            }
        }
    };
    let ws = tokio_tungstenite::accept_hdr_async(https, callback)
        .await
        .map_err(io::Error::other)?;
    counts.connections.fetch_add(1, Ordering::SeqCst);
    Ok(WsBytes {
        ws,
        read: Bytes::new(),
        ping: ping.then(|| tokio::time::interval(PING_EVERY)),
        counts,
    })
}

/// The routed bytes of an upgraded connection, as the proxy reads them.
struct WsBytes<S> {
    ws: WebSocketStream<S>,
    read: Bytes,
    ping: Option<tokio::time::Interval>,
    counts: Arc<Upgrades>,
}

fn ws_io(e: tungstenite::Error) -> io::Error {
    io::Error::other(e)
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsBytes<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let due = self
            .ping
            .as_mut()
            .is_some_and(|p| p.poll_tick(cx).is_ready());
        if due {
            let ws = Pin::new(&mut self.ws);
            let _ = ws
                .start_send(Message::Ping(Bytes::from_static(b"sim")))
                .map_err(ws_io);
            let _ = Pin::new(&mut self.ws).poll_flush(cx);
        }
        loop {
            if !self.read.is_empty() {
                let n = self.read.len().min(buf.remaining());
                buf.put_slice(&self.read.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => self.read = b,
                Some(Ok(Message::Close(_))) | None => return Poll::Ready(Ok(())),
                Some(Ok(Message::Pong(_))) => {
                    self.counts.pongs.fetch_add(1, Ordering::SeqCst);
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(ws_io(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsBytes<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(ws_io)?;
        Pin::new(&mut self.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(buf)))
            .map_err(ws_io)?;
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(ws_io)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_close(cx).map_err(ws_io)
    }
}
