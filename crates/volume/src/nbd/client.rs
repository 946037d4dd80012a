//! The client side of the protocol, as much as a load generator needs: fixed newstyle
//! negotiation with `NBD_OPT_GO`, then pipelined requests and simple replies. Sending and
//! receiving are separate halves so one task can keep requests in flight while another takes
//! the replies in whatever order they come.

use super::*;
use std::io;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpStream, ToSocketAddrs};

/// The export a client negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Export {
    /// Its size in bytes.
    pub size: u64,
    /// Its transmission flags.
    pub flags: u16,
}

/// Connects and negotiates `name`; returns the two halves of the transmission phase.
pub async fn connect(
    addr: impl ToSocketAddrs,
    name: &str,
) -> io::Result<(Export, RequestSender, ReplyReceiver)> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (r, w) = stream.into_split();
    let mut r = BufReader::new(r);
    let mut w = BufWriter::new(w);
    let (magic, opt, flags) = (
        r.read_u64().await?,
        r.read_u64().await?,
        r.read_u16().await?,
    );
    if magic != NBD_MAGIC || opt != IHAVEOPT {
        return Err(bad(format!(
            "not a newstyle NBD server (magic {magic:#x} {opt:#x})"
        )));
    }
    if flags & FLAG_FIXED_NEWSTYLE == 0 {
        return Err(bad("the server does not speak fixed newstyle".into()));
    }
    let mut client_flags = FLAG_C_FIXED_NEWSTYLE;
    if flags & FLAG_NO_ZEROES != 0 {
        client_flags |= FLAG_C_NO_ZEROES;
    }
    w.write_u32(client_flags).await?;
    // NBD_OPT_GO: the name, then no information requests.
    let mut data = (name.len() as u32).to_be_bytes().to_vec();
    data.extend_from_slice(name.as_bytes());
    data.extend_from_slice(&0u16.to_be_bytes());
    w.write_u64(IHAVEOPT).await?;
    w.write_u32(OPT_GO).await?;
    w.write_u32(data.len() as u32).await?;
    w.write_all(&data).await?;
    w.flush().await?;
    let mut export = None;
    loop {
        let magic = r.read_u64().await?;
        if magic != OPTION_REPLY_MAGIC {
            return Err(bad(format!("option reply magic {magic:#x}")));
        }
        let (option, kind, len) = (
            r.read_u32().await?,
            r.read_u32().await?,
            r.read_u32().await?,
        );
        if option != OPT_GO || len > OPTION_BYTES_MAX {
            return Err(bad(format!("reply to option {option} of {len} bytes")));
        }
        let mut data = vec![0u8; len as usize];
        r.read_exact(&mut data).await?;
        match kind {
            REP_INFO if data.len() >= 12 && data[..2] == INFO_EXPORT.to_be_bytes() => {
                let size = u64::from_be_bytes(data[2..10].try_into().expect("8 bytes"));
                let flags = u16::from_be_bytes([data[10], data[11]]);
                export = Some(Export { size, flags });
            }
            REP_INFO => {}
            REP_ACK => break,
            err if err & (1 << 31) != 0 => {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!(
                        "the server refused export {name:?} ({err:#x}: {})",
                        String::from_utf8_lossy(&data)
                    ),
                ));
            }
            other => return Err(bad(format!("unexpected option reply {other:#x}"))),
        }
    }
    let export = export.ok_or_else(|| bad("the server sent no export information".into()))?;
    Ok((
        export,
        RequestSender { w },
        ReplyReceiver {
            r: BufReader::with_capacity(256 << 10, r.into_inner()),
        },
    ))
}

/// Sends requests.
pub struct RequestSender {
    w: BufWriter<OwnedWriteHalf>,
}

impl RequestSender {
    /// Sends one request (`data` is a write's payload) without waiting for its reply; call
    /// [`RequestSender::flush`] to push buffered requests out.
    pub async fn send(
        &mut self,
        command: u16,
        handle: u64,
        offset: u64,
        length: u32,
        data: Option<&[u8]>,
    ) -> io::Result<()> {
        let mut head = [0u8; 28];
        head[..4].copy_from_slice(&REQUEST_MAGIC.to_be_bytes());
        head[6..8].copy_from_slice(&command.to_be_bytes());
        head[8..16].copy_from_slice(&handle.to_be_bytes());
        head[16..24].copy_from_slice(&offset.to_be_bytes());
        head[24..28].copy_from_slice(&length.to_be_bytes());
        self.w.write_all(&head).await?;
        if let Some(d) = data {
            self.w.write_all(d).await?;
        }
        Ok(())
    }

    /// Pushes buffered requests to the server.
    pub async fn flush(&mut self) -> io::Result<()> {
        self.w.flush().await
    }

    /// Ends the session (`NBD_CMD_DISC`) and closes the sending side.
    pub async fn disconnect(mut self) -> io::Result<()> {
        self.send(CMD_DISC, 0, 0, 0, None).await?;
        self.w.flush().await?;
        self.w.shutdown().await
    }
}

/// Receives simple replies.
pub struct ReplyReceiver {
    r: BufReader<OwnedReadHalf>,
}

impl ReplyReceiver {
    /// The next reply's handle and error (0: success). A successful read's data follows:
    /// take it with [`ReplyReceiver::read_data`] before the next reply.
    pub async fn next(&mut self) -> io::Result<(u64, u32)> {
        let magic = self.r.read_u32().await?;
        if magic != SIMPLE_REPLY_MAGIC {
            return Err(bad(format!("reply magic {magic:#x}")));
        }
        let error = self.r.read_u32().await?;
        let handle = self.r.read_u64().await?;
        Ok((handle, error))
    }

    /// Reads a read reply's data.
    pub async fn read_data(&mut self, buf: &mut [u8]) -> io::Result<()> {
        self.r.read_exact(buf).await.map(|_| ())
    }
}

fn bad(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}
