//! Structured replies and block status, byte by byte on the wire: the options' order rules,
//! `base:allocation` listed and selected, reads answered as data and hole chunks that rebuild
//! exactly what was written, block status that follows writes and trims, and errors as error
//! chunks with a message.

use crate::common;

use railstore_volume::nbd::*;
use railstore_volume::VolumeSpec;
use std::net::SocketAddr;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const OBJECT: u64 = 64 << 10;
const SIZE: u64 = 1 << 20;

/// A connection in negotiation.
struct Conn(TcpStream);

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let mut s = TcpStream::connect(addr).await.unwrap();
        assert_eq!(s.read_u64().await.unwrap(), NBD_MAGIC);
        assert_eq!(s.read_u64().await.unwrap(), IHAVEOPT);
        s.read_u16().await.unwrap();
        s.write_u32(FLAG_C_FIXED_NEWSTYLE | FLAG_C_NO_ZEROES)
            .await
            .unwrap();
        Conn(s)
    }

    /// Sends an option; returns its replies (type, data) up to an ACK or an error.
    async fn option(&mut self, option: u32, data: &[u8]) -> Vec<(u32, Vec<u8>)> {
        let s = &mut self.0;
        s.write_u64(IHAVEOPT).await.unwrap();
        s.write_u32(option).await.unwrap();
        s.write_u32(data.len() as u32).await.unwrap();
        s.write_all(data).await.unwrap();
        let mut replies = Vec::new();
        loop {
            assert_eq!(s.read_u64().await.unwrap(), OPTION_REPLY_MAGIC);
            assert_eq!(s.read_u32().await.unwrap(), option);
            let kind = s.read_u32().await.unwrap();
            let mut d = vec![0u8; s.read_u32().await.unwrap() as usize];
            s.read_exact(&mut d).await.unwrap();
            let end = kind == REP_ACK || kind & (1 << 31) != 0;
            replies.push((kind, d));
            if end {
                return replies;
            }
        }
    }

    async fn request(&mut self, kind: u16, flags: u16, cookie: u64, offset: u64, len: u32) {
        let s = &mut self.0;
        s.write_u32(REQUEST_MAGIC).await.unwrap();
        s.write_u16(flags).await.unwrap();
        s.write_u16(kind).await.unwrap();
        s.write_u64(cookie).await.unwrap();
        s.write_u64(offset).await.unwrap();
        s.write_u32(len).await.unwrap();
    }

    async fn write(&mut self, cookie: u64, offset: u64, data: &[u8]) {
        self.request(CMD_WRITE, 0, cookie, offset, data.len() as u32)
            .await;
        self.0.write_all(data).await.unwrap();
        self.simple_ok(cookie).await;
    }

    async fn simple_ok(&mut self, cookie: u64) {
        let s = &mut self.0;
        assert_eq!(s.read_u32().await.unwrap(), SIMPLE_REPLY_MAGIC);
        assert_eq!(s.read_u32().await.unwrap(), 0, "error");
        assert_eq!(s.read_u64().await.unwrap(), cookie);
    }

    /// The chunks of one structured reply: (flags, type, payload), up to the one marked done.
    async fn chunks(&mut self, cookie: u64) -> Vec<(u16, u16, Vec<u8>)> {
        let s = &mut self.0;
        let mut out = Vec::new();
        loop {
            assert_eq!(s.read_u32().await.unwrap(), STRUCTURED_REPLY_MAGIC);
            let flags = s.read_u16().await.unwrap();
            let kind = s.read_u16().await.unwrap();
            assert_eq!(s.read_u64().await.unwrap(), cookie);
            let mut payload = vec![0u8; s.read_u32().await.unwrap() as usize];
            s.read_exact(&mut payload).await.unwrap();
            out.push((flags, kind, payload));
            if flags & REPLY_FLAG_DONE != 0 {
                return out;
            }
        }
    }

    /// A structured read: the bytes rebuilt from its chunks, and (offset, len, hole) of each.
    async fn read(
        &mut self,
        cookie: u64,
        offset: u64,
        len: u32,
    ) -> (Vec<u8>, Vec<(u64, u64, bool)>) {
        self.request(CMD_READ, 0, cookie, offset, len).await;
        let mut bytes = vec![0xEEu8; len as usize];
        let mut pieces = Vec::new();
        for (_, kind, p) in self.chunks(cookie).await {
            let at = u64::from_be_bytes(p[..8].try_into().unwrap());
            let within = (at - offset) as usize;
            match kind {
                REPLY_TYPE_OFFSET_DATA => {
                    bytes[within..within + p.len() - 8].copy_from_slice(&p[8..]);
                    pieces.push((at, p.len() as u64 - 8, false));
                }
                REPLY_TYPE_OFFSET_HOLE => {
                    assert_eq!(p.len(), 12);
                    let n = u32::from_be_bytes(p[8..12].try_into().unwrap()) as usize;
                    bytes[within..within + n].fill(0);
                    pieces.push((at, n as u64, true));
                }
                other => panic!("chunk type {other} in a read"),
            }
        }
        (bytes, pieces)
    }

    /// Block status: (length, flags) of each descriptor.
    async fn status(&mut self, cookie: u64, flags: u16, offset: u64, len: u32) -> Vec<(u32, u32)> {
        self.request(CMD_BLOCK_STATUS, flags, cookie, offset, len)
            .await;
        let chunks = self.chunks(cookie).await;
        assert_eq!(chunks.len(), 1, "one chunk per context");
        let (_, kind, p) = &chunks[0];
        assert_eq!(*kind, REPLY_TYPE_BLOCK_STATUS);
        assert_eq!(
            u32::from_be_bytes(p[..4].try_into().unwrap()),
            CONTEXT_BASE_ALLOCATION_ID
        );
        p[4..]
            .chunks_exact(8)
            .map(|d| {
                (
                    u32::from_be_bytes(d[..4].try_into().unwrap()),
                    u32::from_be_bytes(d[4..].try_into().unwrap()),
                )
            })
            .collect()
    }

    /// A request answered with an error chunk: its error number and message.
    async fn error(&mut self, cookie: u64) -> (u32, String) {
        let chunks = self.chunks(cookie).await;
        let (_, kind, p) = &chunks[chunks.len() - 1];
        assert_eq!(*kind, REPLY_TYPE_ERROR, "{chunks:?}");
        let errno = u32::from_be_bytes(p[..4].try_into().unwrap());
        let n = u16::from_be_bytes(p[4..6].try_into().unwrap()) as usize;
        (errno, String::from_utf8(p[6..6 + n].to_vec()).unwrap())
    }
}

fn name_data(name: &str) -> Vec<u8> {
    let mut d = (name.len() as u32).to_be_bytes().to_vec();
    d.extend_from_slice(name.as_bytes());
    d
}

fn go_data(name: &str) -> Vec<u8> {
    let mut d = name_data(name);
    d.extend_from_slice(&0u16.to_be_bytes());
    d
}

fn meta_data(name: &str, queries: &[&str]) -> Vec<u8> {
    let mut d = name_data(name);
    d.extend_from_slice(&(queries.len() as u32).to_be_bytes());
    for q in queries {
        d.extend_from_slice(&name_data(q));
    }
    d
}

fn kinds(replies: &[(u32, Vec<u8>)]) -> Vec<u32> {
    replies.iter().map(|r| r.0).collect()
}

const HOLE: u32 = STATE_HOLE | STATE_ZERO;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn structured_reads_and_block_status_follow_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let served = common::export(dir.path(), SIZE, OBJECT, None).await;
    let addr = served.addr;

    let mut c = Conn::open(addr).await;
    // Contexts need structured replies first; the option takes no data.
    let early = c
        .option(OPT_SET_META_CONTEXT, &meta_data("v", &["base:allocation"]))
        .await;
    assert_eq!(kinds(&early), vec![REP_ERR_INVALID]);
    assert_eq!(
        kinds(&c.option(OPT_STRUCTURED_REPLY, b"x").await),
        vec![REP_ERR_INVALID]
    );
    assert_eq!(
        kinds(&c.option(OPT_STRUCTURED_REPLY, b"").await),
        vec![REP_ACK]
    );
    // LIST with no query, and with the base: wildcard, names base:allocation; an unknown
    // namespace finds nothing; an unknown export is refused.
    for queries in [&[][..], &["base:"][..]] {
        let listed = c
            .option(OPT_LIST_META_CONTEXT, &meta_data("v", queries))
            .await;
        assert_eq!(
            kinds(&listed),
            vec![REP_META_CONTEXT, REP_ACK],
            "{queries:?}"
        );
        assert_eq!(&listed[0].1[4..], CONTEXT_BASE_ALLOCATION.as_bytes());
    }
    let other = c
        .option(
            OPT_LIST_META_CONTEXT,
            &meta_data("v", &["qemu:dirty-bitmap:a"]),
        )
        .await;
    assert_eq!(kinds(&other), vec![REP_ACK]);
    let unknown = c
        .option(
            OPT_SET_META_CONTEXT,
            &meta_data("nosuch", &["base:allocation"]),
        )
        .await;
    assert_eq!(kinds(&unknown), vec![REP_ERR_UNKNOWN]);
    let mut truncated = meta_data("v", &["base:allocation"]);
    truncated.pop();
    assert_eq!(
        kinds(&c.option(OPT_SET_META_CONTEXT, &truncated).await),
        vec![REP_ERR_INVALID]
    );
    let set = c
        .option(OPT_SET_META_CONTEXT, &meta_data("v", &["base:allocation"]))
        .await;
    assert_eq!(kinds(&set), vec![REP_META_CONTEXT, REP_ACK]);
    assert_eq!(set[0].1[..4], CONTEXT_BASE_ALLOCATION_ID.to_be_bytes());
    let go = c.option(OPT_GO, &go_data("v")).await;
    assert_eq!(*kinds(&go).last().unwrap(), REP_ACK);

    // A fresh volume is one hole, and reads as one.
    assert_eq!(
        c.status(1, 0, 0, SIZE as u32).await,
        vec![(SIZE as u32, HOLE)]
    );
    let (bytes, pieces) = c.read(2, 0, 256 << 10).await;
    assert!(bytes.iter().all(|&b| b == 0));
    assert_eq!(pieces, vec![(0, 256 << 10, true)]);

    // Writes to objects 1 and 3; the model is what the volume should read as.
    let mut model = vec![0u8; SIZE as usize];
    let a: Vec<u8> = (0..4096u32).map(|i| (i % 251) as u8 + 1).collect();
    let b = vec![0x5Au8; 8192];
    c.write(3, OBJECT + 100, &a).await;
    c.write(4, 3 * OBJECT + OBJECT - 4096, &b[..4096]).await;
    c.write(5, 4 * OBJECT, &b[4096..]).await;
    model[(OBJECT + 100) as usize..][..4096].copy_from_slice(&a);
    model[(4 * OBJECT - 4096) as usize..][..8192].copy_from_slice(&b);

    // A read across them: holes for objects 0, 2 and 5, data for 1, 3 and 4, and the bytes
    // rebuilt from the chunks are the model's.
    let (bytes, pieces) = c.read(6, 1000, (5 * OBJECT) as u32).await;
    assert_eq!(bytes, model[1000..][..(5 * OBJECT) as usize]);
    assert_eq!(
        pieces,
        vec![
            (1000, OBJECT - 1000, true),
            (OBJECT, OBJECT, false),
            (2 * OBJECT, OBJECT, true),
            (3 * OBJECT, OBJECT, false),
            (4 * OBJECT, OBJECT, false),
            (5 * OBJECT, 1000, true),
        ]
    );
    let status = c.status(7, 0, 0, SIZE as u32).await;
    let o = OBJECT as u32;
    assert_eq!(
        status,
        vec![
            (o, HOLE),
            (o, 0),
            (o, HOLE),
            (2 * o, 0),
            (SIZE as u32 - 5 * o, HOLE)
        ]
    );
    // Unaligned start; one descriptor only when asked, never beyond the request.
    assert_eq!(
        c.status(8, 0, 512, 2 * o).await,
        vec![(o - 512, HOLE), (o, 0), (512, HOLE)]
    );
    assert_eq!(
        c.status(9, CMD_FLAG_REQ_ONE, 3 * OBJECT, 4096).await,
        vec![(4096, 0)]
    );
    assert_eq!(
        c.status(10, CMD_FLAG_REQ_ONE, 0, SIZE as u32).await,
        vec![(o, HOLE)]
    );

    // Trimming object 1 whole makes it a hole again.
    c.request(CMD_TRIM, 0, 11, OBJECT, o).await;
    c.simple_ok(11).await;
    assert_eq!(c.status(12, 0, 0, 3 * o).await, vec![(3 * o, HOLE)]);

    // Errors come as error chunks with the reason: a read and a block status past the end,
    // an empty block status.
    c.request(CMD_READ, 0, 13, SIZE - 512, 4096).await;
    let (errno, msg) = c.error(13).await;
    assert_eq!(errno, 22, "{msg}");
    assert!(msg.contains("beyond the volume"), "{msg}");
    c.request(CMD_BLOCK_STATUS, 0, 14, SIZE - 512, 4096).await;
    assert_eq!(c.error(14).await.0, 22);
    c.request(CMD_BLOCK_STATUS, 0, 15, 0, 0).await;
    assert_eq!(c.error(15).await.0, 22);
    c.request(CMD_DISC, 0, 16, 0, 0).await;

    // A connection that selected no context gets no block status; one that set the context
    // for another export neither.
    served
        .volumes
        .create(VolumeSpec::new("w", SIZE))
        .await
        .unwrap();
    let mut c = Conn::open(addr).await;
    c.option(OPT_STRUCTURED_REPLY, b"").await;
    c.option(OPT_SET_META_CONTEXT, &meta_data("w", &["base:allocation"]))
        .await;
    c.option(OPT_GO, &go_data("v")).await;
    c.request(CMD_BLOCK_STATUS, 0, 1, 0, 4096).await;
    let (errno, msg) = c.error(1).await;
    assert_eq!(errno, 22);
    assert!(msg.contains("base:allocation"), "{msg}");
    // Its reads are still structured and still right.
    let (bytes, _) = c.read(2, 3 * OBJECT, (2 * OBJECT) as u32).await;
    assert_eq!(
        bytes,
        model[(3 * OBJECT) as usize..][..(2 * OBJECT) as usize]
    );
    c.request(CMD_DISC, 0, 3, 0, 0).await;

    served.stop().await;
}
