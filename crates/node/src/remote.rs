//! The remote device: a [`Device`] whose operations run on another node's device over gRPC.
//!
//! [`RemoteNode::connect`] opens HTTP/2 connections to a node and learns what it exports;
//! [`RemoteNode::device`] gives one of its devices as a `Device`, with the writer's [`Fence`]
//! that every store and delete presents. Handles of the same node share the connection.
//! Operations in flight are held to the node device's queue depth here, before they reach the
//! network. Errors come back as the device's own ([`crate::errors`]).

use crate::errors::{from_status, NODE_CALL};
use crate::generated::node_client::NodeClient;
use crate::service::{
    chunks, message_bytes_for, mode_code, CONNECTION_WINDOW_BYTES, FRAME_BYTES_MAX,
    KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT, MESSAGE_BYTES_MAX, STREAM_WINDOW_BYTES,
};
use crate::wire::*;
use async_trait::async_trait;
use bytes::Bytes;
use railstore_device::{
    CompactStats, Device, DeviceError, DeviceInfo, Fence, IterBatch, IterEntry, IterRequest,
    Limits, QueueGate, ReadRange, Result, Retrieved, StoreMode,
};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use tonic::transport::{Channel, Endpoint};
use tonic::Status;

/// How long connecting to a node may take.
pub const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Connections a node is reached by, unless asked otherwise: a node's connection is read
/// by one task, so two let a node on two cores take in two large values at once.
pub const CONNECTIONS_DEFAULT: usize = 2;

/// The connections to one node; calls take them in turn.
struct Connections {
    clients: Vec<NodeClient<Channel>>,
    next: AtomicUsize,
}

impl Connections {
    fn pick(&self) -> NodeClient<Channel> {
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.clients.len();
        self.clients[i].clone()
    }
}

/// A connection to one node.
#[derive(Clone)]
pub struct RemoteNode {
    connections: Arc<Connections>,
    /// One queue gate per device, shared by every handle on it from this connection.
    gates: Arc<Vec<Arc<QueueGate>>>,
    address: String,
    hello: Arc<HelloReply>,
}

impl RemoteNode {
    /// Connects to the node at `address` (`host:port`) with [`CONNECTIONS_DEFAULT`] connections
    /// and asks what it exports.
    pub async fn connect(address: &str) -> Result<RemoteNode> {
        Self::connect_with(address, CONNECTIONS_DEFAULT).await
    }

    /// Connects with `connections` HTTP/2 connections, which calls take in turn.
    pub async fn connect_with(address: &str, connections: usize) -> Result<RemoteNode> {
        let endpoint = Endpoint::from_shared(format!("http://{address}"))
            .map_err(|e| DeviceError::Config(format!("node address {address:?}: {e}")))?
            .tcp_nodelay(true)
            .initial_stream_window_size(STREAM_WINDOW_BYTES)
            .initial_connection_window_size(CONNECTION_WINDOW_BYTES)
            .max_frame_size(FRAME_BYTES_MAX)
            .connect_timeout(CONNECT_TIMEOUT)
            // A node that vanishes without closing its connections (power cut, partition)
            // fails the calls in flight once pings go unanswered, instead of leaving them
            // waiting forever with their queue slots held.
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT)
            .keep_alive_while_idle(true);
        let mut channels = Vec::new();
        for _ in 0..connections.max(1) {
            channels.push(endpoint.connect().await.map_err(|e| {
                DeviceError::io(
                    "connecting to a node",
                    std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        format!("{address}: {e}"),
                    ),
                )
            })?);
        }
        let client = |channel: &Channel, decoding_max: usize| {
            NodeClient::new(channel.clone())
                .max_decoding_message_size(decoding_max)
                .max_encoding_message_size(MESSAGE_BYTES_MAX)
        };
        let hello = client(&channels[0], MESSAGE_BYTES_MAX)
            .hello(HelloRequest {})
            .await
            .map_err(|s| from_status(&s))?
            .into_inner();
        // A value travels whole in an iteration's entry, so what the client takes in grows
        // with the largest value a device takes.
        let decoding_max = hello
            .devices
            .iter()
            .filter_map(|d| d.limits)
            .map(|l| message_bytes_for(l.value_bytes_max))
            .fold(MESSAGE_BYTES_MAX, usize::max);
        let connections = Arc::new(Connections {
            clients: channels.iter().map(|c| client(c, decoding_max)).collect(),
            next: AtomicUsize::new(0),
        });
        let gates = hello
            .devices
            .iter()
            .map(|d| Arc::new(QueueGate::new(d.queue_depth_max as usize)))
            .collect();
        Ok(RemoteNode {
            connections,
            gates: Arc::new(gates),
            address: address.to_string(),
            hello: Arc::new(hello),
        })
    }

    /// The node's name.
    pub fn name(&self) -> &str {
        &self.hello.node
    }

    /// The array the node's devices belong to.
    pub fn array_id(&self) -> u64 {
        self.hello.array_id
    }

    /// The names of the node's devices, in index order.
    pub fn device_names(&self) -> Vec<String> {
        self.hello.devices.iter().map(|d| d.name.clone()).collect()
    }

    /// What the node has moved over the network since it started (its answer to this call
    /// counts in the next one).
    pub async fn traffic(&self) -> Result<crate::traffic::TrafficSnapshot> {
        let reply = self
            .connections
            .pick()
            .traffic(crate::wire::TrafficRequest {})
            .await
            .map_err(|s| from_status(&s))?
            .into_inner();
        Ok(crate::traffic::TrafficSnapshot::from(&reply))
    }

    /// Device `name` of the node, writing as `fence`.
    pub fn device(&self, name: &str, fence: Fence) -> Result<RemoteDevice> {
        let index = self
            .hello
            .devices
            .iter()
            .position(|d| d.name == name)
            .ok_or_else(|| {
                DeviceError::Config(format!(
                    "node {} at {} has no device {name:?} (it has {:?})",
                    self.hello.node,
                    self.address,
                    self.device_names()
                ))
            })?;
        let facts = &self.hello.devices[index];
        let l = facts.limits.unwrap_or_default();
        Ok(RemoteDevice {
            connections: self.connections.clone(),
            index: index as u32,
            limits: limits_of(l),
            gate: self.gates[index].clone(),
            fence: Arc::new(RwLock::new(fence)),
            memory_bytes: Arc::new(AtomicU64::new(facts.memory_bytes)),
        })
    }
}

/// One device of a node, as a local [`Device`].
pub struct RemoteDevice {
    connections: Arc<Connections>,
    index: u32,
    limits: Limits,
    gate: Arc<QueueGate>,
    fence: Arc<RwLock<Fence>>,
    memory_bytes: Arc<AtomicU64>,
}

impl RemoteDevice {
    /// `retrieve`, or with `part` `retrieve_part` on the node's device.
    async fn read(&self, key: &[u8], range: ReadRange, part: bool) -> Result<Retrieved> {
        let _slot = self.gate.enter().await;
        let mut stream = self
            .connections
            .pick()
            .retrieve(RetrieveRequest {
                device: self.index,
                key: key.to_vec(),
                offset: range.offset,
                len_max: range.len,
                part,
            })
            .await
            .map_err(call_error)?
            .into_inner();
        let first = stream
            .message()
            .await
            .map_err(call_error)?
            .ok_or_else(|| broken("a retrieve answered with no value".into()))?;
        // Read to the stream's end even when the first chunk is the whole value: the end
        // carries the call's status, and a stream dropped early is reset, which the node
        // counts against the connection (enough resets and it refuses the connection).
        let expected = first.range_len as usize;
        let mut value = Gather::new(first.data, expected);
        while let Some(chunk) = stream.message().await.map_err(call_error)? {
            if !value.push(&chunk.data) {
                return Err(broken(format!(
                    "a retrieve returned more than its {expected} B range"
                )));
            }
        }
        let value = value.finish().map_err(|got| {
            broken(format!(
                "a retrieve returned {got} B of a {expected} B range"
            ))
        })?;
        Ok(Retrieved {
            value,
            value_len: first.value_len,
        })
    }

    /// The fence this device's stores and deletes present.
    pub fn fence(&self) -> Fence {
        *self.fence.read().unwrap_or_else(|p| p.into_inner())
    }

    /// Writes as `fence` from now on (a new token after winning a shard, a new layout epoch).
    pub fn set_fence(&self, fence: Fence) {
        *self.fence.write().unwrap_or_else(|p| p.into_inner()) = fence;
    }

    /// Another handle on the same device and connection, with the same queue-depth bound,
    /// writing as `fence` (one handle per shard a node owns).
    pub fn with_fence(&self, fence: Fence) -> RemoteDevice {
        RemoteDevice {
            connections: self.connections.clone(),
            index: self.index,
            limits: self.limits,
            gate: self.gate.clone(),
            fence: Arc::new(RwLock::new(fence)),
            memory_bytes: self.memory_bytes.clone(),
        }
    }

    fn wire_fence(&self) -> Option<crate::wire::Fence> {
        Some(self.fence().into())
    }
}

fn limits_of(l: WireLimits) -> Limits {
    Limits {
        key_bytes_min: l.key_bytes_min as usize,
        key_bytes_max: l.key_bytes_max as usize,
        value_bytes_max: l.value_bytes_max as usize,
    }
}

fn call_error(s: Status) -> DeviceError {
    from_status(&s)
}

fn broken(what: String) -> DeviceError {
    DeviceError::io(
        NODE_CALL,
        std::io::Error::new(std::io::ErrorKind::InvalidData, what),
    )
}

#[async_trait]
impl Device for RemoteDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        // Checked here too, so that a refused value never crosses the network.
        self.limits.check(key, value)?;
        let _slot = self.gate.enter().await;
        let value = Bytes::copy_from_slice(value);
        let value_len = value.len() as u64;
        let mut first = Some(StoreChunk {
            device: self.index,
            key: key.to_vec(),
            mode: mode_code(mode),
            value_len,
            fence: self.wire_fence(),
            data: Bytes::new(),
        });
        let messages: Vec<StoreChunk> = chunks(value)
            .map(|data| match first.take() {
                Some(f) => StoreChunk { data, ..f },
                None => StoreChunk {
                    data,
                    ..Default::default()
                },
            })
            .collect();
        self.connections
            .pick()
            .store(futures_util::stream::iter(messages))
            .await
            .map_err(call_error)?;
        Ok(())
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.read(key, range, false).await
    }

    async fn retrieve_part(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        self.read(key, range, true).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        self.limits.check_key(key)?;
        let _slot = self.gate.enter().await;
        let reply = self
            .connections
            .pick()
            .delete(DeleteRequest {
                device: self.index,
                key: key.to_vec(),
                must_exist,
                fence: self.wire_fence(),
            })
            .await
            .map_err(call_error)?;
        Ok(reply.into_inner().existed)
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        let _slot = self.gate.enter().await;
        let found = self
            .connections
            .pick()
            .exist(ExistRequest {
                device: self.index,
                keys: keys.iter().map(|k| k.to_vec()).collect(),
            })
            .await
            .map_err(call_error)?
            .into_inner()
            .found;
        if found.len() != keys.len() {
            return Err(broken(format!(
                "exist answered for {} keys of {}",
                found.len(),
                keys.len()
            )));
        }
        Ok(found)
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        let _slot = self.gate.enter().await;
        let mut stream = self
            .connections
            .pick()
            .iterate(IterateRequest {
                device: self.index,
                prefix: req.prefix.clone(),
                start_after: req.start_after.clone(),
                entries_max: req.entries_max as u64,
                with_values: req.with_values,
            })
            .await
            .map_err(call_error)?
            .into_inner();
        // Read to the stream's end, as for a retrieve: the end carries the call's status.
        let mut entries = Vec::new();
        let mut more = None;
        while let Some(chunk) = stream.message().await.map_err(call_error)? {
            if more.is_some() {
                return Err(broken("an iteration went on after its last batch".into()));
            }
            entries.extend(chunk.entries.into_iter().map(|e| IterEntry {
                key: e.key,
                value: e.value,
            }));
            if chunk.last {
                more = Some(chunk.more);
            }
        }
        let more =
            more.ok_or_else(|| broken("an iteration's stream ended before its last batch".into()))?;
        Ok(IterBatch { entries, more })
    }

    async fn info(&self) -> Result<DeviceInfo> {
        let _slot = self.gate.enter().await;
        let i = self
            .connections
            .pick()
            .info(DeviceRequest { device: self.index })
            .await
            .map_err(call_error)?
            .into_inner();
        self.memory_bytes.store(i.memory_bytes, Ordering::Relaxed);
        let l = i.limits.unwrap_or_default();
        Ok(DeviceInfo {
            capacity_bytes: i.capacity_bytes,
            used_bytes: i.used_bytes,
            live_bytes: i.live_bytes,
            key_count: i.key_count,
            limits: limits_of(l),
            optimal_value_bytes: i.optimal_value_bytes,
            queue_depth_max: i.queue_depth_max as usize,
        })
    }

    async fn sync(&self) -> Result<()> {
        let _slot = self.gate.enter().await;
        self.connections
            .pick()
            .sync(DeviceRequest { device: self.index })
            .await
            .map_err(call_error)?;
        Ok(())
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        let _slot = self.gate.enter().await;
        let s = self
            .connections
            .pick()
            .compact(CompactRequest {
                device: self.index,
                budget_bytes,
            })
            .await
            .map_err(call_error)?
            .into_inner();
        Ok(CompactStats {
            segments_freed: s.segments_freed,
            bytes_copied: s.bytes_copied,
            bytes_freed: s.bytes_freed,
        })
    }

    fn remote(&self) -> bool {
        true
    }

    fn limits(&self) -> Limits {
        self.limits
    }

    /// The node device's memory as of the connection or the last [`Device::info`]: it is the
    /// node's memory, not this process's, and asking for it each time would cost a call.
    fn memory_bytes(&self) -> u64 {
        self.memory_bytes.load(Ordering::Relaxed)
    }
}
