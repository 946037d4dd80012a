//! S3 versioning: a bucket keeps every version of a key once versioning is on.
//!
//! The current object of a key stays where an unversioned bucket keeps it (the `K` record),
//! so reads of current objects cost the same in both kinds of bucket. Every other version —
//! an older object, or a delete marker — has a `V` record of its own, named by the key and the
//! version's sequence number (`seq`, from a clock that only moves forward), which orders the
//! versions. A version id is the sequence number and 64 random bits in hex; the *null*
//! version (objects of a bucket that never had versioning, and those written while it was
//! suspended) has none, and a key has at most one.
//!
//! Each change makes the records it adds durable before it removes or overwrites any (a sync
//! between the two steps: a crash may keep any subset of the writes since the last sync), so
//! a crash leaves at worst a version in two places or two null versions, and start-up settles
//! both (`load.rs`). Changes take the key's lock, as every write of the key does.

use crate::error::{Result, StoreError};
use crate::listing::rolled_up;
use crate::record::{decode_object, encode_object, object_key, version_key, BodyRef, ObjectRecord};
use crate::store::{check_key, Bucket, Entry, Store, Stored};
use crate::types::{ObjectInfo, WriteCondition};
use crate::warmup::ReadThrough;
use railstore_device::{ReadRange, StoreMode};
use railstore_redundancy::Mechanism;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::SystemTime;

/// The bucket setting that holds its versioning state.
pub(crate) const VERSIONING_SETTING: &str = "versioning";

/// A bucket's versioning state, as S3 has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Versioning {
    /// Never turned on: a write replaces the key's object, a delete removes it.
    Unversioned,
    /// Every write makes a new version; a delete makes a delete marker.
    Enabled,
    /// Writes and deletes make or replace the key's null version; older versions stay.
    Suspended,
}

impl Versioning {
    pub(crate) fn of(settings: &BTreeMap<String, String>) -> Versioning {
        match settings.get(VERSIONING_SETTING).map(String::as_str) {
            Some("Enabled") => Versioning::Enabled,
            Some("Suspended") => Versioning::Suspended,
            _ => Versioning::Unversioned,
        }
    }
}

/// What a delete did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Deleted {
    /// A version was removed or a delete marker made (`false`: nothing matched).
    pub existed: bool,
    /// The version removed or the delete marker made (`None`: the null version).
    pub version_id: Option<String>,
    /// That version is a delete marker.
    pub delete_marker: bool,
}

/// What ListObjectVersions asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionQuery {
    /// Only keys that start with this.
    pub prefix: String,
    /// Roll keys up into common prefixes at this.
    pub delimiter: Option<String>,
    /// Start after this key (or, with `version_marker`, after that version of it).
    pub key_marker: Option<String>,
    /// Start after this version of `key_marker` (`"null"`: its null version).
    pub version_marker: Option<String>,
    /// Versions and common prefixes on one page.
    pub max_keys: usize,
}

/// One version in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionEntry {
    /// The version (a delete marker has `delete_marker` set).
    pub info: ObjectInfo,
    /// It is the key's newest version.
    pub latest: bool,
}

/// One page of ListObjectVersions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VersionPage {
    /// Versions, by key and newest first within a key.
    pub versions: Vec<VersionEntry>,
    /// Common prefixes (with a delimiter).
    pub prefixes: Vec<String>,
    /// More follow.
    pub truncated: bool,
    /// Where the next page starts (when truncated).
    pub next_key_marker: Option<String>,
    /// The version of `next_key_marker` the next page starts after (`"null"` for the null
    /// version; none after a common prefix).
    pub next_version_marker: Option<String>,
}

/// The name S3 gives a version id (`"null"` for the null version).
pub fn version_name(version_id: Option<&str>) -> &str {
    version_id.unwrap_or("null")
}

fn new_version_id(seq: u64) -> String {
    format!("{seq:016x}{:016x}", crate::ids::random::<u64>())
}

/// A version id as a request gives it: `None` for `"null"`; anything but the ids this store
/// makes is refused.
fn parse_version_id(v: &str) -> Result<Option<&str>> {
    if v == "null" {
        return Ok(None);
    }
    if v.len() == 32 && v.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Ok(Some(v));
    }
    Err(StoreError::InvalidArgument(format!(
        "invalid version id {v:?}"
    )))
}

/// The sequence number a version id carries (so a listing can resume after a version that is
/// gone).
fn seq_of_version_id(v: &str) -> Option<u64> {
    u64::from_str_radix(v.get(..16)?, 16).ok()
}

/// What installing a new current object does to the key's other versions (see
/// [`Store::make_room`]).
pub(crate) struct Room {
    /// The new object's version id.
    pub version_id: Option<String>,
    /// The current object stays as an older version (its `V` record is written).
    archived: bool,
    /// The older null version the new one replaces (its record goes once the new one is
    /// written).
    old_null: Option<Arc<Entry>>,
}

impl Room {
    /// Enters `entry` as the key's current object; returns the versions no record names any
    /// more.
    pub(crate) fn enter(&self, b: &mut Bucket, entry: Arc<Entry>) -> Vec<Arc<Entry>> {
        let key = entry.info.key.clone();
        let mut gone = Vec::new();
        if let Some(old) = b.objects.insert(key.clone(), entry) {
            if self.archived {
                b.history.entry(key.clone()).or_default().insert(0, old);
            } else {
                gone.push(old);
            }
        }
        if let Some(null) = &self.old_null {
            gone.extend(remove_version(b, &key, null));
        }
        gone
    }
}

/// Takes `version` out of the key's older versions.
fn remove_version(b: &mut Bucket, key: &str, version: &Arc<Entry>) -> Option<Arc<Entry>> {
    let h = b.history.get_mut(key)?;
    let i = h.iter().position(|e| Arc::ptr_eq(e, version))?;
    let removed = h.remove(i);
    if h.is_empty() {
        b.history.remove(key);
    }
    Some(removed)
}

/// The key's versions as the index holds them, under the key's lock.
struct Versions {
    mode: Versioning,
    current: Option<Arc<Entry>>,
    history: Vec<Arc<Entry>>,
}

impl Versions {
    fn null_in_history(&self) -> Option<Arc<Entry>> {
        self.history
            .iter()
            .find(|e| e.info.version_id.is_none())
            .cloned()
    }
}

impl Store {
    /// A bucket's versioning state.
    pub fn versioning(&self, bucket: &str) -> Result<Versioning> {
        let st = self.inner.state.read().unwrap();
        Ok(Versioning::of(&st.bucket(bucket)?.info.settings))
    }

    /// Turns versioning on or suspends it. It cannot be turned off again (S3 has no way
    /// back: versions exist).
    pub async fn set_versioning(&self, bucket: &str, state: Versioning) -> Result<()> {
        self.indexed().await?;
        let value = match state {
            Versioning::Enabled => "Enabled",
            Versioning::Suspended => "Suspended",
            Versioning::Unversioned => {
                return Err(StoreError::InvalidArgument(
                    "versioning can be enabled or suspended, not turned off".into(),
                ))
            }
        };
        self.set_bucket_setting(bucket, VERSIONING_SETTING, Some(value.to_string()))
            .await
    }

    /// The next version sequence number: the time in nanoseconds, or one more than the last
    /// number given when the clock has not moved past it.
    pub(crate) fn next_version_seq(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let prev = self
            .inner
            .version_clock
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |last| {
                Some(now.max(last + 1))
            })
            .expect("the update always succeeds");
        now.max(prev + 1)
    }

    fn versions_of(&self, bucket: &str, key: &str) -> Result<Versions> {
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        Ok(Versions {
            mode: Versioning::of(&b.info.settings),
            current: b.objects.get(key).cloned(),
            history: b.history.get(key).cloned().unwrap_or_default(),
        })
    }

    /// Prepares the key's versions for a new current object numbered `seq`: keeps the current
    /// one as an older version when versioning says so (writing its `V` record). The caller
    /// holds the key's lock.
    pub(crate) async fn make_room(
        &self,
        bucket: &str,
        bucket_id: u64,
        key: &str,
        seq: u64,
    ) -> Result<Room> {
        let v = self.versions_of(bucket, key)?;
        let archived = match (&v.current, v.mode) {
            (Some(_), Versioning::Enabled) => true,
            (Some(c), Versioning::Suspended) => c.info.version_id.is_some(),
            _ => false,
        };
        if archived {
            self.archive(bucket_id, v.current.as_ref().expect("checked"))
                .await?;
            // Before the current record is overwritten.
            self.durable().await?;
        }
        Ok(Room {
            version_id: (v.mode == Versioning::Enabled).then(|| new_version_id(seq)),
            archived,
            old_null: match v.mode {
                Versioning::Suspended => v.null_in_history(),
                _ => None,
            },
        })
    }

    /// Deletes the record of the older null version a new one replaced, once the new one is
    /// durable. A failure leaves two null versions on the devices; the next start keeps the
    /// newer.
    pub(crate) async fn forget_null_record(&self, bucket_id: u64, key: &str, room: &Room) {
        if let Some(null) = &room.old_null {
            if let Err(e) = self.durable().await {
                tracing::warn!(error = %e, key, "a replaced null version stays until the next start");
                return;
            }
            let vkey = version_key(bucket_id, key, null.seq);
            if let Err(e) = self.inner.manager.delete(&vkey).await {
                tracing::warn!(error = %e, key, "deleting a replaced null version; the next start retries");
            }
        }
    }

    /// The record of `entry` as it would be stored anywhere, and the mechanism to store it
    /// with; an inline body is read from the record under `from`.
    pub(crate) async fn record_value(
        &self,
        bucket_id: u64,
        entry: &Entry,
        from: &[u8],
    ) -> Result<(Vec<u8>, Option<Mechanism>)> {
        let (body, inline, mechanism) = match &entry.body {
            Stored::Chunks(c) => (BodyRef::Chunks(c.to_vec()), Vec::new(), None),
            Stored::Inline if entry.info.size == 0 => (
                BodyRef::Inline,
                Vec::new(),
                Some(Mechanism::parse(&entry.info.mechanism)?),
            ),
            Stored::Inline => {
                let (value, _) = self.inner.manager.get(from, ReadRange::ALL).await?;
                let (rec, bytes) = decode_object(&value)?;
                if rec.body != BodyRef::Inline || rec.seq != entry.seq {
                    return Err(StoreError::Corrupt(format!(
                        "{:?}: the record does not match the index",
                        entry.info.key
                    )));
                }
                let mechanism = Mechanism::parse(&entry.info.mechanism)?;
                (BodyRef::Inline, bytes.to_vec(), Some(mechanism))
            }
        };
        let rec = ObjectRecord {
            bucket_id,
            info: entry.info.clone(),
            body,
            upload_id: entry.upload_id.clone(),
            seq: entry.seq,
        };
        Ok((encode_object(&rec, &inline), mechanism))
    }

    /// Writes the `V` record of the key's current object, which is about to stop being
    /// current.
    async fn archive(&self, bucket_id: u64, current: &Entry) -> Result<()> {
        let key = &current.info.key;
        let (value, mechanism) = self
            .record_value(bucket_id, current, &object_key(bucket_id, key))
            .await?;
        self.inner
            .manager
            .put(
                &version_key(bucket_id, key, current.seq),
                &value,
                StoreMode::Upsert,
                mechanism,
            )
            .await?;
        Ok(())
    }

    /// Finds a version (`None`: the current object) and the manager key of its record. A
    /// delete marker asked for by version id is `DeleteMarker`.
    pub(crate) fn locate(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<(Arc<Entry>, Vec<u8>)> {
        let want = version_id.map(parse_version_id).transpose()?;
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        let current = b.objects.get(key);
        let Some(want) = want else {
            return match current {
                Some(e) => Ok((e.clone(), object_key(b.id, key))),
                None => Err(StoreError::NoSuchKey {
                    bucket: bucket.to_string(),
                    key: key.to_string(),
                }),
            };
        };
        if let Some(e) = current.filter(|e| e.info.version_id.as_deref() == want) {
            return Ok((e.clone(), object_key(b.id, key)));
        }
        let older = b
            .history
            .get(key)
            .and_then(|h| h.iter().find(|e| e.info.version_id.as_deref() == want));
        match older {
            Some(e) if e.info.delete_marker => {
                Err(StoreError::DeleteMarker(version_name(want).to_string()))
            }
            Some(e) => Ok((e.clone(), version_key(b.id, key, e.seq))),
            None => Err(StoreError::NoSuchVersion {
                bucket: bucket.to_string(),
                key: key.to_string(),
                version: version_name(want).to_string(),
            }),
        }
    }

    /// A version's description (`None`: the current object's).
    pub async fn head_object_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: Option<&str>,
    ) -> Result<ObjectInfo> {
        self.inner.metrics.heads.fetch_add(1, Ordering::Relaxed);
        if version_id.is_none() {
            if let ReadThrough::Found { info, .. } = self.read_through(bucket, key).await? {
                return Ok(*info);
            }
        }
        self.indexed().await?;
        Ok(self.locate(bucket, key, version_id)?.0.info.clone())
    }

    /// The key's newest version when it is a delete marker (S3 names it when a read finds no
    /// object).
    pub fn latest_delete_marker(&self, bucket: &str, key: &str) -> Option<ObjectInfo> {
        self.index_ready().ok()?;
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket).ok()?;
        if b.objects.contains_key(key) {
            return None;
        }
        let first = b.history.get(key)?.first()?;
        first.info.delete_marker.then(|| first.info.clone())
    }

    /// Deletes the key's current object if `condition` holds for it. Without versioning the
    /// object goes; with it, a delete marker becomes the newest version (the object stays as
    /// an older one, unless it is the null version and versioning is suspended). A condition
    /// on a key with no object is `Ok` with nothing done, as S3 answers a conditional delete
    /// of a missing key.
    pub async fn delete_object_if(
        &self,
        bucket: &str,
        key: &str,
        condition: Option<&WriteCondition>,
    ) -> Result<Deleted> {
        self.indexed().await?;
        self.check_open()?;
        check_key(key)?;
        let bucket_id = self.bucket_id(bucket)?;
        let rkey = object_key(bucket_id, key);
        let (deleted, gone) = {
            let _lock = self.lock(&rkey).await;
            let v = self.versions_of(bucket, key)?;
            if let Some(c) = condition {
                match (c, &v.current) {
                    (
                        WriteCondition::ETag(_)
                        | WriteCondition::Exists
                        | WriteCondition::Version { .. },
                        None,
                    ) => return Ok(Deleted::default()),
                    (c, current) => c.check(current.as_ref().map(|e| &e.info), bucket, key)?,
                }
            }
            match v.mode {
                Versioning::Unversioned => self.remove_current(bucket, bucket_id, key).await?,
                _ => self.add_delete_marker(bucket, bucket_id, key, v).await?,
            }
        };
        self.durable().await?;
        self.inner.metrics.deletes.fetch_add(1, Ordering::Relaxed);
        self.discard_entries(gone);
        Ok(deleted)
    }

    async fn remove_current(
        &self,
        bucket: &str,
        bucket_id: u64,
        key: &str,
    ) -> Result<(Deleted, Vec<Arc<Entry>>)> {
        let existed = self
            .inner
            .manager
            .delete(&object_key(bucket_id, key))
            .await?;
        let mut st = self.inner.state.write().unwrap();
        let old = st
            .buckets
            .get_mut(bucket)
            .filter(|b| b.id == bucket_id)
            .and_then(|b| b.objects.remove(key));
        if old.is_none() && existed {
            tracing::warn!(bucket, key, "deleted a record the index did not hold");
        }
        let deleted = Deleted {
            existed: old.is_some(),
            ..Deleted::default()
        };
        Ok((deleted, old.into_iter().collect()))
    }

    async fn add_delete_marker(
        &self,
        bucket: &str,
        bucket_id: u64,
        key: &str,
        v: Versions,
    ) -> Result<(Deleted, Vec<Arc<Entry>>)> {
        let seq = self.next_version_seq();
        let version_id = (v.mode == Versioning::Enabled).then(|| new_version_id(seq));
        // Suspended: the marker is the null version, replacing any other.
        let keep = v
            .current
            .as_ref()
            .filter(|c| v.mode == Versioning::Enabled || c.info.version_id.is_some());
        let old_null = match v.mode {
            Versioning::Suspended => v.null_in_history(),
            _ => None,
        };
        if let Some(c) = keep {
            self.archive(bucket_id, c).await?;
        }
        let policy = &self.inner.manager.config().policy;
        let marker = Arc::new(Entry {
            info: ObjectInfo {
                key: key.to_string(),
                size: 0,
                etag: String::new(),
                last_modified: SystemTime::now(),
                content_type: None,
                user_metadata: BTreeMap::new(),
                headers: BTreeMap::new(),
                checksums: BTreeMap::new(),
                mechanism: policy.choose(0).to_string(),
                parts: 0,
                part_sizes: Vec::new(),
                part_numbers: Vec::new(),
                part_checksums: Vec::new(),
                part_annotations: Vec::new(),
                version_id: version_id.clone(),
                delete_marker: true,
            },
            body: Stored::Inline,
            upload_id: None,
            seq,
        });
        let rkey = object_key(bucket_id, key);
        let (value, mechanism) = self.record_value(bucket_id, &marker, &rkey).await?;
        let manager = &self.inner.manager;
        manager
            .put(
                &version_key(bucket_id, key, seq),
                &value,
                StoreMode::Upsert,
                mechanism,
            )
            .await?;
        if v.current.is_some() {
            // The older version's and the marker's records first.
            self.durable().await?;
            manager.delete(&rkey).await?;
        }
        if let Some(null) = &old_null {
            manager
                .delete(&version_key(bucket_id, key, null.seq))
                .await?;
        }
        let mut gone = Vec::new();
        let mut st = self.inner.state.write().unwrap();
        if let Some(b) = st.buckets.get_mut(bucket).filter(|b| b.id == bucket_id) {
            if let Some(old) = b.objects.remove(key) {
                match keep {
                    Some(_) => b.history.entry(key.to_string()).or_default().insert(0, old),
                    None => gone.push(old),
                }
            }
            if let Some(null) = &old_null {
                gone.extend(remove_version(b, key, null));
            }
            b.history
                .entry(key.to_string())
                .or_default()
                .insert(0, marker);
        }
        let deleted = Deleted {
            existed: true,
            version_id,
            delete_marker: true,
        };
        Ok((deleted, gone))
    }

    /// Deletes one version of a key (`"null"`: its null version), if `condition` holds for
    /// it. When it was the newest, the next newest becomes current (an object is read as the
    /// key's object again; a delete marker hides it). A version that does not exist is `Ok`
    /// with `existed` false, as S3 answers.
    ///
    /// A locked version (see [`crate::retention`]) stays and is `ObjectLocked`; a governance
    /// retention gives way when `bypass_governance`.
    pub async fn delete_version(
        &self,
        bucket: &str,
        key: &str,
        version_id: &str,
        condition: Option<&WriteCondition>,
        bypass_governance: bool,
    ) -> Result<Deleted> {
        self.indexed().await?;
        self.check_open()?;
        check_key(key)?;
        let want = parse_version_id(version_id)?;
        let bucket_id = self.bucket_id(bucket)?;
        let rkey = object_key(bucket_id, key);
        let (deleted, gone) = {
            let _lock = self.lock(&rkey).await;
            let v = self.versions_of(bucket, key)?;
            let matches = |e: &&Arc<Entry>| e.info.version_id.as_deref() == want;
            let target = match v.current.iter().chain(&v.history).find(matches) {
                Some(t) => t.clone(),
                // As S3: nothing to delete is no error, whatever the condition.
                None => {
                    return Ok(Deleted {
                        existed: false,
                        version_id: want.map(str::to_string),
                        delete_marker: false,
                    });
                }
            };
            if let Some(c) = condition {
                c.check(Some(&target.info), bucket, key)?;
            }
            let now = crate::retention::now_ms();
            if let Some(why) =
                crate::retention::deletion_refused(&target.info, bypass_governance, now)
            {
                return Err(StoreError::ObjectLocked(why));
            }
            let was_current = v.current.as_ref().is_some_and(|c| Arc::ptr_eq(c, &target));
            let rest: Vec<&Arc<Entry>> = v
                .history
                .iter()
                .filter(|e| !Arc::ptr_eq(e, &target))
                .collect();
            // With no current object left, the newest older version is current again if it
            // is an object.
            let promote = match (&v.current, was_current) {
                (Some(_), false) => None,
                _ => rest
                    .first()
                    .filter(|e| !e.info.delete_marker)
                    .map(|e| (*e).clone()),
            };
            let manager = &self.inner.manager;
            if !was_current {
                manager
                    .delete(&version_key(bucket_id, key, target.seq))
                    .await?;
            }
            match &promote {
                Some(p) => {
                    let vkey = version_key(bucket_id, key, p.seq);
                    let (value, mechanism) = self.record_value(bucket_id, p, &vkey).await?;
                    manager
                        .put(&rkey, &value, StoreMode::Upsert, mechanism)
                        .await?;
                    // Its current record before its older one goes.
                    self.durable().await?;
                    manager.delete(&vkey).await?;
                }
                None if was_current => {
                    manager.delete(&rkey).await?;
                }
                None => {}
            }
            let mut st = self.inner.state.write().unwrap();
            if let Some(b) = st.buckets.get_mut(bucket).filter(|b| b.id == bucket_id) {
                if was_current {
                    b.objects.remove(key);
                } else {
                    remove_version(b, key, &target);
                }
                if let Some(p) = &promote {
                    remove_version(b, key, p);
                    b.objects.insert(key.to_string(), p.clone());
                }
            }
            let deleted = Deleted {
                existed: true,
                version_id: target.info.version_id.clone(),
                delete_marker: target.info.delete_marker,
            };
            (deleted, vec![target])
        };
        self.durable().await?;
        self.inner.metrics.deletes.fetch_add(1, Ordering::Relaxed);
        self.discard_entries(gone);
        Ok(deleted)
    }

    /// One page of a bucket's versions (ListObjectVersions).
    pub fn list_versions(&self, bucket: &str, q: &VersionQuery) -> Result<VersionPage> {
        self.index_ready()?;
        self.inner.metrics.lists.fetch_add(1, Ordering::Relaxed);
        let st = self.inner.state.read().unwrap();
        let b = st.bucket(bucket)?;
        let marker = q.key_marker.as_deref().filter(|m| *m >= q.prefix.as_str());
        let from = match marker {
            Some(m) => Bound::Included(m.to_string()),
            None => Bound::Included(q.prefix.clone()),
        };
        // Versions of the marker's key older than the marker version are still due.
        let resume_below: Option<u64> = match (marker, q.version_marker.as_deref()) {
            (Some(m), Some("null")) => {
                let versions = b
                    .objects
                    .get(m)
                    .into_iter()
                    .chain(b.history.get(m).into_iter().flatten());
                let null = versions.clone().find(|e| e.info.version_id.is_none());
                null.map(|e| e.seq)
            }
            (Some(_), Some(v)) => seq_of_version_id(v),
            _ => None,
        };
        let mut objects = b.objects.range((from.clone(), Bound::Unbounded)).peekable();
        let mut older = b.history.range((from, Bound::Unbounded)).peekable();
        let mut page = VersionPage::default();
        let mut last_prefix: Option<String> = None;
        let mut items = 0usize;
        loop {
            // The next key in either map.
            let key = match (objects.peek(), older.peek()) {
                (Some((a, _)), Some((b, _))) => (*a).min(*b).clone(),
                (Some((a, _)), None) => (*a).clone(),
                (None, Some((b, _))) => (*b).clone(),
                (None, None) => break,
            };
            let current = objects.next_if(|(k, _)| **k == key).map(|(_, e)| e);
            let history = older.next_if(|(k, _)| **k == key).map(|(_, h)| h);
            if !key.starts_with(&q.prefix) {
                if key.as_str() > q.prefix.as_str() {
                    break;
                }
                continue;
            }
            if let Some(cp) = rolled_up(&key, &q.prefix, q.delimiter.as_deref()) {
                if last_prefix.as_deref() == Some(cp) || marker.is_some_and(|m| cp <= m) {
                    continue;
                }
                if items >= q.max_keys {
                    page.truncated = true;
                    break;
                }
                page.prefixes.push(cp.to_string());
                page.next_key_marker = Some(cp.to_string());
                page.next_version_marker = None;
                last_prefix = Some(cp.to_string());
                items += 1;
                continue;
            }
            let all = current.into_iter().chain(history.into_iter().flatten());
            for (i, e) in all.enumerate() {
                if marker == Some(key.as_str()) {
                    match resume_below {
                        Some(s) if e.seq < s => {}
                        _ => continue,
                    }
                }
                if items >= q.max_keys {
                    page.truncated = true;
                    break;
                }
                page.versions.push(VersionEntry {
                    info: e.info.clone(),
                    latest: i == 0,
                });
                page.next_key_marker = Some(key.clone());
                page.next_version_marker =
                    Some(version_name(e.info.version_id.as_deref()).to_string());
                items += 1;
            }
            if page.truncated {
                break;
            }
        }
        if !page.truncated {
            page.next_key_marker = None;
            page.next_version_marker = None;
        }
        Ok(page)
    }
}
