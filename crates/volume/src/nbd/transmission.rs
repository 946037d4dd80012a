//! The transmission phase: requests are read one after another and run concurrently (each in
//! its own task, writes to one object still applied in arrival order by the volume's object
//! locks); replies go out as each finishes, matched by the client's cookie. A write's payload
//! is read only once the connection has budget for it, so a client cannot make the server hold
//! more than [`IN_FLIGHT_BYTES_MAX`] of its data.

use super::*;
use crate::error::{errno, VolumeError};
use crate::volume::Volume;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Mutex, Semaphore};
use tokio::task::JoinSet;

/// Payload bytes (writes read, reads being answered) one connection may have in flight.
pub const IN_FLIGHT_BYTES_MAX: usize = 128 << 20;
/// Budget unit: one permit per 4 KiB.
const PERMIT_BYTES: usize = 4096;

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
    mut stop: tokio::sync::watch::Receiver<bool>,
    recorder: Option<Arc<Recorder>>,
) -> io::Result<()>
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut reader, writer) = tokio::io::split(stream);
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
            answer(&writer, req.cookie, errno::EINVAL, None).await?;
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
            let (error, data) = match run(&volume, req, payload).await {
                Ok(data) => (0, data),
                Err(e) => {
                    tracing::debug!(error = %e, kind = req.kind, offset = req.offset, len = req.len, "NBD request failed");
                    (e.errno(), None)
                }
            };
            if let Err(e) = answer(&writer, req.cookie, error, data.as_deref()).await {
                tracing::debug!(error = %e, "NBD reply not sent");
            }
        });
    };
    while tasks.join_next().await.is_some() {}
    let _ = writer.lock().await.shutdown().await;
    result
}

/// Runs one request; a read returns its data.
async fn run(
    volume: &Volume,
    req: Request,
    payload: Option<Vec<u8>>,
) -> Result<Option<Vec<u8>>, VolumeError> {
    let fua = req.flags & CMD_FLAG_FUA != 0;
    let (offset, len) = (req.offset, req.len as u64);
    match req.kind {
        CMD_READ => Ok(Some(volume.read(offset, len).await?)),
        CMD_WRITE => {
            let data = payload.unwrap_or_default();
            volume.write(offset, &data, fua).await.map(|_| None)
        }
        CMD_FLUSH => volume.flush().await.map(|_| None),
        CMD_TRIM | CMD_WRITE_ZEROES => volume.zero(offset, len, fua).await.map(|_| None),
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

/// Sends a simple reply (with the read's data when there is no error).
async fn answer<W: AsyncWrite + Unpin>(
    writer: &Mutex<W>,
    cookie: u64,
    error: u32,
    data: Option<&[u8]>,
) -> io::Result<()> {
    let mut head = Vec::with_capacity(16);
    head.extend_from_slice(&SIMPLE_REPLY_MAGIC.to_be_bytes());
    head.extend_from_slice(&error.to_be_bytes());
    head.extend_from_slice(&cookie.to_be_bytes());
    let mut w = writer.lock().await;
    w.write_all(&head).await?;
    if let (0, Some(d)) = (error, data) {
        w.write_all(d).await?;
    }
    w.flush().await
}
