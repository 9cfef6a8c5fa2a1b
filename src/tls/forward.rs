//! A byte stream wrapped for something beside its bytes (a permit held, a
//! writer's batching): the wrapper reads, and where it changes nothing
//! writes, straight through to the stream it holds. Written once here.
//!
//! Owns: the forwarding. Must not touch: what any wrapper adds.

/// `impl AsyncRead for $ty<T>`, reading through its field `$inner`.
macro_rules! forward_read {
    ($ty:ident, $inner:ident) => {
        impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for $ty<T> {
            fn poll_read(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &mut tokio::io::ReadBuf<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$inner).poll_read(cx, buf)
            }
        }
    };
}

/// `impl AsyncWrite for $ty<T>`, every call through its field `$inner`.
macro_rules! forward_write {
    ($ty:ident, $inner:ident) => {
        impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for $ty<T> {
            fn poll_write(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                buf: &[u8],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$inner).poll_write(cx, buf)
            }

            fn poll_flush(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$inner).poll_flush(cx)
            }

            fn poll_shutdown(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
            ) -> std::task::Poll<std::io::Result<()>> {
                std::pin::Pin::new(&mut self.$inner).poll_shutdown(cx)
            }

            fn poll_write_vectored(
                mut self: std::pin::Pin<&mut Self>,
                cx: &mut std::task::Context<'_>,
                bufs: &[std::io::IoSlice<'_>],
            ) -> std::task::Poll<std::io::Result<usize>> {
                std::pin::Pin::new(&mut self.$inner).poll_write_vectored(cx, bufs)
            }

            fn is_write_vectored(&self) -> bool {
                self.$inner.is_write_vectored()
            }
        }
    };
}

pub(crate) use {forward_read, forward_write};
