//! The fuzz targets' entry points on random and mutated bytes, so stable CI runs them too.

use proptest::prelude::*;
use railstore_device::fuzzing::{open_arbitrary, open_arbitrary_image, parse_everything};
use std::path::Path;

fn valid_segment() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid/seg-0000000001.log");
    std::fs::read(p).unwrap()
}

fn valid_checkpoint() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/valid/checkpoint");
    std::fs::read(p).unwrap()
}

/// A valid image with a few bytes overwritten and a random cut.
fn mutated(base: Vec<u8>) -> impl Strategy<Value = Vec<u8>> {
    let len = base.len();
    (prop::collection::vec((0..len, any::<u8>()), 0..6), 0..=len).prop_map(move |(edits, cut)| {
        let mut b = base.clone();
        for (at, v) in edits {
            b[at] = v;
        }
        b.truncate(cut);
        b
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn parsers_survive_random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        parse_everything(&data);
    }

    #[test]
    fn parsers_survive_mutated_segments(data in mutated(valid_segment())) {
        parse_everything(&data);
    }

    #[test]
    fn parsers_survive_mutated_checkpoints(data in mutated(valid_checkpoint())) {
        parse_everything(&data);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn recovery_survives_random_bytes(data in prop::collection::vec(any::<u8>(), 0..2048)) {
        open_arbitrary(&data);
    }

    #[test]
    fn recovery_survives_mutated_images(seg in mutated(valid_segment()), ckpt in mutated(valid_checkpoint())) {
        let mut data = (ckpt.len() as u16).to_le_bytes().to_vec();
        data.extend_from_slice(&ckpt);
        data.extend_from_slice(&seg);
        open_arbitrary(&data);
    }
}

fn single_file_image() -> Vec<u8> {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/single-file/device.img");
    std::fs::read(p).unwrap()
}

/// The single-file fixture with a few bytes overwritten where its metadata and log live: the
/// superblock copies, the checkpoint regions' first block, slot 0's header and log; sometimes
/// cut short.
fn mutated_image() -> impl Strategy<Value = Vec<u8>> {
    let base = single_file_image();
    let sb = railstore_device::format::decode_superblock(&base[..4096]).unwrap();
    let ranges: Vec<(u64, u64)> = vec![
        (0, 8192),
        (sb.checkpoint_region_offset(0), 4096),
        (sb.checkpoint_region_offset(1), 4096),
        (sb.slot_offset(0), 4096 + 8192),
    ];
    let at = (0..ranges.len(), any::<u64>())
        .prop_map(move |(r, x)| (ranges[r].0 + x % ranges[r].1) as usize);
    let len = base.len();
    (
        prop::collection::vec((at, any::<u8>()), 1..6),
        prop_oneof![9 => Just(len), 1 => 0..len],
    )
        .prop_map(move |(edits, cut)| {
            let mut b = base.clone();
            for (at, v) in edits {
                b[at] = v;
            }
            b.truncate(cut);
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn parsers_survive_mutated_single_file_metadata(data in mutated_image()) {
        parse_everything(&data[..data.len().min(8192)]);
        let sb = railstore_device::format::decode_superblock(&single_file_image()[..4096]).unwrap();
        for at in [sb.checkpoint_region_offset(0), sb.slot_offset(0)] {
            if let Some(b) = data.get(at as usize..) {
                parse_everything(&b[..b.len().min(4096)]);
            }
        }
    }

    #[test]
    fn recovery_survives_mutated_single_file_images(data in mutated_image()) {
        open_arbitrary_image(&data);
    }
}
