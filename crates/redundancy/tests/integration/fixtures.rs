//! Committed piece images (docs/format.md): valid ones decode to known fields, corrupt ones are
//! rejected with the matching error. `REGENERATE_FIXTURES=1` rewrites them from this code.

use railstore_redundancy::format::{PieceError, PieceHeader, PieceKind, SetDescriptor, SetMember};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn shard() -> (PieceHeader, Vec<u8>) {
    let payload: Vec<u8> = (0..64u8).collect();
    let h = PieceHeader {
        kind: PieceKind::Shard,
        code: 1,
        k: 4,
        m: 2,
        index: 2,
        segment: 0,
        segment_count: 1,
        object_len: 250,
        version: 0x0102_0304_0506_0708,
        set: 0,
        payload_len: 64,
    };
    (h, payload)
}

fn descriptor() -> (PieceHeader, Vec<u8>) {
    let d = SetDescriptor {
        code: 1,
        k: 4,
        m: 2,
        members: vec![
            SetMember {
                user_key: b"alpha".to_vec(),
                segment: 0,
                version: 11,
                len: 4096,
                device: 0,
            },
            SetMember {
                user_key: b"beta".to_vec(),
                segment: 0,
                version: 12,
                len: 100,
                device: 1,
            },
        ],
        parity_devices: vec![4, 5],
        descriptor_devices: vec![4, 5, 0],
    };
    let payload = d.encode();
    let h = PieceHeader {
        kind: PieceKind::SetDescriptor,
        code: 1,
        k: 4,
        m: 2,
        index: 0,
        segment: 0,
        segment_count: 0,
        object_len: 4096,
        version: 99,
        set: 99,
        payload_len: payload.len() as u32,
    };
    (h, payload)
}

fn images() -> Vec<(&'static str, Vec<u8>)> {
    let (h, p) = shard();
    let good = h.encode(&p);
    let mut bad_crc = good.clone();
    bad_crc[60] ^= 0x01;
    let mut bad_kind = good.clone();
    bad_kind[5] = 9;
    let (dh, dp) = descriptor();
    vec![
        ("shard.bin", good.clone()),
        ("descriptor.bin", dh.encode(&dp)),
        ("bad-crc.bin", bad_crc),
        ("short.bin", good[..30].to_vec()),
        ("bad-kind.bin", bad_kind),
    ]
}

#[test]
fn fixtures_decode_or_fail_as_documented() {
    if std::env::var_os("REGENERATE_FIXTURES").is_some() {
        for (name, bytes) in images() {
            std::fs::write(dir().join(name), bytes).unwrap();
        }
    }
    let read = |name: &str| std::fs::read(dir().join(name)).unwrap();
    // The committed bytes are what this code writes: the format has not drifted.
    for (name, bytes) in images() {
        assert_eq!(
            read(name),
            bytes,
            "{name} differs from what the code writes"
        );
    }
    let shard_bytes = read("shard.bin");
    let (h, p) = PieceHeader::decode(&shard_bytes).unwrap();
    assert_eq!((h, p.to_vec()), shard());
    assert_eq!(&shard_bytes[..4], b"RSOB");
    let desc_bytes = read("descriptor.bin");
    let (dh, dp) = PieceHeader::decode(&desc_bytes).unwrap();
    assert_eq!(dh.kind, PieceKind::SetDescriptor);
    let d = SetDescriptor::decode(dp).unwrap();
    assert_eq!(d.members[1].user_key, b"beta");
    assert_eq!(d.parity_devices, vec![4, 5]);
    assert_eq!(
        PieceHeader::decode(&read("bad-crc.bin")).unwrap_err(),
        PieceError::Checksum
    );
    assert_eq!(
        PieceHeader::decode(&read("short.bin")).unwrap_err(),
        PieceError::Short
    );
    assert_eq!(
        PieceHeader::decode(&read("bad-kind.bin")).unwrap_err(),
        PieceError::Kind
    );
}
