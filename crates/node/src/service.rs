//! The node service: a node's local devices exported over gRPC. Each call names a device by its
//! index in the node's list (the order of [`HelloReply::devices`]); mutations are admitted by
//! the node's [`FenceBook`] first. The devices bound their own queue depth; the remote device
//! keeps its calls within the depth the node reports, so calls do not pile up here.

use crate::errors::to_status;
use crate::fences::FenceBook;
use crate::generated::node_server::{Node, NodeServer};
use crate::traffic::{Call, Counted, Traffic};
use crate::wire::*;
use bytes::Bytes;
use futures_util::Stream;
use railstore_device::{Device, DeviceError, IterRequest, ReadRange, StoreMode};
use std::pin::Pin;
use std::sync::Arc;
use tonic::{Request, Response, Status, Streaming};

/// The most bytes of one gRPC message either side accepts: a chunk, or an iteration entry
/// whose value is whole. Far above [`CHUNK_BYTES`]; a bound, not an allocation. Raised to
/// [`message_bytes_for`] a device's value limit where that is more.
pub const MESSAGE_BYTES_MAX: usize = 64 << 20;

/// The message bound that lets a value of `value_bytes_max` travel whole with its key, up to
/// [`MESSAGE_BYTES_CEILING`] (a device reporting no real limit does not lift the bound).
pub(crate) fn message_bytes_for(value_bytes_max: u64) -> usize {
    usize::try_from(value_bytes_max)
        .unwrap_or(usize::MAX)
        .saturating_add(1 << 20)
        .min(MESSAGE_BYTES_CEILING)
}

/// The most any message may be: larger values cannot be iterated with their values.
pub const MESSAGE_BYTES_CEILING: usize = 1 << 30;

/// Streams one connection may have open at once (tonic leaves it unbounded); each holds at
/// most a value being taken in.
pub(crate) const STREAMS_MAX: u32 = 1024;

/// HTTP/2 pings on an idle connection, and how long an unanswered one waits before the
/// connection (and every call on it) is given up.
pub(crate) const KEEPALIVE_INTERVAL: std::time::Duration = std::time::Duration::from_secs(5);
pub(crate) const KEEPALIVE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// HTTP/2 flow-control windows: large enough that a 1 MiB value does not stall on window
/// updates over a fast link (the 64 KiB default held loopback throughput to a fraction).
pub(crate) const STREAM_WINDOW_BYTES: u32 = 4 << 20;
pub(crate) const CONNECTION_WINDOW_BYTES: u32 = 32 << 20;
/// Largest HTTP/2 frame either side accepts: a value's chunk in a few frames rather than the
/// default 16 KiB ones, each of which costs its own header and bookkeeping.
pub(crate) const FRAME_BYTES_MAX: u32 = 1 << 20;

/// One device a node exports.
pub struct Exported {
    /// Its name on the node (reported to clients; also how they pick it).
    pub name: String,
    /// The device.
    pub device: Arc<dyn Device>,
}

/// A node's devices behind the gRPC service.
pub struct NodeService {
    node: String,
    devices: Vec<Exported>,
    fences: Arc<FenceBook>,
    traffic: Arc<Traffic>,
}

type ChunkStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send>>;

impl NodeService {
    /// Exports `devices` as node `node`; `fences` decides which writers it admits.
    pub fn new(node: impl Into<String>, devices: Vec<Exported>, fences: Arc<FenceBook>) -> Self {
        NodeService {
            node: node.into(),
            devices,
            fences,
            traffic: Traffic::new(),
        }
    }

    /// What the node has moved over the network (its connections count into it once
    /// [`serve`]d).
    pub fn traffic(&self) -> Arc<Traffic> {
        self.traffic.clone()
    }

    /// The tonic service, with the node's message size bounds: what it takes in stays at
    /// [`MESSAGE_BYTES_MAX`] (a store arrives in pieces of [`CHUNK_BYTES`]); what it sends may
    /// carry a whole value (an iteration's entry).
    pub fn into_server(self) -> NodeServer<NodeService> {
        let sent_max = self
            .devices
            .iter()
            .map(|e| message_bytes_for(e.device.limits().value_bytes_max as u64))
            .fold(MESSAGE_BYTES_MAX, usize::max);
        NodeServer::new(self)
            .max_decoding_message_size(MESSAGE_BYTES_MAX)
            .max_encoding_message_size(sent_max)
    }

    fn device(&self, index: u32) -> Result<&Arc<dyn Device>, Status> {
        self.devices
            .get(index as usize)
            .map(|e| &e.device)
            .ok_or_else(|| {
                to_status(&DeviceError::Config(format!(
                    "node {} has no device {index} (it has {})",
                    self.node,
                    self.devices.len()
                )))
            })
    }

    async fn admit(&self, fence: Option<Fence>) -> Result<crate::fences::Admitted, Status> {
        let fence = fence.ok_or_else(|| {
            to_status(&DeviceError::Config(
                "a mutation must carry its writer's fence".into(),
            ))
        })?;
        self.fences
            .admit(fence.into())
            .await
            .map_err(|e| to_status(&e))
    }
}

/// A request the protocol does not allow, answered as a configuration error with its details,
/// so that the caller sees a refused request, not a device fault.
fn protocol(what: String) -> Status {
    to_status(&DeviceError::Config(what))
}

fn mode(code: u32) -> Result<StoreMode, Status> {
    match code {
        0 => Ok(StoreMode::Upsert),
        1 => Ok(StoreMode::UpdateOnly),
        2 => Ok(StoreMode::InsertOnly),
        other => Err(protocol(format!("unknown store mode {other}"))),
    }
}

/// The wire number of a store mode.
pub(crate) fn mode_code(mode: StoreMode) -> u32 {
    match mode {
        StoreMode::Upsert => 0,
        StoreMode::UpdateOnly => 1,
        StoreMode::InsertOnly => 2,
    }
}

fn limits(l: railstore_device::Limits) -> WireLimits {
    WireLimits {
        key_bytes_min: l.key_bytes_min as u64,
        key_bytes_max: l.key_bytes_max as u64,
        value_bytes_max: l.value_bytes_max as u64,
    }
}

#[tonic::async_trait]
impl Node for NodeService {
    async fn hello(&self, request: Request<HelloRequest>) -> Result<Response<HelloReply>, Status> {
        self.traffic.call(Call::Hello);
        self.traffic.received(Call::Hello, request.get_ref());
        let mut devices = Vec::with_capacity(self.devices.len());
        for e in &self.devices {
            // A failed device is still exported (its operations answer with its error), with
            // a depth of one.
            let depth = e.device.info().await.map_or(1, |i| i.queue_depth_max);
            devices.push(DeviceFacts {
                name: e.name.clone(),
                limits: Some(limits(e.device.limits())),
                queue_depth_max: depth as u64,
                memory_bytes: e.device.memory_bytes(),
            });
        }
        let reply = HelloReply {
            node: self.node.clone(),
            array_id: self.fences.array_id(),
            devices,
        };
        self.traffic.sent(Call::Hello, &reply);
        Ok(Response::new(reply))
    }

    async fn store(
        &self,
        request: Request<Streaming<StoreChunk>>,
    ) -> Result<Response<StoreReply>, Status> {
        self.traffic.call(Call::Store);
        let mut stream = request.into_inner();
        let first = stream
            .message()
            .await?
            .ok_or_else(|| protocol("a store without its first message".into()))?;
        self.traffic.received(Call::Store, &first);
        let dev = self.device(first.device)?;
        let mode = mode(first.mode)?;
        // Refuse what the device would refuse before taking in the rest of the value.
        let limits = dev.limits();
        if first.value_len > limits.value_bytes_max as u64 {
            return Err(to_status(&DeviceError::ValueLength {
                len: first.value_len as usize,
                max: limits.value_bytes_max,
            }));
        }
        // The buffer grows with what arrives, not with what was announced, so a writer that
        // announces much and sends little holds little. Anything past the announced length is
        // refused, not cut off.
        let announced = first.value_len as usize;
        let mut value = Gather::new(first.data, announced);
        while let Some(chunk) = stream.message().await? {
            self.traffic.received(Call::Store, &chunk);
            if !value.push(&chunk.data) {
                return Err(protocol(format!(
                    "a store's value ran past the {announced} B announced"
                )));
            }
        }
        let value = value.finish().map_err(|got| {
            protocol(format!(
                "a store's value arrived with {got} B, not the {announced} B announced"
            ))
        })?;
        // Admitted only once the value is whole: the admission is held for the device
        // operation alone, never while a writer's bytes trickle in (a paused writer holding it
        // would hold back its successor's first write).
        let _admitted = self.admit(first.fence).await?;
        dev.store(&first.key, &value, mode)
            .await
            .map_err(|e| to_status(&e))?;
        self.traffic.sent(Call::Store, &StoreReply {});
        Ok(Response::new(StoreReply {}))
    }

    type RetrieveStream = ChunkStream<ValueChunk>;

    async fn retrieve(
        &self,
        request: Request<RetrieveRequest>,
    ) -> Result<Response<Self::RetrieveStream>, Status> {
        self.traffic.call(Call::Retrieve);
        self.traffic.received(Call::Retrieve, request.get_ref());
        let r = request.into_inner();
        let dev = self.device(r.device)?;
        let range = ReadRange {
            offset: r.offset,
            len: r.len_max,
        };
        let got = if r.part {
            dev.retrieve_part(&r.key, range).await
        } else {
            dev.retrieve(&r.key, range).await
        }
        .map_err(|e| to_status(&e))?;
        let traffic = self.traffic.clone();
        let chunks = chunks(got.value.clone()).map(move |data| {
            let chunk = ValueChunk {
                value_len: got.value_len,
                range_len: got.value.len() as u64,
                data,
            };
            traffic.sent(Call::Retrieve, &chunk);
            Ok(chunk)
        });
        Ok(Response::new(Box::pin(futures_util::stream::iter(
            chunks.collect::<Vec<_>>(),
        ))))
    }

    async fn delete(
        &self,
        request: Request<DeleteRequest>,
    ) -> Result<Response<DeleteReply>, Status> {
        self.traffic.call(Call::Delete);
        self.traffic.received(Call::Delete, request.get_ref());
        let r = request.into_inner();
        let dev = self.device(r.device)?;
        let _admitted = self.admit(r.fence).await?;
        let existed = dev
            .delete(&r.key, r.must_exist)
            .await
            .map_err(|e| to_status(&e))?;
        let reply = DeleteReply { existed };
        self.traffic.sent(Call::Delete, &reply);
        Ok(Response::new(reply))
    }

    async fn exist(&self, request: Request<ExistRequest>) -> Result<Response<ExistReply>, Status> {
        self.traffic.call(Call::Exist);
        self.traffic.received(Call::Exist, request.get_ref());
        let r = request.into_inner();
        let dev = self.device(r.device)?;
        let keys: Vec<&[u8]> = r.keys.iter().map(Vec::as_slice).collect();
        let found = dev.exist(&keys).await.map_err(|e| to_status(&e))?;
        let reply = ExistReply { found };
        self.traffic.sent(Call::Exist, &reply);
        Ok(Response::new(reply))
    }

    type IterateStream = ChunkStream<IterateChunk>;

    async fn iterate(
        &self,
        request: Request<IterateRequest>,
    ) -> Result<Response<Self::IterateStream>, Status> {
        self.traffic.call(Call::Iterate);
        self.traffic.received(Call::Iterate, request.get_ref());
        let r = request.into_inner();
        let dev = self.device(r.device)?;
        let batch = dev
            .iterate(&IterRequest {
                prefix: r.prefix,
                start_after: r.start_after,
                entries_max: usize::try_from(r.entries_max).unwrap_or(usize::MAX),
                with_values: r.with_values,
            })
            .await
            .map_err(|e| to_status(&e))?;
        // Entries in messages of about CHUNK_BYTES each (at least one entry per message).
        let mut messages = Vec::new();
        let mut entries = Vec::new();
        let mut bytes = 0;
        for e in batch.entries {
            let size = e.key.len() + e.value.as_ref().map_or(0, Vec::len);
            if !entries.is_empty() && bytes + size > CHUNK_BYTES {
                messages.push(Ok(IterateChunk {
                    entries: std::mem::take(&mut entries),
                    last: false,
                    more: false,
                }));
                bytes = 0;
            }
            bytes += size;
            entries.push(WireEntry {
                key: e.key,
                value: e.value,
            });
        }
        messages.push(Ok(IterateChunk {
            entries,
            last: true,
            more: batch.more,
        }));
        for m in messages.iter().flatten() {
            self.traffic.sent(Call::Iterate, m);
        }
        Ok(Response::new(Box::pin(futures_util::stream::iter(
            messages,
        ))))
    }

    async fn info(&self, request: Request<DeviceRequest>) -> Result<Response<InfoReply>, Status> {
        self.traffic.call(Call::Info);
        self.traffic.received(Call::Info, request.get_ref());
        let dev = self.device(request.into_inner().device)?;
        let i = dev.info().await.map_err(|e| to_status(&e))?;
        let reply = InfoReply {
            capacity_bytes: i.capacity_bytes,
            used_bytes: i.used_bytes,
            live_bytes: i.live_bytes,
            key_count: i.key_count,
            limits: Some(limits(i.limits)),
            optimal_value_bytes: i.optimal_value_bytes,
            queue_depth_max: i.queue_depth_max as u64,
            memory_bytes: dev.memory_bytes(),
        };
        self.traffic.sent(Call::Info, &reply);
        Ok(Response::new(reply))
    }

    async fn sync(&self, request: Request<DeviceRequest>) -> Result<Response<SyncReply>, Status> {
        self.traffic.call(Call::Sync);
        self.traffic.received(Call::Sync, request.get_ref());
        let dev = self.device(request.into_inner().device)?;
        dev.sync().await.map_err(|e| to_status(&e))?;
        self.traffic.sent(Call::Sync, &SyncReply {});
        Ok(Response::new(SyncReply {}))
    }

    async fn compact(
        &self,
        request: Request<CompactRequest>,
    ) -> Result<Response<CompactReply>, Status> {
        self.traffic.call(Call::Compact);
        self.traffic.received(Call::Compact, request.get_ref());
        let r = request.into_inner();
        let dev = self.device(r.device)?;
        let s = dev
            .compact(r.budget_bytes)
            .await
            .map_err(|e| to_status(&e))?;
        let reply = CompactReply {
            segments_freed: s.segments_freed,
            bytes_copied: s.bytes_copied,
            bytes_freed: s.bytes_freed,
        };
        self.traffic.sent(Call::Compact, &reply);
        Ok(Response::new(reply))
    }

    async fn traffic(
        &self,
        request: Request<TrafficRequest>,
    ) -> Result<Response<TrafficReply>, Status> {
        self.traffic.call(Call::Traffic);
        self.traffic.received(Call::Traffic, request.get_ref());
        // The reply counts itself only in the next snapshot.
        let reply = TrafficReply::from(&self.traffic.snapshot());
        self.traffic.sent(Call::Traffic, &reply);
        Ok(Response::new(reply))
    }
}

/// A value cut into [`CHUNK_BYTES`] pieces without copying; an empty value is one empty piece,
/// so that the stream always carries the value's length.
pub(crate) fn chunks(value: Bytes) -> impl Iterator<Item = Bytes> {
    let n = value.len().div_ceil(CHUNK_BYTES).max(1);
    (0..n).map(move |i| value.slice(i * CHUNK_BYTES..((i + 1) * CHUNK_BYTES).min(value.len())))
}

/// Serves `service` on `listener` until `shutdown` resolves.
pub async fn serve(
    service: NodeService,
    listener: tokio::net::TcpListener,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    // Connections accepted here are ours, so the server's own `tcp_nodelay` does not reach
    // them: without it a small answer waits for the peer's delayed ACK (about 40 ms).
    let traffic = service.traffic();
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        move |accepted| {
            accepted
                .inspect(|stream| {
                    if let Err(e) = stream.set_nodelay(true) {
                        tracing::warn!(error = %e, "TCP_NODELAY on a node connection");
                    }
                })
                .map(|stream| Counted::new(stream, traffic.clone()))
        },
    );
    tonic::transport::Server::builder()
        .initial_stream_window_size(STREAM_WINDOW_BYTES)
        .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
        .max_frame_size(FRAME_BYTES_MAX)
        .max_concurrent_streams(STREAMS_MAX)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .add_service(service.into_server())
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
