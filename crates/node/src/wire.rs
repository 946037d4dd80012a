//! The messages of the node service, as prost structs (protobuf encoding, no `.proto` file:
//! `build.rs` names them). Field numbers are the wire format: never reuse or renumber one.
//!
//! Values travel in [`CHUNK_BYTES`] pieces: a store is a client stream whose first message
//! carries the key, mode and fence; a retrieve or an iteration is a server stream.

use bytes::{Bytes, BytesMut};

/// Most value bytes in one message: a value up to 1 MiB travels whole in one message (no
/// reassembly copy); a larger one streams, so no message grows with the device's value limit.
pub const CHUNK_BYTES: usize = 1 << 20;

/// A value arriving in pieces, on either side: a first piece that is the whole value is kept as
/// it came (no copy); otherwise the pieces are gathered into a buffer that grows with what
/// arrives (not with what was announced) and never past the expected length.
pub(crate) struct Gather {
    expected: usize,
    value: Bytes,
    gathered: Option<BytesMut>,
}

impl Gather {
    /// Starts with the first piece of a value of `expected` bytes.
    pub(crate) fn new(first: Bytes, expected: usize) -> Gather {
        Gather {
            expected,
            value: first,
            gathered: None,
        }
    }

    /// Adds the next piece; `false` (and nothing added) if it would run past the expected
    /// length.
    pub(crate) fn push(&mut self, piece: &[u8]) -> bool {
        let (value, expected) = (&self.value, self.expected);
        let g = self.gathered.get_or_insert_with(|| {
            let mut g = BytesMut::with_capacity(expected.min(CHUNK_BYTES));
            g.extend_from_slice(value);
            g
        });
        if g.len() + piece.len() > expected {
            return false;
        }
        g.extend_from_slice(piece);
        true
    }

    /// The whole value, or how many bytes arrived if that is not the expected length.
    pub(crate) fn finish(self) -> Result<Bytes, usize> {
        let value = self.gathered.map_or(self.value, BytesMut::freeze);
        if value.len() == self.expected {
            Ok(value)
        } else {
            Err(value.len())
        }
    }
}

/// Who is writing, so that a node can refuse a writer that has been superseded: the array the
/// devices belong to, the layout epoch the writer works under, and the writer's fencing token
/// for its shard (in a cluster, the revision of the etcd lease that made it the shard's owner).
#[derive(Clone, Copy, PartialEq, Eq, Hash, prost::Message)]
pub struct Fence {
    /// The array the writer believes the device belongs to.
    #[prost(uint64, tag = "1")]
    pub array_id: u64,
    /// The layout epoch the writer works under.
    #[prost(uint64, tag = "2")]
    pub layout_epoch: u64,
    /// The shard of the key space the writer owns.
    #[prost(uint32, tag = "3")]
    pub shard: u32,
    /// The writer's token for that shard; a higher token supersedes every lower one.
    #[prost(uint64, tag = "4")]
    pub token: u64,
}

/// Asks a node what it exports.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloRequest {}

/// What a node exports.
#[derive(Clone, PartialEq, prost::Message)]
pub struct HelloReply {
    /// The node's name.
    #[prost(string, tag = "1")]
    pub node: String,
    /// The array its devices belong to.
    #[prost(uint64, tag = "2")]
    pub array_id: u64,
    /// Its devices, addressed by their index in this list.
    #[prost(message, repeated, tag = "3")]
    pub devices: Vec<DeviceFacts>,
}

/// The facts a remote device needs without asking each time.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceFacts {
    /// The device's name on its node.
    #[prost(string, tag = "1")]
    pub name: String,
    /// Its key and value limits.
    #[prost(message, optional, tag = "2")]
    pub limits: Option<WireLimits>,
    /// Most operations in flight at once.
    #[prost(uint64, tag = "3")]
    pub queue_depth_max: u64,
    /// Bytes of memory it keeps for what it stores.
    #[prost(uint64, tag = "4")]
    pub memory_bytes: u64,
}

/// [`railstore_device::Limits`] on the wire.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct WireLimits {
    /// Shortest key.
    #[prost(uint64, tag = "1")]
    pub key_bytes_min: u64,
    /// Longest key.
    #[prost(uint64, tag = "2")]
    pub key_bytes_max: u64,
    /// Longest value.
    #[prost(uint64, tag = "3")]
    pub value_bytes_max: u64,
}

/// One message of a store's stream. The first carries everything but possibly part of the
/// value; the rest carry only `data`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreChunk {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
    /// The key.
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    /// 0 upsert, 1 update only, 2 insert only.
    #[prost(uint32, tag = "3")]
    pub mode: u32,
    /// The whole value's length, so that the node can tell a cut stream from a short value.
    #[prost(uint64, tag = "4")]
    pub value_len: u64,
    /// Who writes.
    #[prost(message, optional, tag = "5")]
    pub fence: Option<Fence>,
    /// The next bytes of the value.
    #[prost(bytes = "bytes", tag = "6")]
    pub data: Bytes,
}

/// A store landed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct StoreReply {}

/// Reads part of a value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RetrieveRequest {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
    /// The key.
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    /// First byte to return.
    #[prost(uint64, tag = "3")]
    pub offset: u64,
    /// Most bytes to return; absent reads to the end.
    #[prost(uint64, optional, tag = "4")]
    pub len_max: Option<u64>,
    /// The caller checks the bytes itself (`Device::retrieve_part`): the node's device may
    /// read the range alone. A node that predates it reads as for `retrieve`.
    #[prost(bool, tag = "5")]
    pub part: bool,
}

/// One message of a retrieve's stream.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValueChunk {
    /// The full stored length of the value (in every chunk; the client checks the first).
    #[prost(uint64, tag = "1")]
    pub value_len: u64,
    /// The next bytes of the requested range.
    #[prost(bytes = "bytes", tag = "2")]
    pub data: Bytes,
    /// Bytes of the requested range in all chunks together, so a cut stream is noticed.
    #[prost(uint64, tag = "3")]
    pub range_len: u64,
}

/// Deletes a key.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteRequest {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
    /// The key.
    #[prost(bytes = "vec", tag = "2")]
    pub key: Vec<u8>,
    /// A missing key is an error.
    #[prost(bool, tag = "3")]
    pub must_exist: bool,
    /// Who writes.
    #[prost(message, optional, tag = "4")]
    pub fence: Option<Fence>,
}

/// Whether the deleted key existed.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeleteReply {
    /// It existed.
    #[prost(bool, tag = "1")]
    pub existed: bool,
}

/// Asks which keys are stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExistRequest {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
    /// The keys.
    #[prost(bytes = "vec", repeated, tag = "2")]
    pub keys: Vec<Vec<u8>>,
}

/// For each key, whether it is stored.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ExistReply {
    /// In the order of the request's keys.
    #[prost(bool, repeated, tag = "1")]
    pub found: Vec<bool>,
}

/// One batch of an iteration ([`railstore_device::IterRequest`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct IterateRequest {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
    /// Only keys starting with these bytes.
    #[prost(bytes = "vec", tag = "2")]
    pub prefix: Vec<u8>,
    /// Resume after this key.
    #[prost(bytes = "vec", optional, tag = "3")]
    pub start_after: Option<Vec<u8>>,
    /// Most entries; 0 means no limit.
    #[prost(uint64, tag = "4")]
    pub entries_max: u64,
    /// Return values too.
    #[prost(bool, tag = "5")]
    pub with_values: bool,
}

/// One message of an iteration's stream: some of the batch's entries.
#[derive(Clone, PartialEq, prost::Message)]
pub struct IterateChunk {
    /// Entries in ascending key order.
    #[prost(message, repeated, tag = "1")]
    pub entries: Vec<WireEntry>,
    /// The last message of the stream: `more` is the batch's answer.
    #[prost(bool, tag = "2")]
    pub last: bool,
    /// More keys with the prefix follow the batch (meaningful in the last message).
    #[prost(bool, tag = "3")]
    pub more: bool,
}

/// One key and, if asked, its value.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WireEntry {
    /// The key.
    #[prost(bytes = "vec", tag = "1")]
    pub key: Vec<u8>,
    /// The value, when the request asked for values.
    #[prost(bytes = "vec", optional, tag = "2")]
    pub value: Option<Vec<u8>>,
}

/// Names one device of the node.
#[derive(Clone, PartialEq, prost::Message)]
pub struct DeviceRequest {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
}

/// [`railstore_device::DeviceInfo`] on the wire, and the device's memory.
#[derive(Clone, PartialEq, prost::Message)]
pub struct InfoReply {
    /// Total bytes the device can hold.
    #[prost(uint64, tag = "1")]
    pub capacity_bytes: u64,
    /// Bytes in use.
    #[prost(uint64, tag = "2")]
    pub used_bytes: u64,
    /// Bytes of live keys, values and their metadata.
    #[prost(uint64, tag = "3")]
    pub live_bytes: u64,
    /// Stored keys.
    #[prost(uint64, tag = "4")]
    pub key_count: u64,
    /// Limits on key and value sizes.
    #[prost(message, optional, tag = "5")]
    pub limits: Option<WireLimits>,
    /// Value size at which the device is most efficient.
    #[prost(uint64, tag = "6")]
    pub optimal_value_bytes: u64,
    /// Most operations in flight.
    #[prost(uint64, tag = "7")]
    pub queue_depth_max: u64,
    /// Bytes of memory the device keeps for what it stores.
    #[prost(uint64, tag = "8")]
    pub memory_bytes: u64,
}

/// A sync finished.
#[derive(Clone, PartialEq, prost::Message)]
pub struct SyncReply {}

/// Reclaims dead space.
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompactRequest {
    /// The device's index on the node.
    #[prost(uint32, tag = "1")]
    pub device: u32,
    /// About how many live bytes it may copy.
    #[prost(uint64, tag = "2")]
    pub budget_bytes: u64,
}

/// What a compaction did ([`railstore_device::CompactStats`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct CompactReply {
    /// Segments reclaimed.
    #[prost(uint64, tag = "1")]
    pub segments_freed: u64,
    /// Live bytes copied.
    #[prost(uint64, tag = "2")]
    pub bytes_copied: u64,
    /// Bytes returned to free space.
    #[prost(uint64, tag = "3")]
    pub bytes_freed: u64,
}

/// Asks a node what it has moved over the network.
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrafficRequest {}

/// One kind of call's counters ([`crate::traffic::CallTraffic`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct WireCallTraffic {
    /// The call's name ([`crate::traffic::Call::name`]).
    #[prost(string, tag = "1")]
    pub call: String,
    /// Calls that arrived.
    #[prost(uint64, tag = "2")]
    pub calls: u64,
    /// Message bytes the node took in.
    #[prost(uint64, tag = "3")]
    pub received: u64,
    /// Message bytes the node sent.
    #[prost(uint64, tag = "4")]
    pub sent: u64,
}

/// A node's network counters since it started ([`crate::traffic::TrafficSnapshot`]).
#[derive(Clone, PartialEq, prost::Message)]
pub struct TrafficReply {
    /// Per kind of call.
    #[prost(message, repeated, tag = "1")]
    pub calls: Vec<WireCallTraffic>,
    /// Bytes read from the node's connections.
    #[prost(uint64, tag = "2")]
    pub socket_received: u64,
    /// Bytes written to them.
    #[prost(uint64, tag = "3")]
    pub socket_sent: u64,
}

/// A device error on the wire, in a failed call's status details: which
/// [`railstore_device::DeviceError`] it is (`kind`) and the fields that variant has.
#[derive(Clone, PartialEq, prost::Message)]
pub struct WireError {
    /// The variant ([`crate::errors`] lists the numbers).
    #[prost(uint32, tag = "1")]
    pub kind: u32,
    /// Lengths, offsets and counts, in the variant's field order.
    #[prost(uint64, repeated, tag = "2")]
    pub numbers: Vec<u64>,
    /// The key, for the variants that carry one.
    #[prost(bytes = "vec", tag = "3")]
    pub key: Vec<u8>,
    /// Texts, in the variant's field order (an I/O error's operation and message; a
    /// corruption's location and reason; a failure's reason; a configuration's message).
    #[prost(string, repeated, tag = "4")]
    pub texts: Vec<String>,
    /// An I/O error's OS error number, 0 if it had none.
    #[prost(int32, tag = "5")]
    pub errno: i32,
    /// A fenced write's fence, and the one the node holds (`numbers`: none).
    #[prost(message, optional, tag = "6")]
    pub sent: Option<Fence>,
    /// The fence the node holds that outranks `sent`.
    #[prost(message, optional, tag = "7")]
    pub held: Option<Fence>,
}
