//! Block volumes in the simulator: unaligned, overlapping writes, zeroing and flushes on two
//! volumes (4 KiB objects, which the hybrid policy replicates, and 16 KiB ones, which it packs),
//! run beside each step's S3 operations, and a model of what each object of a volume may hold.
//!
//! The guarantee checked (docs/volumes.md): a volume object is stored whole or not at all, a
//! write acknowledged before an acknowledged flush survives anything within the tolerance, and
//! nothing else appears. So each object's model is a set of possible contents: `current` (what
//! a read may show now) and `since_flush` (what a crash may leave: every content the object
//! may have had since the last acknowledged flush). An acknowledged write or zeroing maps
//! `current` through itself; one that failed or was cut off by a crash adds the mapped
//! contents to the old ones. A check narrows both to what it read.

use railstore_store::Store;
use railstore_volume::{VolumeSpec, Volumes};
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeSet;

/// The simulated volumes: (name, object size, objects).
pub const VOLUMES: [(&str, u64, u64); 2] = [("v4k", 4096, 6), ("v16k", 16384, 3)];

/// More possible contents than this for one object and it is no longer checked until a read
/// narrows it (a run of failed writes could otherwise grow the set without bound).
const CONTENTS_MAX: usize = 64;

/// One volume operation (they run in order, beside the step's S3 operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolOp {
    /// Writes `len` bytes at `offset` of volume `vol`, made from `fill`.
    Write {
        vol: usize,
        offset: u64,
        len: u64,
        fill: u64,
    },
    /// Zeroes `len` bytes at `offset`.
    Zero { vol: usize, offset: u64, len: u64 },
    /// Flushes (every volume: a flush is the store's).
    Flush { vol: usize },
}

/// Draws a step's volume operations.
pub fn draw(rng: &mut ChaCha8Rng) -> Vec<VolOp> {
    let n = rng.gen_range(0..=4);
    (0..n)
        .map(|_| {
            let vol = rng.gen_range(0..VOLUMES.len());
            let size = size_of(vol);
            let offset = rng.gen_range(0..size);
            let len = rng.gen_range(1..=(size - offset).min(20_000));
            match rng.gen_range(0..10) {
                0..=5 => VolOp::Write {
                    vol,
                    offset,
                    len,
                    fill: rng.gen(),
                },
                6 | 7 => VolOp::Zero { vol, offset, len },
                _ => VolOp::Flush { vol },
            }
        })
        .collect()
}

fn size_of(vol: usize) -> u64 {
    VOLUMES[vol].1 * VOLUMES[vol].2
}

/// The bytes a write writes.
pub fn data(len: u64, fill: u64) -> Vec<u8> {
    let mut x = fill | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Creates the volumes on a new store.
pub async fn create(store: &Store) -> Result<(), String> {
    let volumes = Volumes::open(store.clone())
        .await
        .map_err(|e| e.to_string())?;
    for (name, object_bytes, objects) in VOLUMES {
        let spec = VolumeSpec {
            object_bytes,
            ..VolumeSpec::new(name, object_bytes * objects)
        };
        volumes.create(spec).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// Runs `ops` in order; `done` gets each one's success as it finishes.
pub async fn run(store: Store, ops: Vec<VolOp>, done: impl Fn(bool)) {
    let volumes = match Volumes::open(store).await {
        Ok(v) => v,
        Err(_) => return,
    };
    for op in ops {
        let ok = match op {
            VolOp::Write {
                vol,
                offset,
                len,
                fill,
            } => match volumes.get(VOLUMES[vol].0) {
                Ok(v) => v.write(offset, &data(len, fill), false).await.is_ok(),
                Err(_) => false,
            },
            VolOp::Zero { vol, offset, len } => match volumes.get(VOLUMES[vol].0) {
                Ok(v) => v.zero(offset, len, false).await.is_ok(),
                Err(_) => false,
            },
            VolOp::Flush { vol } => match volumes.get(VOLUMES[vol].0) {
                Ok(v) => v.flush().await.is_ok(),
                Err(_) => false,
            },
        };
        done(ok);
    }
}

/// Reads every volume whole: per volume, its bytes or the error.
pub async fn read_all(store: Store) -> Vec<Result<Vec<u8>, String>> {
    let volumes = match Volumes::open(store).await {
        Ok(v) => v,
        Err(e) => return VOLUMES.iter().map(|_| Err(e.to_string())).collect(),
    };
    let mut out = Vec::new();
    for (vol, (name, ..)) in VOLUMES.iter().enumerate() {
        out.push(match volumes.get(name) {
            Ok(v) => v.read(0, size_of(vol)).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        });
    }
    out
}

/// Narrows an object's model to what a check read.
fn narrow_to(o: &mut Object, seen: &[u8], after_crash: bool) {
    o.current = [seen.to_vec()].into();
    if after_crash {
        o.since_flush = o.current.clone();
    } else {
        o.since_flush.insert(seen.to_vec());
    }
}

/// What one object may hold.
#[derive(Debug, Clone)]
struct Object {
    current: BTreeSet<Vec<u8>>,
    since_flush: BTreeSet<Vec<u8>>,
}

/// The model of every volume's objects.
#[derive(Debug, Clone)]
pub struct VolumeModel {
    /// [volume][object].
    objects: Vec<Vec<Object>>,
}

impl Default for VolumeModel {
    fn default() -> Self {
        VolumeModel {
            objects: VOLUMES
                .iter()
                .map(|&(_, object_bytes, n)| {
                    let zero: BTreeSet<Vec<u8>> = [vec![0u8; object_bytes as usize]].into();
                    (0..n)
                        .map(|_| Object {
                            current: zero.clone(),
                            since_flush: zero.clone(),
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

impl VolumeModel {
    /// Applies one operation: `acknowledged` when it returned success, else it may or may not
    /// have been applied.
    pub fn apply(&mut self, op: VolOp, acknowledged: bool) {
        let (vol, offset, bytes) = match op {
            VolOp::Flush { .. } => {
                if acknowledged {
                    for objects in &mut self.objects {
                        for o in objects {
                            o.since_flush = o.current.clone();
                        }
                    }
                }
                return;
            }
            VolOp::Write {
                vol,
                offset,
                len,
                fill,
            } => (vol, offset, data(len, fill)),
            VolOp::Zero { vol, offset, len } => (vol, offset, vec![0; len as usize]),
        };
        let object_bytes = VOLUMES[vol].1;
        let end = offset + bytes.len() as u64;
        let first = offset / object_bytes;
        let last = (end - 1) / object_bytes;
        for index in first..=last {
            let start = index * object_bytes;
            let lo = offset.max(start);
            let hi = end.min(start + object_bytes);
            let part = &bytes[(lo - offset) as usize..(hi - offset) as usize];
            let o = &mut self.objects[vol][index as usize];
            let mapped: BTreeSet<Vec<u8>> = o
                .current
                .iter()
                .map(|c| {
                    let mut c = c.clone();
                    c[(lo - start) as usize..(hi - start) as usize].copy_from_slice(part);
                    c
                })
                .collect();
            if acknowledged {
                o.current = mapped;
            } else {
                o.current.extend(mapped);
            }
            o.since_flush.extend(o.current.iter().cloned());
        }
    }

    /// Compares what a read of volume `vol` showed with the model and narrows the model to it.
    /// `after_crash`: the store restarted since the last check without a clean shutdown, so
    /// an object may be anything it held since the last flush. Returns the mismatches.
    pub fn check(&mut self, vol: usize, bytes: &[u8], after_crash: bool) -> Vec<String> {
        let object_bytes = VOLUMES[vol].1 as usize;
        let mut problems = Vec::new();
        for (i, o) in self.objects[vol].iter_mut().enumerate() {
            let seen = bytes[i * object_bytes..(i + 1) * object_bytes].to_vec();
            let allowed = if after_crash {
                &o.since_flush
            } else {
                &o.current
            };
            if allowed.len() <= CONTENTS_MAX && !allowed.contains(&seen) {
                let zeros = seen.iter().filter(|b| **b == 0).count();
                if after_crash && zeros == object_bytes && allowed.len() > 1 {
                    // Gone, with an overwrite in flight at the crash: the symptom of SIM-12
                    // (known.rs), in the words its classifier knows.
                    problems.push(format!(
                        "volume {} object {i}: an acknowledged object is lost (it reads as \
                         zeros after a restart): an overwrite of it was cut by a crash",
                        VOLUMES[vol].0
                    ));
                    narrow_to(o, &seen, after_crash);
                    continue;
                }
                problems.push(format!(
                    "volume {} object {i}: {} ({zeros} zero bytes of {object_bytes}) matches none \
                     of the {} contents it may have{}",
                    VOLUMES[vol].0,
                    if after_crash {
                        "after a restart"
                    } else {
                        "read"
                    },
                    allowed.len(),
                    if after_crash {
                        " since its last flush"
                    } else {
                        ""
                    }
                ));
            }
            narrow_to(o, &seen, after_crash);
        }
        problems
    }

    /// Beyond the tolerance anything may have been lost: the model takes what it read.
    pub fn reset(&mut self, vol: usize, bytes: &[u8]) {
        let object_bytes = VOLUMES[vol].1 as usize;
        for (i, o) in self.objects[vol].iter_mut().enumerate() {
            let seen = bytes[i * object_bytes..(i + 1) * object_bytes].to_vec();
            o.current = [seen].into();
            o.since_flush = o.current.clone();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_allows_exactly_what_the_guarantee_allows() {
        let mut m = VolumeModel::default();
        let w = VolOp::Write {
            vol: 0,
            offset: 4000,
            len: 200,
            fill: 9,
        };
        m.apply(w, true);
        let mut image = vec![0u8; size_of(0) as usize];
        image[4000..4200].copy_from_slice(&data(200, 9));
        assert!(m.check(0, &image, false).is_empty());
        // Not flushed: a crash may take it back, object by object.
        let mut lost = image.clone();
        lost[4096..4200].fill(0);
        assert!(m.clone().check(0, &lost, true).is_empty());
        // Without a crash it may not.
        assert_eq!(m.clone().check(0, &lost, false).len(), 1);
        // Flushed, it stays.
        m.apply(VolOp::Flush { vol: 0 }, true);
        assert_eq!(m.clone().check(0, &lost, true).len(), 1);
        // Bytes never written never appear; a failed write may or may not have happened.
        let mut garbage = image.clone();
        garbage[10] = 1;
        assert_eq!(m.clone().check(0, &garbage, true).len(), 1);
        m.apply(
            VolOp::Zero {
                vol: 0,
                offset: 4100,
                len: 10,
            },
            false,
        );
        let mut zeroed = image.clone();
        zeroed[4100..4110].fill(0);
        assert!(m.clone().check(0, &zeroed, false).is_empty());
        assert!(m.clone().check(0, &image, false).is_empty());
    }
}
