//! Placement (DESIGN §3.3): pure, deterministic answers to "which devices hold this key".
//!
//! N devices are split into `width` colour classes of equal size (device d has colour
//! d mod width). A redundancy group takes exactly one device of each colour, so when the
//! read window covers some colours, every group has the same number of readers (eRails §6.2,
//! Fig. 8). Groups come in rounds: each round is a seeded matching that puts every device in
//! exactly one group, so after `rounds` rounds every device belongs to exactly `rounds` groups.
//! With N = width there is one group, the whole array: plain Rails.
//!
//! A key picks its group by jump consistent hashing (Lamping and Veach, 2014) of a stable
//! 64-bit hash, and shard i of the key lives on the group's device of colour
//! (i + rotation(key)) mod width, which spreads data and parity roles over every colour.
//!
//! An object with fewer pieces than the width (r copies, a packed member and its m pointers, a
//! narrow split) spreads them evenly over the ring: piece i of p takes shard
//! floor(i * width / p) ([`PieceOrder::Spread`]). The read window is a run of consecutive
//! colours, so pieces on consecutive colours (the order of layouts made before, kept for them
//! as [`PieceOrder::Consecutive`]) left some window positions with no copy on a reader: with
//! rep3 in a group of six and a window of three, one key in six read a writer. Spread, any
//! window of at least ceil(width / p) colours holds a piece ([`min_pieces_in_window`]).
//!
//! The same (N, width, rounds, seed) always give the same groups; `Layout::encode` and
//! `Layout::decode` persist them, with a digest that catches a change in the derivation.
//!
//! Layout epochs (growing the array): [`Layout::grown`] adds devices in a multiple of the
//! width as a new epoch. The groups so far stay as they are and new groups are made over the
//! added devices alone, as many per device as the old devices have, so every device belongs to
//! the same number of groups. A key's group is a jump hash over all groups, so a key moves
//! only when its new group is one of the added ones: the fraction that moves is
//! added groups / all groups (one half when 6 devices become 12), and a key that stays keeps
//! its devices and shard roles exactly. [`Layout::previous`] gives the layout before the last
//! epoch (where a key not yet moved is still found).

use std::path::Path;

/// Version of the persisted layout text (1: one epoch; 2: with `grow` lines; 3: with a
/// `pieces` line).
pub const LAYOUT_FORMAT_VERSION: u32 = 3;

/// How the pieces of an object with fewer pieces than the width sit on the ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PieceOrder {
    /// Piece i on shard i: layouts written as format 1 or 2 (before spreading existed).
    Consecutive,
    /// Piece i of p on shard floor(i * width / p): every layout made now.
    Spread,
}

impl PieceOrder {
    /// The shard (position on the ring from the key's rotation) of piece `piece` of `pieces`.
    pub fn shard(self, piece: usize, pieces: usize, width: usize) -> usize {
        match self {
            PieceOrder::Spread if pieces < width => piece * width / pieces,
            _ => piece,
        }
    }
}

/// The fewest of an object's `pieces` pieces that any window of `window` consecutive colours
/// covers, on a ring of `width` colours with pieces in `order`. Under separation a
/// mechanism can be read without a writer at every window position when this is at least the
/// pieces it needs (1 copy, k shards).
pub fn min_pieces_in_window(
    order: PieceOrder,
    width: usize,
    pieces: usize,
    window: usize,
) -> usize {
    let pieces = pieces.min(width);
    let mut on = vec![false; width];
    for i in 0..pieces {
        on[order.shard(i, pieces, width)] = true;
    }
    (0..width)
        .map(|start| {
            (0..window.min(width))
                .filter(|j| on[(start + j) % width])
                .count()
        })
        .min()
        .unwrap_or(0)
}

/// Most groups a layout may have.
pub const GROUPS_MAX: usize = 1 << 20;

/// Everything that can be wrong with a layout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("a layout needs width >= 1 and at least one device per colour, got {devices} devices for width {width}")]
    TooFewDevices { devices: usize, width: usize },
    #[error("{devices} devices do not split into {width} colour classes of equal size")]
    UnevenClasses { devices: usize, width: usize },
    #[error("rounds must be at least 1")]
    NoRounds,
    #[error("{groups} groups is more than the {max} a layout may have")]
    TooManyGroups { groups: usize, max: usize },
    #[error("layout file line {line}: {what}")]
    Parse { line: usize, what: String },
    #[error("layout digest {stored:#018x} does not match the groups derived now ({derived:#018x}): the file was edited or written by an incompatible railstore")]
    DigestMismatch { stored: u64, derived: u64 },
    #[error("layout file {path}: {error}")]
    Io { path: String, error: String },
    #[error(
        "an array of width {width} grows by a positive multiple of {width} devices, not {added}"
    )]
    UnevenGrowth { added: usize, width: usize },
}

/// The inputs that fix a layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayoutSpec {
    /// N, the number of devices.
    pub devices: usize,
    /// n, the width of a redundancy group: k + m for splitting and packing, r for replication.
    pub width: usize,
    /// How many groups each device belongs to (forced to 1 when N = width).
    pub rounds: usize,
    /// Seed of the matchings and of the key hash.
    pub seed: u64,
    /// Epoch of the layout, bumped by the operator when the array changes.
    pub version: u64,
}

/// Colour classes and redundancy groups over N devices.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The inputs; `devices` and `version` are the last epoch's, `rounds` the first's
    /// (effective: 1 when the first epoch had one group per round).
    spec: LayoutSpec,
    /// groups[g][colour] = device.
    groups: Vec<Vec<u32>>,
    /// Devices added by each epoch after the first, in order.
    grows: Vec<usize>,
    /// Where pieces of objects narrower than the width go.
    order: PieceOrder,
}

/// Where one key lives: its group and the rotation of shards over colours.
#[derive(Clone, Copy, Debug)]
pub struct Placement<'a> {
    layout: &'a Layout,
    group: usize,
    rotation: usize,
    /// The object's pieces (`width` until [`Placement::of_pieces`] says otherwise).
    pieces: usize,
}

impl Layout {
    /// Derives the layout of `spec`, pieces spread.
    pub fn new(spec: LayoutSpec) -> Result<Layout, PlacementError> {
        Layout::with_order(spec, PieceOrder::Spread)
    }

    /// Derives the layout of `spec` with pieces in `order`.
    pub fn with_order(spec: LayoutSpec, order: PieceOrder) -> Result<Layout, PlacementError> {
        let LayoutSpec { devices, width, .. } = spec;
        if width == 0 || devices < width {
            return Err(PlacementError::TooFewDevices { devices, width });
        }
        if devices % width != 0 {
            return Err(PlacementError::UnevenClasses { devices, width });
        }
        if spec.rounds == 0 {
            return Err(PlacementError::NoRounds);
        }
        let class = devices / width;
        let rounds = if class == 1 { 1 } else { spec.rounds };
        let groups = rounds.saturating_mul(class);
        if groups > GROUPS_MAX || devices > u32::MAX as usize {
            return Err(PlacementError::TooManyGroups {
                groups,
                max: GROUPS_MAX,
            });
        }
        let mut rng = SplitMix64(spec.seed ^ 0x9ACE_3E17_0000_0000);
        Ok(Layout {
            spec: LayoutSpec { rounds, ..spec },
            groups: matchings(&mut rng, 0, class, width, rounds),
            grows: Vec::new(),
            order,
        })
    }

    /// This layout with `added` devices (numbered from [`Layout::devices`] on) as a new epoch,
    /// its version one higher: new groups over the added devices, the old ones unchanged.
    pub fn grown(&self, added: usize) -> Result<Layout, PlacementError> {
        let width = self.spec.width;
        if added == 0 || !added.is_multiple_of(width) {
            return Err(PlacementError::UnevenGrowth { added, width });
        }
        let devices = self.spec.devices + added;
        // As many groups per added device as each old device has, so all carry alike.
        let rounds = self.spec.rounds;
        let groups = self.groups.len() + rounds.saturating_mul(added / width);
        if groups > GROUPS_MAX || devices > u32::MAX as usize {
            return Err(PlacementError::TooManyGroups {
                groups,
                max: GROUPS_MAX,
            });
        }
        let version = self.spec.version + 1;
        let mut rng = SplitMix64(self.spec.seed ^ 0x9ACE_3E17_0000_0000 ^ mix(version));
        let mut out = self.groups.clone();
        out.extend(matchings(
            &mut rng,
            self.spec.devices,
            added / width,
            width,
            rounds,
        ));
        let mut grows = self.grows.clone();
        grows.push(added);
        Ok(Layout {
            spec: LayoutSpec {
                devices,
                version,
                ..self.spec
            },
            groups: out,
            grows,
            order: self.order,
        })
    }

    /// The layout before the last epoch (`None` for a layout of one epoch).
    pub fn previous(&self) -> Option<Layout> {
        let (&added, earlier) = self.grows.split_last()?;
        let class = added / self.spec.width;
        let groups = self.groups.len() - self.spec.rounds * class;
        Some(Layout {
            spec: LayoutSpec {
                devices: self.spec.devices - added,
                version: self.spec.version - 1,
                ..self.spec
            },
            groups: self.groups[..groups].to_vec(),
            grows: earlier.to_vec(),
            order: self.order,
        })
    }

    /// Epochs so far (1 for a layout never grown).
    pub fn epochs(&self) -> usize {
        self.grows.len() + 1
    }

    /// Devices each epoch after the first added, in order.
    pub fn grows(&self) -> &[usize] {
        &self.grows
    }

    pub fn spec(&self) -> LayoutSpec {
        self.spec
    }

    /// Where pieces of objects narrower than the width go.
    pub fn piece_order(&self) -> PieceOrder {
        self.order
    }

    /// N.
    pub fn devices(&self) -> usize {
        self.spec.devices
    }

    /// n, the width of every group and the number of colours.
    pub fn width(&self) -> usize {
        self.spec.width
    }

    /// The colour of `device`.
    pub fn colour_of(&self, device: usize) -> usize {
        device % self.spec.width
    }

    /// The devices of one colour.
    pub fn class(&self, colour: usize) -> impl Iterator<Item = usize> + '_ {
        (colour..self.spec.devices).step_by(self.spec.width)
    }

    /// Number of groups.
    pub fn group_count(&self) -> usize {
        self.groups.len()
    }

    /// The devices of group `g`, indexed by colour.
    pub fn group(&self, g: usize) -> impl Iterator<Item = usize> + '_ {
        self.groups[g].iter().map(|&d| d as usize)
    }

    /// The groups `device` belongs to: the ones a rebuild of it must walk.
    pub fn groups_of(&self, device: usize) -> Vec<usize> {
        let colour = self.colour_of(device);
        (0..self.groups.len())
            .filter(|&g| self.groups[g][colour] as usize == device)
            .collect()
    }

    /// Where `key` lives.
    pub fn place(&self, key: &[u8]) -> Placement<'_> {
        let h = key_hash(key, self.spec.seed);
        Placement {
            layout: self,
            group: jump_hash(h, self.groups.len()),
            rotation: (mix(h ^ 0x0DDB_A11C_0FFE_E000) % self.spec.width as u64) as usize,
            pieces: self.spec.width,
        }
    }

    /// The persisted form: a few `name value` lines (the first epoch's devices and version,
    /// then a `grow ADDED` line per later epoch) and a digest of the derived groups. Spread
    /// pieces are format 3 with a `pieces spread` line; a layout with consecutive pieces is
    /// written exactly as before (format 1, or 2 when grown), so old folders stay readable by
    /// the railstore that made them.
    pub fn encode(&self) -> String {
        let s = self.spec;
        let added: usize = self.grows.iter().sum();
        let format = match (self.order, self.grows.is_empty()) {
            (PieceOrder::Spread, _) => 3,
            (PieceOrder::Consecutive, true) => 1,
            (PieceOrder::Consecutive, false) => 2,
        };
        let mut out = format!(
            "railstore-layout {format}\nversion {}\ndevices {}\nwidth {}\nrounds {}\nseed {}\n",
            s.version - self.grows.len() as u64,
            s.devices - added,
            s.width,
            s.rounds,
            s.seed,
        );
        for g in &self.grows {
            out.push_str(&format!("grow {g}\n"));
        }
        if self.order == PieceOrder::Spread {
            out.push_str("pieces spread\n");
        }
        out.push_str(&format!("digest {:#018x}\n", self.digest()));
        out
    }

    /// Parses `encode`'s output, derives the groups again and checks the digest.
    pub fn decode(text: &str) -> Result<Layout, PlacementError> {
        let mut lines = text.lines().enumerate();
        let bad = |line: usize, what: String| PlacementError::Parse {
            line: line + 1,
            what,
        };
        let format = match lines.next() {
            Some((_, l))
                if (1..=LAYOUT_FORMAT_VERSION)
                    .any(|v| l.trim() == format!("railstore-layout {v}")) =>
            {
                l.trim()["railstore-layout ".len()..]
                    .parse::<u32>()
                    .unwrap_or(0)
            }
            Some((i, l)) => {
                return Err(bad(
                    i,
                    format!(
                        "expected \"railstore-layout N\" with N up to {LAYOUT_FORMAT_VERSION}, \
                         found {l:?}"
                    ),
                ))
            }
            None => return Err(bad(0, "the file is empty".into())),
        };
        let mut grows: Vec<usize> = Vec::new();
        let mut order = None;
        let mut fields: [Option<u64>; 6] = [None; 6];
        const NAMES: [&str; 6] = ["version", "devices", "width", "rounds", "seed", "digest"];
        for (i, line) in lines {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let (name, value) = line
                .split_once(' ')
                .ok_or_else(|| bad(i, format!("expected `name value`, found {line:?}")))?;
            if name == "grow" {
                let added = value
                    .trim()
                    .parse()
                    .map_err(|e| bad(i, format!("grow: {value:?} is not a number ({e})")))?;
                grows.push(added);
                continue;
            }
            if name == "pieces" && format >= 3 {
                // Consecutive pieces are formats 1 and 2 (no such line), so format 3 says spread.
                let parsed = match value.trim() {
                    "spread" => PieceOrder::Spread,
                    v => return Err(bad(i, format!("pieces: expected spread, found {v:?}"))),
                };
                if order.replace(parsed).is_some() {
                    return Err(bad(i, "pieces appears twice".into()));
                }
                continue;
            }
            let slot = NAMES
                .iter()
                .position(|n| *n == name)
                .ok_or_else(|| bad(i, format!("unknown field {name:?}")))?;
            let value = value.trim();
            let parsed = match value.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16),
                None => value.parse(),
            }
            .map_err(|e| bad(i, format!("{name}: {value:?} is not a number ({e})")))?;
            if fields[slot].replace(parsed).is_some() {
                return Err(bad(i, format!("{name} appears twice")));
            }
        }
        let get = |slot: usize| {
            fields[slot].ok_or_else(|| PlacementError::Parse {
                line: 0,
                what: format!("missing field {}", NAMES[slot]),
            })
        };
        let size = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        // Formats 1 and 2 predate spreading: their pieces are consecutive.
        let order = match (format, order) {
            (3, None) => {
                return Err(PlacementError::Parse {
                    line: 0,
                    what: "missing field pieces".into(),
                })
            }
            (_, order) => order.unwrap_or(PieceOrder::Consecutive),
        };
        let mut layout = Layout::with_order(
            LayoutSpec {
                version: get(0)?,
                devices: size(get(1)?),
                width: size(get(2)?),
                rounds: size(get(3)?),
                seed: get(4)?,
            },
            order,
        )?;
        for added in grows {
            layout = layout.grown(added)?;
        }
        let stored = get(5)?;
        let derived = layout.digest();
        if stored != derived {
            return Err(PlacementError::DigestMismatch { stored, derived });
        }
        Ok(layout)
    }

    /// Writes the layout durably: a temporary file, fsync, rename, fsync of the folder.
    pub fn save(&self, path: &Path) -> Result<(), PlacementError> {
        let io = |e: std::io::Error| PlacementError::Io {
            path: path.display().to_string(),
            error: e.to_string(),
        };
        let tmp = path.with_extension("tmp");
        {
            use std::io::Write;
            let mut f = std::os::unix::fs::OpenOptionsExt::mode(
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true),
                0o600,
            )
            .open(&tmp)
            .map_err(io)?;
            f.write_all(self.encode().as_bytes()).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, path).map_err(io)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)
                .and_then(|d| d.sync_all())
                .map_err(io)?;
        }
        Ok(())
    }

    /// Reads a layout written by `save`.
    pub fn load(path: &Path) -> Result<Layout, PlacementError> {
        let text = std::fs::read_to_string(path).map_err(|e| PlacementError::Io {
            path: path.display().to_string(),
            error: e.to_string(),
        })?;
        Layout::decode(&text)
    }

    /// A hash of every group's members, in order.
    fn digest(&self) -> u64 {
        let mut h = 0xcbf2_9ce4_8422_2325u64;
        for g in &self.groups {
            for &d in g {
                h = mix(h ^ d as u64);
            }
            h = mix(h ^ u64::MAX);
        }
        h
    }
}

impl Placement<'_> {
    /// The group index.
    pub fn group(&self) -> usize {
        self.group
    }

    /// How far shard 0 is turned from colour 0.
    pub fn rotation(&self) -> usize {
        self.rotation
    }

    /// This placement for an object of `pieces` pieces (copies, shards, or a packed member and
    /// its pointers): from now on `colour`, `device` and `devices` take piece numbers, which
    /// the layout's [`PieceOrder`] spreads over the ring.
    pub fn of_pieces(self, pieces: usize) -> Self {
        debug_assert!((1..=self.layout.width()).contains(&pieces));
        Placement { pieces, ..self }
    }

    /// The shard (offset on the ring from the key's rotation) of piece `piece`: what indexes
    /// a placement of all `width` pieces.
    pub fn slot(&self, piece: usize) -> usize {
        debug_assert!(piece < self.pieces);
        self.layout
            .order
            .shard(piece, self.pieces, self.layout.width())
    }

    /// The colour that holds piece `piece` (< the pieces, `width` unless set by `of_pieces`).
    pub fn colour(&self, piece: usize) -> usize {
        (self.slot(piece) + self.rotation) % self.layout.width()
    }

    /// The device that holds piece `piece`.
    pub fn device(&self, piece: usize) -> usize {
        self.layout.groups[self.group][self.colour(piece)] as usize
    }

    /// The width of the layout (n colours), whatever `of_pieces` said.
    pub fn width(&self) -> usize {
        self.layout.width()
    }

    /// Devices of pieces 0, 1, ..
    pub fn devices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.pieces).map(|i| self.device(i))
    }
}

/// `rounds` seeded matchings over the `class * width` devices numbered from `first`: each
/// round puts every one of them in exactly one group of one device per colour.
fn matchings(
    rng: &mut SplitMix64,
    first: usize,
    class: usize,
    width: usize,
    rounds: usize,
) -> Vec<Vec<u32>> {
    let mut out = vec![Vec::with_capacity(width); rounds * class];
    for round in 0..rounds {
        for colour in 0..width {
            // A seeded permutation of the colour's class decides who meets whom.
            let mut members: Vec<u32> = (0..class)
                .map(|j| (first + j * width + colour) as u32)
                .collect();
            for i in (1..class).rev() {
                let j = (rng.next() % (i as u64 + 1)) as usize;
                members.swap(i, j);
            }
            for (j, d) in members.into_iter().enumerate() {
                out[round * class + j].push(d);
            }
        }
    }
    out
}

/// A stable 64-bit hash of a key: FNV-1a, seeded, then a full-avalanche finish. Never change it:
/// it decides where stored data is.
pub fn key_hash(key: &[u8], seed: u64) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ mix(seed);
    for &b in key {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    mix(h)
}

/// Jump consistent hash: a bucket in 0..buckets; growing `buckets` moves the fewest keys.
pub fn jump_hash(mut key: u64, buckets: usize) -> usize {
    let (mut b, mut j) = (-1i64, 0i64);
    while j < buckets as i64 {
        b = j;
        key = key.wrapping_mul(2_862_933_555_777_941_757).wrapping_add(1);
        j = ((b + 1) as f64 * ((1u64 << 31) as f64 / ((key >> 33) + 1) as f64)) as i64;
    }
    b.max(0) as usize
}

/// The splitmix64 finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix(self.0)
    }
}
