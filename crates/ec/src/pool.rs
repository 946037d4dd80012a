//! A small pool of coding threads with a short spin before sleeping. Waking a parked thread
//! costs tens of microseconds in a VM, as much as coding a 256 KiB stripe, so workers spin for a
//! bounded time after each call. Parts are claimed from a shared counter by whoever is running,
//! the caller included, so a call finishes even when no worker gets a CPU (an oversubscribed
//! machine) instead of waiting for one to be scheduled.

use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long an idle worker spins before it parks.
const SPIN_BEFORE_PARK: Duration = Duration::from_micros(50);

/// Spins of a waiting caller before it starts yielding its CPU.
const SPINS_BEFORE_YIELD: u32 = 2048;

/// A parallel call, lent to workers for the duration of `Pool::run`.
struct Task<'a> {
    f: &'a (dyn Fn(usize) + Sync),
    parts: usize,
    /// The next unclaimed part.
    next: AtomicUsize,
    /// Workers that took the task and have finished with it.
    released: AtomicUsize,
}

impl Task<'_> {
    /// Claims and runs parts until none is left.
    fn work(&self) {
        loop {
            let part = self.next.fetch_add(1, Ordering::AcqRel);
            if part >= self.parts {
                return;
            }
            (self.f)(part);
        }
    }
}

struct Slot {
    /// Null when idle, else a `*const Task` offered to this worker.
    task: AtomicPtr<()>,
    sleeping: AtomicBool,
}

struct Shared {
    slots: Vec<Slot>,
    shutdown: AtomicBool,
}

/// `threads - 1` workers plus the caller.
pub(crate) struct Pool {
    shared: Arc<Shared>,
    threads: Vec<Thread>,
    handles: Vec<JoinHandle<()>>,
    /// One parallel call at a time; a concurrent caller codes on its own thread instead.
    busy: Mutex<()>,
}

impl Pool {
    pub(crate) fn new(threads: usize) -> std::io::Result<Pool> {
        let workers = threads.saturating_sub(1);
        let shared = Arc::new(Shared {
            slots: (0..workers)
                .map(|_| Slot {
                    task: AtomicPtr::new(std::ptr::null_mut()),
                    sleeping: AtomicBool::new(false),
                })
                .collect(),
            shutdown: AtomicBool::new(false),
        });
        let mut handles = Vec::with_capacity(workers);
        for i in 0..workers {
            let shared = shared.clone();
            handles.push(
                std::thread::Builder::new()
                    .name(format!("railstore-ec-{}", i + 1))
                    .spawn(move || worker(&shared, i))?,
            );
        }
        let threads = handles.iter().map(|h| h.thread().clone()).collect();
        Ok(Pool {
            shared,
            threads,
            handles,
            busy: Mutex::new(()),
        })
    }

    /// Runs `f(0)`, .., `f(parts - 1)`, each exactly once, and returns when all are done.
    pub(crate) fn run(&self, parts: usize, f: &(dyn Fn(usize) + Sync)) {
        let Ok(_guard) = self.busy.try_lock() else {
            (0..parts).for_each(f);
            return;
        };
        let task = Task {
            f,
            parts,
            next: AtomicUsize::new(0),
            released: AtomicUsize::new(0),
        };
        let ptr = &task as *const Task<'_> as *mut ();
        let helpers = (parts.saturating_sub(1)).min(self.shared.slots.len());
        for (slot, thread) in self.shared.slots.iter().zip(&self.threads).take(helpers) {
            slot.task.store(ptr, Ordering::SeqCst);
            if slot.sleeping.load(Ordering::SeqCst) {
                thread.unpark();
            }
        }
        task.work();
        // Take back every offer no worker picked up; the others will be released.
        let mut taken = 0;
        for slot in self.shared.slots.iter().take(helpers) {
            let revoked = slot
                .task
                .compare_exchange(
                    ptr,
                    std::ptr::null_mut(),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok();
            taken += usize::from(!revoked);
        }
        let mut spins = 0u32;
        while task.released.load(Ordering::Acquire) < taken {
            spins += 1;
            if spins < SPINS_BEFORE_YIELD {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // No worker holds the task any more: it may be dropped.
    }
}

fn worker(shared: &Shared, index: usize) {
    let slot = &shared.slots[index];
    loop {
        let started = Instant::now();
        let mut spins = 0u32;
        let task = loop {
            // Taking the offer (swap to null) tells the submitter to wait for our release.
            let p = slot.task.swap(std::ptr::null_mut(), Ordering::AcqRel);
            if !p.is_null() || shared.shutdown.load(Ordering::Acquire) {
                break p;
            }
            spins += 1;
            if spins.is_multiple_of(64) && started.elapsed() > SPIN_BEFORE_PARK {
                slot.sleeping.store(true, Ordering::SeqCst);
                // Checked again after announcing sleep: a submitter that offered before seeing
                // `sleeping` is seen here; one that offers later sees `sleeping` and unparks.
                if slot.task.load(Ordering::SeqCst).is_null()
                    && !shared.shutdown.load(Ordering::SeqCst)
                {
                    std::thread::park();
                }
                slot.sleeping.store(false, Ordering::SeqCst);
                spins = 0;
            } else {
                std::hint::spin_loop();
            }
        };
        if task.is_null() {
            return; // shutdown
        }
        // SAFETY: the submitter keeps the task alive until it counts our release, below.
        let task = unsafe { &*(task as *const Task<'_>) };
        task.work();
        // Last touch of the submitter's memory.
        task.released.fetch_add(1, Ordering::Release);
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::SeqCst);
        for t in &self.threads {
            t.unpark();
        }
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_runs_once_across_many_calls() {
        let pool = Pool::new(3).unwrap();
        for round in 0..2000 {
            let hits: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
            let parts = 1 + round % 3;
            pool.run(parts, &|p| {
                hits[p].fetch_add(1, Ordering::Relaxed);
            });
            for (p, h) in hits.iter().enumerate() {
                assert_eq!(h.load(Ordering::Relaxed), usize::from(p < parts));
            }
            if round % 500 == 0 {
                // Let the workers fall asleep so the wake-up path runs too.
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    #[test]
    fn concurrent_callers_all_finish() {
        let pool = Arc::new(Pool::new(2).unwrap());
        let total = Arc::new(AtomicUsize::new(0));
        let callers: Vec<_> = (0..4)
            .map(|_| {
                let (pool, total) = (pool.clone(), total.clone());
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        pool.run(2, &|_| {
                            total.fetch_add(1, Ordering::Relaxed);
                        });
                    }
                })
            })
            .collect();
        for c in callers {
            c.join().unwrap();
        }
        assert_eq!(total.load(Ordering::Relaxed), 4 * 500 * 2);
    }
}
