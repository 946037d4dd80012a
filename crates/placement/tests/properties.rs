//! Placement properties: one device per colour in every group, balanced membership, even key
//! spread (chi-square), the same answers after a reload, clear errors on bad input.

use proptest::prelude::*;
use railstore_placement::{min_pieces_in_window, Layout, LayoutSpec, PieceOrder, PlacementError};

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
    assert!(matches!(
        Layout::decode(&good.replace("pieces spread\n", "")),
        Err(PlacementError::Parse { .. })
    ));
    assert!(matches!(
        Layout::decode(&good.replace("pieces spread", "pieces scattered")),
        Err(PlacementError::Parse { .. })
    ));
    // Consecutive pieces are said by formats 1 and 2, never by a format-3 line.
    assert!(matches!(
        Layout::decode(&good.replace("pieces spread", "pieces consecutive")),
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

/// Growing 6 devices to 12 (a new epoch): half the keys move, all of them onto the added
/// devices, and every other key keeps its devices and shard roles exactly. The layout before
/// the epoch is the original, and both persist.
#[test]
fn growing_6_to_12_moves_half_the_keys_onto_the_new_devices_and_no_other() {
    let six = Layout::new(spec(6, 6, 3, 7)).unwrap();
    let twelve = six.grown(6).unwrap();
    assert_eq!((twelve.devices(), twelve.epochs()), (12, 2));
    assert_eq!(twelve.spec().version, six.spec().version + 1);
    assert_eq!(twelve.previous().as_ref(), Some(&six));
    let mut moved = 0;
    let keys = 100_000u32;
    for i in 0..keys {
        let key = i.to_le_bytes();
        let (old, new) = (six.place(&key), twelve.place(&key));
        let (a, b): (Vec<usize>, Vec<usize>) = (old.devices().collect(), new.devices().collect());
        if a != b {
            moved += 1;
            assert!(b.iter().all(|&d| d >= 6), "{i}: moved to {b:?}");
            assert_eq!(old.rotation(), new.rotation(), "shard roles turn alike");
        }
    }
    let share = moved as f64 / keys as f64;
    assert!((0.48..=0.52).contains(&share), "{share} of the keys moved");
    assert!(share <= 0.55, "the issue's bound");
    let text = twelve.encode();
    assert!(text.starts_with("railstore-layout 3\n") && text.contains("\ngrow 6\n"));
    assert!(text.contains("\npieces spread\n"));
    assert_eq!(Layout::decode(&text).unwrap(), twelve);
    assert!(six.encode().starts_with("railstore-layout 3\n"));
    // Consecutive pieces (folders made before spreading) are written as they were.
    let old = Layout::with_order(spec(6, 6, 3, 7), PieceOrder::Consecutive).unwrap();
    assert!(old.encode().starts_with("railstore-layout 1\n"));
    let old_grown = old.grown(6).unwrap().encode();
    assert!(old_grown.starts_with("railstore-layout 2\n") && !old_grown.contains("pieces"));
    assert_eq!(
        Layout::decode(&old_grown).unwrap().piece_order(),
        PieceOrder::Consecutive
    );
    assert!(matches!(
        Layout::decode(&text.replace("grow 6", "grow 12")),
        Err(PlacementError::DigestMismatch { .. })
    ));
    assert!(matches!(
        six.grown(5),
        Err(PlacementError::UnevenGrowth { added: 5, width: 6 })
    ));
    assert!(matches!(
        six.grown(0),
        Err(PlacementError::UnevenGrowth { .. })
    ));
}

/// After growing (by one class, then two), every device belongs to as many groups as every
/// other, each group still has one device of each colour, and keys spread evenly over the
/// devices.
#[test]
fn grown_layouts_stay_balanced() {
    let layout = Layout::new(spec(12, 6, 3, 11))
        .unwrap()
        .grown(6)
        .unwrap()
        .grown(12)
        .unwrap();
    assert_eq!((layout.devices(), layout.epochs()), (30, 3));
    let mut per_device = vec![0usize; 30];
    for g in 0..layout.group_count() {
        let members: Vec<usize> = layout.group(g).collect();
        let colours: Vec<usize> = members.iter().map(|&d| layout.colour_of(d)).collect();
        assert_eq!(
            colours,
            (0..6).collect::<Vec<_>>(),
            "group {g}: {members:?}"
        );
        for d in members {
            per_device[d] += 1;
        }
    }
    assert!(per_device.iter().all(|&n| n == 3), "{per_device:?}");
    let mut pieces = vec![0usize; 30];
    for i in 0..60_000u32 {
        for d in layout.place(&i.to_be_bytes()).devices() {
            pieces[d] += 1;
        }
    }
    assert!(chi_square(&pieces) < 60.0, "{pieces:?}");
    assert_eq!(Layout::decode(&layout.encode()).unwrap(), layout);
}

/// Layout files written before epochs existed (format 1; these texts came from that code)
/// still decode, and a layout never grown is written exactly as then: data folders made
/// before keep opening.
#[test]
fn layouts_written_before_epochs_read_and_write_the_same() {
    for text in [
        "railstore-layout 1\nversion 1\ndevices 6\nwidth 6\nrounds 1\nseed 1380010316\ndigest 0xf1c241b57daf3dc6\n",
        "railstore-layout 1\nversion 1\ndevices 12\nwidth 6\nrounds 3\nseed 7\ndigest 0xc64b4c9c9934604c\n",
        "railstore-layout 1\nversion 1\ndevices 24\nwidth 4\nrounds 2\nseed 99\ndigest 0x7a0df85632f88e57\n",
    ] {
        let layout = Layout::decode(text).unwrap();
        assert_eq!(layout.epochs(), 1);
        assert_eq!(layout.piece_order(), PieceOrder::Consecutive);
        assert_eq!(layout.encode(), text);
    }
}

/// Pieces counted in every window position of a real placement: the colours of the key's
/// pieces (through `of_pieces`, what the manager uses) against a window of consecutive
/// colours starting anywhere on the ring.
fn fewest_in_window(l: &Layout, key: &[u8], pieces: usize, window: usize) -> usize {
    let width = l.width();
    let place = l.place(key).of_pieces(pieces);
    let colours: Vec<usize> = (0..pieces).map(|i| place.colour(i)).collect();
    let devices: Vec<usize> = place.devices().collect();
    assert_eq!(devices.len(), pieces);
    let mut distinct = devices.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        pieces,
        "two pieces on one device: {devices:?}"
    );
    for (&c, &d) in colours.iter().zip(&devices) {
        assert_eq!(l.colour_of(d), c);
    }
    (0..width)
        .map(|start| {
            colours
                .iter()
                .filter(|&&c| (c + width - start) % width < window)
                .count()
        })
        .min()
        .unwrap()
}

proptest! {
    /// Spread pieces: every window of w consecutive colours holds at least floor(w * p / n) of
    /// an object's p pieces, so r copies leave one on a reader at every window position once
    /// the window is ceil(n / r) wide, and k + m shards leave k once it is k wide (when
    /// k + m = n). Checked on real placements (groups, rotations, N > n) and against
    /// `min_pieces_in_window`, which the store's configuration check uses.
    #[test]
    fn spread_pieces_fill_every_window_position(
        class in 1usize..4, width in 2usize..17, rounds in 1usize..3, seed in any::<u64>(),
        key in any::<u64>(),
    ) {
        let l = Layout::new(spec(class * width, width, rounds, seed)).unwrap();
        for pieces in 1..=width {
            for window in 1..width {
                let seen = fewest_in_window(&l, &key.to_le_bytes(), pieces, window);
                prop_assert_eq!(seen, min_pieces_in_window(PieceOrder::Spread, width, pieces, window));
                prop_assert!(seen >= window * pieces / width,
                    "width {} pieces {} window {}: {} in the fewest window", width, pieces, window, seen);
                if window >= width.div_ceil(pieces) {
                    prop_assert!(seen >= 1);
                }
            }
        }
    }
}

/// The case the spreading fixes, which the consecutive order gets wrong: rep3 in a group of
/// six read through a window of three colours has one window position (one key in six) with
/// no copy on a reader; spread, every position has one. Also the hybrid policy's widest
/// mechanisms at their own windows: split3+3 (window 3), split10+4 with rep3 (window 10).
#[test]
fn consecutive_copies_miss_a_window_position_and_spread_ones_do_not() {
    assert_eq!(min_pieces_in_window(PieceOrder::Consecutive, 6, 3, 3), 0);
    assert_eq!(min_pieces_in_window(PieceOrder::Spread, 6, 3, 3), 1);
    assert_eq!(min_pieces_in_window(PieceOrder::Spread, 6, 3, 2), 1);
    assert_eq!(min_pieces_in_window(PieceOrder::Spread, 6, 6, 3), 3);
    assert_eq!(min_pieces_in_window(PieceOrder::Spread, 14, 3, 10), 2);
    assert_eq!(min_pieces_in_window(PieceOrder::Spread, 14, 14, 10), 10);
    let old = Layout::with_order(spec(12, 6, 2, 3), PieceOrder::Consecutive).unwrap();
    let new = Layout::new(spec(12, 6, 2, 3)).unwrap();
    let key = b"bucket/small-object";
    assert_eq!(fewest_in_window(&old, key, 3, 3), 0);
    assert_eq!(fewest_in_window(&new, key, 3, 3), 1);
    // Piece 0 stays on shard 0 (the primary), so the mechanism is found where it was.
    for pieces in 1..=6 {
        assert_eq!(
            new.place(key).of_pieces(pieces).device(0),
            old.place(key).device(0)
        );
    }
}
