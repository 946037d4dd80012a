//! Client-visible request latency over the last minutes, one sample per second, for the
//! console's chart (`GET /admin/v1/latency`). Reads are GET and HEAD, writes PUT, POST and
//! DELETE; a request's latency is the time until its answer's head is ready (for a GET, the
//! first byte; for a PUT, the whole body stored). Percentiles come from a histogram with four
//! buckets per power of two, so a reported p99 is within 19 % of the true one.

use serde::Serialize;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Seconds of history kept.
pub const SECONDS: usize = 300;

/// Buckets per power of two of microseconds.
const SUB: usize = 4;
/// Buckets in all: up to 2^32 µs (71 minutes); longer requests land in the last one.
const BUCKETS: usize = 32 * SUB;

/// Which chart a request belongs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Read,
    Write,
}

impl Kind {
    /// The kind of a request by its method; `None` for the rest (OPTIONS and others).
    pub fn of(method: &http::Method) -> Option<Kind> {
        match *method {
            http::Method::GET | http::Method::HEAD => Some(Kind::Read),
            http::Method::PUT | http::Method::POST | http::Method::DELETE => Some(Kind::Write),
            _ => None,
        }
    }
}

/// The requests of one kind in one second.
#[derive(Clone)]
struct Tally {
    count: u64,
    sum_us: u64,
    max_us: u64,
    buckets: [u32; BUCKETS],
}

impl Default for Tally {
    fn default() -> Self {
        Tally {
            count: 0,
            sum_us: 0,
            max_us: 0,
            buckets: [0; BUCKETS],
        }
    }
}

/// The bucket of a latency: the power of two, then which quarter of it.
fn bucket_of(us: u64) -> usize {
    if us < SUB as u64 {
        return us as usize;
    }
    let octave = 63 - us.leading_zeros() as usize;
    let quarter = ((us >> (octave - 2)) & 3) as usize;
    (octave * SUB + quarter).min(BUCKETS - 1)
}

/// The middle of a bucket, in microseconds.
fn bucket_middle(b: usize) -> u64 {
    if b < SUB {
        return b as u64;
    }
    let (octave, quarter) = (b / SUB, (b % SUB) as u64);
    let low = (1u64 << octave) + quarter * (1u64 << (octave - 2));
    low + (1u64 << (octave - 2)) / 2
}

impl Tally {
    fn add(&mut self, us: u64) {
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(us);
        self.max_us = self.max_us.max(us);
        self.buckets[bucket_of(us)] += 1;
    }

    /// The latency at quantile `q` (0..=1), never above the largest seen.
    fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0u64;
        for (b, &n) in self.buckets.iter().enumerate() {
            seen += n as u64;
            if seen >= rank {
                return Some(bucket_middle(b).min(self.max_us));
            }
        }
        Some(self.max_us)
    }

    fn summary(&self) -> KindSample {
        KindSample {
            count: self.count,
            mean_us: (self.count > 0).then(|| self.sum_us / self.count),
            p50_us: self.quantile_us(0.5),
            p99_us: self.quantile_us(0.99),
            max_us: (self.count > 0).then_some(self.max_us),
        }
    }
}

/// One kind's requests in one second, as the API shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KindSample {
    pub count: u64,
    pub mean_us: Option<u64>,
    pub p50_us: Option<u64>,
    pub p99_us: Option<u64>,
    pub max_us: Option<u64>,
}

/// One second of history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Sample {
    /// The second (Unix time).
    pub t: u64,
    pub reads: KindSample,
    pub writes: KindSample,
}

/// The whole history, oldest second first, every second of the window present.
#[derive(Debug, Clone, Serialize)]
pub struct History {
    pub interval_s: u64,
    pub samples: Vec<Sample>,
}

#[derive(Default)]
struct Second {
    t: u64,
    reads: Tally,
    writes: Tally,
}

/// Per-second latency of the last [`SECONDS`] seconds.
pub struct LatencyHistory {
    /// Indexed by second mod SECONDS; a slot whose `t` is old is empty.
    ring: Mutex<Vec<Second>>,
}

impl Default for LatencyHistory {
    fn default() -> Self {
        LatencyHistory {
            ring: Mutex::new((0..SECONDS).map(|_| Second::default()).collect()),
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

impl LatencyHistory {
    /// Counts one request that took `took`, answered now.
    pub fn record(&self, kind: Kind, took: Duration) {
        self.record_at(unix_now(), kind, took);
    }

    fn record_at(&self, t: u64, kind: Kind, took: Duration) {
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let mut ring = self.ring.lock().unwrap();
        let slot = &mut ring[(t % SECONDS as u64) as usize];
        if slot.t != t {
            *slot = Second {
                t,
                ..Second::default()
            };
        }
        match kind {
            Kind::Read => slot.reads.add(us),
            Kind::Write => slot.writes.add(us),
        }
    }

    /// The last `seconds` seconds (at most [`SECONDS`]) up to now, the current one included.
    pub fn history(&self, seconds: usize) -> History {
        self.history_at(unix_now(), seconds)
    }

    fn history_at(&self, now: u64, seconds: usize) -> History {
        let seconds = seconds.clamp(1, SECONDS) as u64;
        let ring = self.ring.lock().unwrap();
        let samples = (now.saturating_sub(seconds - 1)..=now)
            .map(|t| {
                let slot = &ring[(t % SECONDS as u64) as usize];
                let empty = Tally::default();
                let (r, w) = if slot.t == t {
                    (&slot.reads, &slot.writes)
                } else {
                    (&empty, &empty)
                };
                Sample {
                    t,
                    reads: r.summary(),
                    writes: w.summary(),
                }
            })
            .collect();
        History {
            interval_s: 1,
            samples,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_latency_and_their_middles_fall_inside() {
        let mut last = 0;
        for us in [0u64, 1, 3, 4, 5, 7, 8, 100, 1000, 12_345, 1 << 31, u64::MAX] {
            let b = bucket_of(us);
            assert!(b >= last, "buckets grow with the latency ({us})");
            last = b;
            if us < 1 << 32 {
                let m = bucket_middle(b);
                let width = if us < 4 { 1 } else { (us >> 2).max(1) };
                assert!(
                    m.abs_diff(us) <= width,
                    "{us} in bucket {b} with middle {m}"
                );
            }
        }
    }

    #[test]
    fn a_second_reports_its_count_mean_and_percentiles() {
        let h = LatencyHistory::default();
        // 98 fast reads and two slow ones: the p99 is a slow one, the p50 a fast one.
        for _ in 0..98 {
            h.record_at(1000, Kind::Read, Duration::from_micros(200));
        }
        h.record_at(1000, Kind::Read, Duration::from_millis(40));
        h.record_at(1000, Kind::Read, Duration::from_millis(40));
        h.record_at(1001, Kind::Write, Duration::from_millis(3));
        let hist = h.history_at(1002, 3);
        assert_eq!(
            hist.samples.iter().map(|s| s.t).collect::<Vec<_>>(),
            [1000, 1001, 1002]
        );
        let r = hist.samples[0].reads;
        assert_eq!(r.count, 100);
        assert_eq!(r.mean_us, Some((98 * 200 + 2 * 40_000) / 100));
        assert!(r.p50_us.unwrap().abs_diff(200) <= 40, "{r:?}");
        assert!(r.p99_us.unwrap().abs_diff(40_000) <= 8_000, "{r:?}");
        assert_eq!(r.max_us, Some(40_000));
        assert_eq!(hist.samples[0].writes.count, 0);
        let w = hist.samples[1].writes;
        assert!(
            w.count == 1 && w.p99_us.unwrap().abs_diff(3_000) <= 750,
            "{w:?}"
        );
        assert_eq!(hist.samples[2].reads.p99_us, None);
    }

    #[test]
    fn seconds_older_than_the_window_are_forgotten() {
        let h = LatencyHistory::default();
        h.record_at(5000, Kind::Read, Duration::from_millis(1));
        // The same slot, a whole window later: the old second is gone, not added to.
        h.record_at(5000 + SECONDS as u64, Kind::Read, Duration::from_millis(2));
        let hist = h.history_at(5000 + SECONDS as u64, SECONDS);
        assert_eq!(hist.samples.len(), SECONDS);
        let counted: u64 = hist.samples.iter().map(|s| s.reads.count).sum();
        assert_eq!(counted, 1);
        assert_eq!(hist.samples.last().unwrap().reads.max_us, Some(2_000));
    }
}
