//! Operators' actions on the running store during a step (plan::Online): a device failed by
//! request and replaced by an empty one that is rebuilt while the step's operations run, a
//! scrub while they run, or the last grow's devices drained while they run. The step ends when the rebuild or scrub has; what it reports is
//! checked, and the checks after the step find every object as the model has it.

use super::{Flow, World, LIMIT};
use crate::gate::Gate;
use crate::known::Kind;
use crate::plan::Online;
use railstore_device::Device;
use railstore_store::{RepairOptions, StoreError};
use std::sync::Arc;

impl World<'_> {
    /// Starts `action` on the running store; returns whether a background run was started
    /// (a refusal the store may rightly give is logged, not a violation).
    pub(super) fn start_online(&mut self, action: Online) -> bool {
        let live = self.live.as_ref().expect("the store runs during steps");
        let store = live.store.clone();
        match action {
            Online::FailReplace(d) if d >= self.disks.len() => {
                self.log(format!("online replace {d}: no such device now"));
                false
            }
            Online::FailReplace(d) => {
                self.stats.fault("online-replace");
                let failed = store.fail_device(d, "the simulator's operator");
                if let Err(e) = failed {
                    // More devices out than the tolerance (the store took one out on its own).
                    self.log(format!("online fail {d} refused: {e}"));
                    return false;
                }
                self.device_fault = true;
                self.rebuilt = true;
                self.replace_disk(d, None);
                let device: Arc<dyn Device> = Arc::new(Gate::new(
                    self.disks[d].cache.clone(),
                    self.live.as_ref().expect("live").gate.clone(),
                ));
                let live = self.live.as_ref().expect("live");
                let r = live.rt.block_on(async move {
                    store
                        .replace_device_onto(d, device, RepairOptions::default())
                        .await
                });
                match r {
                    Ok(_) => {
                        self.log(format!("online replace {d} started"));
                        true
                    }
                    Err(e) => {
                        self.violation(
                            Kind::Rebuild,
                            format!("replacing device {d} while serving was refused: {e}"),
                        );
                        false
                    }
                }
            }
            Online::Scrub => {
                self.stats.fault("online-scrub");
                match live
                    .rt
                    .block_on(async move { store.start_scrub("sim").await })
                {
                    Ok(_) => true,
                    Err(e @ StoreError::Conflict(_)) => {
                        self.log(format!("online scrub refused: {e}"));
                        false
                    }
                    Err(e) => {
                        self.violation(Kind::Other, format!("starting a scrub failed: {e}"));
                        false
                    }
                }
            }
            Online::Drain => {
                match live.rt.block_on(async move { store.drain_online().await }) {
                    Ok(_) => {
                        self.stats.fault("online-drain");
                        self.log("online drain started");
                        true
                    }
                    // Not grown, a move or repair running, or drained already.
                    Err(e @ (StoreError::Conflict(_) | StoreError::InvalidArgument(_))) => {
                        self.log(format!("online drain refused: {e}"));
                        false
                    }
                    Err(e) => {
                        self.violation(Kind::Other, format!("starting a drain failed: {e}"));
                        false
                    }
                }
            }
        }
    }

    /// Waits for the rebuild or scrub `start_online` started and checks how it ended.
    pub(super) fn finish_online(&mut self, action: Online) -> Flow {
        let live = self.live.as_ref().expect("the store runs during steps");
        let store = live.store.clone();
        let ended = live
            .rt
            .block_on(async move { tokio::time::timeout(LIMIT, store.wait_for_repair()).await });
        let what = match action {
            Online::FailReplace(d) => format!("the online rebuild of device {d}"),
            Online::Scrub => "the online scrub".to_string(),
            Online::Drain => "the online drain's move".to_string(),
        };
        let kind = match action {
            Online::FailReplace(_) => Kind::Rebuild,
            Online::Scrub | Online::Drain => Kind::Other,
        };
        match ended {
            Err(_) => self.violation(kind, format!("{what} is stuck")),
            Ok(None) => self.violation(kind, format!("{what} left no status")),
            Ok(Some(status)) => {
                self.log(format!(
                    "{what}: {} items, {} bytes, {} lost, error {:?}",
                    status.items_done, status.bytes_done, status.objects_lost, status.error
                ));
                self.stats.repair_lost += status.objects_lost;
                if let Some(e) = status.error.filter(|_| !self.breached) {
                    self.violation(kind, format!("{what} failed within tolerance: {e}"));
                }
                if let Online::FailReplace(d) = action {
                    let live = self.live.as_ref().expect("live");
                    let store = live.store.clone();
                    let st = live.rt.block_on(async move { store.status().await });
                    if !self.breached && !st.devices[d].healthy {
                        self.violation(
                            kind,
                            format!(
                                "device {d} is not back in service after its rebuild: {:?}",
                                st.devices[d].error
                            ),
                        );
                    }
                }
            }
        }
        self.halt_if_failed()
    }
}
