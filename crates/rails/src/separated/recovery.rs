//! Journal recovery: the replay at start-up ([`Rails::recover`]), and the readmission of a
//! replaced device while the array serves. Both move device watermarks past journal records
//! that must never be replayed (module docs of `separated` say why a replay is safe).

use super::*;

impl Rails {
    /// The replay behind [`Rails::recover`].
    pub(super) async fn replay_journal(&self) -> Result<JournalRecovery, DeviceError> {
        let n = self.devices.len();
        let mut rep = JournalRecovery {
            replayed_per_device: vec![0; n],
            ..JournalRecovery::default()
        };
        let failed = |rep: &mut JournalRecovery, x: usize, e: &DeviceError| {
            tracing::warn!(device = x, error = %e, "device failed during journal recovery");
            self.fail_device(x);
            if !rep.failed_devices.contains(&x) {
                rep.failed_devices.push(x);
            }
        };
        // 1. Each device's watermark.
        let mut wm = vec![0u64; n];
        for (d, st) in self.devices.all().iter().enumerate() {
            if self.is_failed(d) {
                continue;
            }
            let entries =
                match iterate_all(st.inner.as_ref(), &journal::WATERMARK_KEY_PREFIX, true).await {
                    Ok(e) => e,
                    Err(e) if fatal(&e) => {
                        failed(&mut rep, d, &e);
                        continue;
                    }
                    Err(e) => return Err(e),
                };
            for e in entries {
                let owner = journal::parse_watermark_key(&e.key);
                let (dev, tag) = match journal::decode_watermark(e.value.as_deref().unwrap_or(&[]))
                {
                    Ok(w) => w,
                    Err(e) => {
                        // Without its watermark nobody knows which records the device has
                        // applied, and replaying applied ones could put old versions back: it
                        // leaves service until rebuilt.
                        failed(&mut rep, d, &e);
                        break;
                    }
                };
                if owner != Some(dev) || dev as usize != d {
                    return Err(DeviceError::Config(format!(
                        "device {d} holds the journal watermark of device {dev}: devices must \
                         come in the order they had when the journal was written"
                    )));
                }
                wm[d] = wm[d].max(tag);
            }
        }
        // 2. Every journal record key, per (target, tag), with the devices holding it.
        let mut records: BTreeMap<(u32, u64), Vec<usize>> = BTreeMap::new();
        for (x, st) in self.devices.all().iter().enumerate() {
            if self.is_failed(x) {
                continue;
            }
            match iterate_all(st.inner.as_ref(), &journal::JOURNAL_KEY_PREFIX, false).await {
                Ok(entries) => {
                    for e in entries {
                        rep.records_found += 1;
                        match journal::parse_record_key(&e.key) {
                            Some(k) => records.entry(k).or_default().push(x),
                            None => rep.corrupt += 1,
                        }
                    }
                }
                Err(e) if fatal(&e) => failed(&mut rep, x, &e),
                Err(e) => return Err(e),
            }
        }
        // 3. Replay, per device in tag order, the records above its watermark.
        let mut high = wm.clone();
        for (&(t, g), holders) in &records {
            let t = t as usize;
            if t >= n {
                rep.orphaned += 1;
                continue;
            }
            high[t] = high[t].max(g);
            if g <= wm[t] {
                rep.stale += 1;
                continue;
            }
            if self.is_failed(t) {
                continue;
            }
            if self.replaced.lock().unwrap().contains(&t) {
                // The watermark below moves past it, and the journal goes.
                rep.stale += 1;
                continue;
            }
            let mut record = None;
            for &x in holders {
                if self.is_failed(x) {
                    continue;
                }
                let key = journal::record_key(t as u32, g);
                match self
                    .devices
                    .get(x)
                    .inner
                    .retrieve(&key, ReadRange::ALL)
                    .await
                {
                    Ok(r) => match journal::decode_record(&key, &r.value) {
                        Ok(rec) => {
                            record = Some(rec);
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(device = x, error = %e, "skipping a corrupt journal record");
                            rep.corrupt += 1;
                        }
                    },
                    Err(e) if fatal(&e) => failed(&mut rep, x, &e),
                    Err(DeviceError::Corrupt { .. }) => rep.corrupt += 1,
                    Err(e) => return Err(e),
                }
            }
            let Some(rec) = record else { continue };
            match self.apply(t, &rec.key, &rec.op).await {
                Ok(()) => {
                    rep.replayed += 1;
                    rep.replayed_per_device[t] += 1;
                    self.devices
                        .get(t)
                        .counters
                        .journal_replayed
                        .fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if fatal(&e) => failed(&mut rep, t, &e),
                Err(e) => return Err(e),
            }
        }
        // 4. Make the replays durable, then move each watermark past every record seen (so
        //    they are never replayed again), durably; new tags start above.
        for (t, st) in self.devices.all().iter().enumerate() {
            // A failed device's tags too: its records stay, and a device readmitted in its
            // place must get tags above them (`readmit`).
            st.next_tag.fetch_max(high[t] + 1, Ordering::SeqCst);
            if self.is_failed(t) {
                continue;
            }
            if high[t] > wm[t] {
                let res = async {
                    st.inner.sync().await?;
                    st.inner
                        .store(
                            &journal::watermark_key(t as u32),
                            &journal::encode_watermark(t as u32, high[t]),
                            StoreMode::Upsert,
                        )
                        .await?;
                    st.inner.sync().await
                }
                .await;
                match res {
                    Ok(()) => {}
                    Err(e) if fatal(&e) => {
                        failed(&mut rep, t, &e);
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            st.next_tag.store(high[t] + 1, Ordering::SeqCst);
            st.wm_stored.store(high[t], Ordering::SeqCst);
            st.wm_durable.store(high[t], Ordering::SeqCst);
        }
        // 5. Delete the records: all are now at or below a durable watermark (or orphaned). A
        //    failed device's records stay; it may be brought back. A delete lost to a crash
        //    leaves a stale record, which the next recovery skips and deletes.
        let mut touched = vec![false; n];
        for (&(t, g), holders) in &records {
            let t = t as usize;
            if t < n && self.is_failed(t) {
                continue;
            }
            for &x in holders {
                if self.is_failed(x) {
                    continue;
                }
                match self
                    .devices
                    .get(x)
                    .inner
                    .delete(&journal::record_key(t as u32, g), false)
                    .await
                {
                    Ok(_) => {
                        rep.deleted += 1;
                        touched[x] = true;
                        if t < n {
                            self.devices
                                .get(t)
                                .counters
                                .journal_deleted
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) if fatal(&e) => failed(&mut rep, x, &e),
                    Err(e) => return Err(e),
                }
            }
        }
        for (x, _) in touched.iter().enumerate().filter(|(_, t)| **t) {
            if self.is_failed(x) {
                continue;
            }
            if let Err(e) = self.devices.get(x).inner.sync().await {
                if !fatal(&e) {
                    return Err(e);
                }
                failed(&mut rep, x, &e);
            }
        }
        if rep.records_found > 0 {
            tracing::info!(?rep, "journal recovered");
        }
        Ok(rep)
    }

    /// Failed device `d` now holds an empty replacement (a `DeviceSlot` swapped under rails)
    /// that is being rebuilt while the array serves: it takes writes again, in every frame
    /// until [`Rails::rebuilt`] (it serves no reads meanwhile). Its watermark is
    /// first stored on it, durably, past every tag given to the device it replaces, so no
    /// journal record of the old device is ever replayed onto it (the records left from before
    /// go as stale at their holders' next deletes, or at the next recovery).
    pub async fn readmit(&self, d: usize) -> Result<(), DeviceError> {
        let st = &self.devices.get(d);
        let _flush = st.flush_lock.lock().await;
        let past = st.next_tag.load(Ordering::SeqCst).saturating_sub(1);
        st.inner
            .store(
                &journal::watermark_key(d as u32),
                &journal::encode_watermark(d as u32, past),
                StoreMode::Upsert,
            )
            .await?;
        st.inner.sync().await?;
        st.wm_stored.store(past, Ordering::SeqCst);
        st.wm_durable.store(past, Ordering::SeqCst);
        st.lost.lock().unwrap().clear();
        st.failed.store(false, Ordering::SeqCst);
        // It writes in every frame until `rebuilt`: its rebuild runs at the device's write
        // speed, not only in its writer frames.
        st.rebuilding.store(true, Ordering::SeqCst);
        self.replaced.lock().unwrap().retain(|&x| x != d);
        tracing::info!(
            device = d,
            watermark = past,
            "replacement device takes writes"
        );
        st.work.notify_one();
        st.room.notify_waiters();
        Ok(())
    }
}
