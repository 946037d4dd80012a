//! The role schedule (Rails §4.3): time is cut into frames of length T; a window of s colours
//! serves reads and moves by one colour per frame around the ring of n colours. A colour outside
//! the window writes; shortly before it joins the window it stops writing (the guard) so its
//! programs, erases and garbage collection finish before it serves reads. Every device has its
//! colour's role. Pure: times are nanoseconds since the schedule's start, nothing sleeps.

use std::time::Duration;

/// What a colour does at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// In the window: serves reads, takes no writes (they wait in its write buffer).
    Reader,
    /// Outside the window: flushes its buffer, then takes writes directly.
    Writer,
    /// About to join the window: takes no new writes so the device settles before reading.
    Guard,
}

/// Why a schedule cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// Parameters that cannot work, with the reason.
    #[error("invalid schedule: {0}")]
    Invalid(String),
}

/// Parameters of the schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleConfig {
    /// Colours on the ring (the redundancy group width n).
    pub colours: usize,
    /// Frame length T (Rails used 10 s, eRails 2 s).
    pub frame: Duration,
    /// Smallest window: k for splitting and packing (k readers rebuild any object), 1 for
    /// replication.
    pub window_min: usize,
    /// Largest window; at most `colours - 1` so some colour always writes.
    pub window_max: usize,
    /// How long before joining the window a colour stops taking writes.
    pub guard: Duration,
}

impl ScheduleConfig {
    /// Shortest frame accepted.
    pub const FRAME_MIN: Duration = Duration::from_millis(100);

    /// The defaults for a group of `colours` whose mechanism needs `window_min` readers: T = 2 s,
    /// window fixed at `window_min`, a 50 ms guard (IODA's figure; the simulated SSD's
    /// spill-over lasts 20-50 ms).
    pub fn new(colours: usize, window_min: usize) -> ScheduleConfig {
        ScheduleConfig {
            colours,
            frame: Duration::from_secs(2),
            window_min,
            window_max: window_min,
            guard: Duration::from_millis(50),
        }
    }

    /// Rejects parameters that cannot work.
    pub fn validate(&self) -> Result<(), ScheduleError> {
        let bad = |s: String| Err(ScheduleError::Invalid(s));
        if self.colours < 2 {
            return bad(format!(
                "{} colours: separation needs at least 2",
                self.colours
            ));
        }
        if self.window_min == 0 || self.window_min > self.window_max {
            return bad(format!(
                "window bounds [{}, {}] must satisfy 1 <= min <= max",
                self.window_min, self.window_max
            ));
        }
        if self.window_max >= self.colours {
            return bad(format!(
                "window of {} of {} colours leaves no writer",
                self.window_max, self.colours
            ));
        }
        if self.frame < Self::FRAME_MIN {
            return bad(format!(
                "frame {:?} shorter than {:?}",
                self.frame,
                Self::FRAME_MIN
            ));
        }
        if self.guard >= self.frame {
            return bad(format!(
                "guard {:?} must be shorter than the frame {:?}",
                self.guard, self.frame
            ));
        }
        Ok(())
    }
}

/// The schedule: the window's position follows from the frame number; its size can change per
/// frame (decided one frame ahead, so a colour about to join knows in time to start its guard).
#[derive(Debug, Clone)]
pub struct Schedule {
    cfg: ScheduleConfig,
    /// Window size of each frame from `sizes_from` on; the last entry holds for later frames.
    sizes: Vec<usize>,
    sizes_from: u64,
}

impl Schedule {
    /// A schedule with the window at `cfg.window_min` until told otherwise.
    pub fn new(cfg: ScheduleConfig) -> Result<Schedule, ScheduleError> {
        cfg.validate()?;
        Ok(Schedule {
            sizes: vec![cfg.window_min],
            sizes_from: 0,
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ScheduleConfig {
        &self.cfg
    }

    /// The frame that contains instant `t_ns`.
    pub fn frame_at(&self, t_ns: u64) -> u64 {
        t_ns / self.frame_ns()
    }

    /// Start of frame `f` in nanoseconds.
    pub fn frame_start(&self, f: u64) -> u64 {
        f.saturating_mul(self.frame_ns())
    }

    fn frame_ns(&self) -> u64 {
        self.cfg.frame.as_nanos() as u64
    }

    /// Window size in frame `f`.
    pub fn window_size(&self, f: u64) -> usize {
        if f < self.sizes_from {
            return self.sizes[0];
        }
        let i = (f - self.sizes_from) as usize;
        *self.sizes.get(i).unwrap_or(self.sizes.last().unwrap())
    }

    /// Sets the window size of frame `f` and later frames. Only frames not started by `now_ns`
    /// plus one frame may change, so colours joining the window always get their guard.
    pub fn set_window_size(
        &mut self,
        f: u64,
        size: usize,
        now_ns: u64,
    ) -> Result<(), ScheduleError> {
        if !(self.cfg.window_min..=self.cfg.window_max).contains(&size) {
            return Err(ScheduleError::Invalid(format!(
                "window size {size} outside [{}, {}]",
                self.cfg.window_min, self.cfg.window_max
            )));
        }
        let current = self.frame_at(now_ns);
        if f <= current + 1 && self.window_size(f) != size {
            // Frame f+... is already planned (the guard for it may be running); plan from the
            // frame after.
            return Err(ScheduleError::Invalid(format!(
                "frame {f} is current or next (now in frame {current}); window sizes are \
                 planned at least two frames ahead"
            )));
        }
        // Keep sizes as a run from `current` on: drop the past, extend to f, set the tail.
        let keep_from = current.max(self.sizes_from);
        let mut sizes: Vec<usize> = (keep_from..f).map(|g| self.window_size(g)).collect();
        sizes.push(size);
        self.sizes = sizes;
        self.sizes_from = keep_from;
        Ok(())
    }

    /// First colour of the window in frame `f`: the window moves one colour per frame.
    pub fn window_start(&self, f: u64) -> usize {
        (f % self.cfg.colours as u64) as usize
    }

    /// Whether `colour` is in the window (a reader) during frame `f`.
    pub fn in_window(&self, colour: usize, f: u64) -> bool {
        let n = self.cfg.colours;
        let offset = (colour + n - self.window_start(f)) % n;
        offset < self.window_size(f)
    }

    /// The colours reading in frame `f`, window order.
    pub fn window(&self, f: u64) -> Vec<usize> {
        let n = self.cfg.colours;
        (0..self.window_size(f))
            .map(|i| (self.window_start(f) + i) % n)
            .collect()
    }

    /// The role of `colour` at instant `t_ns`.
    pub fn role(&self, colour: usize, t_ns: u64) -> Role {
        let f = self.frame_at(t_ns);
        if self.in_window(colour, f) {
            return Role::Reader;
        }
        let next = f + 1;
        let guard_from = self
            .frame_start(next)
            .saturating_sub(self.cfg.guard.as_nanos() as u64);
        if self.in_window(colour, next) && t_ns >= guard_from {
            Role::Guard
        } else {
            Role::Writer
        }
    }

    /// The stint of `colour` that contains `t_ns` while it is not a writer: from the start of
    /// its guard (or of the schedule) to the instant it next writes, in nanoseconds; `None`
    /// while it writes. Its write buffer must hold what arrives for it in that span.
    pub fn buffering_stint(&self, colour: usize, t_ns: u64) -> Option<(u64, u64)> {
        if self.role(colour, t_ns) == Role::Writer {
            return None;
        }
        let f = self.frame_at(t_ns);
        // The run of window frames this instant belongs to (the next one while guarding); a
        // run is never longer than the ring, as some colour always writes.
        let ring = self.cfg.colours as u64;
        let mut first = if self.in_window(colour, f) { f } else { f + 1 };
        while first > 0 && f + 1 - first < ring && self.in_window(colour, first - 1) {
            first -= 1;
        }
        let mut end = first;
        while end - first < ring && self.in_window(colour, end) {
            end += 1;
        }
        let start = self
            .frame_start(first)
            .saturating_sub(self.cfg.guard.as_nanos() as u64);
        Some((start, self.frame_start(end)))
    }

    /// The next instant after `t_ns` at which some colour's role changes.
    pub fn next_change(&self, t_ns: u64) -> u64 {
        let f = self.frame_at(t_ns);
        let guard_from = self
            .frame_start(f + 1)
            .saturating_sub(self.cfg.guard.as_nanos() as u64);
        if t_ns < guard_from && self.cfg.guard > Duration::ZERO {
            guard_from
        } else {
            self.frame_start(f + 1)
        }
    }
}

/// The window size for the observed load (Rails §4.3.1).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowChoice {
    /// Colours to read in the next planned frame.
    pub size: usize,
    /// The write load exceeds what the writers sustain even at the smallest window: reads and
    /// writes must share devices (W > W_sep).
    pub partial: bool,
}

/// Picks the window size from the observed load: enough readers for the reads, enough writers
/// for the writes, reads first when both fit, writers first when they do not.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowSizer {
    /// Colours on the ring.
    pub colours: usize,
    /// Window bounds.
    pub window_min: usize,
    /// Window bounds.
    pub window_max: usize,
    /// Read bytes/s one colour serves.
    pub read_bytes_per_s: f64,
    /// Write bytes/s one colour absorbs.
    pub write_bytes_per_s: f64,
    /// Device bytes written per user byte (q = (k+m)/k for codes, r for replication).
    pub write_factor: f64,
    /// The widest window whose write buffers hold what arrives meanwhile
    /// ([`window_buffers_hold`]); `usize::MAX`: no limit.
    pub buffer_window_max: usize,
}

impl WindowSizer {
    /// The window for user reads of `read_load` and writes of `write_load` bytes/s. A colour
    /// writes only while outside the window, so the writers, n - s of n colours, must absorb
    /// `write_factor x write_load` between them: s <= n - q W / w.
    pub fn choose(&self, read_load: f64, write_load: f64) -> WindowChoice {
        let n = self.colours as f64;
        let need_readers = if self.read_bytes_per_s > 0.0 {
            (read_load / self.read_bytes_per_s).ceil() as usize
        } else {
            self.window_max
        };
        let writers_needed = if self.write_bytes_per_s > 0.0 {
            (self.write_factor * write_load / self.write_bytes_per_s).ceil()
        } else {
            n
        };
        let most_readers = (n - writers_needed).floor();
        // Too few writers, or buffers too small for even the narrowest window.
        let partial =
            most_readers < self.window_min as f64 || self.buffer_window_max < self.window_min;
        let cap = if partial {
            self.window_min
        } else {
            (most_readers as usize)
                .min(self.window_max)
                .min(self.buffer_window_max)
        };
        WindowChoice {
            size: need_readers
                .clamp(self.window_min, self.window_max)
                .min(cap),
            partial,
        }
    }
}

/// eRails §4: the most user write bytes/s a group of k readers and m writers sustains when
/// each device writes `w` bytes/s: k m w / (k + m).
pub fn write_bound(k: usize, m: usize, w: f64) -> f64 {
    (k * m) as f64 * w / (k + m) as f64
}

/// Rails §4.2.2 generalised to the window: a colour buffers the writes addressed to it while it
/// reads (s frames) and must keep them until flushed; with writes arriving at `device_write_
/// bytes_per_s` per colour that is at least (s + 1) x T x rate bytes (one more frame while the
/// flush runs). For the 2-device design (s = 1) this is Rails' 2 T w.
pub fn write_buffer_bytes_min(
    window: usize,
    frame: Duration,
    device_write_bytes_per_s: f64,
) -> u64 {
    ((window + 1) as f64 * frame.as_secs_f64() * device_write_bytes_per_s).ceil() as u64
}

/// The widest window s whose buffers of `buffer_bytes` hold what arrives at a device while it
/// reads and then flushes ((s + 1) x T x `arrival_bytes_per_s`, the rule above turned round);
/// `usize::MAX` when nothing arrives.
pub fn window_buffers_hold(buffer_bytes: u64, frame: Duration, arrival_bytes_per_s: f64) -> usize {
    let per_frame = frame.as_secs_f64() * arrival_bytes_per_s;
    if per_frame <= 0.0 {
        return usize::MAX;
    }
    ((buffer_bytes as f64 / per_frame).floor() as usize).saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const MS: u64 = 1_000_000;

    fn cfg(n: usize, s: usize) -> ScheduleConfig {
        ScheduleConfig {
            colours: n,
            frame: Duration::from_millis(1000),
            window_min: s,
            window_max: s,
            guard: Duration::from_millis(50),
        }
    }

    #[test]
    fn buffering_stints_span_guard_and_window() {
        // 6 colours, window 3, 1 s frames, 50 ms guard: colour c reads in the frames f with
        // f mod 6 in {c-2, c-1, c}.
        let s = Schedule::new(cfg(6, 3)).unwrap();
        // Colour 0 reads in frame 0 (a run cut by the schedule's start), then 4-6.
        assert_eq!(s.buffering_stint(0, 500 * MS), Some((0, 1000 * MS)));
        assert_eq!(s.buffering_stint(0, 2000 * MS), None);
        assert_eq!(
            s.buffering_stint(0, 3960 * MS),
            Some((3950 * MS, 7000 * MS))
        );
        // Colour 3 guards from 950 ms, reads in frames 1-3, writes from 4000 ms.
        assert_eq!(s.buffering_stint(3, 900 * MS), None);
        assert_eq!(s.buffering_stint(3, 950 * MS), Some((950 * MS, 4000 * MS)));
        assert_eq!(s.buffering_stint(3, 3999 * MS), Some((950 * MS, 4000 * MS)));
        assert_eq!(s.buffering_stint(3, 4000 * MS), None);
    }

    #[test]
    fn two_device_rails_alternates_roles() {
        let s = Schedule::new(cfg(2, 1)).unwrap();
        assert_eq!(s.role(0, 0), Role::Reader);
        assert_eq!(s.role(1, 0), Role::Writer);
        assert_eq!(s.role(1, 949 * MS), Role::Writer);
        assert_eq!(s.role(1, 950 * MS), Role::Guard);
        assert_eq!(s.role(1, 1000 * MS), Role::Reader);
        assert_eq!(s.role(0, 1000 * MS), Role::Writer);
        assert_eq!(s.next_change(0), 950 * MS);
        assert_eq!(s.next_change(950 * MS), 1000 * MS);
    }

    #[test]
    fn erails_k3_keeps_three_readers_and_moves_one_colour_per_frame() {
        let s = Schedule::new(cfg(6, 3)).unwrap();
        assert_eq!(s.window(0), vec![0, 1, 2]);
        assert_eq!(s.window(1), vec![1, 2, 3]);
        assert_eq!(s.window(5), vec![5, 0, 1]);
        assert_eq!(s.window(6), vec![0, 1, 2]);
    }

    #[test]
    fn bad_configs_are_refused() {
        for (c, needle) in [
            (cfg(1, 1), "at least 2"),
            (cfg(4, 4), "no writer"),
            (cfg(4, 0), "1 <= min"),
            (
                ScheduleConfig {
                    frame: Duration::from_millis(50),
                    ..cfg(4, 2)
                },
                "shorter than",
            ),
            (
                ScheduleConfig {
                    guard: Duration::from_secs(2),
                    ..cfg(4, 2)
                },
                "guard",
            ),
        ] {
            let e = Schedule::new(c).unwrap_err().to_string();
            assert!(e.contains(needle), "{c:?}: {e}");
        }
    }

    #[test]
    fn window_size_changes_only_two_frames_ahead() {
        let mut s = Schedule::new(ScheduleConfig {
            window_max: 4,
            ..cfg(6, 2)
        })
        .unwrap();
        let now = 10 * 1000 * MS + 5; // in frame 10
        assert!(s.set_window_size(11, 4, now).is_err());
        assert!(s.set_window_size(12, 9, now).is_err());
        s.set_window_size(12, 4, now).unwrap();
        assert_eq!(s.window_size(11), 2);
        assert_eq!(s.window_size(12), 4);
        assert_eq!(s.window_size(99), 4);
        assert_eq!(s.window(12).len(), 4);
    }

    #[test]
    fn sizer_trades_readers_for_writers() {
        let z = WindowSizer {
            colours: 6,
            window_min: 3,
            window_max: 5,
            read_bytes_per_s: 100.0,
            write_bytes_per_s: 100.0,
            write_factor: 2.0,
            buffer_window_max: usize::MAX,
        };
        // Light writes: as many readers as reads need.
        assert_eq!(
            z.choose(420.0, 10.0),
            WindowChoice {
                size: 5,
                partial: false
            }
        );
        assert_eq!(
            z.choose(150.0, 10.0),
            WindowChoice {
                size: 3,
                partial: false
            }
        );
        // Writes need q W / w = 4 writers: at most 2 readers, below k = 3: partial separation.
        assert_eq!(
            z.choose(420.0, 200.0),
            WindowChoice {
                size: 3,
                partial: true
            }
        );
        // 2 writers needed: 4 readers at most.
        assert_eq!(
            z.choose(600.0, 100.0),
            WindowChoice {
                size: 4,
                partial: false
            }
        );
    }

    #[test]
    fn buffers_bound_the_window() {
        let frame = Duration::from_secs(2);
        // 10 MB/s arriving per device, 2 s frames: 20 MB per frame; 100 MB holds s + 1 = 5.
        assert_eq!(window_buffers_hold(100_000_000, frame, 10e6), 4);
        assert_eq!(window_buffers_hold(39_999_999, frame, 10e6), 0);
        assert_eq!(window_buffers_hold(1, frame, 0.0), usize::MAX);
        let z = WindowSizer {
            colours: 6,
            window_min: 3,
            window_max: 5,
            read_bytes_per_s: 0.0,
            write_bytes_per_s: 100.0,
            write_factor: 1.0,
            buffer_window_max: 4,
        };
        // Unknown read rate: as wide as writers and buffers allow.
        assert_eq!(z.choose(1.0, 10.0).size, 4);
        let small = WindowSizer {
            buffer_window_max: 2,
            ..z
        };
        assert_eq!(
            small.choose(1.0, 10.0),
            WindowChoice {
                size: 3,
                partial: true
            }
        );
    }

    #[test]
    fn bounds_match_the_papers() {
        // eRails §4: k = m = 3, w = 100 MB/s -> 150 MB/s; the maximum over k + m = 6 is at k = m.
        assert_eq!(write_bound(3, 3, 100.0), 150.0);
        assert!(write_bound(2, 4, 100.0) < write_bound(3, 3, 100.0));
        // Rails §4.2.2: T = 10 s, w = 200 MB/s, two devices -> 4000 MB.
        assert_eq!(
            write_buffer_bytes_min(1, Duration::from_secs(10), 200e6),
            4_000_000_000
        );
    }

    proptest! {
        #[test]
        fn invariants_hold_at_every_instant(
            n in 2usize..12,
            s_raw in 1usize..11,
            frame_ms in 100u64..3000,
            guard_ms in 0u64..99,
            t in 0u64..1_000_000_000_000,
        ) {
            let s = s_raw.min(n - 1);
            let c = ScheduleConfig {
                colours: n,
                frame: Duration::from_millis(frame_ms),
                window_min: s,
                window_max: s,
                guard: Duration::from_millis(guard_ms),
            };
            let sch = Schedule::new(c).unwrap();
            let roles: Vec<Role> = (0..n).map(|col| sch.role(col, t)).collect();
            // Exactly s readers, contiguous on the ring, starting at the frame's colour.
            prop_assert_eq!(roles.iter().filter(|r| **r == Role::Reader).count(), s);
            let f = sch.frame_at(t);
            prop_assert_eq!(roles[sch.window_start(f)], Role::Reader);
            // At most one colour guards (the one joining next), and only in the frame's last
            // guard interval.
            let guards: Vec<usize> = (0..n).filter(|&col| roles[col] == Role::Guard).collect();
            prop_assert!(guards.len() <= 1);
            for g in guards {
                prop_assert!(sch.in_window(g, f + 1));
                prop_assert!(sch.frame_start(f + 1) - t <= guard_ms * MS);
            }
            // Every colour reads for exactly s consecutive frames per rotation of n frames.
            let col = (t % n as u64) as usize;
            let reading: Vec<bool> = (f..f + n as u64).map(|g| sch.in_window(col, g)).collect();
            prop_assert_eq!(reading.iter().filter(|r| **r).count(), s);
            // Roles change only at next_change.
            let next = sch.next_change(t);
            prop_assert!(next > t);
            for col in 0..n {
                prop_assert_eq!(sch.role(col, next - 1), sch.role(col, t));
            }
            // A buffering stint holds no writer instant and is bounded by writer instants.
            for (col, role) in roles.iter().enumerate() {
                match sch.buffering_stint(col, t) {
                    None => prop_assert_eq!(*role, Role::Writer),
                    Some((a, b)) => {
                        prop_assert!(a <= t && t < b);
                        prop_assert!(a == 0 || sch.role(col, a - 1) == Role::Writer);
                        prop_assert_eq!(sch.role(col, b), Role::Writer);
                        let mut at = a;
                        while at < b {
                            prop_assert!(sch.role(col, at) != Role::Writer);
                            at = sch.next_change(at);
                        }
                    }
                }
            }
        }
    }
}
