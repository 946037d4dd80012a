//! The window controller: once per frame it measures the frame's device read and write rates,
//! sizes the buffers by the Rails rule, plans the window for the load (Rails §4.3.1) and widens
//! it past devices out of service (§4.2.1). docs/rails.md, "The window and the buffers follow
//! the load".

use super::*;

/// Once per frame: measures the device read and write bytes of the frame that ended, sizes the
/// buffers from the devices' write rates (`size_buffers`), and with `adaptive` plans the
/// window two frames ahead (a colour joining then still gets its guard).
pub(super) async fn window_controller(rails: std::sync::Weak<Rails>) {
    let mut last = (0u64, 0u64);
    loop {
        let Some(r) = rails.upgrade() else { return };
        let now = r.now_ns();
        let (f, next) = r
            .plan
            .with_schedule(|s| (s.frame_at(now), s.frame_start(s.frame_at(now) + 1)));
        let sums = r.devices.all().iter().fold((0, 0), |acc, st| {
            (
                acc.0 + st.counters.read_bytes.load(Ordering::Relaxed),
                acc.1
                    + st.counters.written_bytes.load(Ordering::Relaxed)
                    + st.counters.journal_bytes.load(Ordering::Relaxed),
            )
        });
        let frame_s = r.cfg.schedule.frame.as_secs_f64();
        let (reads, writes) = (
            (sums.0 - last.0) as f64 / frame_s,
            (sums.1 - last.1) as f64 / frame_s,
        );
        last = sums;
        r.plan_frame(f, now, reads, writes);
        let deadline = r.start + std::time::Duration::from_nanos(next);
        drop(r);
        tokio::time::sleep_until(deadline).await;
    }
}

impl Rails {
    /// One step of the window controller: the frame `f` now running saw `reads` and `writes`
    /// device bytes/s.
    fn plan_frame(&self, f: u64, now: u64, reads: f64, writes: f64) {
        let sched = self.cfg.schedule;
        let healthy: Vec<usize> = (0..self.devices.len())
            .filter(|&d| !self.is_failed(d))
            .collect();
        let measured: Vec<f64> = healthy
            .iter()
            .filter_map(|&d| self.measured_write_rate(d))
            .collect();
        let device_rate = self
            .cfg
            .adaptive
            .and_then(|a| a.write_bytes_per_s)
            .or_else(|| {
                (!measured.is_empty()).then(|| measured.iter().sum::<f64>() / measured.len() as f64)
            });
        // The Rails rule at the widest window the load may ask for, within the memory setting.
        let widest = self.cfg.adaptive.map_or(sched.window_min, |a| {
            a.window_max.unwrap_or(sched.window_max)
        });
        let (ceiling, floor) = (
            self.cfg.write_buffer_bytes_max,
            self.cfg.write_buffer_bytes_max / 8,
        );
        let needed = |rate: f64| crate::schedule::write_buffer_bytes_min(widest, sched.frame, rate);
        if self.cfg.size_buffers {
            for (d, st) in self.devices.all().iter().enumerate() {
                let bound = self
                    .measured_write_rate(d)
                    .map_or(ceiling, |w| needed(w).clamp(floor, ceiling));
                st.buffer.lock().unwrap().set_bytes_max(bound);
                st.room.notify_waiters();
            }
        }
        let buffer_bytes_max = self
            .devices
            .all()
            .iter()
            .map(|st| st.buffer.lock().unwrap().bytes_max())
            .max()
            .unwrap_or(ceiling);
        let per_colour = healthy.len().max(1) as f64 / sched.colours as f64;
        let window = self.plan.with_schedule(|s| s.window_size(f));
        *self.load.lock().unwrap() = FrameLoad {
            read_bytes_per_s: reads,
            write_bytes_per_s: writes,
            device_write_bytes_per_s: device_rate,
            write_bound_bytes_per_s: device_rate
                .map(|w| w * per_colour * (sched.colours - window) as f64),
            buffer_bytes_needed: device_rate.map(needed),
            buffer_bytes_max,
        };
        let base = match (self.cfg.adaptive, device_rate) {
            (Some(a), Some(w)) => self.size_for_load(a, w, reads, writes),
            _ => sched.window_min,
        };
        // A whole rotation ahead, frame by frame: a controller run that comes late (a busy
        // machine) leaves every frame already planned, failures included.
        for g in f + 2..f + 2 + sched.colours as u64 {
            let size = self.widen_past_out_of_service(g, base);
            let _ = self.plan.with_schedule(|s| s.set_window_size(g, size, now));
        }
    }

    /// The window the load asks for (Rails §4.3.1), `w` being one device's write rate; counts
    /// a partial frame when even the smallest window cannot meet the writes or the buffers.
    fn size_for_load(&self, a: AdaptiveWindow, w: f64, reads: f64, writes: f64) -> usize {
        let sched = self.cfg.schedule;
        let healthy = (0..self.devices.len())
            .filter(|&d| !self.is_failed(d))
            .count()
            .max(1);
        let per_colour = healthy as f64 / sched.colours as f64;
        // Writes spread evenly over the healthy devices (placement spreads pieces).
        let arrival = writes / healthy as f64;
        let smallest_buffer = self
            .devices
            .all()
            .iter()
            .map(|st| st.buffer.lock().unwrap().bytes_max())
            .min()
            .unwrap_or(self.cfg.write_buffer_bytes_max);
        let choice = crate::schedule::WindowSizer {
            colours: sched.colours,
            window_min: sched.window_min,
            window_max: a.window_max.unwrap_or(sched.window_max),
            read_bytes_per_s: a.read_bytes_per_s.unwrap_or(0.0) * per_colour,
            write_bytes_per_s: w * per_colour,
            // Device bytes already include every piece (and journal record), so each counts once.
            write_factor: 1.0,
            buffer_window_max: crate::schedule::window_buffers_hold(
                smallest_buffer,
                sched.frame,
                arrival,
            ),
        }
        .choose(reads, writes);
        if choice.partial {
            self.partial_frames.fetch_add(1, Ordering::Relaxed);
        }
        choice.size
    }

    /// The window of frame `f` widened past colours with a device out of service (failed, or
    /// a replacement being rebuilt, which reads nothing) until it holds `base` colours whose
    /// devices all read, within the schedule's widest window (Rails §4.2.1: degraded
    /// operation keeps separating on the devices left). Without it a group missing a reader
    /// has one live reader fewer than the window, and a split object's k-th piece comes from
    /// a writer.
    fn widen_past_out_of_service(&self, f: u64, base: usize) -> usize {
        let sched = self.cfg.schedule;
        let mut out = vec![false; sched.colours];
        for (d, st) in self.devices.all().iter().enumerate() {
            if self.is_failed(d) || st.rebuilding.load(Ordering::SeqCst) {
                out[self.plan.colour_of(d)] = true;
            }
        }
        let start = self.plan.with_schedule(|s| s.window_start(f));
        let (mut size, mut live) = (0, 0);
        while live < base && size < sched.window_max {
            if !out[(start + size) % sched.colours] {
                live += 1;
            }
            size += 1;
        }
        size.max(base)
    }
}
