//! Fixed newstyle negotiation: the server's greeting, then the client's options until one
//! picks an export (`NBD_OPT_GO` or `NBD_OPT_EXPORT_NAME`) or it gives up.

use super::*;
use crate::registry::Volumes;
use crate::volume::Volume;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How a negotiation ended.
pub enum Negotiated {
    /// The client chose this volume: transmission follows.
    Export(Arc<Volume>),
    /// The client aborted or left.
    Closed,
}

/// Negotiates with a client that just connected.
pub async fn negotiate<S>(stream: &mut S, volumes: &Volumes) -> io::Result<Negotiated>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut greeting = Vec::with_capacity(18);
    greeting.extend_from_slice(&NBD_MAGIC.to_be_bytes());
    greeting.extend_from_slice(&IHAVEOPT.to_be_bytes());
    greeting.extend_from_slice(&(FLAG_FIXED_NEWSTYLE | FLAG_NO_ZEROES).to_be_bytes());
    stream.write_all(&greeting).await?;
    stream.flush().await?;
    let client_flags = stream.read_u32().await?;
    if client_flags & !(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES) != 0 {
        return Err(invalid(format!("unknown client flags {client_flags:#x}")));
    }
    let no_zeroes = client_flags & FLAG_C_NO_ZEROES != 0;
    loop {
        let magic = stream.read_u64().await?;
        if magic != IHAVEOPT {
            return Err(invalid(format!("option magic {magic:#x}")));
        }
        let option = stream.read_u32().await?;
        let len = stream.read_u32().await?;
        if len > OPTION_BYTES_MAX {
            // Too long to be one of ours: skip it unread-into-memory, then refuse it.
            tokio::io::copy(&mut (&mut *stream).take(len as u64), &mut tokio::io::sink()).await?;
            reply(stream, option, REP_ERR_TOO_BIG, b"option data too long").await?;
            continue;
        }
        let mut data = vec![0u8; len as usize];
        stream.read_exact(&mut data).await?;
        match option {
            OPT_EXPORT_NAME => {
                let name = String::from_utf8_lossy(&data);
                // The protocol has no error reply here: an unknown name ends the connection.
                let Ok(volume) = volumes.get(&name) else {
                    tracing::info!(export = %name, "NBD client asked for no such volume");
                    return Ok(Negotiated::Closed);
                };
                let mut out = Vec::with_capacity(134);
                out.extend_from_slice(&volume.size().to_be_bytes());
                out.extend_from_slice(&TRANSMISSION_FLAGS.to_be_bytes());
                if !no_zeroes {
                    out.extend_from_slice(&[0u8; 124]);
                }
                stream.write_all(&out).await?;
                stream.flush().await?;
                return Ok(Negotiated::Export(volume));
            }
            OPT_ABORT => {
                let _ = reply(stream, option, REP_ACK, b"").await;
                return Ok(Negotiated::Closed);
            }
            OPT_LIST => {
                if !data.is_empty() {
                    reply(stream, option, REP_ERR_INVALID, b"LIST takes no data").await?;
                    continue;
                }
                for v in volumes.list() {
                    let mut d = (v.name.len() as u32).to_be_bytes().to_vec();
                    d.extend_from_slice(v.name.as_bytes());
                    reply(stream, option, REP_SERVER, &d).await?;
                }
                reply(stream, option, REP_ACK, b"").await?;
            }
            OPT_INFO | OPT_GO => {
                let Some((name, _requests)) = parse_info(&data) else {
                    reply(stream, option, REP_ERR_INVALID, b"malformed INFO/GO data").await?;
                    continue;
                };
                let Ok(volume) = volumes.get(&name) else {
                    let msg = format!("no volume named {name:?}");
                    reply(stream, option, REP_ERR_UNKNOWN, msg.as_bytes()).await?;
                    continue;
                };
                let mut export = INFO_EXPORT.to_be_bytes().to_vec();
                export.extend_from_slice(&volume.size().to_be_bytes());
                export.extend_from_slice(&TRANSMISSION_FLAGS.to_be_bytes());
                reply(stream, option, REP_INFO, &export).await?;
                // Block sizes: any alignment works, 4 KiB is best, 32 MiB is the most a
                // request may carry.
                let mut sizes = INFO_BLOCK_SIZE.to_be_bytes().to_vec();
                for v in [1u32, 4096, PAYLOAD_BYTES_MAX] {
                    sizes.extend_from_slice(&v.to_be_bytes());
                }
                reply(stream, option, REP_INFO, &sizes).await?;
                reply(stream, option, REP_ACK, b"").await?;
                if option == OPT_GO {
                    return Ok(Negotiated::Export(volume));
                }
            }
            OPT_STARTTLS => {
                reply(
                    stream,
                    option,
                    REP_ERR_UNSUP,
                    b"TLS is not offered (the export listens on loopback only)",
                )
                .await?;
            }
            OPT_STRUCTURED_REPLY => {
                reply(stream, option, REP_ERR_UNSUP, b"simple replies only").await?;
            }
            _ => {
                reply(stream, option, REP_ERR_UNSUP, b"option not supported").await?;
            }
        }
    }
}

/// The export name and information requests of `NBD_OPT_INFO` / `NBD_OPT_GO` data.
pub fn parse_info(data: &[u8]) -> Option<(String, Vec<u16>)> {
    let name_len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
    let name = data.get(4..4usize.checked_add(name_len)?)?;
    let rest = &data[4 + name_len..];
    let count = u16::from_be_bytes(rest.get(..2)?.try_into().ok()?) as usize;
    let reqs = rest.get(2..)?;
    if reqs.len() != count * 2 {
        return None;
    }
    let requests = reqs
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect();
    Some((String::from_utf8_lossy(name).into_owned(), requests))
}

async fn reply<S: AsyncWrite + Unpin>(
    stream: &mut S,
    option: u32,
    kind: u32,
    data: &[u8],
) -> io::Result<()> {
    let mut out = Vec::with_capacity(20 + data.len());
    out.extend_from_slice(&OPTION_REPLY_MAGIC.to_be_bytes());
    out.extend_from_slice(&option.to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&(data.len() as u32).to_be_bytes());
    out.extend_from_slice(data);
    stream.write_all(&out).await?;
    stream.flush().await
}

fn invalid(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_data_parses_and_refuses_bad_lengths() {
        let mut d = 3u32.to_be_bytes().to_vec();
        d.extend_from_slice(b"vol");
        d.extend_from_slice(&2u16.to_be_bytes());
        d.extend_from_slice(&3u16.to_be_bytes());
        d.extend_from_slice(&1u16.to_be_bytes());
        assert_eq!(parse_info(&d), Some(("vol".into(), vec![3, 1])));
        assert_eq!(parse_info(&d[..d.len() - 1]), None);
        let mut long = 99u32.to_be_bytes().to_vec();
        long.extend_from_slice(b"vol\0\0");
        assert_eq!(parse_info(&long), None);
        assert_eq!(parse_info(&[]), None);
    }
}
