//! Device errors across the wire, one to one: a node puts the [`DeviceError`] of a failed
//! operation into the gRPC status's details ([`WireError`]); the remote device rebuilds the same
//! variant with the same data. A status without such details is the network's or gRPC's own
//! failure, and becomes [`DeviceError::Io`] (the node could not be reached or the call broke),
//! which the layers above treat as they treat a local I/O error.

use crate::wire::{self, WireError};
use prost::Message;
use railstore_device::{DeviceError, Fence};
use std::collections::HashSet;
use std::io;
use std::sync::{Mutex, OnceLock};
use tonic::{Code, Status};

const KEY_LENGTH: u32 = 1;
const VALUE_LENGTH: u32 = 2;
const CAPACITY: u32 = 3;
const KEY_NOT_FOUND: u32 = 4;
const KEY_EXISTS: u32 = 5;
const OFFSET: u32 = 6;
const IO: u32 = 7;
const CORRUPT: u32 = 8;
const FAILED: u32 = 9;
const STOPPED: u32 = 10;
const TRANSIENT: u32 = 11;
const CONFIG: u32 = 12;
const FENCED: u32 = 13;

/// The operation named when a call fails outside the device (connection, transport, protocol).
pub const NODE_CALL: &str = "a call to the node";

/// The status a node answers with when a device operation fails.
pub fn to_status(e: &DeviceError) -> Status {
    let (code, w) = match e {
        DeviceError::KeyLength { len, min, max } => (
            Code::InvalidArgument,
            numbers(KEY_LENGTH, &[*len as u64, *min as u64, *max as u64]),
        ),
        DeviceError::ValueLength { len, max } => (
            Code::InvalidArgument,
            numbers(VALUE_LENGTH, &[*len as u64, *max as u64]),
        ),
        DeviceError::Capacity { needed, available } => (
            Code::ResourceExhausted,
            numbers(CAPACITY, &[*needed, *available]),
        ),
        DeviceError::KeyNotFound { key } => (
            Code::NotFound,
            WireError {
                kind: KEY_NOT_FOUND,
                key: key.clone(),
                ..Default::default()
            },
        ),
        DeviceError::KeyExists { key } => (
            Code::AlreadyExists,
            WireError {
                kind: KEY_EXISTS,
                key: key.clone(),
                ..Default::default()
            },
        ),
        DeviceError::Offset { offset, value_len } => {
            (Code::OutOfRange, numbers(OFFSET, &[*offset, *value_len]))
        }
        DeviceError::Io { op, source } => (
            Code::Internal,
            WireError {
                kind: IO,
                numbers: vec![kind_code(source.kind())],
                texts: vec![op.to_string(), source.to_string()],
                errno: source.raw_os_error().unwrap_or(0),
                ..Default::default()
            },
        ),
        DeviceError::Corrupt { location, reason } => {
            (Code::DataLoss, texts(CORRUPT, &[location, reason]))
        }
        DeviceError::Failed { reason } => (Code::Internal, texts(FAILED, &[reason])),
        DeviceError::Stopped { reason } => (Code::Unavailable, texts(STOPPED, &[reason])),
        DeviceError::Transient => (Code::Unavailable, numbers(TRANSIENT, &[])),
        DeviceError::Config(m) => (Code::InvalidArgument, texts(CONFIG, &[m])),
        DeviceError::Fenced { sent, held } => (
            Code::FailedPrecondition,
            WireError {
                kind: FENCED,
                sent: Some((*sent).into()),
                held: Some((*held).into()),
                ..Default::default()
            },
        ),
    };
    Status::with_details(code, e.to_string(), w.encode_to_vec().into())
}

/// The error a remote device reports for a failed call.
pub fn from_status(s: &Status) -> DeviceError {
    match WireError::decode(s.details()) {
        Ok(w) if !s.details().is_empty() => from_wire(w).unwrap_or_else(|| outside(s)),
        _ => outside(s),
    }
}

/// A failure outside the device: the node unreachable, the call cut or refused by gRPC.
fn outside(s: &Status) -> DeviceError {
    let kind = match s.code() {
        Code::Unavailable => io::ErrorKind::NotConnected,
        Code::DeadlineExceeded => io::ErrorKind::TimedOut,
        Code::Cancelled => io::ErrorKind::Interrupted,
        Code::InvalidArgument | Code::OutOfRange => io::ErrorKind::InvalidInput,
        _ => io::ErrorKind::Other,
    };
    DeviceError::io(
        NODE_CALL,
        io::Error::new(kind, format!("{:?}: {}", s.code(), s.message())),
    )
}

fn from_wire(w: WireError) -> Option<DeviceError> {
    let n = |i: usize| w.numbers.get(i).copied();
    let t = |i: usize| w.texts.get(i).map(String::as_str);
    Some(match w.kind {
        KEY_LENGTH => DeviceError::KeyLength {
            len: n(0)? as usize,
            min: n(1)? as usize,
            max: n(2)? as usize,
        },
        VALUE_LENGTH => DeviceError::ValueLength {
            len: n(0)? as usize,
            max: n(1)? as usize,
        },
        CAPACITY => DeviceError::Capacity {
            needed: n(0)?,
            available: n(1)?,
        },
        KEY_NOT_FOUND => DeviceError::KeyNotFound { key: w.key },
        KEY_EXISTS => DeviceError::KeyExists { key: w.key },
        OFFSET => DeviceError::Offset {
            offset: n(0)?,
            value_len: n(1)?,
        },
        IO => {
            let source = if w.errno != 0 {
                io::Error::from_raw_os_error(w.errno)
            } else {
                io::Error::new(kind_of(n(0)?), t(1)?.to_string())
            };
            DeviceError::io(intern(t(0)?), source)
        }
        CORRUPT => DeviceError::Corrupt {
            location: t(0)?.to_string(),
            reason: intern(t(1)?),
        },
        FAILED => DeviceError::Failed {
            reason: intern(t(0)?),
        },
        STOPPED => DeviceError::Stopped {
            reason: intern(t(0)?),
        },
        TRANSIENT => DeviceError::Transient,
        CONFIG => DeviceError::Config(t(0)?.to_string()),
        FENCED => DeviceError::Fenced {
            sent: w.sent?.into(),
            held: w.held?.into(),
        },
        _ => return None,
    })
}

fn numbers(kind: u32, numbers: &[u64]) -> WireError {
    WireError {
        kind,
        numbers: numbers.to_vec(),
        ..Default::default()
    }
}

fn texts(kind: u32, texts: &[&str]) -> WireError {
    WireError {
        kind,
        texts: texts.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
}

/// The I/O error kinds that keep their identity across the wire; others arrive as `Other`
/// (with their message), or exactly when the error carried an OS error number.
const KINDS: [io::ErrorKind; 18] = [
    io::ErrorKind::Other,
    io::ErrorKind::NotFound,
    io::ErrorKind::PermissionDenied,
    io::ErrorKind::ConnectionRefused,
    io::ErrorKind::ConnectionReset,
    io::ErrorKind::ConnectionAborted,
    io::ErrorKind::NotConnected,
    io::ErrorKind::BrokenPipe,
    io::ErrorKind::AlreadyExists,
    io::ErrorKind::WouldBlock,
    io::ErrorKind::InvalidInput,
    io::ErrorKind::InvalidData,
    io::ErrorKind::TimedOut,
    io::ErrorKind::WriteZero,
    io::ErrorKind::Interrupted,
    io::ErrorKind::Unsupported,
    io::ErrorKind::UnexpectedEof,
    io::ErrorKind::OutOfMemory,
];

fn kind_code(kind: io::ErrorKind) -> u64 {
    KINDS.iter().position(|k| *k == kind).unwrap_or(0) as u64
}

fn kind_of(code: u64) -> io::ErrorKind {
    KINDS
        .get(code as usize)
        .copied()
        .unwrap_or(io::ErrorKind::Other)
}

/// Most distinct remote texts kept as `&'static str`, and the longest kept whole.
const INTERNED_MAX: usize = 1024;
const INTERNED_BYTES_MAX: usize = 200;

/// A `&'static str` for a text that arrived over the wire, for the error fields that are
/// static (a device's reasons and operation names, which are few and fixed in its code).
fn intern(text: &str) -> &'static str {
    static SEEN: OnceLock<Interner> = OnceLock::new();
    SEEN.get_or_init(|| Interner::new(INTERNED_MAX))
        .intern(text)
}

/// Leaks each distinct text once; past `max` of them (a node sending arbitrary texts) a fixed
/// placeholder stands in, so memory stays bounded.
struct Interner {
    seen: Mutex<HashSet<&'static str>>,
    max: usize,
}

impl Interner {
    fn new(max: usize) -> Self {
        Interner {
            seen: Mutex::default(),
            max,
        }
    }

    fn intern(&self, text: &str) -> &'static str {
        let mut cut = text.len().min(INTERNED_BYTES_MAX);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        let text = &text[..cut];
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(s) = seen.get(text) {
            return s;
        }
        if seen.len() >= self.max {
            return "(a remote reason, not kept: too many distinct ones)";
        }
        let s: &'static str = Box::leak(text.to_owned().into_boxed_str());
        seen.insert(s);
        s
    }
}

impl From<Fence> for wire::Fence {
    fn from(f: Fence) -> Self {
        wire::Fence {
            array_id: f.array_id,
            layout_epoch: f.layout_epoch,
            shard: f.shard,
            token: f.token,
        }
    }
}

impl From<wire::Fence> for Fence {
    fn from(f: wire::Fence) -> Self {
        Fence {
            array_id: f.array_id,
            layout_epoch: f.layout_epoch,
            shard: f.shard,
            token: f.token,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(e: &DeviceError) -> DeviceError {
        from_status(&to_status(e))
    }

    #[test]
    fn every_variant_crosses_with_its_data() {
        let fence = Fence {
            array_id: 7,
            layout_epoch: 3,
            shard: 9,
            token: 41,
        };
        let cases = vec![
            DeviceError::KeyLength {
                len: 300,
                min: 1,
                max: 255,
            },
            DeviceError::ValueLength { len: 9, max: 8 },
            DeviceError::Capacity {
                needed: 5,
                available: 4,
            },
            DeviceError::KeyNotFound {
                key: b"k1".to_vec(),
            },
            DeviceError::KeyExists {
                key: b"k2".to_vec(),
            },
            DeviceError::Offset {
                offset: 10,
                value_len: 3,
            },
            DeviceError::io("segment write", io::Error::from_raw_os_error(libc_enospc())),
            DeviceError::io(
                "segment read",
                io::Error::new(io::ErrorKind::UnexpectedEof, "short read"),
            ),
            DeviceError::Corrupt {
                location: "segment 3 offset 4096".into(),
                reason: "record checksum",
            },
            DeviceError::Failed {
                reason: "fail-stop injected",
            },
            DeviceError::Stopped {
                reason: "runtime shutting down",
            },
            DeviceError::Transient,
            DeviceError::Config("bad".into()),
            DeviceError::Fenced {
                sent: fence,
                held: Fence { token: 42, ..fence },
            },
        ];
        for e in cases {
            let back = round_trip(&e);
            assert_eq!(format!("{back:?}"), format!("{e:?}"), "{e}");
            assert_eq!(back.to_string(), e.to_string());
        }
    }

    #[test]
    fn a_status_without_details_is_an_io_error_of_the_call() {
        let e = from_status(&Status::unavailable("connection refused"));
        match e {
            DeviceError::Io { op, source } => {
                assert_eq!(op, NODE_CALL);
                assert_eq!(source.kind(), io::ErrorKind::NotConnected);
                assert!(source.to_string().contains("connection refused"));
            }
            other => panic!("expected an I/O error, got {other:?}"),
        }
        // Details that are not a device error (an unknown kind) are not trusted either.
        let odd = Status::with_details(
            Code::Internal,
            "x",
            WireError {
                kind: 99,
                ..Default::default()
            }
            .encode_to_vec()
            .into(),
        );
        assert!(matches!(from_status(&odd), DeviceError::Io { .. }));
        // A known kind missing its fields is not invented either.
        let short = Status::with_details(
            Code::Internal,
            "x",
            numbers(CAPACITY, &[1]).encode_to_vec().into(),
        );
        assert!(matches!(from_status(&short), DeviceError::Io { .. }));
    }

    #[test]
    fn interned_texts_are_bounded() {
        let interner = Interner::new(8);
        let first = interner.intern("a reason");
        assert!(
            std::ptr::eq(first, interner.intern("a reason")),
            "one leak per text"
        );
        assert_eq!(
            interner.intern(&"x".repeat(10_000)).len(),
            INTERNED_BYTES_MAX
        );
        for i in 0..20 {
            let s = interner.intern(&format!("reason {i}"));
            assert_eq!(s == format!("reason {i}"), i < 6, "{s}");
        }
        assert_eq!(interner.seen.lock().unwrap().len(), 8);
    }

    fn libc_enospc() -> i32 {
        28
    }
}
