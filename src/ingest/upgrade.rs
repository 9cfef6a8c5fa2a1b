//! Teleport's ALPN connection upgrade: how a client reaches a proxy's TLS
//! routing when a layer-7 load balancer in front of the proxy terminates
//! TLS and keeps neither the SNI nor the ALPN list. The client speaks
//! HTTPS to the balancer, asks the proxy's web API to upgrade the request
//! to a WebSocket (`GET /webapi/connectionupgrade`, subprotocol
//! `alpn-ping`), and runs the TLS it would have sent the proxy inside the
//! WebSocket's binary messages; the proxy routes that TLS by its ALPN as
//! if it had arrived directly. With `alpn-ping` the proxy pings the
//! WebSocket so that the balancer's idle timeout never closes a quiet
//! watch; the pongs go back on the next read.
//!
//! Whether a proxy needs it is found as Teleport's clients find it: a TLS
//! handshake offering only `teleport-reversetunnel`, which a proxy
//! accepts and a balancer does not.
//!
//! Owns the upgrade handshake and the byte stream over WebSocket
//! messages; what runs inside (TLS, HTTP/2) belongs to the dialer
//! (`dial.rs`).

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::{Sink, Stream};
use hyper::body::Bytes;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// The proxy's upgrade endpoint.
pub const PATH: &str = "/webapi/connectionupgrade";
/// The WebSocket subprotocol asking for TLS routing with pings, as
/// Teleport's own Auth clients ask.
pub const PROTOCOL: &str = "alpn-ping";
/// The ALPN value of the probe: a proxy negotiates it, a balancer in front
/// of one does not.
pub const PROBE_ALPN: &[u8] = b"teleport-reversetunnel";
/// Largest WebSocket message taken from the proxy. The proxy sends what
/// each read of the routed TLS gave it, a TLS record or a few.
const MAX_MESSAGE: usize = 1 << 20;
/// Largest message sent: a write larger than this goes out in several.
const MAX_WRITE: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum UpgradeError {
    #[error("the proxy at {addr} refused the WebSocket connection upgrade ({PATH} answered 404): is it a Teleport proxy of version 15.1 or later? (older ones know only a form Lifeline does not speak)")]
    NotFound { addr: String },
    #[error("the connection upgrade at {addr} was refused: {detail}")]
    Refused { addr: String, detail: String },
}

/// Upgrades `stream` (HTTPS to the proxy or its balancer, at `addr`) to a
/// byte stream routed by the proxy.
pub async fn upgrade<S>(stream: S, addr: &str) -> Result<WsIo<S>, UpgradeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let refused = |detail: String| UpgradeError::Refused {
        addr: addr.to_string(),
        detail,
    };
    let mut req = format!("wss://{addr}{PATH}")
        .into_client_request()
        .map_err(|e| refused(e.to_string()))?;
    req.headers_mut().insert(
        "Sec-WebSocket-Protocol",
        hyper::header::HeaderValue::from_static(PROTOCOL),
    );
    let config = WebSocketConfig::default()
        .max_message_size(Some(MAX_MESSAGE))
        .max_frame_size(Some(MAX_MESSAGE));
    match tokio_tungstenite::client_async_with_config(req, stream, Some(config)).await {
        Ok((ws, _)) => Ok(WsIo {
            ws,
            read: Bytes::new(),
        }),
        Err(tungstenite::Error::Http(resp)) if resp.status() == 404 => {
            Err(UpgradeError::NotFound {
                addr: addr.to_string(),
            })
        }
        Err(tungstenite::Error::Http(resp)) => {
            Err(refused(format!("the proxy answered {}", resp.status())))
        }
        Err(e) => Err(refused(e.to_string())),
    }
}

/// Bytes carried as WebSocket binary messages, readable and writable as a
/// stream. Pings are answered by the WebSocket layer on the next read;
/// text messages carry nothing of the routed stream and are skipped.
pub struct WsIo<S> {
    ws: WebSocketStream<S>,
    /// What is left of the last message read.
    read: Bytes,
}

fn io_error(e: tungstenite::Error) -> io::Error {
    match e {
        tungstenite::Error::Io(e) => e,
        other => io::Error::other(other),
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for WsIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            if !self.read.is_empty() {
                let n = self.read.len().min(buf.remaining());
                buf.put_slice(&self.read.split_to(n));
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => self.read = b,
                // End of stream: a close, or the connection gone.
                Some(Ok(Message::Close(_))) | None => return Poll::Ready(Ok(())),
                Some(Ok(_)) => {}
                Some(Err(tungstenite::Error::ConnectionClosed)) => return Poll::Ready(Ok(())),
                Some(Err(e)) => return Poll::Ready(Err(io_error(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for WsIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        // An empty message would carry nothing and still cost a frame.
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(io_error)?;
        let n = buf.len().min(MAX_WRITE);
        Pin::new(&mut self.ws)
            .start_send(Message::Binary(Bytes::copy_from_slice(&buf[..n])))
            .map_err(io_error)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(io_error)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match ready!(Pin::new(&mut self.ws).poll_close(cx)) {
            Ok(()) | Err(tungstenite::Error::ConnectionClosed) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(io_error(e))),
        }
    }
}

#[cfg(test)]
// Handshake callbacks return tungstenite's error response as it is.
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use futures::{SinkExt, StreamExt};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};

    #[tokio::test]
    async fn a_proxy_without_the_upgrade_api_is_named() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(tokio_tungstenite::accept_hdr_async(
            server,
            |_: &Request, _: Response| {
                let mut resp = ErrorResponse::new(None);
                *resp.status_mut() = hyper::StatusCode::NOT_FOUND;
                Err::<Response, _>(resp)
            },
        ));
        let Err(err) = upgrade(client, "proxy.example.com:443").await else {
            panic!("a 404 is no upgrade")
        };
        assert!(matches!(err, UpgradeError::NotFound { .. }), "{err}");
        assert!(err.to_string().contains(PATH), "{err}");
    }

    /// Bytes written come out as binary messages, and what the proxy sends
    /// comes back as bytes whatever pings and text it puts between them.
    #[tokio::test]
    async fn bytes_cross_the_websocket_around_pings() {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let proxy = tokio::spawn(async move {
            let mut ws =
                tokio_tungstenite::accept_hdr_async(server, |req: &Request, mut resp: Response| {
                    assert_eq!(req.uri().path(), PATH);
                    let offered = req.headers().get("Sec-WebSocket-Protocol").cloned();
                    assert_eq!(
                        offered.as_ref().and_then(|v| v.to_str().ok()),
                        Some(PROTOCOL)
                    );
                    if let Some(v) = offered {
                        resp.headers_mut().insert("Sec-WebSocket-Protocol", v);
                    }
                    Ok(resp)
                })
                .await
                .expect("upgraded");
            let got = ws.next().await.expect("a message").expect("readable");
            assert_eq!(got, Message::Binary(Bytes::from_static(b"hello")));
            ws.send(Message::Ping(Bytes::from_static(b"p")))
                .await
                .expect("ping sent");
            ws.send(Message::text("ignored")).await.expect("text sent");
            ws.send(Message::Binary(Bytes::from_static(b"world")))
                .await
                .expect("sent");
            // The pong comes back before anything else the client sends.
            let pong = ws.next().await.expect("a pong").expect("readable");
            assert_eq!(pong, Message::Pong(Bytes::from_static(b"p")));
            ws.close(None).await.expect("closed");
        });
        let mut io = upgrade(client, "proxy.example.com:443")
            .await
            .expect("upgraded");
        io.write_all(b"hello").await.expect("written");
        io.flush().await.expect("flushed");
        let mut buf = [0u8; 5];
        io.read_exact(&mut buf).await.expect("read");
        assert_eq!(&buf, b"world");
        // The read that follows sends the pong, then meets the close.
        let mut more = [0u8; 1];
        let n = io.read(&mut more).await.expect("read");
        assert_eq!(n, 0, "a close ends the stream");
        proxy.await.expect("the proxy saw it all");
    }
}
