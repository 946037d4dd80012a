//! The fuzz targets' entry points on random and mutated bytes, so stable CI runs them too.

use proptest::prelude::*;
use railstore_device::fuzzing::{open_arbitrary, parse_everything};
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
