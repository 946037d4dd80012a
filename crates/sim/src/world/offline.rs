//! The offline commands run between restarts (plan::Offline), as `railstore status` and
//! `railstore scrub` do: without separation, checked like a running store.

use super::*;
use crate::gate::Gate;

impl World<'_> {
    /// Opens the store as the offline command `what` does (no separation) and checks it;
    /// `false` when it did not open (the command ends there, as the refusal's flow says).
    fn open_offline(&mut self, what: &str) -> Result<bool, Halt> {
        let mut cfg = self.store_cfg.clone();
        cfg.separation = None;
        match self.open(cfg, None) {
            Opened::Live(l) => self.live = Some(l),
            Opened::Refused(e) => return self.refused(what, e).map(|()| false),
            Opened::Stuck => return self.stuck(what).map(|()| false),
            Opened::Crashed(_) => unreachable!("no crash armed"),
        }
        self.fresh = true;
        self.check()?;
        Ok(true)
    }

    pub(super) fn offline(&mut self, off: Offline) -> Flow {
        match off {
            Offline::Status => {
                self.stats.fault("offline-status");
                if !self.open_offline("railstore status")? {
                    return Ok(());
                }
                let live = self.live.as_ref().expect("open");
                let store = live.store.clone();
                let status = live.rt.block_on(async move { store.status().await });
                let surely = (0..KEYS.len())
                    .filter(|k| self.model.surely_present(*k))
                    .count() as u64;
                let maybe = (0..KEYS.len())
                    .filter(|k| self.model.maybe_present(*k))
                    .count() as u64;
                if !self.breached && !(surely..=maybe).contains(&status.objects) {
                    self.violation(
                        Kind::Data,
                        format!(
                            "railstore status counts {} objects; the model has {surely} to {maybe}",
                            status.objects
                        ),
                    );
                }
                self.down(StopHow::Clean)
            }
            Offline::Scrub { crash } => {
                self.stats.fault("offline-scrub");
                if !self.open_offline("railstore scrub")? {
                    return Ok(());
                }
                let live = self.live.as_ref().expect("open");
                if let Some((n, _)) = crash {
                    live.gate.arm_crash(n);
                }
                let store = live.store.clone();
                let g = live.gate.clone();
                let r = live.rt.block_on(async move {
                    tokio::select! {
                        r = tokio::time::timeout(
                            LIMIT,
                            store.scrub(RepairOptions::default(), Arc::new(RepairProgress::default())),
                        ) => Some(r),
                        _ = g.wait_tripped() => None,
                    }
                });
                match r {
                    None => {
                        let power = crash.is_some_and(|(_, p)| p);
                        self.stats.fault("scrub-crash");
                        self.down(if power {
                            StopHow::PowerCut
                        } else {
                            StopHow::ProcessCrash
                        })
                    }
                    Some(Ok(Ok(report))) => {
                        // A crash armed for a scrub that finished first does not happen.
                        if let Some(l) = &self.live {
                            l.gate.disarm();
                        }
                        self.stats.repair_lost += report.objects_lost.len() as u64;
                        self.check()?;
                        self.down(StopHow::Clean)
                    }
                    Some(Ok(Err(e))) => {
                        if let Some(l) = &self.live {
                            l.gate.disarm();
                        }
                        if !self.breached {
                            self.violation(
                                Kind::Other,
                                format!("railstore scrub failed within tolerance: {e}"),
                            );
                        }
                        self.down(StopHow::Clean)
                    }
                    Some(Err(_)) => {
                        let _ = self.down(StopHow::ProcessCrash);
                        self.stuck("railstore scrub")
                    }
                }
            }
            Offline::GrowOrDrain => {
                // An array that owes a scrub (a crash since its last one) is refused: as the
                // refusal tells the operator, scrub it first.
                if !Store::stopped_cleanly(&self.store_cfg) {
                    self.offline(Offline::Scrub { crash: None })?;
                }
                if self.disks.len() == self.cfg.devices {
                    self.grow()
                } else {
                    self.drain()
                }
            }
            Offline::CrashedOpen {
                after_device_ops,
                power,
            } => {
                self.stats.fault("open-crash");
                let how = if power {
                    StopHow::PowerCut
                } else {
                    StopHow::ProcessCrash
                };
                match self.open(self.store_cfg.clone(), Some(after_device_ops)) {
                    Opened::Live(l) => {
                        // The open finished first: crash right after it.
                        self.live = Some(l);
                        self.down(how)
                    }
                    Opened::Crashed(rt) => {
                        drop(rt);
                        if power {
                            self.power_cut();
                        }
                        Ok(())
                    }
                    Opened::Refused(e) => self.refused("opening the store", e),
                    Opened::Stuck => self.stuck("opening the store"),
                }
            }
        }
    }

    /// `railstore grow` by a group's width of new empty disks.
    fn grow(&mut self) -> Flow {
        let first = self.disks.len();
        self.stats.fault("offline-grow");
        for _ in 0..self.cfg.group_width() {
            let disk = self.new_disk(None);
            self.disks.push(disk);
        }
        let gate = self.new_gate();
        let added: Vec<Arc<dyn Device>> = self.disks[first..]
            .iter()
            .map(|d| Arc::new(Gate::new(d.cache.clone(), gate.clone())) as Arc<dyn Device>)
            .collect();
        let cfg = self.store_cfg.clone();
        match self
            .util
            .block_on(async move { Store::grow_with_devices(cfg, added).await })
        {
            Ok(n) => {
                self.stats.fault("grown");
                self.log(format!("grown to {n} devices"));
            }
            Err(e) => {
                self.disks.truncate(first);
                self.relayout_refused("grow", e);
            }
        }
        self.halt_if_failed()
    }

    /// `railstore drain` of the last epoch.
    fn drain(&mut self) -> Flow {
        self.stats.fault("offline-drain");
        match Store::drain_offline(&self.store_cfg) {
            Ok(gone) => {
                self.stats.fault("drain-started");
                self.log(format!("draining devices {gone:?}"));
            }
            Err(e) => self.relayout_refused("drain", e),
        }
        self.halt_if_failed()
    }

    /// A grow or drain the store may rightly refuse (a move still running, an array not shut
    /// down cleanly) is logged; any other refusal is a violation.
    fn relayout_refused(&mut self, what: &str, e: StoreError) {
        match e {
            StoreError::Conflict(_) => self.log(format!("{what} refused: {e}")),
            e => self.violation(Kind::Other, format!("railstore {what} failed: {e}")),
        }
    }

    /// After a clean shutdown: a drain whose move was done has removed its devices from the
    /// array (the layout file says how many are left); their disks go.
    pub(super) fn forget_drained(&mut self) {
        let Ok(Some(n)) = Store::recorded_devices(&self.store_cfg) else {
            return;
        };
        if n < self.disks.len() {
            self.stats.fault("drained");
            self.log(format!("drained: {n} devices left"));
            self.disks.truncate(n);
            self.broken.retain(|d| *d < n);
            self.snapshots.retain(|d, _| *d < n);
            if self.flaky.is_some_and(|d| d >= n) {
                self.flaky = None;
            }
        }
    }
}
