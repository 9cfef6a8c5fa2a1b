//! At most so many connections at once on a listener. A connection past
//! the limit is closed as soon as it is accepted, counted and logged with
//! its peer, so a client sees the refusal at once (and backs off) instead
//! of waiting in the kernel's backlog; one already served is never cut.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_stream::{Stream, StreamExt};
use tonic::transport::server::Connected;
use tracing::{debug, warn};

use crate::stats::Stats;

/// A connection holding one of the listener's places until it closes.
pub struct Limited<T> {
    inner: T,
    _place: Place,
}

/// One place, counted in the gauge while held.
struct Place {
    _permit: OwnedSemaphorePermit,
    stats: Arc<Stats>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.stats.grpc_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// `incoming`, with at most `max` of its connections open at once.
pub fn limit<S, T>(
    incoming: S,
    max: usize,
    stats: Arc<Stats>,
) -> impl Stream<Item = Result<Limited<T>, io::Error>>
where
    S: Stream<Item = Result<T, io::Error>>,
    T: Peer,
{
    let places = Arc::new(Semaphore::new(max));
    // Said once per spell of refusals, not once per connection.
    let full = Arc::new(AtomicBool::new(false));
    incoming.filter_map(move |conn| {
        let conn = match conn {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        match places.clone().try_acquire_owned() {
            Ok(permit) => {
                if full.swap(false, Ordering::Relaxed) {
                    debug!("gRPC connections below the limit again");
                }
                stats.grpc_connections.fetch_add(1, Ordering::Relaxed);
                Some(Ok(Limited {
                    inner: conn,
                    _place: Place {
                        _permit: permit,
                        stats: stats.clone(),
                    },
                }))
            }
            Err(_) => {
                Stats::inc(&stats.grpc_connections_refused);
                if !full.swap(true, Ordering::Relaxed) {
                    warn!(max, "gRPC connection limit reached (server.grpc_max_connections): new connections are closed until some end");
                }
                debug!(peer = ?conn.peer(), "gRPC connection refused: at the limit");
                None
            }
        }
    })
}

/// The first wait after an accept fails, and the longest.
const ACCEPT_BACKOFF: (std::time::Duration, std::time::Duration) = (
    std::time::Duration::from_millis(10),
    std::time::Duration::from_secs(1),
);

/// `incoming`, waiting after each accept that fails (a full descriptor
/// table fails every accept at once: tonic would try again at once, and
/// spin) from 10 ms doubling to 1 s, counted, said once per spell. The
/// connections already open go on meanwhile.
pub fn patient<S, T>(incoming: S, stats: Arc<Stats>) -> impl Stream<Item = Result<T, io::Error>>
where
    S: Stream<Item = Result<T, io::Error>> + Send + 'static,
    T: Send + 'static,
{
    async_stream::stream! {
        let mut incoming = std::pin::pin!(incoming);
        let mut wait = ACCEPT_BACKOFF.0;
        let mut failing = false;
        while let Some(conn) = incoming.next().await {
            match conn {
                Ok(c) => {
                    if std::mem::take(&mut failing) {
                        warn!("gRPC accepts succeed again");
                    }
                    wait = ACCEPT_BACKOFF.0;
                    yield Ok(c);
                }
                Err(e) => {
                    Stats::inc(&stats.accept_errors);
                    if !std::mem::replace(&mut failing, true) {
                        warn!(error = %e, "gRPC accept failed (out of file descriptors?): waiting before each next try, up to 1 s");
                    }
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(ACCEPT_BACKOFF.1);
                }
            }
        }
    }
}

/// Who is on the other end, for the log line of a refusal.
pub trait Peer {
    fn peer(&self) -> Option<SocketAddr>;
}

impl Peer for TcpStream {
    fn peer(&self) -> Option<SocketAddr> {
        self.peer_addr().ok()
    }
}

impl Peer for tokio_rustls::server::TlsStream<TcpStream> {
    fn peer(&self) -> Option<SocketAddr> {
        self.get_ref().0.peer_addr().ok()
    }
}

impl<T: Connected> Connected for Limited<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

super::forward::forward_read!(Limited, inner);
super::forward::forward_write!(Limited, inner);
