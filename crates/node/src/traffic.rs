//! What a node moves over the cluster network (the Ceph study's private network, §VI-B): the
//! gRPC messages it takes in and sends, per kind of call, and the bytes on its connections'
//! sockets (messages plus HTTP/2 framing, headers and pings).
//!
//! A message counts as its protobuf encoding plus gRPC's 5-byte length prefix, counted where the
//! service takes it in or hands it out (a streamed answer when the stream is made, so one the
//! client gives up on counts whole); an answer that is an error counts nothing here (it travels
//! in trailers, which the socket count sees).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// gRPC's prefix before each message: a compression flag and a 4-byte length.
const GRPC_PREFIX_BYTES: u64 = 5;

/// The kinds of call the node service answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Call {
    /// What the node exports.
    Hello,
    /// A value written.
    Store,
    /// A value (or a range of it) read.
    Retrieve,
    /// A key deleted.
    Delete,
    /// Which keys are stored.
    Exist,
    /// A batch of keys (and values).
    Iterate,
    /// A device's figures.
    Info,
    /// A device synced.
    Sync,
    /// A device compacted.
    Compact,
    /// These counters.
    Traffic,
}

impl Call {
    /// Every kind, in the order of the counters.
    pub const ALL: [Call; 10] = [
        Call::Hello,
        Call::Store,
        Call::Retrieve,
        Call::Delete,
        Call::Exist,
        Call::Iterate,
        Call::Info,
        Call::Sync,
        Call::Compact,
        Call::Traffic,
    ];

    /// Its name in metrics and reports.
    pub fn name(self) -> &'static str {
        match self {
            Call::Hello => "hello",
            Call::Store => "store",
            Call::Retrieve => "retrieve",
            Call::Delete => "delete",
            Call::Exist => "exist",
            Call::Iterate => "iterate",
            Call::Info => "info",
            Call::Sync => "sync",
            Call::Compact => "compact",
            Call::Traffic => "traffic",
        }
    }

    fn index(self) -> usize {
        Call::ALL
            .iter()
            .position(|&c| c == self)
            .expect("every call is listed")
    }
}

/// A node's counters, shared by its service and its connections.
#[derive(Debug, Default)]
pub struct Traffic {
    received: [AtomicU64; Call::ALL.len()],
    sent: [AtomicU64; Call::ALL.len()],
    calls: [AtomicU64; Call::ALL.len()],
    socket_received: AtomicU64,
    socket_sent: AtomicU64,
}

impl Traffic {
    /// Counters at zero.
    pub fn new() -> Arc<Traffic> {
        Arc::new(Traffic::default())
    }

    /// A call of `call` arrived.
    pub(crate) fn call(&self, call: Call) {
        self.calls[call.index()].fetch_add(1, Ordering::Relaxed);
    }

    /// A message of `call` taken in.
    pub(crate) fn received<M: prost::Message>(&self, call: Call, message: &M) {
        self.received[call.index()].fetch_add(message_bytes(message), Ordering::Relaxed);
    }

    /// A message of `call` handed out.
    pub(crate) fn sent<M: prost::Message>(&self, call: Call, message: &M) {
        self.sent[call.index()].fetch_add(message_bytes(message), Ordering::Relaxed);
    }

    /// The counters now.
    pub fn snapshot(&self) -> TrafficSnapshot {
        TrafficSnapshot {
            calls: Call::ALL
                .iter()
                .map(|&c| CallTraffic {
                    call: c,
                    calls: self.calls[c.index()].load(Ordering::Relaxed),
                    received: self.received[c.index()].load(Ordering::Relaxed),
                    sent: self.sent[c.index()].load(Ordering::Relaxed),
                })
                .collect(),
            socket_received: self.socket_received.load(Ordering::Relaxed),
            socket_sent: self.socket_sent.load(Ordering::Relaxed),
        }
    }
}

/// A message's bytes on the wire before HTTP/2 framing.
fn message_bytes<M: prost::Message>(message: &M) -> u64 {
    message.encoded_len() as u64 + GRPC_PREFIX_BYTES
}

/// One kind of call's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallTraffic {
    /// The kind of call.
    pub call: Call,
    /// Calls that arrived.
    pub calls: u64,
    /// Message bytes the node took in.
    pub received: u64,
    /// Message bytes the node sent.
    pub sent: u64,
}

/// A node's counters at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrafficSnapshot {
    /// Per kind of call, in [`Call::ALL`]'s order.
    pub calls: Vec<CallTraffic>,
    /// Bytes read from the node's connections.
    pub socket_received: u64,
    /// Bytes written to them.
    pub socket_sent: u64,
}

impl TrafficSnapshot {
    /// Message bytes in both directions, every kind of call.
    pub fn message_bytes(&self) -> u64 {
        self.calls.iter().map(|c| c.received + c.sent).sum()
    }

    /// Socket bytes in both directions.
    pub fn socket_bytes(&self) -> u64 {
        self.socket_received + self.socket_sent
    }

    /// What moved between `earlier` and this snapshot (of the same node).
    pub fn since(&self, earlier: &TrafficSnapshot) -> TrafficSnapshot {
        TrafficSnapshot {
            calls: self
                .calls
                .iter()
                .zip(&earlier.calls)
                .map(|(now, then)| CallTraffic {
                    call: now.call,
                    calls: now.calls.saturating_sub(then.calls),
                    received: now.received.saturating_sub(then.received),
                    sent: now.sent.saturating_sub(then.sent),
                })
                .collect(),
            socket_received: self.socket_received.saturating_sub(earlier.socket_received),
            socket_sent: self.socket_sent.saturating_sub(earlier.socket_sent),
        }
    }

    /// The sum of several nodes' snapshots.
    pub fn sum<'a>(snapshots: impl IntoIterator<Item = &'a TrafficSnapshot>) -> TrafficSnapshot {
        let mut total = TrafficSnapshot {
            calls: Call::ALL
                .iter()
                .map(|&call| CallTraffic {
                    call,
                    calls: 0,
                    received: 0,
                    sent: 0,
                })
                .collect(),
            socket_received: 0,
            socket_sent: 0,
        };
        for s in snapshots {
            for (t, c) in total.calls.iter_mut().zip(&s.calls) {
                t.calls += c.calls;
                t.received += c.received;
                t.sent += c.sent;
            }
            total.socket_received += s.socket_received;
            total.socket_sent += s.socket_sent;
        }
        total
    }
}

/// Nodes' counters in Prometheus' text format, each series labelled with its node's name.
pub fn prometheus(nodes: &[(String, TrafficSnapshot)]) -> String {
    use std::fmt::Write as _;
    let label = |node: &str| node.replace('\\', "\\\\").replace('"', "\\\"");
    let mut s = String::new();
    let _ = writeln!(
        s,
        "# HELP railstore_node_calls_total Calls that reached the node service (failed ones too), by kind.\n\
         # TYPE railstore_node_calls_total counter"
    );
    for (node, t) in nodes {
        for c in &t.calls {
            let _ = writeln!(
                s,
                "railstore_node_calls_total{{node=\"{}\",call=\"{}\"}} {}",
                label(node),
                c.call.name(),
                c.calls
            );
        }
    }
    let _ = writeln!(
        s,
        "# HELP railstore_node_message_bytes_total gRPC message bytes (protobuf and its \
         5-byte prefix) the node took in (received) and sent, by kind of call.\n\
         # TYPE railstore_node_message_bytes_total counter"
    );
    for (node, t) in nodes {
        for c in &t.calls {
            for (direction, v) in [("received", c.received), ("sent", c.sent)] {
                let _ = writeln!(
                    s,
                    "railstore_node_message_bytes_total{{node=\"{}\",call=\"{}\",direction=\"{direction}\"}} {v}",
                    label(node),
                    c.call.name()
                );
            }
        }
    }
    let _ = writeln!(
        s,
        "# HELP railstore_node_socket_bytes_total Bytes on the node service's connections \
         (messages, HTTP/2 framing, headers and pings).\n\
         # TYPE railstore_node_socket_bytes_total counter"
    );
    for (node, t) in nodes {
        for (direction, v) in [("received", t.socket_received), ("sent", t.socket_sent)] {
            let _ = writeln!(
                s,
                "railstore_node_socket_bytes_total{{node=\"{}\",direction=\"{direction}\"}} {v}",
                label(node)
            );
        }
    }
    s
}

impl From<&TrafficSnapshot> for crate::wire::TrafficReply {
    fn from(s: &TrafficSnapshot) -> Self {
        crate::wire::TrafficReply {
            calls: s
                .calls
                .iter()
                .map(|c| crate::wire::WireCallTraffic {
                    call: c.call.name().to_string(),
                    calls: c.calls,
                    received: c.received,
                    sent: c.sent,
                })
                .collect(),
            socket_received: s.socket_received,
            socket_sent: s.socket_sent,
        }
    }
}

impl From<&crate::wire::TrafficReply> for TrafficSnapshot {
    /// Calls this side does not know (a newer node's) are left out.
    fn from(r: &crate::wire::TrafficReply) -> Self {
        let mut s = TrafficSnapshot::sum([]);
        for w in &r.calls {
            if let Some(c) = s.calls.iter_mut().find(|c| c.call.name() == w.call) {
                c.calls = w.calls;
                c.received = w.received;
                c.sent = w.sent;
            }
        }
        s.socket_received = r.socket_received;
        s.socket_sent = r.socket_sent;
        s
    }
}

/// A connection whose bytes count into a node's [`Traffic`].
pub struct Counted<S> {
    inner: S,
    traffic: Arc<Traffic>,
}

impl<S> Counted<S> {
    /// `inner`, counted into `traffic`.
    pub fn new(inner: S, traffic: Arc<Traffic>) -> Self {
        Counted { inner, traffic }
    }

    /// Counts what a write wrote.
    fn count_sent(&self, polled: &Poll<std::io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = polled {
            self.traffic
                .socket_sent
                .fetch_add(*n as u64, Ordering::Relaxed);
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Counted<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before) as u64;
        self.traffic.socket_received.fetch_add(n, Ordering::Relaxed);
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Counted<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.count_sent(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.count_sent(&polled);
        polled
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

impl tonic::transport::server::Connected for Counted<tokio::net::TcpStream> {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{DeleteReply, DeleteRequest};

    #[test]
    fn messages_count_their_encoding_and_prefix_per_call() {
        let t = Traffic::new();
        let request = DeleteRequest {
            device: 1,
            key: vec![7; 100],
            must_exist: true,
            fence: None,
        };
        t.call(Call::Delete);
        t.received(Call::Delete, &request);
        t.sent(Call::Delete, &DeleteReply { existed: true });
        let s = t.snapshot();
        let d = s.calls.iter().find(|c| c.call == Call::Delete).unwrap();
        // device (2 B), key (tag, length, 100 B), must_exist (2 B), and the prefix.
        assert_eq!(d.received, 2 + 2 + 100 + 2 + 5);
        assert_eq!(d.sent, 2 + 5);
        assert_eq!(d.calls, 1);
        assert_eq!(s.message_bytes(), d.received + d.sent);
        let later = {
            t.sent(Call::Delete, &DeleteReply { existed: false });
            t.snapshot()
        };
        // A false bool is not encoded: only the prefix.
        assert_eq!(later.since(&s).message_bytes(), 5);
        let text = prometheus(&[("n\"1".into(), later.clone()), ("n2".into(), s)]);
        assert!(text.contains(
            "railstore_node_message_bytes_total{node=\"n\\\"1\",call=\"delete\",direction=\"received\"} 111"
        ));
        // One family heading for every node's series.
        assert_eq!(text.matches("# TYPE railstore_node_calls_total").count(), 1);
        assert!(text.contains("railstore_node_calls_total{node=\"n2\",call=\"delete\"} 1"));
    }

    #[tokio::test]
    async fn a_counted_connection_counts_both_directions() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let traffic = Traffic::new();
        let (a, mut b) = tokio::io::duplex(64);
        let mut a = Counted::new(a, traffic.clone());
        a.write_all(b"hello").await.unwrap();
        let mut got = [0u8; 5];
        b.read_exact(&mut got).await.unwrap();
        b.write_all(b"abc").await.unwrap();
        let mut back = [0u8; 3];
        a.read_exact(&mut back).await.unwrap();
        let s = traffic.snapshot();
        assert_eq!((s.socket_sent, s.socket_received), (5, 3));
        assert_eq!(s.socket_bytes(), 8);
    }
}
