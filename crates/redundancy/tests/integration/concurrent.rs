//! A read that overlaps an overwrite, and an object of which only damaged pieces are left:
//! - a read whose cheap path meets the overwrite half done (new pieces on some devices, old
//!   ones on the others) reads the careful way under the key's lock, after the write: it must
//!   not repair the old version back over the pieces the write already stored, which would
//!   leave the acknowledged version with fewer pieces than its tolerance needs;
//! - an object none of whose pieces is valid, only corrupt ones, is lost, not absent: a read
//!   errs and a scrub reports it instead of deleting what is left, and it can be deleted;
//! - the careful read (under the lock) reads the segment whose cheap read failed, not the
//!   whole object.

use railstore_device::{
    iterate_all, Device, DeviceError, DeviceInfo, IterBatch, IterRequest, Limits, MemDevice,
    ReadRange, Retrieved, StoreMode,
};
use railstore_redundancy::format::segment_key;
use railstore_redundancy::{
    Manager, ManagerConfig, Mechanism, Policy, RedundancyError, RepairOptions, RepairProgress,
};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// A memory device whose reads and stores a test holds back, and whose reads it can fail.
struct Held {
    inner: MemDevice,
    /// While true, reads wait.
    reads_held: watch::Sender<bool>,
    /// While true, stores wait.
    stores_held: watch::Sender<bool>,
    /// Operations waiting at either gate now.
    waiting: AtomicUsize,
    /// Stores that reached the memory device.
    stored: AtomicUsize,
    /// Reads fail with an I/O error.
    failing: AtomicBool,
}

impl Held {
    fn new() -> Arc<Held> {
        Arc::new(Held {
            inner: MemDevice::new(Default::default()).unwrap(),
            reads_held: watch::channel(false).0,
            stores_held: watch::channel(false).0,
            waiting: AtomicUsize::new(0),
            stored: AtomicUsize::new(0),
            failing: AtomicBool::new(false),
        })
    }

    async fn pass(&self, gate: &watch::Sender<bool>) {
        let mut open = gate.subscribe();
        if *open.borrow() {
            self.waiting.fetch_add(1, Ordering::SeqCst);
            open.wait_for(|held| !held).await.unwrap();
            self.waiting.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[async_trait::async_trait]
impl Device for Held {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), DeviceError> {
        self.pass(&self.stores_held).await;
        let r = self.inner.store(key, value, mode).await;
        self.stored.fetch_add(1, Ordering::SeqCst);
        r
    }
    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved, DeviceError> {
        self.pass(&self.reads_held).await;
        if self.failing.load(Ordering::SeqCst) {
            return Err(DeviceError::io(
                "reading",
                std::io::Error::other("injected EIO"),
            ));
        }
        self.inner.retrieve(key, range).await
    }
    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool, DeviceError> {
        self.inner.delete(key, must_exist).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>, DeviceError> {
        self.inner.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        self.inner.iterate(req).await
    }
    async fn info(&self) -> Result<DeviceInfo, DeviceError> {
        self.inner.info().await
    }
    async fn sync(&self) -> Result<(), DeviceError> {
        self.inner.sync().await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

async fn array(mech: &str) -> (Arc<Manager>, Vec<Arc<Held>>) {
    let held: Vec<Arc<Held>> = (0..6).map(|_| Held::new()).collect();
    (Arc::new(open(&held, mech).await), held)
}

/// A manager over `held` (a fresh one over the same devices: nothing cached).
async fn open(held: &[Arc<Held>], mech: &str) -> Manager {
    Manager::open(
        held.iter().map(|h| h.clone() as Arc<dyn Device>).collect(),
        ManagerConfig {
            policy: Policy::Standalone(Mechanism::parse(mech).unwrap()),
            pack_wait: Duration::from_millis(1),
            ..ManagerConfig::default()
        },
    )
    .await
    .unwrap()
}

/// Every key the device holds.
async fn device_keys(dev: &Held) -> Vec<Vec<u8>> {
    let all = iterate_all(&dev.inner, b"", false).await.unwrap();
    all.into_iter().map(|e| e.key).collect()
}

/// Waits (real time, briefly) until `done` holds.
async fn until(what: &str, done: impl Fn() -> bool) {
    for _ in 0..2000 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("timed out waiting until {what}");
}

/// The read meets the overwrite with the new piece on the primary only: its cheap read sees
/// shards of two versions and falls back to the careful read. Before the fix the careful read
/// ran without the lock, decoded the old version from the five other devices and wrote its
/// shard back over the new one on the primary; the write then completed on the other five,
/// and with three of those lost (the tolerance of RS(3,3)) the acknowledged version no longer
/// decoded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_that_meets_an_overwrite_does_not_repair_it_back() {
    let (m, held) = array("split3+3").await;
    let key = b"volume/object-7".to_vec();
    let old: Vec<u8> = (0..60_000u32).map(|i| (i % 251) as u8).collect();
    let new: Vec<u8> = (0..60_000u32).map(|i| (i % 239) as u8 ^ 0x5a).collect();
    m.put(&key, &old, StoreMode::Upsert, None).await.unwrap();
    m.sync().await.unwrap();
    let layout = m.layout();
    let place = layout.place(&key);
    let primary = place.device(0);
    let others: Vec<usize> = (1..6).map(|i| place.device(i)).collect();

    // The read starts first, and waits on the primary (after its look for a write in flight).
    held[primary].reads_held.send_replace(true);
    let reader = {
        let (m, key) = (m.clone(), key.clone());
        tokio::spawn(async move { m.get(&key, ReadRange::ALL).await })
    };
    until("the read waits on the primary", || {
        held[primary].waiting.load(Ordering::SeqCst) == 1
    })
    .await;

    // The overwrite lands on the primary and waits on the five others.
    for &d in &others {
        held[d].stores_held.send_replace(true);
    }
    let stored_before = held[primary].stored.load(Ordering::SeqCst);
    let writer = {
        let (m, key, new) = (m.clone(), key.clone(), new.clone());
        tokio::spawn(async move { m.put(&key, &new, StoreMode::Upsert, None).await })
    };
    until("the overwrite is on the primary only", || {
        held[primary].stored.load(Ordering::SeqCst) > stored_before
            && others
                .iter()
                .all(|&d| held[d].waiting.load(Ordering::SeqCst) == 1)
    })
    .await;

    // The read goes on; give it the time to finish if it does not wait for the write.
    held[primary].reads_held.send_replace(false);
    let mut reader = reader;
    let early = tokio::time::timeout(Duration::from_millis(500), &mut reader).await;
    for &d in &others {
        held[d].stores_held.send_replace(false);
    }
    writer.await.unwrap().unwrap();
    let read = match early {
        Ok(r) => r,
        Err(_) => reader.await,
    }
    .unwrap()
    .unwrap()
    .0;
    assert!(
        read == old || read == new,
        "the read returned neither version"
    );

    // The acknowledged version survives the loss of any three devices; three of those the
    // overwrite reached last fail now.
    for &d in &others[..3] {
        held[d].failing.store(true, Ordering::SeqCst);
    }
    let (got, _) = m
        .get(&key, ReadRange::ALL)
        .await
        .expect("the acknowledged version decodes with three devices lost");
    assert!(
        got == new,
        "the read after the overwrite returned the old version"
    );
}

/// Every copy of an object corrupt: a read errs (`Lost`), and a scrub counts it lost and
/// leaves its pieces; before the fix both took it for the leftovers of an unfinished write
/// (absent), and the scrub deleted them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_with_only_corrupt_pieces_is_lost_not_absent() {
    let (m, held) = array("rep3").await;
    let key = b"bucket/only-corrupt".to_vec();
    m.put(&key, &[7u8; 3000], StoreMode::Upsert, None)
        .await
        .unwrap();
    m.sync().await.unwrap();
    let layout = m.layout();
    let place = layout.place(&key);
    let skey = segment_key(&key, 0, 0);
    let positions: Vec<usize> = (0..layout.width()).map(|i| place.device(i)).collect();
    let mut corrupted = 0;
    for &d in &positions {
        let Ok(found) = held[d].inner.retrieve(&skey, ReadRange::ALL).await else {
            continue;
        };
        let mut bytes = found.value.to_vec();
        bytes[0] ^= 0xff;
        bytes[40] ^= 0xff;
        held[d]
            .inner
            .store(&skey, &bytes, StoreMode::Upsert)
            .await
            .unwrap();
        corrupted += 1;
    }
    assert_eq!(corrupted, 3);
    drop(m);
    let m2 = open(&held, "rep3").await;
    match m2.get(&key, ReadRange::ALL).await {
        Err(RedundancyError::Lost { .. }) => {}
        other => panic!("a read of an object whose copies are all corrupt gave {other:?}"),
    }
    let report = m2
        .scrub(
            RepairOptions::default(),
            Arc::new(RepairProgress::default()),
        )
        .await
        .unwrap();
    assert!(
        report.objects_lost.contains(&key),
        "the scrub did not count it lost: {report:?}"
    );
    let mut left = 0;
    for &d in &positions {
        left += held[d].inner.exist(&[&skey]).await.unwrap()[0] as usize;
    }
    assert_eq!(left, 3, "the scrub deleted the corrupt copies");

    // Its owner can still delete it; then nothing of it is left, and it reads as absent.
    assert!(
        m2.delete(&key).await.unwrap(),
        "the lost object was not deleted"
    );
    for &d in &positions {
        assert!(!held[d].inner.exist(&[&skey]).await.unwrap()[0]);
    }
    assert!(matches!(
        m2.get(&key, ReadRange::ALL).await,
        Err(RedundancyError::NotFound { .. })
    ));
}

/// A lost object of several segments (a split one, every shard of segment 0 corrupt) is
/// deleted whole: its later segments go with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_object_is_deleted_with_its_later_segments() {
    let (m, held) = array("split3+3").await;
    let key = b"bucket/big-and-lost".to_vec();
    let value: Vec<u8> = (0..9_000_000u32).map(|i| (i % 253) as u8).collect();
    m.put(&key, &value, StoreMode::Upsert, None).await.unwrap();
    m.sync().await.unwrap();
    let skey = segment_key(&key, 0, 0);
    let pieces_of_key = |d: usize| {
        let held = held[d].clone();
        let key = key.clone();
        async move {
            device_keys(&held)
                .await
                .iter()
                .filter(|k| k.windows(key.len()).any(|w| w == key.as_slice()))
                .count()
        }
    };
    let mut before = 0;
    for (d, dev) in held.iter().enumerate() {
        before += pieces_of_key(d).await;
        let found = dev.inner.retrieve(&skey, ReadRange::ALL).await.unwrap();
        let mut bytes = found.value.to_vec();
        bytes[0] ^= 0xff;
        dev.inner
            .store(&skey, &bytes, StoreMode::Upsert)
            .await
            .unwrap();
    }
    assert!(before > 6, "the object has later segments");
    drop(m);
    let m = open(&held, "split3+3").await;
    assert!(matches!(
        m.get(&key, ReadRange::ALL).await,
        Err(RedundancyError::Lost { .. })
    ));
    assert!(m.delete(&key).await.unwrap());
    for d in 0..6 {
        assert_eq!(pieces_of_key(d).await, 0, "device {d} kept pieces of it");
    }
}

/// A read error is not a corrupt piece: a key of which only the primary holds a piece (a
/// write cut after its first store, never acknowledged) reads as absent while that piece
/// cannot be read, and can be written anew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_error_on_the_primary_is_not_taken_for_a_lost_object() {
    let (m, held) = array("rep3").await;
    let key = b"bucket/cut-write".to_vec();
    m.put(&key, &[3u8; 2000], StoreMode::Upsert, None)
        .await
        .unwrap();
    let layout = m.layout();
    let place = layout.place(&key);
    let skey = segment_key(&key, 0, 0);
    for d in (1..layout.width()).map(|i| place.device(i)) {
        held[d].inner.delete(&skey, false).await.unwrap();
    }
    drop(m);
    let m = open(&held, "rep3").await;
    held[place.device(0)].failing.store(true, Ordering::SeqCst);
    match m.get(&key, ReadRange::ALL).await {
        Err(RedundancyError::NotFound { .. }) => {}
        other => panic!("a cut write whose one piece cannot be read gave {other:?}"),
    }
    m.put(&key, &[4u8; 2000], StoreMode::Upsert, None)
        .await
        .unwrap();
    held[place.device(0)].failing.store(false, Ordering::SeqCst);
    assert_eq!(
        m.get(&key, ReadRange::ALL).await.unwrap().0,
        vec![4u8; 2000]
    );
}

/// A careful read is as narrow as the cheap read that failed: a range of a large object whose
/// segment 3 lost copies reads segment 0 the cheap way and segment 3 the careful way (and
/// repairs it), not every segment of the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_careful_read_of_one_bad_segment_reads_that_segment() {
    let (m, held) = array("rep3").await;
    let key = b"vol/large".to_vec();
    let value: Vec<u8> = (0..13_000_000u32).map(|i| (i % 247) as u8).collect();
    m.put(&key, &value, StoreMode::Upsert, None).await.unwrap();
    m.sync().await.unwrap();
    let meta = m.meta(&key).await.unwrap().unwrap();
    assert!(meta.segments >= 6, "{meta:?}");
    let seg = meta.segment_bytes as usize;
    // Segment 3's copy goes from every device but the last position's (reads prefer the
    // first positions).
    let layout = m.layout();
    let keep = layout.place(&key).device(2);
    let mut holders = Vec::new();
    for (d, dev) in held.iter().enumerate() {
        for k in device_keys(dev).await {
            if k.len() == 1 + key.len() + 12 && k.ends_with(&3u32.to_be_bytes()) {
                holders.push((d, k));
            }
        }
    }
    assert_eq!(holders.len(), 3);
    for (d, dkey) in holders.iter().filter(|(d, _)| *d != keep) {
        held[*d].inner.delete(dkey, true).await.unwrap();
    }
    let read_bytes = || m.devices().counters.retrieve_bytes.load(Ordering::Relaxed);
    let repairs = || m.devices().counters.repairs.load(Ordering::Relaxed);
    let offset = 3 * seg + 5000;
    let mut careful = None;
    for _ in 0..20 {
        let (before, repaired) = (read_bytes(), repairs());
        let (got, _) = m
            .get(
                &key,
                ReadRange {
                    offset: offset as u64,
                    len: Some(4096),
                },
            )
            .await
            .unwrap();
        assert!(got == value[offset..offset + 4096]);
        if repairs() > repaired {
            careful = Some(read_bytes() - before);
            break;
        }
    }
    let bytes = careful.expect("no read went the careful way");
    assert!(
        bytes < 5 * seg as u64,
        "the careful read of one segment read {bytes} B ({} segments)",
        bytes as f64 / seg as f64
    );
}
