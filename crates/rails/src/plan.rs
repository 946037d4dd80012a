//! The read plan: which devices should serve reads now. The reliability manager asks it before
//! every read and sends reads elsewhere only when the preferred devices cannot serve.

use crate::schedule::{Role, Schedule};
use arc_swap::ArcSwap;
use std::sync::{Arc, RwLock};

/// Says which devices should serve reads now. Devices it rejects are used only when the
/// preferred ones cannot serve a read.
pub trait ReadPlan: Send + Sync + 'static {
    /// Whether `device` should serve reads now.
    fn prefers(&self, device: usize) -> bool;
}

/// No separation: every healthy device serves reads.
#[derive(Debug, Default, Clone, Copy)]
pub struct AnyHealthy;

impl ReadPlan for AnyHealthy {
    fn prefers(&self, _device: usize) -> bool {
        true
    }
}

/// Reads go to the devices whose colour is in the window now.
pub struct ScheduledReads {
    schedule: RwLock<Schedule>,
    /// Grows with the array ([`ScheduledReads::add_devices`]).
    colour_of: ArcSwap<Vec<usize>>,
    clock: Box<dyn Fn() -> u64 + Send + Sync>,
}

impl ScheduledReads {
    /// A plan for devices of the given colours (index = device) following `schedule`, with
    /// `clock` giving nanoseconds since the schedule's start (a tokio clock in the running
    /// system, so it also runs in virtual time).
    pub fn new(
        schedule: Schedule,
        colour_of: Vec<usize>,
        clock: impl Fn() -> u64 + Send + Sync + 'static,
    ) -> ScheduledReads {
        ScheduledReads {
            schedule: RwLock::new(schedule),
            colour_of: ArcSwap::from_pointee(colour_of),
            clock: Box::new(clock),
        }
    }

    /// The role of `device` now.
    pub fn role(&self, device: usize) -> Role {
        let now = (self.clock)();
        self.schedule
            .read()
            .unwrap()
            .role(self.colour_of(device), now)
    }

    /// The colour of `device`.
    pub fn colour_of(&self, device: usize) -> usize {
        self.colour_of.load()[device]
    }

    /// Devices of the given colours join the plan after the others.
    pub fn add_devices(&self, colours: &[usize]) {
        self.colour_of.rcu(|old| {
            let mut all = Vec::clone(old);
            all.extend_from_slice(colours);
            Arc::new(all)
        });
    }

    /// The buffering stint of `device` at `t_ns` ([`Schedule::buffering_stint`]).
    pub fn buffering_stint(&self, device: usize, t_ns: u64) -> Option<(u64, u64)> {
        self.schedule
            .read()
            .unwrap()
            .buffering_stint(self.colour_of(device), t_ns)
    }

    /// Changes the schedule (window sizes planned ahead).
    pub fn with_schedule<T>(&self, f: impl FnOnce(&mut Schedule) -> T) -> T {
        f(&mut self.schedule.write().unwrap())
    }
}

impl ReadPlan for ScheduledReads {
    fn prefers(&self, device: usize) -> bool {
        self.role(device) == Role::Reader
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::ScheduleConfig;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn reads_follow_the_window() {
        let cfg = ScheduleConfig {
            frame: Duration::from_millis(100),
            ..ScheduleConfig::new(3, 2)
        };
        let now = Arc::new(AtomicU64::new(0));
        let clock = now.clone();
        // Six devices in three colour classes: device d has colour d mod 3.
        let plan = ScheduledReads::new(
            Schedule::new(cfg).unwrap(),
            vec![0, 1, 2, 0, 1, 2],
            move || clock.load(Ordering::SeqCst),
        );
        let readers =
            |plan: &ScheduledReads| (0..6).filter(|&d| plan.prefers(d)).collect::<Vec<_>>();
        assert_eq!(readers(&plan), vec![0, 1, 3, 4]);
        now.store(100_000_000, Ordering::SeqCst);
        assert_eq!(readers(&plan), vec![1, 2, 4, 5]);
        assert_eq!(plan.role(0), Role::Writer);
        now.store(199_000_000, Ordering::SeqCst);
        assert_eq!(plan.role(0), Role::Guard);
        assert!(AnyHealthy.prefers(5));
    }
}
