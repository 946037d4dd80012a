//! The rails frame clock every node shares: frames counted from an origin in the map, on each
//! node's own wall clock.
//!
//! Rails turns colours from readers into writers at frame boundaries. On one machine one clock
//! decides; across nodes each node reads its own clock against the map's origin, so two nodes
//! disagree about a boundary by their clock skew. The guard (a device stops taking writes this
//! long before it joins the read window) covers skew up to the guard: with NTP keeping nodes
//! within a few milliseconds and the default guard of 50 ms, no node still writes to a device
//! another node already reads from. Larger skew makes a read meet a writer now and then, which
//! costs latency, never data.

use railstore_rails::schedule::{Schedule, ScheduleConfig};
use serde::{Deserialize, Serialize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The clock's settings, kept in the map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FrameClock {
    /// Frame 0 starts here (milliseconds since the Unix epoch).
    pub origin_unix_ms: u64,
    /// Frame length T.
    pub frame_ms: u64,
    /// How long before joining the read window a device stops taking writes.
    pub guard_ms: u64,
    /// Colours reading at once.
    pub window: usize,
}

/// Where the clock stands at one moment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FrameNow {
    /// The frame number.
    pub frame: u64,
    /// The colours reading in it.
    pub reading: Vec<usize>,
    /// Time left in it.
    pub left: Duration,
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl FrameClock {
    /// The rails schedule of `width` colours this clock drives (its time 0 is the origin).
    pub fn schedule(&self, width: usize) -> Option<Schedule> {
        let cfg = ScheduleConfig {
            frame: Duration::from_millis(self.frame_ms),
            guard: Duration::from_millis(self.guard_ms),
            ..ScheduleConfig::new(width, self.window)
        };
        Schedule::new(cfg).ok()
    }

    /// The frame at `unix_ms` for `width` colours (before the origin: frame 0).
    pub fn at(&self, width: usize, unix_ms: u64) -> Option<FrameNow> {
        let schedule = self.schedule(width)?;
        let t_ns = unix_ms.saturating_sub(self.origin_unix_ms) * 1_000_000;
        let frame = schedule.frame_at(t_ns);
        let end = schedule.frame_start(frame + 1);
        Some(FrameNow {
            frame,
            reading: schedule.window(frame),
            left: Duration::from_nanos(end.saturating_sub(t_ns)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_reading_the_same_time_agrees() {
        let clock = FrameClock {
            origin_unix_ms: 1_000_000,
            frame_ms: 2_000,
            guard_ms: 50,
            window: 3,
        };
        let a = clock.at(6, 1_000_000 + 5_500).unwrap();
        assert_eq!(a.frame, 2);
        assert_eq!(a.left, Duration::from_millis(500));
        assert_eq!(a.reading.len(), 3);
        // The window moves each frame and comes back after a cycle.
        let next = clock.at(6, 1_000_000 + 6_000).unwrap();
        assert_eq!(next.frame, 3);
        assert_ne!(next.reading, a.reading);
        assert_eq!(clock.at(6, 1_000_000).unwrap().frame, 0);
        assert_eq!(clock.at(6, 0).unwrap().frame, 0);
        // A window wider than the colours is no schedule.
        assert!(FrameClock { window: 7, ..clock }.at(6, 0).is_none());
    }
}
