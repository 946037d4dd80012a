//! The transmission phase: requests are read one after another and run concurrently (each in
//! its own task, writes to one object still applied in arrival order by the volume's object
//! locks); replies go out as each finishes, matched by the client's cookie. A write's payload
//! is read only once the connection has budget for it, so a client cannot make the server hold
//! more than [`IN_FLIGHT_BYTES_MAX`] of its data.
//!
//! With structured replies negotiated, a read is answered in data and hole chunks (in order,
//! the last one marked done), any error as an error chunk with its message, and block status
//! with one `base:allocation` chunk; the other requests still get simple replies on success,
//! as the protocol allows.

use super::handshake::Session;
use super::*;
use crate::error::VolumeError;
use crate::volume::{Extent, Volume};
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

/// Payload bytes (writes read, reads being answered) one connection may have in flight.
pub const IN_FLIGHT_BYTES_MAX: usize = 128 << 20;
/// Budget unit: one permit per 4 KiB.
const PERMIT_BYTES: usize = 4096;
/// Objects one block status request looks up at most: a longer request gets a shorter answer
/// (which the protocol allows; clients ask again from where it ended).
const STATUS_OBJECTS_MAX: u64 = 16_384;
/// Longest error message sent in an error chunk (the protocol's string limit).
const MESSAGE_BYTES_MAX: usize = 4096;
/// Requests are read through a buffer this large: many small requests, one receive.
const READ_BUFFER_BYTES: usize = 256 << 10;
/// A reply's data up to this long goes out with its header in one send (copied behind it);
/// longer data is sent as it is, after its header.
const REPLY_COPY_BYTES_MAX: usize = 128 << 10;

/// One request's header.
#[derive(Debug, Clone, Copy)]
pub struct Request {
    pub flags: u16,
    pub kind: u16,
    pub cookie: u64,
    pub offset: u64,
    pub len: u32,
}

/// Serves requests on `stream` for `volume` until the client disconnects, `stop` fires, or
/// the stream breaks; waits for the requests in flight before it returns.
pub async fn transmit<S>(
    stream: S,
    volume: Arc<Volume>,
    session: Session,
    mut stop: tokio::sync::watch::Receiver<bool>,
    recorder: Option<Arc<Recorder>>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (reader, writer) = tokio::io::split(stream);
    let mut reader = tokio::io::BufReader::with_capacity(READ_BUFFER_BYTES, reader);
    let writer = Arc::new(Mutex::new(writer));
    let budget = Arc::new(Semaphore::new(IN_FLIGHT_BYTES_MAX / PERMIT_BYTES));
    let mut tasks = JoinSet::new();
    let result = loop {
        let req = tokio::select! {
            r = read_request(&mut reader) => r,
            _ = stop.wait_for(|s| *s) => break Ok(()),
        };
        let req = match req {
            Ok(Some(r)) => r,
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        };
        // Finished tasks are reaped as we go, so a long connection does not pile them up.
        while tasks.try_join_next().is_some() {}
        if req.kind == CMD_DISC {
            break Ok(());
        }
        if let Some(r) = &recorder {
            r.request(&volume.meta().name, req.kind, req.offset, req.len);
        }
        let carries = matches!(req.kind, CMD_READ | CMD_WRITE);
        if carries && req.len > PAYLOAD_BYTES_MAX {
            if req.kind == CMD_WRITE {
                // Its payload cannot be skipped safely at this size: the client broke the
                // advertised limit, so the connection ends.
                break Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "a write of {} B, above the {PAYLOAD_BYTES_MAX} B limit",
                        req.len
                    ),
                ));
            }
            let too_long = VolumeError::Invalid(format!(
                "a read of {} B, above the {PAYLOAD_BYTES_MAX} B limit",
                req.len
            ));
            answer(&writer, session, req, Err(too_long)).await?;
            continue;
        }
        let permits = if carries {
            (req.len as usize).div_ceil(PERMIT_BYTES).max(1) as u32
        } else {
            1
        };
        let permit = budget
            .clone()
            .acquire_many_owned(permits)
            .await
            .expect("the budget is never closed");
        let payload = if req.kind == CMD_WRITE {
            let mut data = vec![0u8; req.len as usize];
            if let Err(e) = reader.read_exact(&mut data).await {
                break Err(e);
            }
            Some(data)
        } else {
            None
        };
        let volume = volume.clone();
        let writer = writer.clone();
        tasks.spawn(async move {
            let _permit = permit;
            let outcome = run(&volume, session, req, payload).await;
            if let Err(e) = &outcome {
                tracing::debug!(error = %e, kind = req.kind, offset = req.offset, len = req.len, "NBD request failed");
            }
            if let Err(e) = answer(&writer, session, req, outcome).await {
                tracing::debug!(error = %e, "NBD reply not sent");
            }
        });
    };
    while tasks.join_next().await.is_some() {}
    let _ = writer.lock().await.shutdown().await;
    result
}

/// What a request that succeeded answers with.
enum Answer {
    /// Nothing but success.
    Done,
    /// A read's bytes, whole (simple replies).
    Data(Vec<u8>),
    /// A read's extents (structured replies).
    Extents(Vec<Extent>),
    /// Block status: consecutive runs of (length, allocated).
    Allocation(Vec<(u64, bool)>),
}

/// Runs one request.
async fn run(
    volume: &Volume,
    session: Session,
    req: Request,
    payload: Option<Vec<u8>>,
) -> Result<Answer, VolumeError> {
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let (offset, len) = (req.offset, req.len as u64);
    match req.kind {
        CMD_READ if session.structured => {
            Ok(Answer::Extents(volume.read_extents(offset, len).await?))
        }
        CMD_READ => Ok(Answer::Data(volume.read(offset, len).await?)),
        CMD_WRITE => {
            let data = payload.unwrap_or_default();
            volume.write(offset, &data, fua).await.map(|_| Answer::Done)
        }
        CMD_FLUSH => volume.flush().await.map(|_| Answer::Done),
        CMD_TRIM | CMD_WRITE_ZEROES => volume.zero(offset, len, fua).await.map(|_| Answer::Done),
        CMD_BLOCK_STATUS => {
            if !session.allocation {
                return Err(VolumeError::Invalid(
                    "block status without base:allocation selected for this export".into(),
                ));
            }
            if len == 0 {
                return Err(VolumeError::Invalid("block status of 0 bytes".into()));
            }
            let end = offset.checked_add(len).filter(|&e| e <= volume.size());
            if end.is_none() {
                return Err(VolumeError::OutOfRange {
                    what: "block status",
                    offset,
                    end: offset.saturating_add(len),
                    size: volume.size(),
                });
            }
            // Looked up as far as STATUS_OBJECTS_MAX objects reach.
            let object = volume.meta().object_bytes;
            let reach = (offset / object + STATUS_OBJECTS_MAX).saturating_mul(object);
            let mut runs = volume.allocation(offset, len.min(reach - offset)).await?;
            if req.flags & CMD_FLAG_REQ_ONE != 0 {
                runs.truncate(1);
            }
            Ok(Answer::Allocation(runs))
        }
        other => Err(VolumeError::Invalid(format!("request type {other}"))),
    }
}

/// Reads the next request header; `None` when the client closed the connection between
/// requests.
async fn read_request<R: AsyncRead + Unpin>(reader: &mut R) -> io::Result<Option<Request>> {
    let mut head = [0u8; 28];
    match reader.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    reader.read_exact(&mut head[1..]).await?;
    let magic = u32::from_be_bytes(head[0..4].try_into().unwrap());
    if magic != REQUEST_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("request magic {magic:#x}"),
        ));
    }
    Ok(Some(Request {
        flags: u16::from_be_bytes(head[4..6].try_into().unwrap()),
        kind: u16::from_be_bytes(head[6..8].try_into().unwrap()),
        cookie: u64::from_be_bytes(head[8..16].try_into().unwrap()),
        offset: u64::from_be_bytes(head[16..24].try_into().unwrap()),
        len: u32::from_be_bytes(head[24..28].try_into().unwrap()),
    }))
}

/// Sends the reply to `req`: simple, or structured chunks where the session negotiated them
/// and the request needs them (reads, block status, errors).
async fn answer<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    session: Session,
    req: Request,
    outcome: Result<Answer, VolumeError>,
) -> io::Result<()> {
    let mut out = Vec::new();
    match outcome {
        Err(e) if session.structured => {
            let mut msg = e.to_string();
            if msg.len() > MESSAGE_BYTES_MAX {
                let mut cut = MESSAGE_BYTES_MAX;
                while !msg.is_char_boundary(cut) {
                    cut -= 1;
                }
                msg.truncate(cut);
            }
            let msg = msg.into_bytes();
            let mut payload = e.errno().to_be_bytes().to_vec();
            payload.extend_from_slice(&(msg.len() as u16).to_be_bytes());
            payload.extend_from_slice(&msg);
            chunk(
                &mut out,
                req.cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_ERROR,
                &[&payload],
            );
        }
        Err(e) => simple(&mut out, req.cookie, e.errno()),
        Ok(Answer::Done) => simple(&mut out, req.cookie, 0),
        Ok(Answer::Data(data)) => {
            simple(&mut out, req.cookie, 0);
            let mut w = writer.lock().await;
            send(&mut *w, &mut out, &data).await?;
            return w.flush().await;
        }
        Ok(Answer::Extents(extents)) if extents.is_empty() => {
            chunk(&mut out, req.cookie, REPLY_FLAG_DONE, REPLY_TYPE_NONE, &[]);
        }
        Ok(Answer::Extents(extents)) => {
            // Chunk heads are built here, the data goes out as it is (up to 32 MiB: no copy).
            let last = extents.len() - 1;
            let mut w = writer.lock().await;
            for (i, e) in extents.iter().enumerate() {
                let flags = if i == last { REPLY_FLAG_DONE } else { 0 };
                let offset = e.offset.to_be_bytes();
                out.clear();
                match &e.data {
                    Some(data) => {
                        let len = (8 + data.len()) as u32;
                        head(&mut out, req.cookie, flags, REPLY_TYPE_OFFSET_DATA, len);
                        out.extend_from_slice(&offset);
                        send(&mut *w, &mut out, data).await?;
                    }
                    None => {
                        // A hole is never longer than the request, whose length is 32 bits.
                        head(&mut out, req.cookie, flags, REPLY_TYPE_OFFSET_HOLE, 12);
                        out.extend_from_slice(&offset);
                        out.extend_from_slice(&(e.len as u32).to_be_bytes());
                        w.write_all(&out).await?;
                    }
                }
            }
            return w.flush().await;
        }
        Ok(Answer::Allocation(runs)) => {
            let mut payload = CONTEXT_BASE_ALLOCATION_ID.to_be_bytes().to_vec();
            for (len, allocated) in runs {
                let state = if allocated {
                    0
                } else {
                    STATE_HOLE | STATE_ZERO
                };
                // Runs lie within the request, whose length is 32 bits.
                payload.extend_from_slice(&(len as u32).to_be_bytes());
                payload.extend_from_slice(&state.to_be_bytes());
            }
            chunk(
                &mut out,
                req.cookie,
                REPLY_FLAG_DONE,
                REPLY_TYPE_BLOCK_STATUS,
                &[&payload],
            );
        }
    }
    let mut w = writer.lock().await;
    w.write_all(&out).await?;
    w.flush().await
}

/// Sends a reply's `head` and then `data`: in one send when the data is short (a 4 KiB read's
/// reply is one system call, not two), else the data as it is, uncopied.
async fn send<W: AsyncWrite + Unpin>(w: &mut W, head: &mut Vec<u8>, data: &[u8]) -> io::Result<()> {
    if data.len() <= REPLY_COPY_BYTES_MAX {
        head.extend_from_slice(data);
        w.write_all(head).await
    } else {
        w.write_all(head).await?;
        w.write_all(data).await
    }
}

/// Appends a simple reply's header.
fn simple(out: &mut Vec<u8>, cookie: u64, error: u32) {
    out.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&error.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
}

/// Appends one structured reply chunk whose payload is `parts`, one after another.
fn chunk(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    head(out, cookie, flags, kind, len as u32);
    for p in parts {
        out.extend_from_slice(p);
    }
}

/// Appends a structured reply chunk's header, for a payload of `len` bytes.
fn head(out: &mut Vec<u8>, cookie: u64, flags: u16, kind: u16, len: u32) {
    out.extend_from_slice(&STRUCTURED_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&cookie.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
}
