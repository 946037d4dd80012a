//! The checks of a running store against the model after every step and open.

use super::*;

impl World<'_> {
    /// Checks the running store against the model: every key read whole and compared, the
    /// listing against the reads and the model, a listing with a prefix and a delimiter, a few
    /// ranged reads. The first check after an open narrows what a crash left uncertain.
    pub(super) fn check(&mut self) -> Flow {
        let narrow = std::mem::take(&mut self.fresh);
        let beyond = self.breached;
        let mut rng = ChaCha8Rng::seed_from_u64(mix(
            self.seed ^ 0xC4EC,
            self.stats.opens << 16 | self.step as u64,
        ));
        let prefix = PREFIXES[rng.gen_range(0..PREFIXES.len())];
        let delimiter = rng.gen_bool(0.5);
        let max_keys = rng.gen_range(1..=4);
        let ranged: Vec<(usize, RangeSpec)> = (0..3)
            .map(|_| {
                let key = rng.gen_range(0..KEYS.len());
                let spec = if rng.gen_bool(0.3) {
                    RangeSpec::Suffix(rng.gen_range(1..100_000))
                } else {
                    let first = rng.gen_range(0..150_000);
                    RangeSpec::FromTo {
                        first,
                        last: rng.gen_bool(0.6).then(|| first + rng.gen_range(0..80_000)),
                    }
                };
                (key, spec)
            })
            .collect();
        let live = self.live.as_ref().expect("a check needs a running store");
        let store = live.store.clone();
        let ranged2 = ranged.clone();
        let seen = live.rt.block_on(async move {
            let mut reads = Vec::new();
            for k in KEYS {
                reads.push(ops::read(&store, k, None).await);
            }
            let mut heads: Vec<Result<u64, bool>> = Vec::new();
            for k in KEYS {
                heads.push(match store.head_object(BUCKET, k).await {
                    Ok(i) => Ok(i.size),
                    Err(StoreError::NoSuchKey { .. }) => Err(true),
                    Err(_) => Err(false),
                });
            }
            let full = ops::list(&store, "", false, 1000).await;
            let part = ops::list(&store, prefix, delimiter, max_keys).await;
            let mut ranges = Vec::new();
            for (k, spec) in ranged2 {
                ranges.push(ops::read(&store, KEYS[k], Some(spec)).await);
            }
            let volumes = crate::volume::read_all(store.clone()).await;
            let status = store.status().await;
            let bucket = store.head_bucket(BUCKET).map_err(|e| e.to_string());
            Seen {
                reads,
                heads,
                full,
                part,
                ranges,
                volumes,
                status,
                bucket,
            }
        });
        let mut problems = Vec::new();
        // The devices the store has out of service.
        let out: BTreeSet<usize> = seen
            .status
            .devices
            .iter()
            .filter(|d| !d.healthy || d.recorded.is_some_and(|h| h != DeviceHealth::Ok))
            .map(|d| d.index)
            .collect();
        let damage = !out.is_empty();
        if !beyond {
            let spurious: Vec<String> = out
                .difference(&self.broken)
                .map(|d| {
                    format!(
                        "device {d} ({})",
                        seen.status.devices[*d]
                            .error
                            .clone()
                            .unwrap_or_else(|| "no reason given".into())
                    )
                })
                .collect();
            if !spurious.is_empty() {
                problems.push((
                    Kind::Other,
                    format!(
                        "the store took devices out of service that had no fault injected: {}",
                        spurious.join("; ")
                    ),
                ));
            }
        }
        if let Err(e) = &seen.bucket {
            if !(beyond && damage) {
                problems.push((Kind::Data, format!("the bucket is gone: {e}")));
            }
        }
        let mut states = Vec::new();
        // Keys whose read is already reported: the other checks leave them out.
        let mut bad = BTreeSet::new();
        for (k, read) in seen.reads.iter().enumerate() {
            match self.model.check_read(k, read, beyond, damage) {
                Ok(s) => {
                    if s.is_none() {
                        match read {
                            Read::Absent => {
                                self.model.mark_lost(k);
                                self.stats.lost_reported += 1;
                            }
                            _ => self.stats.reads_refused += 1,
                        }
                    }
                    states.push(s);
                }
                Err(e) => {
                    problems.push((Kind::Data, e));
                    states.push(None);
                    bad.insert(k);
                }
            }
            let head = &seen.heads[k];
            let agree = match (read, head) {
                (Read::Body { size, .. }, Ok(h)) => size == h,
                (Read::Absent, Err(true)) => true,
                (Read::Error(_), _) => true,
                _ => false,
            };
            if !agree && !beyond && !bad.contains(&k) {
                problems.push((
                    Kind::Data,
                    format!(
                        "{:?}: the description (head) disagrees with the read: head {head:?}{}",
                        KEYS[k],
                        self.model.marks(k)
                    ),
                ));
            }
        }
        match &seen.full {
            Ok(listed) => {
                for (k, read) in seen.reads.iter().enumerate() {
                    let is_listed = listed.iter().any(|l| l == KEYS[k]);
                    let problem = match read {
                        Read::Body { .. } if !is_listed => Some("readable but not listed"),
                        Read::Absent if is_listed && !beyond => {
                            Some("listed but a read says there is no such key")
                        }
                        Read::Error(_) if is_listed && !beyond => Some("listed but unreadable"),
                        _ => None,
                    };
                    if let Some(p) = problem.filter(|_| !bad.contains(&k)) {
                        problems.push((
                            Kind::Data,
                            format!("{:?}: {p}{}", KEYS[k], self.model.marks(k)),
                        ));
                    }
                }
            }
            Err(e) if !beyond => {
                problems.push((Kind::Data, format!("listing the bucket failed: {e}")))
            }
            Err(_) => {}
        }
        if self.verbose {
            let shown: Vec<String> = states
                .iter()
                .enumerate()
                .map(|(k, s)| format!("{}={s:?}/{}", KEYS[k], self.model.show(k)))
                .collect();
            eprintln!(
                "    check (narrow {narrow}, out of service {:?}): {}",
                seen.status
                    .devices
                    .iter()
                    .filter(|d| !d.healthy || d.recorded.is_some_and(|h| h != DeviceHealth::Ok))
                    .map(|d| d.index)
                    .collect::<Vec<_>>(),
                shown.join(" ")
            );
        }
        if narrow {
            for (k, s) in states.iter().enumerate() {
                if let Some(s) = s {
                    if self.model.key(k).states.len() > 1 {
                        self.stats.narrowed += 1;
                    }
                    self.model.narrow(k, *s);
                }
            }
        }
        if let Ok(listed) = &seen.full {
            if let Err(e) = self.model.check_listing("", false, listed, &bad) {
                if !beyond {
                    problems.push((Kind::Data, e));
                }
            }
        }
        match &seen.part {
            Ok(listed) => {
                if let Err(e) = self.model.check_listing(prefix, delimiter, listed, &bad) {
                    if !beyond {
                        problems.push((Kind::Data, e));
                    }
                }
            }
            Err(e) if !beyond => {
                problems.push((Kind::Data, format!("listing {prefix:?} failed: {e}")))
            }
            Err(_) => {}
        }
        for ((k, spec), read) in ranged.iter().zip(&seen.ranges) {
            if bad.contains(k) {
                continue;
            }
            if let Err(e) = self.model.check_range(*k, *spec, read, beyond, damage) {
                problems.push((Kind::Data, e));
            }
        }
        let after_crash = std::mem::take(&mut self.volumes_crashed);
        for (vol, read) in seen.volumes.iter().enumerate() {
            match read {
                Ok(bytes) if beyond => self.volumes.reset(vol, bytes),
                Ok(bytes) => {
                    for p in self.volumes.check(vol, bytes, after_crash) {
                        problems.push((Kind::Data, p));
                    }
                }
                Err(_) if beyond => {}
                Err(e) => problems.push((
                    Kind::Data,
                    format!("volume {} unreadable: {e}", crate::volume::VOLUMES[vol].0),
                )),
            }
        }
        for (kind, p) in problems {
            self.violation(kind, p);
        }
        self.halt_if_failed()
    }
}

struct Seen {
    reads: Vec<Read>,
    heads: Vec<Result<u64, bool>>,
    full: Result<Vec<String>, String>,
    part: Result<Vec<String>, String>,
    ranges: Vec<Read>,
    volumes: Vec<Result<Vec<u8>, String>>,
    status: railstore_store::StoreStatus,
    bucket: Result<railstore_store::BucketInfo, String>,
}
