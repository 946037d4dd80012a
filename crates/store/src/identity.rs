//! Durable identity and state of an array's devices.
//!
//! The data folder holds `array.json`: the array's id, its *epoch* (bumped at every open) and,
//! per device, its id and state (`ok`, `failed`, `rebuilding`). Each device holds an identity
//! record (rails' reserved key [`IDENTITY_KEY`]): array id, position, device id and the epoch
//! of the last open it took part in. At open every device is checked against the state:
//!
//! - another array's device, or a device at the wrong position: refused, with the reason;
//! - missing, empty, failed or being rebuilt, an image of a device replaced since, or an epoch
//!   older than the array's (it was away while the array ran, so it missed writes): *not
//!   current*. Up to the configuration's tolerance the array starts degraded with those devices
//!   failed (never read, never written) until `railstore rebuild` re-admits them; beyond it the
//!   open is refused.
//!
//! Order of writes: current devices are stamped with the new epoch (and synced) before the
//! state file names it, so a crash between the two leaves devices one epoch ahead, which counts
//! as current. A device that fails while the array runs is recorded as failed in the state file
//! before the operation that found the failure returns.

use crate::error::{Result, StoreError};
use railstore_device::{Device, ReadRange, StoreMode};
use railstore_rails::journal::IDENTITY_KEY;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The array state file in the data folder.
pub(crate) const STATE_FILE: &str = "array.json";
const FORMAT: u32 = 1;

/// What the array knows of one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceHealth {
    /// In service.
    Ok,
    /// Out of service until rebuilt.
    Failed,
    /// Being rebuilt: out of service until the rebuild finishes.
    Rebuilding,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct DeviceEntry {
    id: String,
    health: DeviceHealth,
    /// Why it is not in service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    /// Where it lives when an operator replaced it onto another path (`railstore device
    /// replace N --path P`): this wins over the configuration's path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArrayState {
    format: u32,
    array_id: String,
    epoch: u64,
    devices: Vec<DeviceEntry>,
}

impl ArrayState {
    /// The record device `d` holds at `epoch`.
    fn identity_of(&self, d: usize, epoch: u64) -> Identity {
        Identity {
            format: FORMAT,
            array_id: self.array_id.clone(),
            index: d,
            device_id: self.devices[d].id.clone(),
            epoch,
        }
    }
}

/// The record each device holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Identity {
    format: u32,
    array_id: String,
    index: usize,
    device_id: String,
    epoch: u64,
}

fn new_id() -> String {
    hex::encode(crate::ids::random::<[u8; 16]>())
}

/// Writes `bytes` to `path` atomically and durably: a temporary file, fsync, rename, fsync of
/// the folder.
pub(crate) fn write_durably(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let tmp = path.with_extension("tmp");
    let io = |what: &str, e| StoreError::io(format!("{what} {}", tmp.display()), e);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(|e| io("creating", e))?;
    f.write_all(bytes).map_err(|e| io("writing", e))?;
    f.sync_all().map_err(|e| io("syncing", e))?;
    drop(f);
    std::fs::rename(&tmp, path)
        .map_err(|e| StoreError::io(format!("renaming to {}", path.display()), e))?;
    sync_dir(dir)
}

/// Makes a rename or unlink in `dir` durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| StoreError::io(format!("syncing folder {}", dir.display()), e))
}

/// The paths the array state in `data_dir` records for devices replaced onto another path
/// (index = device; `None`: the configuration's). Empty when there is no state yet.
pub(crate) fn recorded_paths(data_dir: &Path) -> Result<Vec<Option<PathBuf>>> {
    let path = data_dir.join(STATE_FILE);
    match std::fs::read(&path) {
        Ok(b) => {
            let st: ArrayState = serde_json::from_slice(&b).map_err(|e| {
                StoreError::Corrupt(format!("the array state {}: {e}", path.display()))
            })?;
            Ok(st.devices.into_iter().map(|e| e.path).collect())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(StoreError::io(format!("reading {}", path.display()), e)),
    }
}

/// Why a device is not current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCurrent {
    /// Its folder or file was not there.
    Missing,
    /// It holds no identity record: empty, or never part of this array.
    Empty,
    /// The state file says it is failed or being rebuilt.
    OutOfService(DeviceHealth, Option<String>),
    /// An image of a device that was replaced since.
    Replaced,
    /// It was away while the array ran (its epoch is older): it missed writes.
    Stale {
        /// The last epoch it took part in.
        epoch: u64,
        /// The array's.
        array_epoch: u64,
    },
    /// Its identity could not be read.
    Unreadable(String),
    /// It is being rebuilt by this open.
    Replacing,
}

impl std::fmt::Display for NotCurrent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotCurrent::Missing => write!(f, "missing"),
            NotCurrent::Empty => write!(f, "empty (no identity record of this array)"),
            NotCurrent::OutOfService(h, r) => {
                write!(
                    f,
                    "{}",
                    if *h == DeviceHealth::Failed {
                        "failed"
                    } else {
                        "an unfinished rebuild"
                    }
                )?;
                match r {
                    Some(r) => write!(f, " ({r})"),
                    None => Ok(()),
                }
            }
            NotCurrent::Replaced => write!(f, "an old image of a device replaced since"),
            NotCurrent::Stale { epoch, array_epoch } => write!(
                f,
                "stale: last in service at epoch {epoch}, the array is at {array_epoch}, so it \
                 missed writes"
            ),
            NotCurrent::Unreadable(e) => write!(f, "its identity cannot be read: {e}"),
            NotCurrent::Replacing => write!(f, "being rebuilt"),
        }
    }
}

/// The array's state, kept in its data folder; shared with the failure hook.
pub(crate) struct ArrayIdentity {
    path: PathBuf,
    state: Mutex<ArrayState>,
}

/// The outcome of checking the devices at open.
pub(crate) struct Admission {
    pub identity: Arc<ArrayIdentity>,
    /// Devices out of service, with why.
    pub not_current: Vec<(usize, NotCurrent)>,
}

/// An identity record's bytes: its JSON, then the CRC32C of the JSON (little-endian), so a
/// flipped bit makes the device unreadable (out of service) instead of foreign or misplaced.
fn encode_identity(id: &Identity) -> Vec<u8> {
    let mut bytes = serde_json::to_vec(id).expect("an identity serialises");
    let crc = crc32c::crc32c(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Decodes [`encode_identity`]'s bytes. A record of the first release, bare JSON with no
/// checksum, is still accepted (the open stamps it anew, with one); JSON followed by a checksum
/// never parses as bare JSON, so a damaged new record is not taken for an old one.
fn decode_identity(bytes: &[u8]) -> std::result::Result<Identity, String> {
    let Some(json_len) = bytes.len().checked_sub(4) else {
        return Err("an identity record shorter than its checksum".into());
    };
    let (json, crc) = bytes.split_at(json_len);
    if crc32c::crc32c(json).to_le_bytes() != crc {
        return serde_json::from_slice(bytes)
            .map_err(|_| "an identity record whose checksum does not match".into());
    }
    serde_json::from_slice(json).map_err(|e| format!("a malformed identity record: {e}"))
}

async fn read_identity(dev: &dyn Device) -> std::result::Result<Option<Identity>, String> {
    match dev.retrieve(&IDENTITY_KEY, ReadRange::ALL).await {
        Ok(r) => decode_identity(&r.value).map(Some),
        Err(railstore_device::DeviceError::KeyNotFound { .. }) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

async fn stamp(dev: &dyn Device, id: &Identity) -> Result<()> {
    let bytes = encode_identity(id);
    let what = "writing a device's identity";
    dev.store(&IDENTITY_KEY, &bytes, StoreMode::Upsert)
        .await
        .map_err(|source| StoreError::Device { what, source })?;
    dev.sync()
        .await
        .map_err(|source| StoreError::Device { what, source })
}

impl ArrayIdentity {
    fn save(&self, st: &ArrayState) -> Result<()> {
        write_durably(
            &self.path,
            &serde_json::to_vec_pretty(st).expect("the state serialises"),
        )
    }

    /// The array's id.
    pub fn array_id(&self) -> String {
        self.state.lock().unwrap().array_id.clone()
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.state.lock().unwrap().epoch
    }

    /// Device `d`'s recorded health, and why it is out of service.
    pub fn health(&self, d: usize) -> (DeviceHealth, Option<String>) {
        let st = self.state.lock().unwrap();
        match st.devices.get(d) {
            Some(e) => (e.health, e.reason.clone()),
            // Drained out of the array while it still runs (`grow.rs`).
            None => (DeviceHealth::Failed, Some("removed from the array".into())),
        }
    }

    /// Records device `d` as `health` (durably) unless it is already.
    pub fn set_health(&self, d: usize, health: DeviceHealth, reason: Option<String>) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        if st.devices.get(d).is_none_or(|e| e.health == health) {
            // The same already, or a device drained out of the array since.
            return Ok(());
        }
        st.devices[d].health = health;
        st.devices[d].reason = reason;
        self.save(&st)
    }

    /// Device `d` was rebuilt onto `dev`: it gets a new id (so an image of the old one is
    /// never taken for it), is stamped with the current epoch and is back in service.
    pub async fn readmit(&self, d: usize, dev: &dyn Device) -> Result<()> {
        let id = new_id();
        let rec = {
            let st = self.state.lock().unwrap();
            Identity {
                device_id: id.clone(),
                ..st.identity_of(d, st.epoch)
            }
        };
        stamp(dev, &rec).await?;
        let mut st = self.state.lock().unwrap();
        st.devices[d] = DeviceEntry {
            id,
            health: DeviceHealth::Ok,
            reason: None,
            path: st.devices[d].path.clone(),
        };
        self.save(&st)
    }

    /// Adds `devices` (newly made, empty) to the array described in `data_dir` as its devices
    /// `first`, `first + 1`, ..., at `paths` when given (else the configuration's): each is
    /// stamped with the current epoch, then the state records them, durably. A grow
    /// (`grow.rs`) does this before its layout names them; until then the next open drops them
    /// again, and so does this (entries from `first` on are a grow a crash cut short).
    pub(crate) async fn add_devices(
        data_dir: &Path,
        first: usize,
        devices: &[Arc<dyn Device>],
        paths: &[Option<PathBuf>],
    ) -> Result<()> {
        let path = data_dir.join(STATE_FILE);
        let bytes = std::fs::read(&path)
            .map_err(|e| StoreError::io(format!("reading {}", path.display()), e))?;
        let mut st: ArrayState = serde_json::from_slice(&bytes)
            .map_err(|e| StoreError::Corrupt(format!("the array state {}: {e}", path.display())))?;
        st.devices.truncate(first);
        for (dev, p) in devices.iter().zip(paths) {
            st.devices.push(DeviceEntry {
                id: new_id(),
                health: DeviceHealth::Ok,
                reason: None,
                path: p.clone(),
            });
            let d = st.devices.len() - 1;
            stamp(dev.as_ref(), &st.identity_of(d, st.epoch)).await?;
        }
        write_durably(
            &path,
            &serde_json::to_vec_pretty(&st).expect("the state serialises"),
        )
    }

    /// [`ArrayIdentity::add_devices`] for the running array (an online grow): the devices are
    /// stamped with the current epoch, then recorded here and in the state file, durably.
    pub(crate) async fn join_devices(
        &self,
        first: usize,
        devices: &[Arc<dyn Device>],
        paths: &[Option<PathBuf>],
    ) -> Result<()> {
        let grown = {
            let mut st = self.state.lock().unwrap().clone();
            st.devices.truncate(first);
            st.devices.extend(paths.iter().map(|p| DeviceEntry {
                id: new_id(),
                health: DeviceHealth::Ok,
                reason: None,
                path: p.clone(),
            }));
            st
        };
        for (j, dev) in devices.iter().enumerate() {
            stamp(dev.as_ref(), &grown.identity_of(first + j, grown.epoch)).await?;
        }
        let mut st = self.state.lock().unwrap();
        st.devices.truncate(first);
        st.devices.extend_from_slice(&grown.devices[first..]);
        self.save(&st)
    }

    /// Forgets every device from `n` on (a drain removed them from the layout), durably.
    pub(crate) fn keep_devices(&self, n: usize) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        st.devices.truncate(n);
        self.save(&st)
    }

    /// Records that device `d` now lives at `path` (a replace onto another path), durably.
    pub fn set_path(&self, d: usize, path: &Path) -> Result<()> {
        let mut st = self.state.lock().unwrap();
        st.devices[d].path = Some(path.to_path_buf());
        self.save(&st)
    }

    /// Checks `devices` (opened in array order; `existed[d]` says whether device d's folder or
    /// file was there before opening) against the state in `data_dir`, refuses foreign or
    /// misplaced devices, and, when at most `tolerance` devices are not current, starts a new
    /// epoch: the current devices are stamped with it and the others recorded as failed.
    /// `replacing` is a device this open rebuilds. A data folder without a state file is a new
    /// array (or one made before identities existed): every device is stamped.
    pub async fn admit(
        data_dir: &Path,
        devices: &[Arc<dyn Device>],
        existed: &[bool],
        replacing: Option<usize>,
        tolerance: usize,
    ) -> Result<Admission> {
        let path = data_dir.join(STATE_FILE);
        let n = devices.len();
        let saved: Option<ArrayState> = match std::fs::read(&path) {
            Ok(b) => Some(serde_json::from_slice(&b).map_err(|e| {
                StoreError::Corrupt(format!("the array state {}: {e}", path.display()))
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(StoreError::io(format!("reading {}", path.display()), e)),
        };
        let mut st = match saved {
            Some(st) => st,
            None => {
                let st = ArrayState {
                    format: FORMAT,
                    array_id: new_id(),
                    epoch: 0,
                    devices: (0..n)
                        .map(|_| DeviceEntry {
                            id: new_id(),
                            health: DeviceHealth::Ok,
                            reason: None,
                            path: None,
                        })
                        .collect(),
                };
                // Stamp every device there at epoch 0 first, so the checks below find them
                // current (a folder made before identities existed, or a new array).
                for (d, dev) in devices.iter().enumerate() {
                    if Some(d) == replacing || !existed[d] {
                        continue;
                    }
                    stamp(dev.as_ref(), &st.identity_of(d, 0)).await?;
                }
                tracing::info!(array = %st.array_id, devices = n, "array identity created");
                st
            }
        };
        if st.format == FORMAT && st.devices.len() > n {
            // Devices a grow recorded before its layout named them: the grow did not happen.
            tracing::warn!(
                recorded = st.devices.len(),
                devices = n,
                "the array state names devices its layout does not; forgetting them"
            );
            st.devices.truncate(n);
        }
        if st.format != FORMAT || st.devices.len() != n {
            return Err(StoreError::Config(format!(
                "the array state {} describes {} devices (format {}); the configuration names {n}",
                path.display(),
                st.devices.len(),
                st.format
            )));
        }
        let mut not_current = Vec::new();
        for (d, dev) in devices.iter().enumerate() {
            let entry = &st.devices[d];
            let why = if Some(d) == replacing {
                Some(NotCurrent::Replacing)
            } else if entry.health != DeviceHealth::Ok {
                Some(NotCurrent::OutOfService(entry.health, entry.reason.clone()))
            } else if !existed[d] {
                Some(NotCurrent::Missing)
            } else {
                match read_identity(dev.as_ref()).await {
                    Err(e) => Some(NotCurrent::Unreadable(e)),
                    Ok(None) => Some(NotCurrent::Empty),
                    Ok(Some(id)) => {
                        if id.array_id != st.array_id {
                            return Err(StoreError::Config(format!(
                                "device {d} belongs to another array ({}; this one is {}): \
                                 refusing to use it",
                                id.array_id, st.array_id
                            )));
                        }
                        if id.index != d {
                            return Err(StoreError::Config(format!(
                                "device {d} holds this array's device {}: devices were swapped \
                                 or reordered; put each back in its place",
                                id.index
                            )));
                        }
                        if id.device_id != entry.id {
                            Some(NotCurrent::Replaced)
                        } else if id.epoch < st.epoch {
                            Some(NotCurrent::Stale {
                                epoch: id.epoch,
                                array_epoch: st.epoch,
                            })
                        } else if id.epoch > st.epoch + 1 {
                            return Err(StoreError::Config(format!(
                                "device {d} is at epoch {}, ahead of the array state's {} \
                                 ({}): the state file is older than the devices",
                                id.epoch,
                                st.epoch,
                                path.display()
                            )));
                        } else {
                            None
                        }
                    }
                }
            };
            if let Some(w) = why {
                not_current.push((d, w));
            }
        }
        if not_current.len() > tolerance {
            let list: Vec<String> = not_current
                .iter()
                .map(|(d, w)| format!("device {d}: {w}"))
                .collect();
            return Err(StoreError::Config(format!(
                "{} devices are not current ({}); the configuration tolerates {tolerance}, so \
                 the array cannot serve without risking old or lost data. Put the right devices \
                 back, or rebuild them (railstore rebuild --device N) one at a time",
                not_current.len(),
                list.join("; ")
            )));
        }
        let epoch = st.epoch + 1;
        for (d, dev) in devices.iter().enumerate() {
            if not_current.iter().any(|(x, _)| *x == d) {
                continue;
            }
            stamp(dev.as_ref(), &st.identity_of(d, epoch)).await?;
        }
        for (d, why) in &not_current {
            if *why == NotCurrent::Replacing {
                continue;
            }
            tracing::warn!(device = d, why = %why, "device out of service until rebuilt");
            if st.devices[*d].health == DeviceHealth::Ok {
                st.devices[*d].health = DeviceHealth::Failed;
                st.devices[*d].reason = Some(why.to_string());
            }
        }
        st.epoch = epoch;
        let identity = ArrayIdentity {
            path,
            state: Mutex::new(st),
        };
        identity.save(&identity.state.lock().unwrap())?;
        Ok(Admission {
            identity: Arc::new(identity),
            not_current,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_records_round_trip_refuse_damage_and_accept_the_unchecksummed_format() {
        let id = Identity {
            format: FORMAT,
            array_id: "a".repeat(32),
            index: 3,
            device_id: "d".repeat(32),
            epoch: 7,
        };
        let bytes = encode_identity(&id);
        assert_eq!(decode_identity(&bytes).unwrap(), id);
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut bad = bytes.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    decode_identity(&bad).is_err(),
                    "flip at byte {i} bit {bit} accepted"
                );
            }
        }
        let legacy = serde_json::to_vec(&id).unwrap();
        assert_eq!(decode_identity(&legacy).unwrap(), id);
        assert!(decode_identity(b"{}").is_err());
    }
}
