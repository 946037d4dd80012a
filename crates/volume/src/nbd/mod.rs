//! The NBD protocol (github.com/NetworkBlockDevice/nbd, doc/proto.md), server side: fixed
//! newstyle negotiation ([`handshake`]), then read, write, flush, trim, write-zeroes and block
//! status requests ([`transmission`]), over TCP or a Unix socket ([`server`]). The export name
//! is the volume's name. A client that negotiates structured replies gets reads as data and
//! hole chunks (objects never written cost no bytes on the wire) and may select the
//! `base:allocation` metadata context for block status (which parts of the volume hold
//! objects), so `qemu-img map` and `qemu-img convert` see a sparse volume as sparse. What is
//! not offered: TLS (so the binary listens on loopback only), extended headers, and the
//! old-style handshake. [`client`] is the other side, for the project's own load generator
//! (`railstore bench ceph-study` without fio).

pub mod client;
pub mod handshake;
pub mod record;
pub mod server;
pub mod transmission;

pub use record::Recorder;
pub use server::NbdServer;

/// "NBDMAGIC": the server's first eight bytes.
pub const NBD_MAGIC: u64 = 0x4e42_444d_4147_4943;
/// "IHAVEOPT": sent after `NBD_MAGIC`, and before every option the client sends.
pub const IHAVEOPT: u64 = 0x4948_4156_454f_5054;
/// Starts every option reply.
pub const OPTION_REPLY_MAGIC: u64 = 0x0003_e889_0455_65a9;
/// Starts every request.
pub const REQUEST_MAGIC: u32 = 0x2560_9513;
/// Starts every simple reply.
pub const SIMPLE_REPLY_MAGIC: u32 = 0x6744_6698;

/// Handshake flags (server) and client flags.
pub const FLAG_FIXED_NEWSTYLE: u16 = 1 << 0;
pub const FLAG_NO_ZEROES: u16 = 1 << 1;
pub const FLAG_C_FIXED_NEWSTYLE: u32 = 1 << 0;
pub const FLAG_C_NO_ZEROES: u32 = 1 << 1;

/// Options.
pub const OPT_EXPORT_NAME: u32 = 1;
pub const OPT_ABORT: u32 = 2;
pub const OPT_LIST: u32 = 3;
pub const OPT_STARTTLS: u32 = 5;
pub const OPT_INFO: u32 = 6;
pub const OPT_GO: u32 = 7;
pub const OPT_STRUCTURED_REPLY: u32 = 8;
pub const OPT_LIST_META_CONTEXT: u32 = 9;
pub const OPT_SET_META_CONTEXT: u32 = 10;

/// Option reply types.
pub const REP_ACK: u32 = 1;
pub const REP_SERVER: u32 = 2;
pub const REP_INFO: u32 = 3;
pub const REP_META_CONTEXT: u32 = 4;
pub const REP_ERR_UNSUP: u32 = (1 << 31) + 1;
pub const REP_ERR_INVALID: u32 = (1 << 31) + 3;
pub const REP_ERR_UNKNOWN: u32 = (1 << 31) + 6;
pub const REP_ERR_TOO_BIG: u32 = (1 << 31) + 9;

/// Information types of `NBD_REP_INFO`.
pub const INFO_EXPORT: u16 = 0;
pub const INFO_BLOCK_SIZE: u16 = 3;

/// Transmission flags.
pub const TFLAG_HAS_FLAGS: u16 = 1 << 0;
pub const TFLAG_SEND_FLUSH: u16 = 1 << 2;
pub const TFLAG_SEND_FUA: u16 = 1 << 3;
pub const TFLAG_SEND_TRIM: u16 = 1 << 5;
pub const TFLAG_SEND_WRITE_ZEROES: u16 = 1 << 6;
pub const TFLAG_CAN_MULTI_CONN: u16 = 1 << 8;

/// What every export offers: flush and FUA (the store's durability), trim and write-zeroes
/// (objects deleted or zeroed), and several connections at once (a flush on one makes every
/// acknowledged write durable, whichever connection it came on).
pub const TRANSMISSION_FLAGS: u16 = TFLAG_HAS_FLAGS
    | TFLAG_SEND_FLUSH
    | TFLAG_SEND_FUA
    | TFLAG_SEND_TRIM
    | TFLAG_SEND_WRITE_ZEROES
    | TFLAG_CAN_MULTI_CONN;

/// Request types.
pub const CMD_READ: u16 = 0;
pub const CMD_WRITE: u16 = 1;
pub const CMD_DISC: u16 = 2;
pub const CMD_FLUSH: u16 = 3;
pub const CMD_TRIM: u16 = 4;
pub const CMD_WRITE_ZEROES: u16 = 6;
pub const CMD_BLOCK_STATUS: u16 = 7;

/// Request flags.
pub const CMD_FLAG_FUA: u16 = 1 << 0;
/// Block status: one descriptor is enough.
pub const CMD_FLAG_REQ_ONE: u16 = 1 << 3;

/// Starts every structured reply chunk.
pub const STRUCTURED_REPLY_MAGIC: u32 = 0x668e_33ef;
/// Structured reply flags: the last chunk of a reply.
pub const REPLY_FLAG_DONE: u16 = 1 << 0;
/// Structured reply chunk types.
pub const REPLY_TYPE_NONE: u16 = 0;
pub const REPLY_TYPE_OFFSET_DATA: u16 = 1;
pub const REPLY_TYPE_OFFSET_HOLE: u16 = 2;
pub const REPLY_TYPE_BLOCK_STATUS: u16 = 5;
pub const REPLY_TYPE_ERROR: u16 = (1 << 15) + 1;

/// The one metadata context offered, and the id it gets when selected.
pub const CONTEXT_BASE_ALLOCATION: &str = "base:allocation";
pub const CONTEXT_BASE_ALLOCATION_ID: u32 = 1;
/// `base:allocation` status flags: nothing stored there, and it reads as zeros.
pub const STATE_HOLE: u32 = 1 << 0;
pub const STATE_ZERO: u32 = 1 << 1;

/// Largest read or write payload a request may carry (what the block-size information
/// advertises; the protocol's suggested maximum).
pub const PAYLOAD_BYTES_MAX: u32 = 32 << 20;
/// Longest option data accepted during negotiation.
pub const OPTION_BYTES_MAX: u32 = 64 << 10;
