//! S3 versioning against a model: random puts, deletes, deletes of versions, changes of the
//! bucket's versioning state and restarts, seeded; after each step every listing, current
//! object and version reads as the model says. Then the same runs with power cuts at random
//! points: after restart the bucket is as the model had it before the step in flight or after
//! it, never anything else (no acknowledged version lost, no deleted one back).
//!
//! A failing seed prints itself; `VERSIONS_SEED=n` replays that one alone.

use railstore_device::{
    Device, DeviceInfo, FaultConfig, FaultyDevice, IterBatch, IterRequest, Limits, MemDevice,
    ReadRange, Retrieved, StoreMode,
};
use railstore_store::{
    body_from, collect_body, version_name, PutOptions, Store, StoreConfig, StoreError,
    VersionQuery, Versioning,
};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const BUCKET: &str = "bkt";
const KEYS: [&str; 4] = ["a", "b/1", "b/2", "c"];

fn config(dir: &Path) -> StoreConfig {
    let mut c = StoreConfig {
        data_dir: dir.to_path_buf(),
        inline_bytes_max: 4 << 10,
        chunk_bytes: 64 << 10,
        ..StoreConfig::default()
    };
    c.separation = None;
    c
}

/// Bodies inline, in one chunk, in several, and empty.
fn body(rng: &mut ChaCha8Rng) -> Vec<u8> {
    let len = [0usize, 300, 20_000, 150_000][rng.gen_range(0..4)];
    let mut v = vec![0u8; len];
    rng.fill(v.as_mut_slice());
    v
}

/// One version as the model has it: its id (`None`: the null version; `"?"`: made by a
/// step the store never answered), whether it is a delete marker, its body.
#[derive(Clone, PartialEq, Eq)]
struct Version {
    id: Option<String>,
    marker: bool,
    body: Vec<u8>,
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sum = self
            .body
            .iter()
            .fold(0u32, |a, b| a.rotate_left(5) ^ *b as u32);
        match self.marker {
            true => write!(f, "marker {:?}", self.id),
            false => write!(
                f,
                "{:?} ({} bytes, sum {sum:08x})",
                self.id,
                self.body.len()
            ),
        }
    }
}

/// Per key, its versions newest first; and the bucket's versioning state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Model {
    mode: Versioning,
    keys: BTreeMap<String, Vec<Version>>,
}

#[derive(Debug, Clone)]
enum Step {
    Mode(Versioning),
    Put(String, Vec<u8>),
    Delete(String),
    /// A version by its id (`"null"` for the null version; a made-up id for a missing one).
    DeleteVersion(String, String),
    Restart,
}

impl Model {
    fn new() -> Model {
        Model {
            mode: Versioning::Unversioned,
            keys: BTreeMap::new(),
        }
    }

    /// The model after `step`; `made` is the version id the store gave a new version.
    fn apply(&self, step: &Step, made: Option<String>) -> Model {
        let mut m = self.clone();
        let new = |marker: bool, body: Vec<u8>| Version {
            id: made.clone(),
            marker,
            body,
        };
        match step {
            Step::Mode(v) => m.mode = *v,
            Step::Put(k, b) => {
                let vs = m.keys.entry(k.clone()).or_default();
                match m.mode {
                    Versioning::Unversioned => vs.clear(),
                    Versioning::Suspended => vs.retain(|v| v.id.is_some()),
                    Versioning::Enabled => {}
                }
                vs.insert(0, new(false, b.clone()));
            }
            Step::Delete(k) => {
                let vs = m.keys.entry(k.clone()).or_default();
                match m.mode {
                    Versioning::Unversioned => vs.clear(),
                    Versioning::Suspended => {
                        vs.retain(|v| v.id.is_some());
                        vs.insert(0, new(true, Vec::new()));
                    }
                    Versioning::Enabled => vs.insert(0, new(true, Vec::new())),
                }
            }
            Step::DeleteVersion(k, id) => {
                if let Some(vs) = m.keys.get_mut(k) {
                    vs.retain(|v| version_name(v.id.as_deref()) != id);
                }
            }
            Step::Restart => {}
        }
        m.keys.retain(|_, vs| !vs.is_empty());
        m
    }

    /// A random step that fits the model.
    fn step(&self, rng: &mut ChaCha8Rng) -> Step {
        let key = KEYS[rng.gen_range(0..KEYS.len())].to_string();
        match rng.gen_range(0..100) {
            0..=4 if self.mode != Versioning::Enabled => Step::Mode(Versioning::Enabled),
            0..=4 => Step::Mode(Versioning::Suspended),
            5..=7 => Step::Restart,
            8..=44 => Step::Put(key, body(rng)),
            45..=64 => Step::Delete(key),
            _ => {
                let ids: Vec<String> = self
                    .keys
                    .get(&key)
                    .into_iter()
                    .flatten()
                    .map(|v| version_name(v.id.as_deref()).to_string())
                    .collect();
                let id = match ids.len() {
                    0 => format!("{:032x}", rng.gen::<u128>()),
                    n => ids[rng.gen_range(0..n)].clone(),
                };
                Step::DeleteVersion(key, id)
            }
        }
    }
}

fn step_name(step: &Step) -> String {
    match step {
        Step::Put(k, b) => format!("Put({k}, {} bytes)", b.len()),
        s => format!("{s:?}"),
    }
}

/// Runs `step` on the store; returns the version id it made, if any.
async fn run(store: &Store, step: &Step) -> Result<Option<String>, StoreError> {
    match step {
        Step::Mode(v) => store.set_versioning(BUCKET, *v).await.map(|_| None),
        Step::Put(k, b) => {
            let info = store
                .put_object(BUCKET, k, body_from(b.clone()), PutOptions::default())
                .await?;
            Ok(info.version_id)
        }
        Step::Delete(k) => Ok(store.delete_object_if(BUCKET, k, None).await?.version_id),
        Step::DeleteVersion(k, id) => store
            .delete_version(BUCKET, k, id, None, false)
            .await
            .map(|_| None),
        Step::Restart => Ok(None),
    }
}

/// The bucket's versions as the store lists them, a page of `page` at a time, with each
/// version's body read by its id.
async fn observed(store: &Store, page: usize) -> BTreeMap<String, Vec<Version>> {
    let mut out: BTreeMap<String, Vec<Version>> = BTreeMap::new();
    let mut q = VersionQuery {
        max_keys: page,
        ..VersionQuery::default()
    };
    loop {
        let p = store.list_versions(BUCKET, &q).unwrap();
        assert!(p.versions.len() <= page);
        for v in p.versions {
            let vs = out.entry(v.info.key.clone()).or_default();
            assert_eq!(v.latest, vs.is_empty(), "{}: latest flag", v.info.key);
            let name = version_name(v.info.version_id.as_deref()).to_string();
            let body = match store
                .get_object_version(BUCKET, &v.info.key, Some(&name), None)
                .await
            {
                Ok(g) => collect_body(g.body).await.unwrap(),
                Err(StoreError::DeleteMarker(_)) => {
                    assert!(v.info.delete_marker, "{}/{name}: not a marker", v.info.key);
                    Vec::new()
                }
                Err(e) => panic!("{}/{name}: {e}", v.info.key),
            };
            vs.push(Version {
                id: v.info.version_id,
                marker: v.info.delete_marker,
                body,
            });
        }
        if !p.truncated {
            break;
        }
        q.key_marker = p.next_key_marker;
        q.version_marker = p.next_version_marker;
    }
    out
}

/// Checks the store against the model: versions, current objects, the plain listing.
async fn check(store: &Store, model: &Model, page: usize, seed: u64) {
    assert_eq!(
        store.versioning(BUCKET).unwrap(),
        model.mode,
        "seed {seed}: versioning state"
    );
    assert_eq!(
        observed(store, page).await,
        model.keys,
        "seed {seed}: versions (left: store, right: model)"
    );
    for key in KEYS {
        let want = model
            .keys
            .get(key)
            .and_then(|vs| vs.first())
            .filter(|v| !v.marker);
        match (store.get_object(BUCKET, key, None).await, want) {
            (Ok(g), Some(v)) => {
                assert_eq!(
                    collect_body(g.body).await.unwrap(),
                    v.body,
                    "seed {seed}: {key}"
                )
            }
            (Err(StoreError::NoSuchKey { .. }), None) => {
                let marker = model.keys.contains_key(key);
                assert_eq!(
                    store.latest_delete_marker(BUCKET, key).is_some(),
                    marker,
                    "seed {seed}: {key}: the marker that hides it"
                );
            }
            (got, want) => panic!(
                "seed {seed}: {key}: read {:?}, model has {:?}",
                got.map(|g| g.info),
                want.map(|v| v.body.len())
            ),
        }
    }
    let listed: Vec<String> = store
        .list_objects(
            BUCKET,
            &railstore_store::ListQuery {
                max_keys: 1000,
                ..Default::default()
            },
        )
        .unwrap()
        .objects
        .into_iter()
        .map(|o| o.key)
        .collect();
    let current: Vec<String> = model
        .keys
        .iter()
        .filter(|(_, vs)| !vs[0].marker)
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(listed, current, "seed {seed}: plain listing");
}

fn seeds(default: std::ops::Range<u64>) -> Vec<u64> {
    match std::env::var("VERSIONS_SEED") {
        Ok(s) => vec![s.parse().expect("VERSIONS_SEED is a number")],
        Err(_) => default.collect(),
    }
}

fn mems(n: usize) -> Vec<Arc<MemDevice>> {
    (0..n)
        .map(|_| Arc::new(MemDevice::new(Default::default()).unwrap()))
        .collect()
}

fn plain(mems: &[Arc<MemDevice>]) -> Vec<Arc<dyn Device>> {
    mems.iter().map(|m| m.clone() as Arc<dyn Device>).collect()
}

/// Waits until no store in this process holds the data folder's lock (what a process exit
/// does at once); a seed that never lets go fails with its number.
async fn wait_for_exit(dir: &std::path::Path, seed: u64) {
    let lock = std::fs::File::open(dir.join("lock")).unwrap();
    for _ in 0..600 {
        if lock.try_lock().is_ok() {
            lock.unlock().unwrap();
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("seed {seed}: the dropped store still holds the data folder after 30 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_follow_the_model_through_restarts() {
    for seed in seeds(0..12) {
        eprintln!("seed {seed}");
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let mems = mems(cfg.device_count());
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut store = Store::open_with_devices(cfg.clone(), plain(&mems))
            .await
            .unwrap();
        store.create_bucket(BUCKET).await.unwrap();
        let mut model = Model::new();
        let mut made = std::collections::HashSet::new();
        for _ in 0..60 {
            let step = model.step(&mut rng);
            let id = run(&store, &step)
                .await
                .unwrap_or_else(|e| panic!("seed {seed}: {step:?}: {e}"));
            if let Some(id) = &id {
                assert!(
                    made.insert(id.clone()),
                    "seed {seed}: version id {id} twice"
                );
            }
            let enabled = model.mode == Versioning::Enabled;
            let new_version = matches!(step, Step::Put(..) | Step::Delete(..));
            assert_eq!(
                id.is_some(),
                enabled && new_version,
                "seed {seed}: {step:?} made {id:?}"
            );
            model = model.apply(&step, id);
            if let Step::Restart = step {
                store.shutdown().await.unwrap();
                drop(store);
                store = Store::open_with_devices(cfg.clone(), plain(&mems))
                    .await
                    .unwrap();
            }
            check(&store, &model, rng.gen_range(1..5), seed).await;
        }
        store.shutdown().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_with_versions_is_not_empty() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path());
    let mems = mems(cfg.device_count());
    let store = Store::open_with_devices(cfg, plain(&mems)).await.unwrap();
    store.create_bucket(BUCKET).await.unwrap();
    store
        .set_versioning(BUCKET, Versioning::Enabled)
        .await
        .unwrap();
    let put = store
        .put_object(BUCKET, "k", body_from(b"x".to_vec()), PutOptions::default())
        .await
        .unwrap();
    let marker = store.delete_object_if(BUCKET, "k", None).await.unwrap();
    assert!(marker.delete_marker);
    assert!(matches!(
        store.delete_bucket(BUCKET).await,
        Err(StoreError::BucketNotEmpty(_))
    ));
    for id in [marker.version_id, put.version_id] {
        let d = store
            .delete_version(BUCKET, "k", id.as_deref().unwrap(), None, false)
            .await
            .unwrap();
        assert!(d.existed);
    }
    assert!(matches!(
        store.set_versioning(BUCKET, Versioning::Unversioned).await,
        Err(StoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        store
            .get_object_version(BUCKET, "k", Some("not-an-id"), None)
            .await,
        Err(StoreError::InvalidArgument(_))
    ));
    store.delete_bucket(BUCKET).await.unwrap();
    store.shutdown().await.unwrap();
}

/// Whether `got` is `want` with the version ids of versions the store never named (`"?"`)
/// taken as any id.
fn matches_model(got: &BTreeMap<String, Vec<Version>>, want: &Model) -> bool {
    got.len() == want.keys.len()
        && got.iter().zip(&want.keys).all(|((gk, gv), (wk, wv))| {
            gk == wk
                && gv.len() == wv.len()
                && gv.iter().zip(wv).all(|(g, w)| {
                    g.marker == w.marker
                        && g.body == w.body
                        && (w.id.as_deref() == Some("?") && g.id.is_some() || g.id == w.id)
                })
        })
}

/// The power of the whole array: it goes off for every device at once at the `at`-th write,
/// delete or sync any device receives. Nothing reaches a device after that.
struct Power {
    writes: AtomicU64,
    at: u64,
}

impl Power {
    /// Counts a write; an error once the power is off.
    fn tick(&self) -> railstore_device::Result<()> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst) + 1;
        match n >= self.at {
            true => Err(railstore_device::DeviceError::Failed {
                reason: "power cut",
            }),
            false => Ok(()),
        }
    }

    fn is_off(&self) -> bool {
        self.writes.load(Ordering::SeqCst) >= self.at
    }

    fn check(&self) -> railstore_device::Result<()> {
        match self.is_off() {
            true => Err(railstore_device::DeviceError::Failed {
                reason: "power cut",
            }),
            false => Ok(()),
        }
    }
}

/// A device on the array's power.
struct Powered {
    device: Arc<FaultyDevice>,
    power: Arc<Power>,
}

#[async_trait::async_trait]
impl Device for Powered {
    async fn store(
        &self,
        key: &[u8],
        value: &[u8],
        mode: StoreMode,
    ) -> railstore_device::Result<()> {
        self.power.tick()?;
        self.device.store(key, value, mode).await
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> railstore_device::Result<Retrieved> {
        self.power.check()?;
        self.device.retrieve(key, range).await
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> railstore_device::Result<bool> {
        self.power.tick()?;
        self.device.delete(key, must_exist).await
    }

    async fn exist(&self, keys: &[&[u8]]) -> railstore_device::Result<Vec<bool>> {
        self.power.check()?;
        self.device.exist(keys).await
    }

    async fn iterate(&self, req: &IterRequest) -> railstore_device::Result<IterBatch> {
        self.power.check()?;
        self.device.iterate(req).await
    }

    async fn info(&self) -> railstore_device::Result<DeviceInfo> {
        self.device.info().await
    }

    async fn sync(&self) -> railstore_device::Result<()> {
        self.power.tick()?;
        self.device.sync().await
    }

    fn limits(&self) -> Limits {
        self.device.limits()
    }
}

// One thread: the devices see their writes in the same order on every run of a seed.
#[tokio::test]
async fn a_power_cut_leaves_the_versions_before_or_after_the_step_in_flight() {
    for seed in seeds(0..64) {
        eprintln!("seed {seed}");
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path());
        let mems = mems(cfg.device_count());
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed);
        // Every device loses its unsynced writes at the cut (they sit in a volatile cache until
        // a sync).
        let faulty: Vec<Arc<FaultyDevice>> = mems
            .iter()
            .enumerate()
            .map(|(i, m)| {
                Arc::new(FaultyDevice::new(
                    m.clone(),
                    FaultConfig {
                        seed: seed * 31 + i as u64,
                        volatile_writes: true,
                        ..FaultConfig::default()
                    },
                ))
            })
            .collect();
        let power = Arc::new(Power {
            writes: AtomicU64::new(0),
            at: rng.gen_range(50..6_000),
        });
        let devices: Vec<Arc<dyn Device>> = faulty
            .iter()
            .map(|f| {
                Arc::new(Powered {
                    device: f.clone(),
                    power: power.clone(),
                }) as Arc<dyn Device>
            })
            .collect();
        let store = Store::open_with_devices(cfg.clone(), devices)
            .await
            .unwrap();
        // What the data folder says of the devices at the cut: a dead process records no
        // failures, but this one goes on and records every device failed.
        let state_file = dir.path().join("array.json");
        let state_at_cut = std::fs::read(&state_file).unwrap();
        let cut = || power.is_off();
        let mut model = Model::new();
        let mut in_flight: Option<Step> = None;
        if store.create_bucket(BUCKET).await.is_err() || cut() {
            // Cut before there was anything to keep.
            continue;
        }
        model.mode = Versioning::Unversioned;
        for _ in 0..200 {
            let mut step = model.step(&mut rng);
            if let Step::Restart = step {
                step = Step::Mode(Versioning::Enabled);
            }
            if std::env::var("VERSIONS_SEED").is_ok() {
                eprintln!(
                    "step {} at write {}",
                    step_name(&step),
                    power.writes.load(Ordering::SeqCst)
                );
            }
            match run(&store, &step).await {
                // Answered after the power went out: no client could have had that answer
                // (the process dies with the power), so the step is in flight, not
                // acknowledged. (The store goes on here with its devices failed, and answered
                // within its tolerance.)
                Ok(_) if cut() => {
                    in_flight = Some(step);
                    break;
                }
                // Acknowledged: it must survive, even when a device went down during it.
                Ok(id) => model = model.apply(&step, id),
                Err(_) => {
                    in_flight = Some(step);
                    break;
                }
            }
        }
        eprintln!(
            "seed {seed}: cut at write {} during {:?}",
            power.at,
            in_flight.as_ref().map(step_name)
        );
        for f in &faulty {
            f.crash().await;
        }
        drop(store);
        // The process is gone before the power returns: in a test it is gone once its
        // background tasks (the reaper, mid-pass on the crashed devices) have let go of it,
        // which releases the data folder's lock as the process's exit would.
        wait_for_exit(dir.path(), seed).await;
        for f in &faulty {
            f.restart().await;
        }
        std::fs::write(&state_file, &state_at_cut).unwrap();
        let store = Store::open_with_devices(cfg.clone(), plain(&mems))
            .await
            .unwrap_or_else(|e| panic!("seed {seed}: reopening: {e}"));
        let got = observed(&store, 1000).await;
        let after = in_flight
            .as_ref()
            .map(|s| model.apply(s, Some("?".to_string())));
        let after_null = in_flight.as_ref().map(|s| model.apply(s, None));
        let ok = matches_model(&got, &model)
            || after.as_ref().is_some_and(|a| matches_model(&got, a))
            || after_null.as_ref().is_some_and(|a| matches_model(&got, a));
        assert!(
            ok,
            "seed {seed}: after the cut during {:?}:\nstore: {got:?}\nmodel before: {:?}",
            in_flight.as_ref().map(step_name),
            model.keys
        );
        // The bucket works on: every version still reads, and a new one can be added.
        store
            .put_object(
                BUCKET,
                "a",
                body_from(b"after".to_vec()),
                PutOptions::default(),
            )
            .await
            .unwrap();
        store.shutdown().await.unwrap();
    }
}
