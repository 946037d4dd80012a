//! The NBD client against the export, in one process: negotiation (a known and an unknown
//! export), pipelined writes and reads whose replies come back under their handles with the
//! data written, an error reply for a read past the end, and the export's request recording.

use crate::common;

use railstore_volume::nbd::client;
use railstore_volume::nbd::{CMD_READ, CMD_WRITE};
use std::collections::HashMap;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_writes_reads_and_the_export_records_what_it_served() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("requests.trace");
    let served = common::export(dir.path(), 1 << 20, 64 << 10, Some(&trace)).await;
    let addr = served.addr;

    let refused = client::connect(addr, "nosuch")
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.kind(), std::io::ErrorKind::NotFound, "{refused}");

    let (export, mut tx, mut rx) = client::connect(addr, "v").await.unwrap();
    assert_eq!(export.size, 1 << 20);
    // Eight 4 KiB writes across two objects, sent before any reply is read.
    let block = |i: u64| vec![i as u8 + 1; 4096];
    for i in 0..8u64 {
        tx.send(CMD_WRITE, 100 + i, i * 12288, 4096, Some(&block(i)))
            .await
            .unwrap();
    }
    tx.flush().await.unwrap();
    let mut answered = HashMap::new();
    for _ in 0..8 {
        let (handle, error) = rx.next().await.unwrap();
        answered.insert(handle, error);
    }
    assert_eq!(answered, (100..108).map(|h| (h, 0)).collect());
    // Reads back, pipelined, then one past the end (an error reply, no data).
    for i in 0..8u64 {
        tx.send(CMD_READ, 200 + i, i * 12288, 4096, None)
            .await
            .unwrap();
    }
    tx.send(CMD_READ, 999, (1 << 20) - 512, 4096, None)
        .await
        .unwrap();
    tx.flush().await.unwrap();
    let mut buf = vec![0u8; 4096];
    for _ in 0..9 {
        let (handle, error) = rx.next().await.unwrap();
        if handle == 999 {
            assert_ne!(error, 0, "a read past the end succeeded");
            continue;
        }
        assert_eq!(error, 0);
        rx.read_data(&mut buf).await.unwrap();
        assert_eq!(buf, block(handle - 200), "read {handle}");
    }
    tx.disconnect().await.unwrap();
    served.stop().await;

    // The recording: the 17 reads and writes in the order they arrived (this connection
    // sent them in order), the volume as device 0.
    let text = std::fs::read_to_string(&trace).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 17, "{text}");
    for (i, f) in lines.iter().enumerate() {
        let i = i as u64;
        assert_eq!(f.len(), 5, "{text}");
        assert_eq!(f[1], "0");
        let (offset, op) = match i {
            0..8 => (i * 12288, "0"),
            8..16 => ((i - 8) * 12288, "1"),
            _ => ((1 << 20) - 512, "1"),
        };
        assert_eq!(
            (f[2], f[3], f[4]),
            (offset.to_string().as_str(), "4096", op)
        );
    }
}
