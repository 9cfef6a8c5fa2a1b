//! The HTTP listener's connections, each held under three bounds so that
//! no client can use up the process's file descriptors (which gRPC
//! accepts, health watches and PostgreSQL connections need as well):
//!
//! - at most `server.max_http_connections` at once. At the limit, the
//!   oldest connection that has not yet sent a whole request is closed to
//!   make room (a slowloris client's, or one that never speaks), so a real
//!   request still gets in; only with none such is the new one refused;
//! - `server.http_header_timeout` to send a request's headers (hyper's
//!   own timer, which also bounds the wait for a kept-alive connection's
//!   next request);
//! - `server.http_idle_timeout` without a byte either way.
//!
//! Owns the accept loop and each connection's lifetime; what a request
//! gets is the router's.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::stats::Stats;

/// The bounds, from `[server]`.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

impl Bounds {
    pub fn of(s: &crate::config::ServerConfig) -> Bounds {
        Bounds {
            max_connections: s.max_http_connections,
            header_timeout: s.http_header_timeout,
            idle_timeout: s.http_idle_timeout,
        }
    }
}

/// How long a new connection at the limit waits for the room an evicted
/// one leaves.
const EVICTION_WAIT: Duration = Duration::from_millis(500);

/// Connections that have not sent a whole request yet, oldest first: the
/// ones closed to make room.
#[derive(Default)]
struct Waiting {
    next: AtomicU64,
    by_age: Mutex<BTreeMap<u64, CancellationToken>>,
}

impl Waiting {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, CancellationToken>> {
        self.by_age.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, evict: CancellationToken) -> u64 {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(id, evict);
        id
    }

    fn remove(&self, id: u64) {
        self.lock().remove(&id);
    }

    /// Closes the oldest; false with none waiting.
    fn evict_oldest(&self) -> bool {
        let oldest = self.lock().pop_first();
        oldest.is_some_and(|(_, t)| {
            t.cancel();
            true
        })
    }
}

/// Shared by the accept loop and every connection.
struct Shared {
    bounds: Bounds,
    places: Arc<Semaphore>,
    waiting: Waiting,
    stats: Arc<Stats>,
    /// Said once per spell at the limit.
    full: AtomicBool,
    /// The instant every connection's activity is measured from.
    base: Instant,
}

/// Serves `app` on the connections `listener` accepts until `stop`, then
/// lets the open ones finish (as `axum::serve`'s graceful shutdown does).
pub async fn serve<L>(
    mut listener: L,
    app: axum::Router,
    bounds: Bounds,
    stats: Arc<Stats>,
    stop: CancellationToken,
) where
    L: axum::serve::Listener<Addr = SocketAddr>,
{
    let shared = Arc::new(Shared {
        bounds,
        places: Arc::new(Semaphore::new(bounds.max_connections)),
        waiting: Waiting::default(),
        stats,
        full: AtomicBool::new(false),
        // A timing site: how long a socket has been quiet, on tokio's
        // clock as hyper's header timer is.
        #[allow(clippy::disallowed_methods)]
        base: Instant::now(),
    });
    let tracker = TaskTracker::new();
    loop {
        // axum's listeners back off on their own when an accept fails
        // (a full descriptor table among the causes) rather than spin.
        let (io, peer) = tokio::select! {
            _ = stop.cancelled() => break,
            c = listener.accept() => c,
        };
        let (shared, app, stop) = (shared.clone(), app.clone(), stop.clone());
        tracker.spawn(async move {
            let Some(place) = admit(&shared, peer).await else {
                return;
            };
            connection(io, peer, app, place, shared, stop).await;
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// One held place, counted in the gauge while held.
struct Place {
    _permit: OwnedSemaphorePermit,
    stats: Arc<Stats>,
}

impl Drop for Place {
    fn drop(&mut self) {
        self.stats.http_connections.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A place for a new connection: free, or made by closing the oldest
/// connection that has not sent a request; `None`: refused.
async fn admit(shared: &Shared, peer: SocketAddr) -> Option<Place> {
    let permit = match shared.places.clone().try_acquire_owned() {
        Ok(p) => Some(p),
        Err(_) if shared.waiting.evict_oldest() => {
            Stats::inc(&shared.stats.http_connections_evicted);
            tokio::time::timeout(EVICTION_WAIT, shared.places.clone().acquire_owned())
                .await
                .ok()
                .and_then(Result::ok)
        }
        Err(_) => None,
    };
    let Some(permit) = permit else {
        Stats::inc(&shared.stats.http_connections_refused);
        if !shared.full.swap(true, Ordering::Relaxed) {
            warn!(
                max = shared.bounds.max_connections,
                "HTTP connection limit reached (server.max_http_connections), every held connection serving: new connections are closed until some end"
            );
        }
        debug!(%peer, "HTTP connection refused: at the limit");
        return None;
    };
    if shared.full.swap(false, Ordering::Relaxed) {
        debug!("HTTP connections below the limit again");
    }
    shared
        .stats
        .http_connections
        .fetch_add(1, Ordering::Relaxed);
    Some(Place {
        _permit: permit,
        stats: shared.stats.clone(),
    })
}

/// One connection, until it ends, is evicted, idles out, or `stop`.
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    app: axum::Router,
    _place: Place,
    shared: Arc<Shared>,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let evict = CancellationToken::new();
    let id = shared.waiting.add(evict.clone());
    let now_ms = |base: Instant| u64::try_from(base.elapsed().as_millis()).unwrap_or(u64::MAX);
    let last = Arc::new(AtomicU64::new(now_ms(shared.base)));
    let io = Active {
        inner: io,
        last: last.clone(),
        base: shared.base,
    };
    // The first whole request takes the connection off the eviction list.
    let spoke = Arc::new(AtomicBool::new(false));
    let svc = tower::ServiceExt::map_request(app, {
        let (spoke, shared) = (spoke.clone(), shared.clone());
        move |mut req: axum::http::Request<hyper::body::Incoming>| {
            if !spoke.swap(true, Ordering::Relaxed) {
                shared.waiting.remove(id);
            }
            req.extensions_mut().insert(ConnectInfo(peer));
            req
        }
    });
    let svc = hyper_util::service::TowerToHyperService::new(svc);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.bounds.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(conn);
    let idle = shared.bounds.idle_timeout;
    let mut look = tokio::time::interval((idle / 4).max(Duration::from_millis(25)));
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut draining = false;
    loop {
        tokio::select! {
            done = conn.as_mut() => {
                if let Err(e) = done {
                    debug!(%peer, error = %e, "HTTP connection ended with an error");
                }
                break;
            }
            _ = stop.cancelled(), if !draining => {
                draining = true;
                conn.as_mut().graceful_shutdown();
            }
            _ = evict.cancelled() => {
                debug!(%peer, "HTTP connection closed to make room: no whole request yet");
                break;
            }
            _ = look.tick() => {
                let quiet = shared.base.elapsed().saturating_sub(Duration::from_millis(last.load(Ordering::Relaxed)));
                if quiet >= idle {
                    Stats::inc(&shared.stats.http_connections_idle_closed);
                    debug!(%peer, ?quiet, "HTTP connection closed: idle");
                    break;
                }
            }
        }
    }
    if !spoke.load(Ordering::Relaxed) {
        shared.waiting.remove(id);
    }
}

/// A connection's bytes, noting when any last moved.
struct Active<I> {
    inner: I,
    /// Milliseconds after `base`.
    last: Arc<AtomicU64>,
    base: Instant,
}

impl<I> Active<I> {
    fn moved(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last.store(ms, Ordering::Relaxed);
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Active<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.moved();
        }
        r
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Active<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.moved();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_waiting_connection_is_evicted_first() {
        let w = Waiting::default();
        let (a, b) = (CancellationToken::new(), CancellationToken::new());
        let ida = w.add(a.clone());
        let _idb = w.add(b.clone());
        assert!(w.evict_oldest());
        assert!(a.is_cancelled() && !b.is_cancelled());
        w.remove(ida);
        assert!(w.evict_oldest());
        assert!(b.is_cancelled());
        assert!(!w.evict_oldest(), "none left");
    }
}
