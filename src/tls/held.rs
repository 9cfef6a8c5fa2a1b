//! An HTTP listener's connections, each held under bounds so that no
//! client, with or without a token, can hold the port shut (which gRPC
//! accepts, health watches and PostgreSQL connections would feel too):
//!
//! - at most `max_connections` at once. At the cap, the connection that
//!   has held no whole request for longest is closed to make room: one
//!   that never spoke, one still sending a request (a slowloris client's,
//!   headers or body), or one idle between requests; its place passes to
//!   the new connection at once. Only when every held
//!   connection is serving a whole request is the new one refused;
//! - `header_timeout` to send a request's headers (hyper's own timer,
//!   which also bounds the wait for a kept-alive connection's next
//!   request);
//! - a request, headers and body, must arrive whole within
//!   `header_timeout` plus one second for every `min_rate` bytes it has
//!   sent, and never later than `request_timeout` after its first byte
//!   (Apache's `mod_reqtimeout` rule): a client that sends one byte every
//!   few seconds is closed in seconds, whatever its `Content-Length` says;
//! - `idle_timeout` without a byte either way.
//!
//! Every closing is counted by reason in the listener's
//! [`HeldCounters`](crate::stats::HeldCounters).
//!
//! Owns the accept loop and each connection's lifetime; what a request
//! gets is the router's.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::ConnectInfo;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, warn};

use crate::stats::{HeldCounters, Stats};

/// The bounds, from `[server]`.
#[derive(Clone, Copy, Debug)]
pub struct Bounds {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// The most a whole request (headers and body) may take.
    pub request_timeout: Duration,
    /// Bytes a second a request must average past `header_timeout`; 0:
    /// no floor.
    pub min_rate: u32,
    /// Which listener they bound (its counters, its log lines).
    pub which: Listener,
}

impl Bounds {
    /// The HTTP listener's bounds.
    pub fn of(s: &crate::config::ServerConfig) -> Bounds {
        Bounds {
            max_connections: s.max_http_connections,
            header_timeout: s.http_header_timeout,
            idle_timeout: s.http_idle_timeout,
            request_timeout: s.http_request_timeout,
            min_rate: s.http_min_rate,
            which: Listener::Http,
        }
    }

    /// The admin listener's: its own small cap, the same deadlines.
    pub fn admin(s: &crate::config::ServerConfig) -> Bounds {
        Bounds {
            max_connections: s.admin_max_connections,
            which: Listener::Admin,
            ..Bounds::of(s)
        }
    }

    /// How long a request that began `took` ago and has sent `received`
    /// bytes may still take: `None` while within its bounds, else which
    /// bound it broke.
    fn overdue(&self, took: Duration, received: u64) -> Option<Cut> {
        if took > self.request_timeout {
            return Some(Cut::RequestDeadline);
        }
        if self.min_rate == 0 {
            return None;
        }
        let earned =
            Duration::from_millis(received.saturating_mul(1000) / u64::from(self.min_rate));
        (took > self.header_timeout.saturating_add(earned)).then_some(Cut::TooSlow)
    }

    /// How often a connection's deadlines are looked at.
    fn look_every(&self) -> Duration {
        (self.idle_timeout.min(self.header_timeout) / 4)
            .clamp(Duration::from_millis(25), Duration::from_secs(1))
    }
}

/// Why a connection was closed by a deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    Idle,
    RequestDeadline,
    TooSlow,
}

impl Cut {
    fn counter(self, c: &HeldCounters) -> &AtomicU64 {
        match self {
            Cut::Idle => &c.idle,
            Cut::RequestDeadline => &c.request_deadline,
            Cut::TooSlow => &c.too_slow,
        }
    }
}

/// A held connection's permit, which an eviction takes over: the new
/// connection is admitted at once, without waiting for the one it
/// displaced to be scheduled and close.
type Permit = Arc<Mutex<Option<OwnedSemaphorePermit>>>;

fn take(p: &Permit) -> Option<OwnedSemaphorePermit> {
    p.lock().unwrap_or_else(|e| e.into_inner()).take()
}

/// Connections holding no whole request, in the order they came to be so:
/// the first is closed to make room.
#[derive(Default)]
struct Evictable {
    next: AtomicU64,
    by_age: Mutex<BTreeMap<u64, (CancellationToken, Permit)>>,
}

impl Evictable {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, (CancellationToken, Permit)>> {
        self.by_age.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, evict: CancellationToken, permit: Permit) -> u64 {
        let place = self.next.fetch_add(1, Ordering::Relaxed);
        self.lock().insert(place, (evict, permit));
        place
    }

    fn remove(&self, place: u64) {
        self.lock().remove(&place);
    }

    /// Closes the first and hands over its permit; `None` with none.
    fn evict_first(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            let (evict, permit) = self.lock().pop_first()?.1;
            evict.cancel();
            if let Some(p) = take(&permit) {
                return Some(p);
            }
        }
    }
}

/// Shared by the accept loop and every connection.
struct Shared {
    bounds: Bounds,
    places: Arc<Semaphore>,
    evictable: Evictable,
    stats: Arc<Stats>,
    which: Listener,
    /// Said once per spell at the cap.
    full: AtomicBool,
    /// The instant every connection's activity is measured from.
    base: Instant,
}

/// Which listener, for its counters and its log lines.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    /// `server.listen`: API, dashboard, probes, metrics.
    Http,
    /// `server.admin_listen`: probes and metrics only.
    Admin,
}

impl Listener {
    fn field(self) -> &'static str {
        match self {
            Listener::Http => "server.max_http_connections",
            Listener::Admin => "server.admin_max_connections",
        }
    }
}

impl Shared {
    fn counters(&self) -> &HeldCounters {
        match self.which {
            Listener::Http => &self.stats.http,
            Listener::Admin => &self.stats.admin,
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(crate::clock::since(self.base).as_millis()).unwrap_or(u64::MAX)
    }
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
        evictable: Evictable::default(),
        stats,
        which: bounds.which,
        full: AtomicBool::new(false),
        // How long a socket has been quiet, on tokio's clock as hyper's
        // header timer is.
        base: crate::clock::monotonic(),
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
            let Some(place) = admit(&shared, peer) else {
                return;
            };
            connection(io, peer, app, place, shared, stop).await;
        });
    }
    tracker.close();
    tracker.wait().await;
}

/// One held place, counted in the gauge while held; its permit may be
/// handed over to a newer connection by an eviction.
struct Place {
    permit: Permit,
    shared: Arc<Shared>,
}

impl Drop for Place {
    fn drop(&mut self) {
        // A place handed over by an eviction is counted by its new holder.
        if take(&self.permit).is_some() {
            self.shared.counters().open.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// A place for a new connection: free, or made by closing the one that
/// has held no whole request for longest; `None`: refused.
fn admit(shared: &Arc<Shared>, peer: SocketAddr) -> Option<Place> {
    let counters = shared.counters();
    // The gauge counts places: a fresh one adds to it, a handed-over one
    // (and its count) only changes hands.
    let permit = match shared.places.clone().try_acquire_owned() {
        Ok(p) => {
            counters.open.fetch_add(1, Ordering::Relaxed);
            Some(p)
        }
        Err(_) => shared
            .evictable
            .evict_first()
            .inspect(|_| Stats::inc(&counters.evicted)),
    };
    let Some(permit) = permit else {
        Stats::inc(&counters.refused);
        if !shared.full.swap(true, Ordering::Relaxed) {
            warn!(
                max = shared.bounds.max_connections,
                field = shared.which.field(),
                "connection cap reached, every held connection serving a whole request: new connections are closed until some end"
            );
        }
        debug!(%peer, listener = ?shared.which, "connection refused: at the cap");
        return None;
    };
    if shared.full.swap(false, Ordering::Relaxed) {
        debug!(listener = ?shared.which, "connections below the cap again");
    }
    Some(Place {
        permit: Arc::new(Mutex::new(Some(permit))),
        shared: shared.clone(),
    })
}

/// What one connection is doing, as its deadlines and the eviction read it.
#[derive(Debug, Default)]
struct Phase {
    /// When the request now arriving sent its first byte (ms after
    /// `base`); `None` between requests.
    receiving_since: Option<u64>,
    /// Bytes read since then.
    received: u64,
    /// Requests handed to the router whose responses are not done.
    in_flight: usize,
    /// Its place among the evictable, while it holds no whole request.
    evictable: Option<u64>,
}

/// One connection's shared state: its phase, its last byte, its eviction.
struct Conn {
    phase: Mutex<Phase>,
    permit: Permit,
    /// The last byte either way, ms after `base`.
    last: AtomicU64,
    evict: CancellationToken,
    shared: Arc<Shared>,
}

impl Conn {
    fn lock(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the phase, then puts the connection on or takes it off
    /// the evictable list: on it while it holds no whole request (nothing
    /// in flight, or a request still arriving).
    fn update(&self, f: impl FnOnce(&mut Phase)) {
        let mut p = self.lock();
        f(&mut p);
        let evictable = p.in_flight == 0 || p.receiving_since.is_some();
        match (evictable, p.evictable) {
            (true, None) => {
                p.evictable = Some(
                    self.shared
                        .evictable
                        .add(self.evict.clone(), self.permit.clone()),
                );
            }
            (false, Some(place)) => {
                self.shared.evictable.remove(place);
                p.evictable = None;
            }
            _ => {}
        }
    }

    fn read(&self, n: usize) {
        let now = self.shared.now_ms();
        self.last.store(now, Ordering::Relaxed);
        self.update(|p| {
            if p.receiving_since.is_none() {
                p.receiving_since = Some(now);
                p.received = 0;
            }
            p.received = p.received.saturating_add(n as u64);
        });
    }

    fn wrote(&self) {
        self.last.store(self.shared.now_ms(), Ordering::Relaxed);
    }

    /// A request's body is whole (or will not be read).
    fn request_whole(&self) {
        self.update(|p| p.receiving_since = None);
    }

    /// Which deadline, if any, the connection has passed at `now_ms`.
    fn overdue(&self, now_ms: u64) -> Option<Cut> {
        let p = self.lock();
        if let Some(since) = p.receiving_since {
            let took = Duration::from_millis(now_ms.saturating_sub(since));
            if let Some(cut) = self.shared.bounds.overdue(took, p.received) {
                return Some(cut);
            }
        }
        drop(p);
        let quiet = Duration::from_millis(now_ms.saturating_sub(self.last.load(Ordering::Relaxed)));
        (quiet >= self.shared.bounds.idle_timeout).then_some(Cut::Idle)
    }

    fn leave(&self) {
        if let Some(place) = self.lock().evictable.take() {
            self.shared.evictable.remove(place);
        }
    }
}

/// One connection, until it ends, is evicted, passes a deadline, or `stop`.
async fn connection<I>(
    io: I,
    peer: SocketAddr,
    app: axum::Router,
    place: Place,
    shared: Arc<Shared>,
    stop: CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let conn = Arc::new(Conn {
        phase: Mutex::new(Phase::default()),
        permit: place.permit.clone(),
        last: AtomicU64::new(shared.now_ms()),
        evict: CancellationToken::new(),
        shared: shared.clone(),
    });
    conn.update(|_| {});
    let io = Active {
        inner: io,
        conn: conn.clone(),
    };
    let svc = Tracking {
        inner: app,
        conn: conn.clone(),
        peer,
    };
    let svc = hyper_util::service::TowerToHyperService::new(svc);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.bounds.header_timeout);
    builder.http2().timer(TokioTimer::new());
    let served = builder.serve_connection_with_upgrades(TokioIo::new(io), svc);
    tokio::pin!(served);
    let mut look = tokio::time::interval(shared.bounds.look_every());
    look.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut draining = false;
    loop {
        tokio::select! {
            done = served.as_mut() => {
                if let Err(e) = done {
                    debug!(%peer, error = %e, "HTTP connection ended with an error");
                }
                break;
            }
            _ = stop.cancelled(), if !draining => {
                draining = true;
                served.as_mut().graceful_shutdown();
            }
            _ = conn.evict.cancelled() => {
                debug!(%peer, listener = ?shared.which, "connection closed to make room: it held no whole request");
                break;
            }
            _ = look.tick() => {
                if let Some(cut) = conn.overdue(shared.now_ms()) {
                    Stats::inc(cut.counter(shared.counters()));
                    debug!(%peer, listener = ?shared.which, ?cut, "connection closed by a deadline");
                    break;
                }
            }
        }
    }
    conn.leave();
    drop(place);
}

/// The router, with each request's arrival and its response's end told
/// to the connection.
#[derive(Clone)]
struct Tracking {
    inner: axum::Router,
    conn: Arc<Conn>,
    peer: SocketAddr,
}

impl tower::Service<axum::http::Request<Incoming>> for Tracking {
    type Response = axum::http::Response<Tracked<axum::body::Body>>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        tower::Service::<axum::http::Request<axum::body::Body>>::poll_ready(&mut self.inner, cx)
    }

    fn call(&mut self, req: axum::http::Request<Incoming>) -> Self::Future {
        let (mut parts, body) = req.into_parts();
        parts.extensions.insert(ConnectInfo(self.peer));
        let whole = body.is_end_stream();
        self.conn.update(|p| p.in_flight += 1);
        let serving = Serving(self.conn.clone());
        if whole {
            self.conn.request_whole();
        }
        let body = Tracked {
            inner: body,
            on_end: (!whole).then(|| Ended::Request(self.conn.clone())),
        };
        let req = axum::http::Request::from_parts(parts, axum::body::Body::new(body));
        let fut = tower::Service::call(&mut self.inner, req);
        Box::pin(async move {
            let r = fut.await?;
            Ok(r.map(|inner| Tracked {
                inner,
                on_end: Some(Ended::Response(serving)),
            }))
        })
    }
}

/// A request in flight: its end (the response sent, or dropped unsent)
/// is told when this drops.
struct Serving(Arc<Conn>);

impl Drop for Serving {
    fn drop(&mut self) {
        self.0
            .update(|p| p.in_flight = p.in_flight.saturating_sub(1));
    }
}

/// What a tracked body tells when it ends or is dropped.
enum Ended {
    /// The request body is whole (or will not be read).
    Request(Arc<Conn>),
    /// The response is done.
    Response(Serving),
}

impl Ended {
    fn tell(self) {
        match self {
            Ended::Request(c) => c.request_whole(),
            Ended::Response(s) => drop(s),
        }
    }
}

/// A body that tells its connection when it ends.
struct Tracked<B> {
    inner: B,
    on_end: Option<Ended>,
}

impl<B> Drop for Tracked<B> {
    fn drop(&mut self) {
        if let Some(e) = self.on_end.take() {
            e.tell();
        }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_)))) || self.inner.is_end_stream()
        {
            if let Some(e) = self.on_end.take() {
                e.tell();
            }
        }
        r
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A connection's bytes, told to it as they move.
struct Active<I> {
    inner: I,
    conn: Arc<Conn>,
}

impl<I: AsyncRead + Unpin> AsyncRead for Active<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before);
        if matches!(r, Poll::Ready(Ok(()))) && n > 0 {
            self.conn.read(n);
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
            self.conn.wrote();
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
            self.conn.wrote();
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
    fn the_connection_that_held_no_request_longest_is_evicted_first() {
        let w = Evictable::default();
        let places = Arc::new(Semaphore::new(3));
        let permit = || -> Permit {
            Arc::new(Mutex::new(Some(
                places.clone().try_acquire_owned().expect("a place"),
            )))
        };
        let (a, b, c) = (
            CancellationToken::new(),
            CancellationToken::new(),
            CancellationToken::new(),
        );
        let (pa, pc) = (permit(), permit());
        let _ = w.add(a.clone(), pa.clone());
        let _ = w.add(b.clone(), permit());
        let gone = w.add(c.clone(), pc.clone());
        // The first is closed and its place handed over, not freed.
        let handed = w.evict_first().expect("a place handed over");
        assert!(a.is_cancelled() && !b.is_cancelled());
        assert!(
            take(&pa).is_none(),
            "the evicted connection holds it no more"
        );
        assert_eq!(places.available_permits(), 0);
        drop(handed);
        assert_eq!(places.available_permits(), 1);
        // One that left is not evicted; one whose place was taken is passed over.
        w.remove(gone);
        assert!(w.evict_first().is_some());
        assert!(b.is_cancelled() && !c.is_cancelled());
        let _ = w.add(c.clone(), pc.clone());
        drop(take(&pc));
        assert!(
            w.evict_first().is_none(),
            "none left with a place to hand over"
        );
    }

    fn bounds() -> Bounds {
        Bounds {
            max_connections: 8,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            request_timeout: Duration::from_secs(30),
            min_rate: 500,
            which: Listener::Http,
        }
    }

    #[test]
    fn a_request_earns_a_second_for_every_min_rate_bytes_up_to_its_deadline() {
        let b = bounds();
        let s = Duration::from_secs;
        // Within the header timeout, anything goes.
        assert_eq!(b.overdue(s(9), 0), None);
        // Past it, 500 bytes buy one more second.
        assert_eq!(b.overdue(s(11), 0), Some(Cut::TooSlow));
        assert_eq!(b.overdue(s(11), 500), None);
        assert_eq!(b.overdue(s(13), 1000), Some(Cut::TooSlow));
        // One byte every five seconds is closed just past the header timeout.
        assert_eq!(
            b.overdue(Duration::from_millis(10_300), 120),
            Some(Cut::TooSlow)
        );
        // A fast sender still meets the whole request's deadline.
        assert_eq!(b.overdue(s(31), 1 << 30), Some(Cut::RequestDeadline));
        // No floor: only the deadline.
        let none = Bounds { min_rate: 0, ..b };
        assert_eq!(none.overdue(s(29), 0), None);
        assert_eq!(none.overdue(s(31), 0), Some(Cut::RequestDeadline));
        // Huge counts do not overflow.
        assert_eq!(b.overdue(s(20), u64::MAX), None);
    }
}
