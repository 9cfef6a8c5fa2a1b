//! Writes that leave a gRPC connection together. HTTP/2 flushes after every
//! frame it is handed; when many streams share one connection (a stream-
//! balancing proxy in front of Lifeline, or the benchmark's agents), each
//! discovery message to each stream became its own `writev` and TCP
//! segment, and its own TLS record. Here a flush first lets the other
//! tasks already queued on the runtime run once (the connection's other
//! streams among them, since discovery wakes a connection's streams
//! together), then writes everything they handed over in one call.
//!
//! A connection that carries one stream gains nothing from waiting, and
//! its message would leave after the other tasks' instead of at once: a
//! connection whose waits gathered nothing twice in a row writes at once
//! for its next `SKIP` flushes, then tries waiting again.
//!
//! Bounded: at most `MAX_PENDING` bytes wait; past that a write goes
//! through at once.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::AsyncWrite;
use tonic::transport::server::Connected;

/// Most bytes a connection holds back before writing through.
const MAX_PENDING: usize = 64 * 1024;
/// A buffer grown past this is freed once written, so an idle connection
/// keeps no more than this.
const KEEP: usize = 8 * 1024;
/// Waits in a row that gathered nothing before the connection stops
/// waiting for a while.
const MISSES: u8 = 2;
/// Flushes written at once after that.
const SKIP: u8 = 16;

pub struct Coalesced<T> {
    inner: T,
    pending: Vec<u8>,
    /// How much of `pending` is written already.
    written: usize,
    /// This flush has let the other tasks run once: how much waited then.
    yielded: Option<usize>,
    /// Waits in a row that gathered nothing.
    misses: u8,
    /// Flushes left to write at once.
    skip: u8,
}

impl<T> Coalesced<T> {
    pub fn new(inner: T) -> Self {
        Coalesced {
            inner,
            pending: Vec::new(),
            written: 0,
            yielded: None,
            misses: 0,
            skip: 0,
        }
    }
}

impl<T: AsyncWrite + Unpin> Coalesced<T> {
    /// Writes out what waits.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n =
                ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.written = 0;
        if self.pending.capacity() > KEEP {
            self.pending = Vec::new();
        } else {
            self.pending.clear();
        }
        Poll::Ready(Ok(()))
    }

    /// Makes room for `len` more bytes: writes out what waits when they
    /// would not fit. `false`: `len` alone is past the bound and goes
    /// straight through.
    fn room(&mut self, cx: &mut Context<'_>, len: usize) -> Poll<io::Result<bool>> {
        if self.pending.len() + len > MAX_PENDING {
            ready!(self.drain(cx))?;
        }
        Poll::Ready(Ok(len <= MAX_PENDING))
    }
}

impl<T: Connected> Connected for Coalesced<T> {
    type ConnectInfo = T::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

super::forward::forward_read!(Coalesced, inner);

impl<T: AsyncWrite + Unpin> AsyncWrite for Coalesced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if !ready!(this.room(cx, buf.len()))? {
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        this.pending.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        let len = bufs.iter().map(|b| b.len()).sum();
        if !ready!(this.room(cx, len))? {
            return Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        }
        for b in bufs {
            this.pending.extend_from_slice(b);
        }
        Poll::Ready(Ok(len))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        // A batch part written is being drained (the socket was full):
        // no waiting, no counting.
        if this.written == 0 && !this.pending.is_empty() {
            match this.yielded.take() {
                None if this.skip > 0 => this.skip -= 1,
                None => {
                    // Woken by itself, the task goes to the back of the
                    // runtime's queue: whatever is queued ahead runs first.
                    this.yielded = Some(this.pending.len());
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Some(before) if this.pending.len() > before => this.misses = 0,
                Some(_) => {
                    this.misses += 1;
                    if this.misses >= MISSES {
                        this.misses = 0;
                        this.skip = SKIP;
                    }
                }
            }
        }
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn writes_wait_for_the_flush_and_leave_together() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let mut a = Coalesced::new(a);
        a.write_all(b"one ").await.unwrap();
        a.write_all(b"two").await.unwrap();
        // Nothing has left before the flush.
        assert_eq!(a.pending, b"one two");
        assert_eq!(a.written, 0);
        a.flush().await.unwrap();
        let mut got = [0u8; 7];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"one two");
    }

    #[tokio::test]
    async fn a_write_past_the_bound_goes_through_after_what_waits() {
        let (a, mut b) = tokio::io::duplex(4 << 20);
        let mut a = Coalesced::new(a);
        a.write_all(b"head").await.unwrap();
        let big = vec![7u8; MAX_PENDING + 1];
        a.write_all(&big).await.unwrap();
        a.flush().await.unwrap();
        let mut got = vec![0u8; 4 + big.len()];
        b.read_exact(&mut got).await.unwrap();
        assert_eq!(&got[..4], b"head");
        assert!(got[4..].iter().all(|&x| x == 7));
        assert!(a.pending.capacity() <= KEEP);
    }

    /// Writes `bytes` and flushes by hand; whether the flush waited.
    fn write_and_flush(c: &mut Coalesced<tokio::io::DuplexStream>, more: bool) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut c = Pin::new(c);
        assert!(c.as_mut().poll_write(&mut cx, b"frame").is_ready());
        if c.as_mut().poll_flush(&mut cx).is_ready() {
            return false;
        }
        if more {
            // Another stream's frame while it waited.
            assert!(c.as_mut().poll_write(&mut cx, b"frame").is_ready());
        }
        assert!(c.as_mut().poll_flush(&mut cx).is_ready());
        true
    }

    #[tokio::test]
    async fn a_connection_whose_waits_gather_nothing_writes_at_once_for_a_while() {
        let (a, _b) = tokio::io::duplex(1 << 20);
        let mut a = Coalesced::new(a);
        // Many streams: every flush waits, and every wait gathers.
        for _ in 0..10 {
            assert!(write_and_flush(&mut a, true));
        }
        // One stream: two waits gather nothing, then SKIP flushes go at once.
        assert!(write_and_flush(&mut a, false));
        assert!(write_and_flush(&mut a, false));
        for _ in 0..SKIP {
            assert!(!write_and_flush(&mut a, false));
        }
        // Then it tries waiting again, and keeps on while waits gather.
        assert!(write_and_flush(&mut a, true));
        assert!(write_and_flush(&mut a, false));
        assert!(write_and_flush(&mut a, true));
    }

    #[tokio::test]
    async fn a_closed_peer_is_an_error_not_a_loss_in_silence() {
        let (a, b) = tokio::io::duplex(64);
        drop(b);
        let mut a = Coalesced::new(a);
        a.write_all(b"lost").await.unwrap();
        assert!(a.flush().await.is_err());
    }
}
