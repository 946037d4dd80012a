//! What happens while the store is down between steps (plan::Stop): the store goes down, a node
//! that was down comes back, repairs, snapshots, stale returns, wipes, a flaky device, the
//! offline commands, and the store opens again; with the harness-side mutations that act there.

use super::*;

impl World<'_> {
    /// Everything that happens while the store is down, then the store opens again.
    pub(super) fn stop(&mut self, stop: &Stop, already_down: bool) -> Flow {
        if !already_down {
            self.down(stop.how)?;
        }
        self.node_returns(&self.present(&stop.returns));
        if !self.breached {
            for d in self.present(&stop.repair) {
                self.rebuild(d)?;
            }
        }
        for d in self.present(&stop.snapshot) {
            let img = self.image(d);
            self.snapshots.insert(d, img);
            self.stats.fault("snapshot");
        }
        if stop.rollback_snapshot {
            let imgs = (0..self.disks.len()).map(|d| self.image(d)).collect();
            self.rollback = Some(imgs);
        }
        for d in self.present(&stop.stale_return) {
            if let Some(img) = self.snapshots.remove(&d) {
                self.replace_disk(d, Some(&img));
                self.broken.insert(d);
                self.device_fault = true;
                self.stats.fault("stale-return");
            }
        }
        for d in self.present(&stop.wipe) {
            self.replace_disk(d, None);
            self.broken.insert(d);
            self.device_fault = true;
            self.stats.fault("wipe");
        }
        if stop.rollback {
            if let Some(imgs) = self.rollback.take() {
                self.undetectable_rollback(imgs);
            }
        }
        if let Some(d) = stop.flaky.filter(|d| *d < self.disks.len()) {
            self.flaky = Some(d);
            self.broken.insert(d);
            self.device_fault = true;
            self.stats.fault("flaky");
        }
        for off in &stop.offline {
            self.offline(*off)?;
        }
        self.open_service()
    }

    /// Mutation: every device back to `imgs`, with its current identity record, so that the
    /// store cannot tell.
    fn undetectable_rollback(&mut self, imgs: Vec<Image>) {
        let id_key = railstore_rails::journal::IDENTITY_KEY;
        for (d, mut img) in imgs.into_iter().enumerate() {
            let mem = self.disks[d].mem.clone();
            let current = self
                .util
                .block_on(async move { mem.retrieve(&id_key, ReadRange::ALL).await.ok() });
            img.retain(|(k, _)| k.as_slice() != id_key.as_slice());
            if let Some(c) = current {
                img.push((id_key.to_vec(), c.value.to_vec()));
            }
            let dead = self.disks[d].dead;
            self.replace_disk(d, Some(&img));
            if dead {
                self.disks[d].dead = true;
                self.disks[d].cache.fail_stop();
            }
        }
        self.stats.fault("mutation-rollback");
    }

    /// Rebuilds device `d` onto an empty device, offline.
    fn rebuild(&mut self, d: usize) -> Flow {
        self.log(format!("rebuild {d}"));
        self.stats.fault("rebuild");
        self.rebuilt = true;
        self.replace_disk(d, None);
        self.stats.opens += 1;
        let rt = virtual_time_runtime().expect("a runtime");
        let gate = self.new_gate();
        let devices = self.devices(&gate);
        let cfg = self.store_cfg.clone();
        let r = rt.block_on(async move {
            tokio::time::timeout(
                LIMIT,
                Store::rebuild_offline_with_devices(
                    cfg,
                    d,
                    devices,
                    RepairOptions::default(),
                    Arc::new(RepairProgress::default()),
                ),
            )
            .await
        });
        drop(rt);
        match r {
            Ok(Ok(report)) => {
                self.stats.repair_lost += report.objects_lost.len() as u64;
            }
            Ok(Err(e)) => {
                self.violation(Kind::Rebuild, format!("rebuilding device {d} failed: {e}"));
            }
            Err(_) => self.violation(Kind::Rebuild, format!("rebuilding device {d} is stuck")),
        }
        self.broken.remove(&d);
        self.halt_if_failed()
    }

    /// A node that was down is back: its devices answer again with what they had made
    /// durable (their volatile caches are gone with the node). They stay broken for the
    /// planner's budget until repaired: the store must find out by itself whether they missed
    /// writes.
    fn node_returns(&mut self, devices: &[usize]) {
        if devices.is_empty() {
            return;
        }
        let caches: Vec<Arc<FaultyDevice>> = devices
            .iter()
            .map(|&d| self.disks[d].cache.clone())
            .collect();
        self.util.block_on(async move {
            for c in caches {
                c.restart().await;
            }
        });
        for &d in devices {
            self.disks[d].dead = false;
        }
        self.log(format!("node back: devices {devices:?}"));
        self.stats.fault("node-return");
        if self.cfg.mutation == Some(Mutation::NodeBackAsCurrent) {
            self.mark_healthy_behind_the_stores_back(devices);
        }
    }

    /// Mutation: `devices` healthy again in the array's state file, as if they had missed
    /// nothing.
    fn mark_healthy_behind_the_stores_back(&mut self, devices: &[usize]) {
        let path = self.store_cfg.data_dir.join("array.json");
        let text = std::fs::read_to_string(&path).expect("the array's state file");
        let mut state: serde_json::Value = serde_json::from_str(&text).expect("its JSON");
        for &d in devices {
            let entry = &mut state["devices"][d];
            entry["health"] = "ok".into();
            if let Some(e) = entry.as_object_mut() {
                e.remove("reason");
            }
        }
        std::fs::write(&path, serde_json::to_vec(&state).expect("JSON")).expect("writing it");
        self.stats.fault("mutation-node-back-current");
    }
}
