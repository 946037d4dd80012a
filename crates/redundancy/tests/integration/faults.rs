//! Device faults within the mechanism's tolerance lose nothing and never surface an old
//! version:
//! - a read error is decoded around and the piece rewritten; only many of them take the device
//!   out of service;
//! - a write that does not land on a device (it is full, or keeps failing) takes that device
//!   out of service, and the write goes on with the others: the device held the old piece, and
//!   a read that preferred it would have returned the old version;
//! - a hung device is cut off by the operation timeout instead of stalling the array;
//! - a device whose sync fails leaves service and the sync succeeds without it, but only
//!   while the devices out of service are within the tolerance: beyond it (whether they left
//!   during the sync or before it), the sync fails.

use futures_util::future::BoxFuture;
use railstore_device::{
    Device, DeviceError, DeviceInfo, IterBatch, IterRequest, Limits, MemDevice, ReadRange,
    Retrieved, StoreMode,
};
use railstore_redundancy::{FaultPolicy, Manager, ManagerConfig, Mechanism, Policy};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Something a test does behind a device's back, once.
type Hook = Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>;

/// A memory device whose faults a test turns on and off.
struct Flaky {
    inner: MemDevice,
    /// The next this many reads fail with an I/O error.
    failing_reads: AtomicU64,
    /// Reads of device keys that hold these bytes fail with an I/O error.
    failing_keys_with: Mutex<Option<Vec<u8>>>,
    /// Stores fail: no room.
    full: AtomicBool,
    /// Every operation waits for ever.
    hung: AtomicBool,
    /// Syncs fail.
    failing_syncs: AtomicBool,
    /// Runs once, after the next listing returns (to change the array behind a walk's back).
    after_listing: Mutex<Option<Hook>>,
}

impl Flaky {
    fn new() -> Arc<Flaky> {
        Arc::new(Flaky {
            inner: MemDevice::new(Default::default()).unwrap(),
            failing_reads: AtomicU64::new(0),
            failing_keys_with: Mutex::new(None),
            full: AtomicBool::new(false),
            hung: AtomicBool::new(false),
            failing_syncs: AtomicBool::new(false),
            after_listing: Mutex::new(None),
        })
    }

    async fn gate(&self) {
        if self.hung.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

#[async_trait::async_trait]
impl Device for Flaky {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<(), DeviceError> {
        self.gate().await;
        if self.full.load(Ordering::SeqCst) {
            return Err(DeviceError::Capacity {
                needed: value.len() as u64,
                available: 0,
            });
        }
        self.inner.store(key, value, mode).await
    }
    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved, DeviceError> {
        self.gate().await;
        let failing = self
            .failing_reads
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
            || self
                .failing_keys_with
                .lock()
                .unwrap()
                .as_ref()
                .is_some_and(|part| key.windows(part.len()).any(|w| w == part.as_slice()));
        if failing {
            return Err(DeviceError::io(
                "reading",
                std::io::Error::other("injected EIO"),
            ));
        }
        self.inner.retrieve(key, range).await
    }
    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool, DeviceError> {
        self.gate().await;
        self.inner.delete(key, must_exist).await
    }
    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>, DeviceError> {
        self.gate().await;
        self.inner.exist(keys).await
    }
    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch, DeviceError> {
        self.gate().await;
        let batch = self.inner.iterate(req).await;
        let hook = self.after_listing.lock().unwrap().take();
        if let Some(hook) = hook {
            hook().await;
        }
        batch
    }
    async fn info(&self) -> Result<DeviceInfo, DeviceError> {
        self.inner.info().await
    }
    async fn sync(&self) -> Result<(), DeviceError> {
        self.gate().await;
        if self.failing_syncs.load(Ordering::SeqCst) {
            return Err(DeviceError::io(
                "syncing",
                std::io::Error::other("injected EIO"),
            ));
        }
        self.inner.sync().await
    }
    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

async fn array(
    mech: &str,
    faults: FaultPolicy,
) -> (Manager, Vec<Arc<Flaky>>, Arc<Mutex<Vec<usize>>>) {
    let flaky: Vec<Arc<Flaky>> = (0..6).map(|_| Flaky::new()).collect();
    let m = Manager::open(
        flaky.iter().map(|f| f.clone() as Arc<dyn Device>).collect(),
        ManagerConfig {
            policy: Policy::Standalone(Mechanism::parse(mech).unwrap()),
            pack_wait: Duration::from_millis(1),
            faults,
            ..ManagerConfig::default()
        },
    )
    .await
    .unwrap();
    let recorded = Arc::new(Mutex::new(Vec::new()));
    let r = recorded.clone();
    m.devices()
        .on_failure(Arc::new(move |d| r.lock().unwrap().push(d)));
    (m, flaky, recorded)
}

/// Every key of a (small) device in one batch.
fn all_keys() -> IterRequest {
    IterRequest {
        prefix: Vec::new(),
        start_after: None,
        entries_max: 100_000,
        with_values: false,
    }
}

/// A device key of a packing set's piece: parity `p`, descriptor `m`, dead member `x`.
fn set_piece(key: &[u8]) -> bool {
    b"pmx".contains(&key[0])
}

/// A scrub with the default options; it must complete.
async fn scrub(m: &Manager) -> railstore_redundancy::RepairReport {
    m.scrub(
        railstore_redundancy::RepairOptions::default(),
        Arc::new(railstore_redundancy::RepairProgress::default()),
    )
    .await
    .unwrap()
}

/// Keys whose primary piece (position 0, the one a fast read takes first) is on device `d`.
fn keys_with_primary(m: &Manager, d: usize, count: usize) -> Vec<Vec<u8>> {
    (0u32..)
        .map(|i| format!("key-{i}").into_bytes())
        .filter(|k| m.layout().place(k).device(0) == d)
        .take(count)
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_read_error_is_decoded_around_and_the_piece_rewritten() {
    for mech in ["rep3", "split3+3"] {
        let (m, flaky, recorded) = array(mech, FaultPolicy::default()).await;
        let key = keys_with_primary(&m, 2, 1).remove(0);
        let value: Vec<u8> = (0..5000u32).map(|i| i as u8).collect();
        m.put(&key, &value, StoreMode::Upsert, None).await.unwrap();
        m.sync().await.unwrap();
        // The fast read and the careful read both meet the error on device 2.
        flaky[2].failing_reads.store(2, Ordering::SeqCst);
        let repairs = m.devices().counters.repairs.load(Ordering::Relaxed);
        let (got, _) = m.get(&key, ReadRange::ALL).await.unwrap();
        assert_eq!(got, value, "{mech}");
        assert!(
            !m.devices().is_failed(2),
            "{mech}: one bad read failed the device"
        );
        assert!(recorded.lock().unwrap().is_empty());
        assert!(m.devices().counters.read_errors.load(Ordering::Relaxed) >= 2);
        assert!(
            m.devices().counters.repairs.load(Ordering::Relaxed) > repairs,
            "{mech}: the unreadable piece was not rewritten"
        );
        // It reads from device 2 again.
        let (got, _) = m.get(&key, ReadRange::ALL).await.unwrap();
        assert_eq!(got, value);
    }
}

#[tokio::test(start_paused = true)]
async fn many_read_errors_take_the_device_out_of_service() {
    let faults = FaultPolicy {
        read_errors_max: 4,
        ..FaultPolicy::default()
    };
    let (m, flaky, recorded) = array("rep3", faults).await;
    let keys = keys_with_primary(&m, 1, 10);
    for k in &keys {
        m.put(k, k, StoreMode::Upsert, None).await.unwrap();
    }
    flaky[1].failing_reads.store(u64::MAX, Ordering::SeqCst);
    for k in &keys {
        assert_eq!(&m.get(k, ReadRange::ALL).await.unwrap().0, k);
    }
    assert!(m.devices().is_failed(1));
    assert_eq!(*recorded.lock().unwrap(), vec![1]);
}

/// A scrub that cannot read a packed member (its device errs, still in service) must not take
/// the member for dead and reclaim its set: the set's parity is what keeps the member once its
/// device is lost (SIM-16: an online rebuild reclaimed a set while its only member's device
/// was failing, and the object was gone).
#[tokio::test(start_paused = true)]
async fn a_member_that_cannot_be_read_keeps_its_set() {
    let faults = FaultPolicy {
        read_errors_max: 1_000_000,
        ..FaultPolicy::default()
    };
    let (m, flaky, _) = array("pack3+3", faults).await;
    let key = keys_with_primary(&m, 2, 1).remove(0);
    let value: Vec<u8> = (0..5000u32).map(|i| (i * 7) as u8).collect();
    m.put(&key, &value, StoreMode::Upsert, None).await.unwrap();
    m.sync().await.unwrap();
    // The member's own key fails to read; the set's descriptor and parity read.
    *flaky[2].failing_keys_with.lock().unwrap() = Some(key.clone());
    let report = scrub(&m).await;
    assert_eq!(
        (report.sets, report.sets_reclaimed, report.sets_lost),
        (1, 0, 0),
        "{report:?}"
    );
    assert!(!m.devices().is_failed(2));
    // Device 2 is lost: the member decodes from its set.
    m.devices().mark_failed(2);
    let (got, _) = m.get(&key, ReadRange::ALL).await.unwrap();
    assert_eq!(got, value);
}

/// A set reclaimed between a scrub's listing and its check of the set (by another repair, its
/// last member deleted) is not reported lost: its pieces are gone because nothing needs them.
#[tokio::test(start_paused = true)]
async fn a_set_reclaimed_after_the_listing_is_not_counted_lost() {
    let (m, flaky, _) = array("pack3+3", FaultPolicy::default()).await;
    let key = b"member".to_vec();
    m.put(&key, &[7u8; 5000], StoreMode::Upsert, None)
        .await
        .unwrap();
    m.sync().await.unwrap();
    m.delete(&key).await.unwrap();
    m.sync().await.unwrap();
    // After the listing of a device holding a piece of the set (parity `p`, descriptor `m` or
    // the dead member `x`: which devices do depends on the set's id), every piece of the set
    // leaves every device, as a concurrent reclaim would do.
    let mut holder = None;
    for (d, f) in flaky.iter().enumerate() {
        let listing = f.inner.iterate(&all_keys()).await.unwrap();
        if listing.entries.iter().any(|e| set_piece(&e.key)) {
            holder = Some(d);
            break;
        }
    }
    let holder = holder.expect("a device holds a piece of the set");
    let all = flaky.clone();
    *flaky[holder].after_listing.lock().unwrap() = Some(Box::new(move || {
        Box::pin(async move {
            for f in &all {
                let listing = f.inner.iterate(&all_keys()).await.unwrap();
                for e in listing.entries.iter().filter(|e| set_piece(&e.key)) {
                    f.inner.delete(&e.key, true).await.unwrap();
                }
            }
        })
    }));
    let report = scrub(&m).await;
    assert_eq!(
        (report.sets, report.sets_reclaimed, report.sets_lost),
        (1, 0, 0),
        "{report:?}"
    );
}

/// The old version stays on a full device while the overwrite lands on the others. The device
/// must leave service, or a read that prefers it returns the old version.
#[tokio::test(start_paused = true)]
async fn a_full_device_leaves_service_and_writes_go_on_without_it() {
    for mech in ["rep3", "split3+3"] {
        let (m, flaky, recorded) = array(mech, FaultPolicy::default()).await;
        let keys = keys_with_primary(&m, 3, 20);
        for k in &keys {
            m.put(k, b"old version", StoreMode::Upsert, None)
                .await
                .unwrap();
        }
        m.sync().await.unwrap();
        flaky[3].full.store(true, Ordering::SeqCst);
        for k in &keys {
            m.put(k, b"new version", StoreMode::Upsert, None)
                .await
                .unwrap_or_else(|e| panic!("{mech}: a write with enough devices failed: {e}"));
        }
        m.sync().await.unwrap();
        for k in &keys {
            let (got, _) = m.get(k, ReadRange::ALL).await.unwrap();
            assert_eq!(got, b"new version", "{mech}: an old version was read");
        }
        assert!(m.devices().is_failed(3), "{mech}");
        assert_eq!(*recorded.lock().unwrap(), vec![3], "{mech}");
    }
}

/// A device that stops answering is cut off by the timeout: reads decode around it, and the
/// first write that times out on it (a put, or the rewrite of a piece a read could not get)
/// takes it out of service; writes finish without it.
#[tokio::test(start_paused = true)]
async fn a_hung_device_is_cut_off_by_the_timeout() {
    let faults = FaultPolicy {
        op_timeout: Some(Duration::from_secs(2)),
        ..FaultPolicy::default()
    };
    let (m, flaky, recorded) = array("split3+3", faults).await;
    let keys = keys_with_primary(&m, 0, 5);
    for k in &keys {
        m.put(k, &vec![7u8; 9000], StoreMode::Upsert, None)
            .await
            .unwrap();
    }
    flaky[0].hung.store(true, Ordering::SeqCst);
    let t = tokio::time::Instant::now();
    for k in &keys {
        assert_eq!(m.get(k, ReadRange::ALL).await.unwrap().0, vec![7u8; 9000]);
    }
    for k in &keys {
        m.put(k, &vec![8u8; 9000], StoreMode::Upsert, None)
            .await
            .unwrap();
    }
    assert!(m.devices().is_failed(0));
    assert_eq!(*recorded.lock().unwrap(), vec![0]);
    assert!(m.devices().counters.timeouts.load(Ordering::Relaxed) > 0);
    assert!(t.elapsed() < Duration::from_secs(60), "{:?}", t.elapsed());
    for k in &keys {
        assert_eq!(m.get(k, ReadRange::ALL).await.unwrap().0, vec![8u8; 9000]);
    }
}

#[tokio::test(start_paused = true)]
async fn a_sync_fails_when_more_devices_fail_in_it_than_the_tolerance() {
    for mech in ["rep3", "split3+3"] {
        let (m, flaky, recorded) = array(mech, FaultPolicy::default()).await;
        m.put(b"k", b"v1", StoreMode::Upsert, None).await.unwrap();
        // One device failing in the sync: within the tolerance of 2.
        flaky[1].failing_syncs.store(true, Ordering::SeqCst);
        m.sync()
            .await
            .unwrap_or_else(|e| panic!("{mech}: one device out: {e}"));
        assert_eq!(*recorded.lock().unwrap(), vec![1], "{mech}");
        // Three more: what the sync covers may now be durable nowhere, and it must say so.
        m.put(b"k", b"v2", StoreMode::Upsert, None).await.unwrap();
        for d in [0, 2, 4] {
            flaky[d].failing_syncs.store(true, Ordering::SeqCst);
        }
        let res = m.sync().await;
        assert!(
            res.is_err(),
            "{mech}: a sync with {} devices out of service succeeded",
            recorded.lock().unwrap().len()
        );
    }
}

/// Devices that left service before a sync are not synced at all; when they are more than the
/// tolerance, the sync must still fail (it succeeded vacuously over devices that had all
/// failed, so a store answered writes after a power cut had taken every device).
#[tokio::test(start_paused = true)]
async fn a_sync_fails_when_more_devices_failed_before_it_than_the_tolerance() {
    let (m, _flaky, _) = array("rep3", FaultPolicy::default()).await;
    m.put(b"k", b"v1", StoreMode::Upsert, None).await.unwrap();
    for d in [0, 1] {
        m.devices().mark_failed(d);
    }
    m.sync().await.expect("two out: within rep3's tolerance");
    m.devices().mark_failed(2);
    assert!(m.sync().await.is_err(), "a sync with three out succeeded");
    for d in 3..6 {
        m.devices().mark_failed(d);
    }
    assert!(
        m.sync().await.is_err(),
        "a sync with every device out succeeded"
    );
}

/// `holds` may say "absent" only where a read finds nothing: not when the primary lost its
/// piece (a read finds another), not when a device of the group cannot be asked (NBD block
/// status reports what it says is absent as a hole, which a copy then skips).
#[tokio::test(start_paused = true)]
async fn holds_says_absent_only_where_a_read_finds_nothing() {
    for mech in ["rep3", "split3+3", "pack3+3"] {
        let (m, flaky, _) = array(mech, FaultPolicy::default()).await;
        let keys = keys_with_primary(&m, 0, 2);
        let (key, other) = (&keys[0], &keys[1]);
        assert!(!m.holds(key).await.unwrap(), "{mech}: never written");
        m.put(key, b"payload", StoreMode::Upsert, None)
            .await
            .unwrap();
        m.sync().await.unwrap();
        assert!(m.holds(key).await.unwrap(), "{mech}: written");
        // The primary loses its piece (behind the manager's back, so nothing is cached): a
        // read still finds the object, and so does holds.
        let fresh = Manager::open(
            flaky.iter().map(|f| f.clone() as Arc<dyn Device>).collect(),
            ManagerConfig {
                policy: Policy::Standalone(Mechanism::parse(mech).unwrap()),
                ..ManagerConfig::default()
            },
        )
        .await
        .unwrap();
        let mut piece = vec![b'o'];
        piece.extend_from_slice(key);
        flaky[0].inner.delete(&piece, false).await.unwrap();
        assert!(
            fresh.holds(key).await.unwrap(),
            "{mech}: primary piece lost"
        );
        assert_eq!(fresh.get(key, ReadRange::ALL).await.unwrap().0, b"payload");
        // Deleted: absent again.
        m.delete(key).await.unwrap();
        m.sync().await.unwrap();
        assert!(!m.holds(key).await.unwrap(), "{mech}: deleted");
        // A device of the group out of service: nothing can be ruled out.
        let d = m.layout().place(other).device(1);
        m.devices().mark_failed(d);
        assert!(m.holds(other).await.unwrap(), "{mech}: device {d} failed");
    }
}
