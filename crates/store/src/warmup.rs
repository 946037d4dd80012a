//! Serving while the index loads (issue 20, "restart in seconds").
//!
//! After a clean shutdown the store opens with its buckets only and loads every object, version
//! and upload in the background (`load.rs`). Until that is done:
//!
//! - reads of an object's current version (GET and HEAD without a version id) read its record
//!   straight from the manager: the record is what the index would hold;
//! - everything that changes the index (puts, deletes, copies, multipart steps, bucket and
//!   header changes) and every read that needs more than one record (GET or HEAD of a version,
//!   a current version with no record: a delete marker or no object) waits for the load;
//! - listings and the other answers the index gives synchronously fail with
//!   [`StoreError::IndexLoading`] (S3: 503, which clients retry).
//!
//! Since nothing changes the index while it loads, a record read through is the record the load
//! reads. One hazard remains: a chunked body streamed through a read-through must not have its
//! chunks deleted when a later put replaces the object, and the reaper deletes chunks once no
//! one but the index holds their list. So read-throughs register their chunk lists, and the load
//! hands the index those very lists when it publishes ([`Warmup::adopt`]).
//!
//! After an unclean shutdown the whole load (with its careful reads) finishes before the store
//! serves: a read-through could answer a version the careful load then rolls back.

use crate::error::{Result, StoreError};
use crate::record::{decode_object, object_key, BodyRef, ChunkRef};
use crate::store::{Bucket, Store, Stored};
use crate::types::ObjectInfo;
use railstore_device::ReadRange;
use railstore_redundancy::RedundancyError;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

/// Where the index is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum IndexState {
    Loading,
    Ready,
    /// The load failed; the store answers nothing that needs the index.
    Failed(String),
}

/// Chunk lists streamed by read-throughs, by bucket id and key.
type EarlyReads = HashMap<(u64, String), Weak<Vec<ChunkRef>>>;

pub(crate) struct Warmup {
    state: tokio::sync::watch::Sender<IndexState>,
    /// Chunk lists read-throughs stream, by bucket id and key; `None` once the index is
    /// published (no read-through starts after that).
    early: Mutex<Option<EarlyReads>>,
    /// Test hook: the load waits here after publishing the buckets until released.
    hold: Mutex<Option<Arc<tokio::sync::Notify>>>,
}

impl Warmup {
    pub(crate) fn new() -> Warmup {
        Warmup {
            state: tokio::sync::watch::Sender::new(IndexState::Loading),
            early: Mutex::new(Some(HashMap::new())),
            hold: Mutex::new(None),
        }
    }

    pub(crate) fn set(&self, s: IndexState) {
        self.state.send_replace(s);
    }

    /// Holds the load after the buckets are published until `hold` is notified (tests).
    pub(crate) fn hold(&self, hold: Arc<tokio::sync::Notify>) {
        *self.hold.lock().unwrap() = Some(hold);
    }

    /// Lets a held load go on (at shutdown).
    pub(crate) fn release_hold(&self) {
        if let Some(n) = self.hold.lock().unwrap().take() {
            n.notify_one();
        }
    }

    pub(crate) fn state(&self) -> IndexState {
        self.state.borrow().clone()
    }

    /// Gives the loaded index the chunk lists read-throughs hold, so the reaper sees their
    /// readers, and ends read-throughs.
    pub(crate) fn adopt(&self, buckets: &mut BTreeMap<String, Bucket>) {
        let mut early = self.early.lock().unwrap();
        let Some(map) = early.take() else { return };
        let mut by_id: HashMap<u64, &mut Bucket> =
            buckets.values_mut().map(|b| (b.id, b)).collect();
        for ((id, key), held) in map {
            let Some(held) = held.upgrade() else { continue };
            let Some(entry) = by_id.get_mut(&id).and_then(|b| b.objects.get_mut(&key)) else {
                continue;
            };
            let same = matches!(&entry.body, Stored::Chunks(c) if **c == *held);
            if let (true, Some(e)) = (same, Arc::get_mut(entry)) {
                e.body = Stored::Chunks(held);
            }
        }
    }

    /// The chunk list a read-through streams: the one registered for the same object if its
    /// chunks are the same, else `chunks`, registered. `None` once the index is published.
    fn register(&self, id: u64, key: &str, chunks: Vec<ChunkRef>) -> Option<Arc<Vec<ChunkRef>>> {
        let mut early = self.early.lock().unwrap();
        let map = early.as_mut()?;
        let slot = map.entry((id, key.to_string())).or_default();
        if let Some(held) = slot.upgrade().filter(|h| **h == chunks) {
            return Some(held);
        }
        let list = Arc::new(chunks);
        *slot = Arc::downgrade(&list);
        Some(list)
    }
}

/// What a read-through found.
pub(crate) enum ReadThrough {
    /// The current object: its description, and its body when inline.
    Found {
        info: Box<ObjectInfo>,
        inline: Option<Vec<u8>>,
        chunks: Arc<Vec<ChunkRef>>,
    },
    /// Not answerable from one record: wait for the index.
    Wait,
}

impl Store {
    /// Waits until the index has loaded.
    pub(crate) async fn indexed(&self) -> Result<()> {
        self.check_open()?;
        let mut rx = self.inner.warmup.state.subscribe();
        let state = rx
            .wait_for(|s| *s != IndexState::Loading)
            .await
            .map_err(|_| StoreError::ShuttingDown)?
            .clone();
        // A load the shutdown stopped is the shutdown's answer, not a failure.
        self.check_open()?;
        match state {
            IndexState::Failed(why) => Err(StoreError::IndexFailed(why)),
            _ => Ok(()),
        }
    }

    /// Whether the index has loaded, for answers that cannot wait.
    pub(crate) fn index_ready(&self) -> Result<()> {
        match self.inner.warmup.state() {
            IndexState::Ready => Ok(()),
            IndexState::Loading => Err(StoreError::IndexLoading),
            IndexState::Failed(why) => Err(StoreError::IndexFailed(why)),
        }
    }

    /// Whether the index has finished loading (it loads in the background after a clean
    /// start; until then listings answer [`StoreError::IndexLoading`] and writes wait).
    pub fn index_loaded(&self) -> bool {
        self.inner.warmup.state() == IndexState::Ready
    }

    pub(crate) async fn held(&self) {
        let hold = self.inner.warmup.hold.lock().unwrap().clone();
        if let Some(n) = hold {
            n.notified().await;
        }
    }

    /// The current version of `key` read from its record while the index loads.
    pub(crate) async fn read_through(&self, bucket: &str, key: &str) -> Result<ReadThrough> {
        if self.inner.warmup.state() != IndexState::Loading {
            return Ok(ReadThrough::Wait);
        }
        let id = self.inner.state.read().unwrap().bucket(bucket)?.id;
        let value = match self
            .inner
            .manager
            .get(&object_key(id, key), ReadRange::ALL)
            .await
        {
            Ok((v, _)) => v,
            Err(RedundancyError::NotFound { .. }) => return Ok(ReadThrough::Wait),
            Err(e) => return Err(e.into()),
        };
        let (rec, body) = decode_object(&value)?;
        if rec.info.key != key || rec.bucket_id != id {
            return Err(StoreError::Corrupt(format!(
                "object record of {:?} under another key",
                rec.info.key
            )));
        }
        let (inline, chunks) = match rec.body {
            // An inline body is in the record: nothing to keep from the reaper.
            BodyRef::Inline => (Some(body.to_vec()), Some(Arc::new(Vec::new()))),
            BodyRef::Chunks(c) => (None, self.inner.warmup.register(id, key, c)),
        };
        match chunks {
            Some(chunks) => Ok(ReadThrough::Found {
                info: Box::new(rec.info),
                inline,
                chunks,
            }),
            None => Ok(ReadThrough::Wait),
        }
    }
}
