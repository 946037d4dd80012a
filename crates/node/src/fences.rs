//! What a node admits: for its array, the newest layout epoch and, per shard, the highest
//! fencing token any writer has presented. Both only rise (tokens are etcd revisions, which
//! rise across the cluster whatever the epoch); a mutation presenting less than either is
//! refused ([`DeviceError::Fenced`]) and changes nothing.
//!
//! Raising a value waits for every admitted mutation under the old value to finish (each holds
//! a read guard until its device operation returns; a raise takes the write guard), so once a
//! newer writer has been admitted no older writer's mutation is in flight or can start: a
//! superseded owner that wakes up cannot overwrite its successor's data. With a file, the
//! raised values are made durable before the newer writer is admitted, so a node restart does
//! not readmit an old writer.
//!
//! The node takes a writer's word for which shard it writes: it does not know how keys map to
//! shards. A writer must present, for each key, the fence of the shard that key belongs to (one
//! `RemoteDevice::with_fence` handle per owned shard); a stale owner presenting another shard's
//! valid fence would not be stopped here.

use railstore_device::{DeviceError, Fence};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio::sync::{OwnedRwLockReadGuard, RwLock};

/// Shards a node keeps fences for: a bound on its memory and on its fence file, far above
/// any cluster's shard count.
pub const SHARDS_MAX: u32 = 1 << 16;

/// The node's fencing state.
pub struct FenceBook {
    array_id: u64,
    epoch: Arc<RwLock<u64>>,
    shards: Mutex<HashMap<u32, Arc<RwLock<u64>>>>,
    /// The raised values as last made durable, and the file they live in. Held across the
    /// write so that two raises reach the file in order.
    durable: tokio::sync::Mutex<Durable>,
}

#[derive(Default, Clone)]
struct Durable {
    path: Option<PathBuf>,
    epoch: u64,
    tokens: BTreeMap<u32, u64>,
}

/// A mutation's admission: held until the mutation's device operation has returned.
pub struct Admitted {
    _epoch: OwnedRwLockReadGuard<u64>,
    _shard: OwnedRwLockReadGuard<u64>,
}

impl FenceBook {
    /// A book for `array_id` kept in memory only (a node restart forgets it).
    pub fn in_memory(array_id: u64) -> Self {
        Self::with(array_id, Durable::default())
    }

    /// A book for `array_id` kept in `path`: loaded if the file exists, rewritten (atomically,
    /// durably) whenever a value rises. A file of another array is refused.
    pub fn open(array_id: u64, path: &Path) -> Result<Self, DeviceError> {
        let mut durable = Durable {
            path: Some(path.to_path_buf()),
            ..Durable::default()
        };
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let (file_array, epoch, tokens) = parse(&text).ok_or_else(|| {
                    DeviceError::Config(format!("{}: not a fence file", path.display()))
                })?;
                if file_array != array_id {
                    return Err(DeviceError::Config(format!(
                        "{}: fences of array {file_array:#x}, not {array_id:#x}",
                        path.display()
                    )));
                }
                durable.epoch = epoch;
                durable.tokens = tokens;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(DeviceError::io("reading the fence file", e)),
        }
        Ok(Self::with(array_id, durable))
    }

    fn with(array_id: u64, durable: Durable) -> Self {
        let shards = durable
            .tokens
            .iter()
            .map(|(s, t)| (*s, Arc::new(RwLock::new(*t))))
            .collect();
        FenceBook {
            array_id,
            epoch: Arc::new(RwLock::new(durable.epoch)),
            shards: Mutex::new(shards),
            durable: tokio::sync::Mutex::new(durable),
        }
    }

    /// The array this node's devices belong to.
    pub fn array_id(&self) -> u64 {
        self.array_id
    }

    /// What the node holds for `shard`: its array, the newest epoch, the shard's highest token.
    pub async fn held(&self, shard: u32) -> Fence {
        Fence {
            array_id: self.array_id,
            layout_epoch: *self.epoch.read().await,
            shard,
            token: *self.shard(shard).read().await,
        }
    }

    /// Admits a mutation from `sent`, raising the held values if it is newer; refuses it if
    /// another array's, or older than what is held.
    pub async fn admit(&self, sent: Fence) -> Result<Admitted, DeviceError> {
        if sent.shard >= SHARDS_MAX {
            return Err(DeviceError::Config(format!(
                "shard {} out of range (a node keeps fences for shards below {SHARDS_MAX})",
                sent.shard
            )));
        }
        let shard = self.shard(sent.shard);
        loop {
            let epoch = self.epoch.clone().read_owned().await;
            let token = shard.clone().read_owned().await;
            let held = Fence {
                array_id: self.array_id,
                layout_epoch: *epoch,
                shard: sent.shard,
                token: *token,
            };
            if sent.array_id != self.array_id
                || sent.layout_epoch < held.layout_epoch
                || sent.token < held.token
            {
                return Err(DeviceError::Fenced { sent, held });
            }
            if sent.layout_epoch == held.layout_epoch && sent.token == held.token {
                return Ok(Admitted {
                    _epoch: epoch,
                    _shard: token,
                });
            }
            // Newer than what is held: raise, then look again (another raise may have passed
            // this one meanwhile).
            drop((epoch, token));
            if sent.layout_epoch > held.layout_epoch {
                let mut e = self.epoch.write().await;
                if *e < sent.layout_epoch {
                    self.persist(|d| d.epoch = sent.layout_epoch).await?;
                    *e = sent.layout_epoch;
                }
            }
            let mut t = shard.write().await;
            if *t < sent.token {
                self.persist(|d| {
                    d.tokens.insert(sent.shard, sent.token);
                })
                .await?;
                *t = sent.token;
            }
        }
    }

    fn shard(&self, shard: u32) -> Arc<RwLock<u64>> {
        self.shards
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(shard)
            .or_default()
            .clone()
    }

    /// Applies `raise` to the durable values and, with a file, writes them before returning.
    async fn persist(&self, raise: impl FnOnce(&mut Durable)) -> Result<(), DeviceError> {
        let mut durable = self.durable.lock().await;
        let mut next = durable.clone();
        raise(&mut next);
        if let Some(path) = next.path.clone() {
            let text = format(self.array_id, &next);
            tokio::task::spawn_blocking(move || write_durably(&path, &text))
                .await
                .map_err(|_| DeviceError::Stopped {
                    reason: "the fence file write did not run",
                })?
                .map_err(|e| DeviceError::io("writing the fence file", e))?;
        }
        *durable = next;
        Ok(())
    }
}

fn format(array_id: u64, d: &Durable) -> String {
    let mut s = format!("array {array_id}\nepoch {}\n", d.epoch);
    for (shard, token) in &d.tokens {
        s.push_str(&format!("shard {shard} {token}\n"));
    }
    s
}

fn parse(text: &str) -> Option<(u64, u64, BTreeMap<u32, u64>)> {
    let mut lines = text.lines();
    let array = lines.next()?.strip_prefix("array ")?.parse().ok()?;
    let epoch = lines.next()?.strip_prefix("epoch ")?.parse().ok()?;
    let mut tokens = BTreeMap::new();
    for line in lines {
        let (shard, token) = line.strip_prefix("shard ")?.split_once(' ')?;
        tokens.insert(shard.parse().ok()?, token.parse().ok()?);
    }
    Some((array, epoch, tokens))
}

/// Replaces `path` with `text` so that a crash leaves the old file or the new one, never a mix.
fn write_durably(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)?;
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(epoch: u64, shard: u32, token: u64) -> Fence {
        Fence {
            array_id: 5,
            layout_epoch: epoch,
            shard,
            token,
        }
    }

    #[tokio::test]
    async fn older_writers_are_refused_and_shards_are_apart() {
        let book = FenceBook::in_memory(5);
        drop(book.admit(fence(1, 0, 10)).await.unwrap());
        drop(book.admit(fence(1, 0, 10)).await.unwrap());
        let refused = book.admit(fence(1, 0, 9)).await.err().unwrap();
        assert!(
            matches!(refused, DeviceError::Fenced { held, .. } if held.token == 10),
            "{refused}"
        );
        // Another shard's tokens are its own.
        drop(book.admit(fence(1, 1, 3)).await.unwrap());
        assert!(matches!(
            book.admit(fence(1, SHARDS_MAX, 1)).await,
            Err(DeviceError::Config(_))
        ));
        // A newer epoch supersedes every older epoch's writer, whatever its token.
        drop(book.admit(fence(2, 1, 3)).await.unwrap());
        assert!(book.admit(fence(1, 0, 11)).await.is_err());
        // Another array's writer is refused.
        let other = Fence {
            array_id: 6,
            ..fence(2, 0, 99)
        };
        assert!(book.admit(other).await.is_err());
        assert_eq!(book.held(0).await.token, 10);
    }

    #[tokio::test]
    async fn a_raise_waits_for_the_older_writers_in_flight() {
        let book = Arc::new(FenceBook::in_memory(5));
        let old = book.admit(fence(0, 0, 1)).await.unwrap();
        let raiser = {
            let book = book.clone();
            tokio::spawn(async move { book.admit(fence(0, 0, 2)).await.map(drop) })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!raiser.is_finished(), "admitted while an older write ran");
        drop(old);
        raiser.await.unwrap().unwrap();
        assert!(book.admit(fence(0, 0, 1)).await.is_err());
    }

    #[tokio::test]
    async fn raised_values_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fences");
        {
            let book = FenceBook::open(5, &path).unwrap();
            drop(book.admit(fence(3, 4, 17)).await.unwrap());
        }
        let book = FenceBook::open(5, &path).unwrap();
        assert_eq!(book.held(4).await, fence(3, 4, 17));
        assert!(book.admit(fence(3, 4, 16)).await.is_err());
        assert!(FenceBook::open(6, &path).is_err(), "another array's file");
        std::fs::write(&path, "junk").unwrap();
        assert!(FenceBook::open(5, &path).is_err(), "a damaged file");
    }
}
