//! Placement properties: one device per colour in every group, balanced membership, even key
//! spread (chi-square), the same answers after a reload, clear errors on bad input.

use proptest::prelude::*;
use railstore_placement::{Layout, LayoutSpec, PlacementError};

fn spec(devices: usize, width: usize, rounds: usize, seed: u64) -> LayoutSpec {
    LayoutSpec {
        devices,
        width,
        rounds,
        seed,
        version: 1,
    }
}

proptest! {
    #[test]
    fn groups_take_one_device_per_colour_and_membership_is_balanced(
        class in 1usize..6, width in 1usize..9, rounds in 1usize..5, seed in any::<u64>()
    ) {
        let l = Layout::new(spec(class * width, width, rounds, seed)).unwrap();
        let expected_rounds = if class == 1 { 1 } else { rounds };
        prop_assert_eq!(l.group_count(), class * expected_rounds);
        for g in 0..l.group_count() {
            let members: Vec<usize> = l.group(g).collect();
            prop_assert_eq!(members.len(), width);
            for (colour, &d) in members.iter().enumerate() {
                prop_assert_eq!(l.colour_of(d), colour, "group {} colour {}", g, colour);
            }
        }
        let counts: Vec<usize> = (0..l.devices()).map(|d| l.groups_of(d).len()).collect();
        let (lo, hi) = (counts.iter().min().unwrap(), counts.iter().max().unwrap());
        prop_assert!(hi - lo <= 1, "membership {:?}", counts);
        prop_assert_eq!(*hi, expected_rounds);
    }

    #[test]
    fn a_key_uses_each_colour_once(seed in any::<u64>(), key in proptest::collection::vec(any::<u8>(), 0..40)) {
        let l = Layout::new(spec(12, 6, 3, seed)).unwrap();
        let p = l.place(&key);
        let mut colours: Vec<usize> = p.devices().map(|d| l.colour_of(d)).collect();
        colours.sort();
        prop_assert_eq!(colours, (0..6).collect::<Vec<_>>());
        let members: Vec<usize> = l.group(p.group()).collect();
        prop_assert!(p.devices().all(|d| members.contains(&d)));
    }
}

/// Pearson's chi-square of `counts` against a uniform expectation.
fn chi_square(counts: &[usize]) -> f64 {
    let total: usize = counts.iter().sum();
    let e = total as f64 / counts.len() as f64;
    counts.iter().map(|&c| (c as f64 - e).powi(2) / e).sum()
}

#[test]
fn keys_spread_evenly_over_groups_devices_and_shard_roles() {
    let l = Layout::new(spec(24, 6, 4, 7)).unwrap();
    let mut groups = vec![0usize; l.group_count()];
    let mut devices = vec![0usize; l.devices()];
    let mut shard0 = vec![0usize; l.devices()];
    for i in 0..200_000u32 {
        let key = format!("bucket/object-{i}");
        let p = l.place(key.as_bytes());
        groups[p.group()] += 1;
        for d in p.devices() {
            devices[d] += 1;
        }
        shard0[p.device(0)] += 1;
    }
    // Critical values of chi-square at p = 0.001: df 15 -> 37.7, df 23 -> 49.7.
    assert_eq!(groups.len(), 16);
    assert!(chi_square(&groups) < 37.7, "groups {groups:?}");
    assert!(chi_square(&devices) < 49.7, "devices {devices:?}");
    assert!(chi_square(&shard0) < 49.7, "shard 0 {shard0:?}");
}

#[test]
fn same_answers_after_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("layout");
    let a = Layout::new(spec(12, 6, 3, 99)).unwrap();
    a.save(&path).unwrap();
    let b = Layout::load(&path).unwrap();
    assert_eq!(a, b);
    for i in 0..1000 {
        let key = i.to_string();
        let (pa, pb) = (a.place(key.as_bytes()), b.place(key.as_bytes()));
        assert!(pa.devices().eq(pb.devices()));
    }
    // Plain Rails: N = n is one group, the whole array.
    let rails = Layout::new(spec(6, 6, 5, 1)).unwrap();
    assert_eq!(rails.group_count(), 1);
    assert_eq!(rails.group(0).collect::<Vec<_>>(), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn bad_layouts_and_files_are_refused() {
    assert!(matches!(
        Layout::new(spec(5, 6, 1, 0)),
        Err(PlacementError::TooFewDevices { .. })
    ));
    assert!(matches!(
        Layout::new(spec(13, 6, 1, 0)),
        Err(PlacementError::UnevenClasses { .. })
    ));
    assert!(matches!(
        Layout::new(spec(12, 0, 1, 0)),
        Err(PlacementError::TooFewDevices { .. })
    ));
    assert!(matches!(
        Layout::new(spec(12, 6, 0, 0)),
        Err(PlacementError::NoRounds)
    ));
    let good = Layout::new(spec(12, 6, 2, 5)).unwrap().encode();
    let tampered = good.replace("seed 5", "seed 6");
    assert!(matches!(
        Layout::decode(&tampered),
        Err(PlacementError::DigestMismatch { .. })
    ));
    assert!(matches!(
        Layout::decode(""),
        Err(PlacementError::Parse { .. })
    ));
    assert!(matches!(
        Layout::decode(&good.replace("width 6", "width six")),
        Err(PlacementError::Parse { line: 4, .. })
    ));
    assert!(matches!(
        Layout::decode(&good.replace("rounds 2\n", "")),
        Err(PlacementError::Parse { .. })
    ));
    let err = Layout::load(std::path::Path::new("/nonexistent/layout")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/layout"));
}

#[test]
fn jump_hash_moves_few_keys_when_groups_grow() {
    use railstore_placement::{jump_hash, key_hash};
    let mut moved = 0;
    for i in 0..100_000u32 {
        let h = key_hash(&i.to_le_bytes(), 3);
        let (a, b) = (jump_hash(h, 10), jump_hash(h, 11));
        assert!(a < 10 && b < 11);
        if a != b {
            assert_eq!(b, 10, "a key only ever moves to the new bucket");
            moved += 1;
        }
    }
    // About 1/11 of the keys move.
    assert!((8_000..10_200).contains(&moved), "{moved} moved");
    assert_eq!(jump_hash(12345, 1), 0);
    assert_ne!(key_hash(b"a", 1), key_hash(b"a", 2), "the seed matters");
}
