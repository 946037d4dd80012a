//! The model: per key, the set of states the store may show. An acknowledged put or delete
//! makes it one state; an operation whose outcome is unknown (cut by a crash, or answered
//! with an error) adds its state to the set; the first look after the store opens again
//! narrows the set to what the store shows, and from then on that must hold.

use crate::body::{self, Segment};
use crate::plan::KEYS;
use railstore_store::RangeSpec;
use std::collections::{BTreeSet, HashMap};

/// A key's state: absent, or a version.
pub type State = Option<u64>;

/// A version: which key, which bytes.
#[derive(Debug, Clone)]
pub struct Version {
    /// Index into [`KEYS`].
    pub key: usize,
    /// Its body's segments.
    pub segments: Vec<Segment>,
    /// Bytes.
    pub len: usize,
}

/// What the model allows for one key.
#[derive(Debug, Clone)]
pub struct KeyState {
    /// The states the store may show.
    pub states: BTreeSet<State>,
    /// Beyond tolerance only: the object went missing while the store reported damage, so
    /// absence is tolerated from now on (wrong bytes never are).
    pub lost: bool,
    /// The state was uncertain (a write cut by a crash, or answered with an error) and a
    /// restart resolved it.
    pub resolved: bool,
}

/// What a read returned.
#[derive(Debug, Clone)]
pub enum Read {
    /// `NoSuchKey`.
    Absent,
    /// Bytes `range` of an object of `size` bytes.
    Body {
        /// The object's size.
        size: u64,
        /// The range returned, end exclusive.
        range: (u64, u64),
        /// The bytes.
        bytes: Vec<u8>,
    },
    /// `InvalidRange`.
    InvalidRange,
    /// Any other error.
    Error(String),
}

/// The model of the bucket.
#[derive(Debug, Clone)]
pub struct Model {
    versions: HashMap<u64, Version>,
    keys: Vec<KeyState>,
    owner: HashMap<u64, (u64, usize)>,
}

impl Default for Model {
    fn default() -> Self {
        Model {
            versions: HashMap::new(),
            keys: (0..KEYS.len())
                .map(|_| KeyState {
                    states: BTreeSet::from([None]),
                    lost: false,
                    resolved: false,
                })
                .collect(),
            owner: HashMap::new(),
        }
    }
}

fn show(s: State) -> String {
    match s {
        None => "absent".into(),
        Some(v) => format!("v{v}"),
    }
}

fn show_set(s: &BTreeSet<State>) -> String {
    let v: Vec<String> = s.iter().map(|s| show(*s)).collect();
    format!("{{{}}}", v.join(", "))
}

impl Model {
    /// Makes version `vid` known (before the operation that writes it starts).
    pub fn register(&mut self, vid: u64, key: usize, segments: Vec<Segment>) {
        for (i, s) in segments.iter().enumerate() {
            self.owner.insert(s.seed, (vid, i));
        }
        let len = segments.iter().map(|s| s.len).sum();
        self.versions.insert(vid, Version { key, segments, len });
    }

    /// Version `vid`'s bytes.
    pub fn body(&self, vid: u64) -> Vec<u8> {
        body::body(&self.versions[&vid].segments)
    }

    /// Version `vid`'s length.
    pub fn len(&self, vid: u64) -> usize {
        self.versions[&vid].len
    }

    /// What the model allows for `key`.
    pub fn key(&self, key: usize) -> &KeyState {
        &self.keys[key]
    }

    /// An acknowledged write: `key` is `state` from now on.
    pub fn acknowledge(&mut self, key: usize, state: State) {
        self.keys[key] = KeyState {
            states: BTreeSet::from([state]),
            lost: false,
            resolved: false,
        };
    }

    /// A write whose outcome is unknown: `state` is possible too.
    pub fn maybe(&mut self, key: usize, state: State) {
        self.keys[key].states.insert(state);
    }

    /// The store shows `state` for `key` after a restart: only that from now on.
    pub fn narrow(&mut self, key: usize, state: State) {
        debug_assert!(self.keys[key].states.contains(&state));
        let k = &mut self.keys[key];
        if k.states.len() > 1 {
            k.resolved = true;
        }
        k.states = BTreeSet::from([state]);
    }

    /// Beyond tolerance: `key` went missing with damage reported.
    pub fn mark_lost(&mut self, key: usize) {
        self.keys[key].lost = true;
    }

    /// Present in every allowed state.
    pub fn surely_present(&self, key: usize) -> bool {
        let k = &self.keys[key];
        !k.lost && k.states.iter().all(Option::is_some)
    }

    /// Present in some allowed state.
    pub fn maybe_present(&self, key: usize) -> bool {
        self.keys[key].states.iter().any(Option::is_some)
    }

    /// Absent in every allowed state.
    pub fn surely_absent(&self, key: usize) -> bool {
        self.keys[key].states.iter().all(Option::is_none)
    }

    /// The version whose whole body is `bytes`, among the allowed states of `key`.
    pub fn matching(&self, key: usize, bytes: &[u8]) -> Option<u64> {
        self.keys[key]
            .states
            .iter()
            .flatten()
            .copied()
            .find(|v| self.versions[v].len == bytes.len() && self.body(*v) == bytes)
    }

    /// Says where the bytes of a wrong body came from: versions (allowed, older, or of other
    /// keys) and blocks, or unknown bytes.
    pub fn explain(&self, key: usize, bytes: &[u8]) -> String {
        if let Some(v) = self
            .versions
            .iter()
            .filter(|(_, x)| x.key == key && x.len == bytes.len())
            .map(|(v, _)| *v)
            .filter(|v| self.body(*v) == bytes)
            .min()
        {
            return format!(
                "an old version of the key: exactly v{v} ({} bytes), which is not allowed now",
                bytes.len()
            );
        }
        let runs = body::explain(bytes);
        let mut parts = Vec::new();
        for r in runs.iter().take(8) {
            let from = match self.owner.get(&r.seed) {
                Some((v, seg)) => {
                    let k = self.versions[v].key;
                    format!(
                        "v{v} part {seg}{} block {}",
                        if k == key {
                            String::new()
                        } else {
                            format!(" (of key {:?})", KEYS[k])
                        },
                        r.block
                    )
                }
                None if r.seed == 0 => "unknown bytes".into(),
                None => format!("unknown segment {:#x}", r.seed),
            };
            parts.push(format!("[{}..{}) {from}", r.start, r.end));
        }
        if runs.len() > 8 {
            parts.push(format!("… {} runs in all", runs.len()));
        }
        format!(
            "{} bytes that match no version: {}",
            bytes.len(),
            parts.join(", ")
        )
    }

    /// Checks a full read of `key`. `Ok(Some(state))`: the store shows an allowed state.
    /// `Ok(None)`: tolerated without telling the state (an error or a loss, beyond
    /// tolerance). `Err`: a violation, explained.
    pub fn check_read(
        &self,
        key: usize,
        read: &Read,
        beyond: bool,
        damage_reported: bool,
    ) -> Result<Option<State>, String> {
        let k = &self.keys[key];
        let allowed = show_set(&k.states);
        let resolved = self.marks(key);
        match read {
            Read::Absent if k.states.contains(&None) => Ok(Some(None)),
            Read::Absent if beyond && (k.lost || damage_reported) => Ok(None),
            Read::Absent => Err(format!(
                "{:?} is missing: an acknowledged object is lost (allowed {allowed}){resolved}{}",
                KEYS[key],
                if beyond {
                    "; the store reports no damage"
                } else {
                    ""
                }
            )),
            Read::Body { bytes, .. } => match self.matching(key, bytes) {
                Some(v) => Ok(Some(Some(v))),
                None => {
                    let what = if k.states.iter().all(Option::is_none) {
                        "an acknowledged delete is undone"
                    } else {
                        "wrong bytes"
                    };
                    Err(format!(
                        "{:?}: {what}: reads {} (allowed {allowed})",
                        KEYS[key],
                        self.explain(key, bytes)
                    ))
                }
            },
            Read::InvalidRange => Err(format!(
                "{:?}: a whole-object read answered InvalidRange",
                KEYS[key]
            )),
            Read::Error(_) if beyond => Ok(None),
            Read::Error(e) => Err(format!(
                "{:?} cannot be read within tolerance: {e} (allowed {allowed}){resolved}",
                KEYS[key]
            )),
        }
    }

    /// Checks a ranged read of `key` against every allowed state.
    pub fn check_range(
        &self,
        key: usize,
        range: RangeSpec,
        read: &Read,
        beyond: bool,
        damage_reported: bool,
    ) -> Result<(), String> {
        let k = &self.keys[key];
        if let Read::Error(e) = read {
            return if beyond {
                Ok(())
            } else {
                Err(format!(
                    "{:?} range {range:?} cannot be read within tolerance: {e} (allowed {})",
                    KEYS[key],
                    show_set(&k.states)
                ))
            };
        }
        if beyond && (k.lost || damage_reported) && matches!(read, Read::Absent) {
            return Ok(());
        }
        for s in &k.states {
            let ok = match (s, read) {
                (None, Read::Absent) => true,
                (Some(v), Read::InvalidRange) => range.resolve(self.len(*v) as u64).is_err(),
                (
                    Some(v),
                    Read::Body {
                        size,
                        range: got,
                        bytes,
                    },
                ) => {
                    let len = self.len(*v) as u64;
                    match range.resolve(len) {
                        Ok((a, b)) => {
                            *size == len
                                && *got == (a, b)
                                && self.body(*v)[a as usize..b as usize] == bytes[..]
                        }
                        Err(_) => false,
                    }
                }
                _ => false,
            };
            if ok {
                return Ok(());
            }
        }
        let got = match read {
            Read::Absent => "NoSuchKey".to_string(),
            Read::InvalidRange => "InvalidRange".to_string(),
            Read::Body { size, range, .. } => {
                format!(
                    "bytes {range:?} of an object of {size} bytes, not those of any allowed state"
                )
            }
            Read::Error(e) => e.clone(),
        };
        Err(format!(
            "{:?} range {range:?}: {got} (allowed {})",
            KEYS[key],
            show_set(&k.states)
        ))
    }

    /// Checks a listing of `prefix` (rolled up at `/` with `delimiter`): keys and common
    /// prefixes in ascending order, no repeats; every entry possible, every surely present key
    /// (or its common prefix) there. Keys in `unsettled` (written while the listing ran) may
    /// be either way.
    pub fn check_listing(
        &self,
        prefix: &str,
        delimiter: bool,
        listed: &[String],
        unsettled: &BTreeSet<usize>,
    ) -> Result<(), String> {
        if listed.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "listing of {prefix:?} is not in strictly ascending order: {listed:?}"
            ));
        }
        let roll = |k: &str| -> String {
            if delimiter {
                if let Some(i) = k[prefix.len()..].find('/') {
                    return k[..prefix.len() + i + 1].to_string();
                }
            }
            k.to_string()
        };
        let mut required = BTreeSet::new();
        let mut possible = BTreeSet::new();
        for (i, k) in KEYS.iter().enumerate() {
            if !k.starts_with(prefix) {
                continue;
            }
            let entry = roll(k);
            if unsettled.contains(&i) || self.maybe_present(i) {
                possible.insert(entry.clone());
            }
            if !unsettled.contains(&i) && self.surely_present(i) {
                required.insert(entry);
            }
        }
        let listed_set: BTreeSet<String> = listed.iter().cloned().collect();
        let extra: Vec<&String> = listed_set.difference(&possible).collect();
        let missing: Vec<&String> = required.difference(&listed_set).collect();
        if !extra.is_empty() || !missing.is_empty() {
            let states: Vec<String> = KEYS
                .iter()
                .enumerate()
                .filter(|(_, k)| k.starts_with(prefix))
                .map(|(i, k)| format!("{k}={}", show_set(&self.keys[i].states)))
                .collect();
            return Err(format!(
                "listing of {prefix:?}{}: listed {listed:?}; should not be there {extra:?}; \
                 missing {missing:?} (model: {})",
                if delimiter { " with delimiter /" } else { "" },
                states.join(" ")
            ));
        }
        Ok(())
    }

    /// What a crash left uncertain about `key`, as a suffix for messages: its state was
    /// resolved by a restart, or an overwrite (or a create or delete) of it was cut by a crash
    /// and is not resolved yet.
    pub fn marks(&self, key: usize) -> &'static str {
        let k = &self.keys[key];
        if k.resolved {
            "; its state was resolved by a restart after a crash cut its write"
        } else if k.states.len() > 1 && !k.states.contains(&None) {
            "; an overwrite of it was cut by a crash"
        } else if k.states.len() > 1 {
            "; a write or delete of it was cut by a crash"
        } else {
            ""
        }
    }

    /// The allowed states of `key`, as text.
    pub fn show(&self, key: usize) -> String {
        show_set(&self.keys[key].states)
    }
}
