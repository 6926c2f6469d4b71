//! The gRPC listener's accepted connections: each takes a slot of the process's connection
//! budget (accepting waits at the cap, as on the HTTP listeners) and must send its first bytes
//! (the HTTP/2 preface) within `header_read_timeout`, or it is closed. With TLS the handshake
//! comes first, within the same time ([`super::tls`]).
//!
//! gRPC connections are not evicted (a proxy keeps one open and sends calls on it at any
//! time), so they hold a place in the bulk share of the budget
//! ([`bulk_share`](crate::serve::connections::bulk_share), shared with the reverse proxy's
//! connections): the rest stays for the API and admin listeners, so gRPC connections never
//! starve `/healthz`, `/readyz` or the API.

use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::server::{Connected, TcpConnectInfo};

use tokio::sync::OwnedSemaphorePermit;

use super::held::{Held, Registry};
use super::tls::{Acceptors, Transport};
use crate::serve::connections::{Connections, Slot};

use crate::serve::listener::{accept_failed, stopped};

/// The connections accepted on `listener` until `shutdown` turns true.
pub(super) fn accept(
    listener: TcpListener,
    connections: Arc<Connections>,
    registry: Arc<Registry>,
    first_bytes: Duration,
    tls: Option<Arc<Acceptors>>,
    shutdown: watch::Receiver<bool>,
) -> impl Stream<Item = Result<GrpcIo, std::io::Error>> {
    let share = connections.bulk();
    futures_util::stream::unfold(
        (listener, connections, tls, shutdown),
        move |(listener, connections, tls, mut shutdown)| {
            let share = Arc::clone(&share);
            let registry = Arc::clone(&registry);
            async move {
                let stream = loop {
                    tokio::select! {
                        accepted = listener.accept() => match accepted {
                            Ok((stream, _)) => break stream,
                            Err(e) => accept_failed(&e).await,
                        },
                        () = stopped(&mut shutdown) => return None,
                    }
                };
                // The bulk share first (waiting while it is full: nothing of gRPC is evicted),
                // then, as on the HTTP listeners, room made once a connection is there.
                let share_permit = tokio::select! {
                    permit = Arc::clone(&share).acquire_owned() => {
                        permit.expect("the bulk share is never closed")
                    }
                    () = stopped(&mut shutdown) => return None,
                };
                let mut slot = tokio::select! {
                    slot = connections.reserve() => slot,
                    () = stopped(&mut shutdown) => return None,
                };
                slot.accepted();
                let _ = stream.set_nodelay(true);
                let info = stream.connect_info();
                let held = registry.register(info.remote_addr());
                let io = GrpcIo {
                    held,
                    inner: match &tls {
                        None => Transport::Plain(stream),
                        Some(tls) => tls.accept(stream, first_bytes),
                    },
                    info,
                    _slot: slot,
                    _share: share_permit,
                    first_bytes: Some(Box::pin(tokio::time::sleep(first_bytes))),
                };
                Some((Ok(io), (listener, connections, tls, shutdown)))
            }
        },
    )
}

/// An accepted gRPC connection: its socket (plain or TLS), its addresses, its budget slot, and
/// the deadline of its first bytes.
#[derive(Debug)]
pub(super) struct GrpcIo {
    /// What its calls hold (`held.rs`), and whether it must close.
    held: Arc<Held>,
    inner: Transport,
    info: TcpConnectInfo,
    _slot: Slot,
    /// Its place in the bulk share
    /// ([`bulk_share`](crate::serve::connections::bulk_share)).
    _share: OwnedSemaphorePermit,
    /// Until the first bytes arrive.
    first_bytes: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Connected for GrpcIo {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.info.clone()
    }
}

impl AsyncRead for GrpcIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.held.is_shed(cx) {
            // It held the most unanswered calls past the budget (`held.rs`).
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionAborted,
                "closed: the gRPC connection held the most undelivered answers",
            )));
        }
        let before = buf.filled().len();
        let result = Pin::new(&mut this.inner).poll_read(cx, buf);
        if let Some(deadline) = &mut this.first_bytes {
            match &result {
                Poll::Ready(Ok(())) if buf.filled().len() > before => this.first_bytes = None,
                Poll::Pending if deadline.as_mut().poll(cx).is_ready() => {
                    metrics::counter!(
                        "floodgate_connections_closed_total",
                        "reason" => "header_timeout"
                    )
                    .increment(1);
                    return Poll::Ready(Err(std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        "the gRPC client sent nothing within header_read_timeout",
                    )));
                }
                _ => {}
            }
        }
        result
    }
}

impl AsyncWrite for GrpcIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = result {
            self.held.wrote(n);
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = result {
            self.held.wrote(n);
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
