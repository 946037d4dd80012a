//! Fixed newstyle negotiation: the server's greeting, then the client's options until one
//! picks an export (`NBD_OPT_GO` or `NBD_OPT_EXPORT_NAME`) or it gives up. On the way a client
//! may ask for structured replies and then select the `base:allocation` metadata context.

use super::*;
use crate::registry::Volumes;
use crate::volume::Volume;
use std::io;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How a negotiation ended.
pub enum Negotiated {
    /// The client chose this volume: transmission follows, as negotiated.
    Export(Arc<Volume>, Session),
    /// The client aborted or left.
    Closed,
}

/// What a connection negotiated besides its export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Session {
    /// Structured replies: reads are answered in data and hole chunks, errors with a message.
    pub structured: bool,
    /// `base:allocation` was selected for the export chosen: block status requests are
    /// answered.
    pub allocation: bool,
}

impl Session {
    /// The session of export `name`: block status only where the last SET_META_CONTEXT
    /// selected `base:allocation` for that same export.
    fn chosen(structured: bool, allocation_for: &Option<String>, name: &str) -> Session {
        Session {
            structured,
            allocation: allocation_for.as_deref() == Some(name),
        }
    }
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
    let mut structured = false;
    // The export the last NBD_OPT_SET_META_CONTEXT named, if it selected base:allocation.
    let mut allocation_for: Option<String> = None;
    loop {
        let magic = stream.read_u64().await?;
        if magic != IHAVEOPT {
            return Err(invalid(format!("option magic {magic:#x}")));
        }
        let option = stream.read_u32().await?;
        let len = stream.read_u32().await?;
        if len > OPTION_BYTES_MAX {
            if option == OPT_SET_META_CONTEXT {
                // A SET replaces the selection even when it fails.
                allocation_for = None;
            }
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
                let session = Session::chosen(structured, &allocation_for, &name);
                return Ok(Negotiated::Export(volume, session));
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
                    let session = Session::chosen(structured, &allocation_for, &name);
                    return Ok(Negotiated::Export(volume, session));
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
                if !data.is_empty() {
                    reply(
                        stream,
                        option,
                        REP_ERR_INVALID,
                        b"STRUCTURED_REPLY takes no data",
                    )
                    .await?;
                    continue;
                }
                structured = true;
                reply(stream, option, REP_ACK, b"").await?;
            }
            OPT_LIST_META_CONTEXT | OPT_SET_META_CONTEXT => {
                let set = option == OPT_SET_META_CONTEXT;
                if set {
                    // A SET replaces what was selected, even when it fails.
                    allocation_for = None;
                }
                if !structured {
                    let msg = b"metadata contexts need structured replies first";
                    reply(stream, option, REP_ERR_INVALID, msg).await?;
                    continue;
                }
                let Some((name, queries)) = parse_meta_context(&data) else {
                    let msg = b"malformed metadata context data";
                    reply(stream, option, REP_ERR_INVALID, msg).await?;
                    continue;
                };
                if volumes.get(&name).is_err() {
                    let msg = format!("no volume named {name:?}");
                    reply(stream, option, REP_ERR_UNKNOWN, msg.as_bytes()).await?;
                    continue;
                }
                if offers_allocation(&queries, set) {
                    let id = if set { CONTEXT_BASE_ALLOCATION_ID } else { 0 };
                    let mut d = id.to_be_bytes().to_vec();
                    d.extend_from_slice(CONTEXT_BASE_ALLOCATION.as_bytes());
                    reply(stream, option, REP_META_CONTEXT, &d).await?;
                    if set {
                        allocation_for = Some(name);
                    }
                }
                reply(stream, option, REP_ACK, b"").await?;
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

/// The export name and queries of `NBD_OPT_LIST_META_CONTEXT` / `NBD_OPT_SET_META_CONTEXT`
/// data.
pub fn parse_meta_context(data: &[u8]) -> Option<(String, Vec<Vec<u8>>)> {
    let (name, mut rest) = take_string(data)?;
    let count = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?);
    rest = &rest[4..];
    let mut queries = Vec::new();
    for _ in 0..count {
        let (query, after) = take_string(rest)?;
        queries.push(query.to_vec());
        rest = after;
    }
    if !rest.is_empty() {
        return None;
    }
    Some((String::from_utf8_lossy(name).into_owned(), queries))
}

/// Whether `base:allocation` answers these queries: every context when a LIST has none, the
/// `base:` wildcard in a LIST, and its own name in either. Unknown namespaces and leaves are
/// ignored, as the protocol says.
fn offers_allocation(queries: &[Vec<u8>], set: bool) -> bool {
    if queries.is_empty() {
        return !set;
    }
    queries
        .iter()
        .any(|q| q == CONTEXT_BASE_ALLOCATION.as_bytes() || (!set && q == b"base:"))
}

/// A string preceded by its 32-bit length, and what follows it.
fn take_string(data: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_be_bytes(data.get(..4)?.try_into().ok()?) as usize;
    let s = data.get(4..4usize.checked_add(len)?)?;
    Some((s, &data[4 + len..]))
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

    fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
        let mut d = (name.len() as u32).to_be_bytes().to_vec();
        d.extend_from_slice(name.as_bytes());
        d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
        for q in queries {
            d.extend_from_slice(&(q.len() as u32).to_be_bytes());
            d.extend_from_slice(q.as_bytes());
        }
        d
    }

    #[test]
    fn meta_context_data_parses_and_refuses_bad_lengths() {
        let d = meta_data("vol", &["base:allocation", "qemu:dirty-bitmap:x"]);
        let (name, queries) = parse_meta_context(&d).unwrap();
        assert_eq!(name, "vol");
        assert_eq!(
            queries,
            vec![b"base:allocation".to_vec(), b"qemu:dirty-bitmap:x".to_vec()]
        );
        assert_eq!(parse_meta_context(&d[..d.len() - 1]), None);
        let mut extra = d.clone();
        extra.push(0);
        assert_eq!(parse_meta_context(&extra), None);
        // A count larger than the queries that follow.
        let mut short = meta_data("vol", &[]);
        short[7..11].copy_from_slice(&5u32.to_be_bytes());
        assert_eq!(parse_meta_context(&short), None);
    }

    #[test]
    fn base_allocation_is_offered_to_its_queries_only() {
        let q = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        assert!(offers_allocation(&q(&[]), false), "LIST of everything");
        assert!(
            !offers_allocation(&q(&[]), true),
            "SET of nothing selects nothing"
        );
        assert!(offers_allocation(&q(&["base:"]), false));
        assert!(
            !offers_allocation(&q(&["base:"]), true),
            "SET ignores the wildcard"
        );
        assert!(offers_allocation(&q(&["x:y", "base:allocation"]), true));
        assert!(!offers_allocation(&q(&["qemu:allocation-depth"]), false));
    }
}
