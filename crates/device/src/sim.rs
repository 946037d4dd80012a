//! `sim`: an SSD timing model around any inner device (the inner device keeps the data).
//!
//! The model is a page-mapped flash translation layer over `channels × dies_per_channel` dies.
//! Values occupy 4 KiB mapping units; units are gathered in a DRAM write buffer into 32 KiB
//! program units ("pages") that are programmed round-robin over the dies. When a die runs low on
//! free blocks, greedy garbage collection picks the block with the fewest valid units, relocates
//! them (page reads + programs) and erases it, all while the die is blocked. Reads queue behind
//! whatever the die is doing: that is where write-induced read stalls come from (Flash on Rails
//! §3).
//!
//! Every die and channel is a timeline (`busy_until`); an operation's completion time is computed
//! arithmetically when it is submitted, and the operation then waits once with
//! `tokio::time::sleep_until`. Under a normal runtime that takes real time; under a
//! current-thread runtime with a paused clock it takes virtual time, deterministically.
//! CPU time of the host is not charged.

use crate::api::{
    CompactStats, Device, DeviceInfo, IterBatch, IterRequest, Limits, QueueGate, ReadRange,
    Retrieved, StoreMode,
};
use crate::error::{DeviceError, Result};
use crate::fasthash::{FastMap, MapKey};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tokio::time::{Duration, Instant};

/// Parameters of the SSD model. Defaults approximate a modern TLC NVMe SSD; sources are in
/// `docs/benchmarks/sim-ssd.md`.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Independent flash channels.
    pub channels: usize,
    /// Dies on each channel.
    pub dies_per_channel: usize,
    /// Program unit: bytes programmed at once on a die (multi-plane page).
    pub page_bytes: u32,
    /// Mapping granularity of the FTL.
    pub unit_bytes: u32,
    /// Program units per erase block.
    pub pages_per_block: u32,
    /// Bytes the host may store (logical capacity).
    pub logical_bytes: u64,
    /// Extra physical space as a fraction of the logical space.
    pub over_provisioning: f64,
    /// Reading one page into the die's register.
    pub page_read_ns: u64,
    /// Programming one page.
    pub program_ns: u64,
    /// Erasing one block.
    pub erase_ns: u64,
    /// Channel transfer rate.
    pub channel_bytes_per_sec: u64,
    /// DRAM write buffer; stores complete once their data is in it.
    pub write_buffer_bytes: u64,
    /// Garbage collection runs on a die when its free blocks drop below this.
    pub gc_free_blocks_min: u32,
    /// Program/erase suspend: a read waits this long instead of behind the whole program or
    /// erase; `None` disables suspend.
    pub suspend_ns: Option<u64>,
    /// Controller and host interface overhead per command.
    pub command_ns: u64,
    /// Most commands in flight.
    pub queue_depth_max: usize,
    /// Tokio time per model time. tokio's timers tick in whole milliseconds, so a 50 µs page
    /// read would round up to 1 ms; in virtual time set this to [`VIRTUAL_TIME_DILATION`]
    /// (one model microsecond per tokio millisecond) and divide tokio durations by it. 1 in
    /// real time, where delays below 1 ms round up to the timer tick.
    pub time_dilation: u64,
}

/// Dilation for virtual-time runs: one model microsecond per tokio millisecond, so tokio's
/// 1 ms timer resolution becomes 1 µs of model time.
pub const VIRTUAL_TIME_DILATION: u64 = 1000;

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            channels: 8,
            dies_per_channel: 4,
            page_bytes: 32 << 10,
            unit_bytes: 4 << 10,
            pages_per_block: 64,
            logical_bytes: 1 << 30,
            over_provisioning: 0.07,
            page_read_ns: 50_000,
            program_ns: 500_000,
            erase_ns: 3_000_000,
            channel_bytes_per_sec: 1_200_000_000,
            write_buffer_bytes: 4 << 20,
            gc_free_blocks_min: 3,
            suspend_ns: None,
            command_ns: 2_000,
            queue_depth_max: 128,
            time_dilation: 1,
        }
    }
}

impl SimConfig {
    /// The default model for `logical` bytes. Erase blocks keep their default size (64 pages
    /// of 32 KiB) when each die still has at least 24 of them, and shrink (to at least 4 pages)
    /// on smaller simulated SSDs so that garbage collection keeps enough blocks to choose from.
    pub fn for_logical_bytes(logical: u64) -> SimConfig {
        let d = SimConfig::default();
        let dies = (d.channels * d.dies_per_channel) as u64;
        let per_die_pages = logical * 107 / 100 / dies / d.page_bytes as u64;
        let ppb = (per_die_pages / 24).clamp(4, d.pages_per_block as u64);
        let ppb = 1u32 << (63 - ppb.leading_zeros());
        SimConfig {
            logical_bytes: logical,
            pages_per_block: ppb,
            ..d
        }
    }
}

/// Counters of the model (for amplification and stall figures).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SimStats {
    /// Pages programmed for host writes.
    pub host_pages_programmed: u64,
    /// Pages programmed to relocate valid data during GC.
    pub gc_pages_programmed: u64,
    /// Pages read for host reads.
    pub pages_read: u64,
    /// Blocks erased.
    pub blocks_erased: u64,
    /// GC runs.
    pub gc_runs: u64,
    /// Nanoseconds dies spent in GC, summed over dies.
    pub gc_busy_ns: u64,
    /// Stores that waited for write-buffer space.
    pub buffer_stalls: u64,
}

impl SimStats {
    /// Write amplification: all pages programmed / host pages programmed.
    pub fn write_amplification(&self) -> f64 {
        if self.host_pages_programmed == 0 {
            return 1.0;
        }
        (self.host_pages_programmed + self.gc_pages_programmed) as f64
            / self.host_pages_programmed as f64
    }
}

const INVALID: u64 = u64::MAX;
const NOT_PROGRAMMED: u64 = u64::MAX;

/// A stored key: its id (an index into the per-id unit tables) and how many mapping units its
/// value has.
#[derive(Clone, Copy)]
struct Slot {
    id: u32,
    units: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Busy {
    Read,
    Write,
}

struct Die {
    busy_until: u64,
    busy: Busy,
    free: Vec<u32>,
    /// Open block for host data and the next unit in it.
    host: (u32, u32),
    /// Open block for GC relocations and the next unit in it.
    gc: (u32, u32),
    /// Valid units per block.
    valid: Vec<u32>,
}

struct Model {
    cfg: SimConfig,
    epoch: Instant,
    units_per_page: u32,
    units_per_block: u32,
    blocks_per_die: u32,
    dies: Vec<Die>,
    chan_busy: Vec<u64>,
    /// Physical unit → (key id << 32 | unit index), or INVALID.
    p2l: Vec<u64>,
    /// Page → time its program completes (NOT_PROGRAMMED while in the write buffer).
    prog_done: Vec<u64>,
    ids: FastMap<MapKey, Slot>,
    /// Per id: physical unit of the value's first mapping unit. Most values have one unit, and
    /// a read finds it in this dense table (the 24-byte extents it replaced missed the cache on
    /// most reads).
    first_unit: Vec<u32>,
    /// Per id: physical units of the value's other mapping units (empty for one-unit values).
    more_units: Vec<Box<[u32]>>,
    free_ids: Vec<u32>,
    next_die: usize,
    /// Die whose host page is being filled, and units filled.
    fill: Option<(usize, u32)>,
    /// Pages handed to dies: (program completion, units freed from the buffer then).
    buffer: VecDeque<(u64, u32)>,
    buffer_units: u64,
    buffer_units_max: u64,
    logical_units_used: u64,
    /// Units reserved by stores waiting for the inner device (see [`Model::reserve`]).
    reserved_units: u64,
    logical_units_max: u64,
    stats: SimStats,
}

impl Model {
    fn new(cfg: SimConfig) -> Result<Model> {
        let bad = |m: &str| Err(DeviceError::Config(format!("sim: {m}")));
        if cfg.unit_bytes == 0 || !cfg.page_bytes.is_multiple_of(cfg.unit_bytes) {
            return bad("page_bytes must be a multiple of unit_bytes");
        }
        if cfg.channels == 0
            || cfg.dies_per_channel == 0
            || cfg.pages_per_block == 0
            || cfg.time_dilation == 0
        {
            return bad("channels, dies, pages per block and time dilation must be positive");
        }
        let units_per_page = cfg.page_bytes / cfg.unit_bytes;
        let units_per_block = units_per_page * cfg.pages_per_block;
        let n_dies = cfg.channels * cfg.dies_per_channel;
        let block_bytes = cfg.page_bytes as u64 * cfg.pages_per_block as u64;
        let physical = (cfg.logical_bytes as f64 * (1.0 + cfg.over_provisioning)) as u64;
        let blocks_per_die =
            physical.div_ceil(block_bytes * n_dies as u64) as u32 + cfg.gc_free_blocks_min + 2;
        if blocks_per_die < cfg.gc_free_blocks_min + 8 {
            return bad("too few blocks per die; raise logical_bytes or lower pages_per_block");
        }
        let total_units = blocks_per_die as u64 * units_per_block as u64 * n_dies as u64;
        if total_units > u32::MAX as u64 {
            return bad("too many physical units for 32-bit addresses");
        }
        let dies = (0..n_dies)
            .map(|_| Die {
                busy_until: 0,
                busy: Busy::Read,
                free: (2..blocks_per_die).rev().collect(),
                host: (0, 0),
                gc: (1, 0),
                valid: vec![0; blocks_per_die as usize],
            })
            .collect();
        let buffer_units_max =
            (cfg.write_buffer_bytes / cfg.unit_bytes as u64).max(units_per_page as u64);
        Ok(Model {
            epoch: Instant::now(),
            units_per_page,
            units_per_block,
            blocks_per_die,
            dies,
            chan_busy: vec![0; cfg.channels],
            p2l: vec![INVALID; total_units as usize],
            prog_done: vec![NOT_PROGRAMMED; (total_units / units_per_page as u64) as usize],
            ids: FastMap::default(),
            first_unit: Vec::new(),
            more_units: Vec::new(),
            free_ids: Vec::new(),
            next_die: 0,
            fill: None,
            buffer: VecDeque::new(),
            buffer_units: 0,
            buffer_units_max,
            logical_units_used: 0,
            reserved_units: 0,
            logical_units_max: cfg.logical_bytes / cfg.unit_bytes as u64,
            stats: SimStats::default(),
            cfg,
        })
    }

    fn now(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.epoch)
            .as_nanos() as u64
            / self.cfg.time_dilation
    }

    fn units_for(&self, value_len: usize) -> u64 {
        (value_len as u64)
            .div_ceil(self.cfg.unit_bytes as u64)
            .max(1)
    }

    fn ppn(&self, die: usize, block: u32, unit: u32) -> u32 {
        ((die as u64 * self.blocks_per_die as u64 + block as u64) * self.units_per_block as u64
            + unit as u64) as u32
    }

    fn die_block(&self, ppn: u32) -> (usize, u32) {
        let b = ppn / self.units_per_block;
        ((b / self.blocks_per_die) as usize, b % self.blocks_per_die)
    }

    fn xfer_ns(&self, bytes: u64) -> u64 {
        bytes * 1_000_000_000 / self.cfg.channel_bytes_per_sec.max(1)
    }

    fn invalidate(&mut self, ppn: u32) {
        self.p2l[ppn as usize] = INVALID;
        let (d, b) = self.die_block(ppn);
        self.dies[d].valid[b as usize] -= 1;
    }

    /// Schedules a page program on `die` at or after `now`; returns its completion.
    fn program(&mut self, die: usize, page: u32, now: u64) -> u64 {
        let ch = die % self.cfg.channels;
        let xfer = self.xfer_ns(self.cfg.page_bytes as u64);
        let t_in = self.chan_busy[ch].max(now) + xfer;
        self.chan_busy[ch] = t_in;
        let d = &mut self.dies[die];
        let done = d.busy_until.max(t_in) + self.cfg.program_ns;
        d.busy_until = done;
        d.busy = Busy::Write;
        self.prog_done[page as usize] = done;
        done
    }

    /// Takes a free block on `die`, collecting garbage first if free blocks run low.
    fn take_block(&mut self, die: usize, now: u64) -> u32 {
        while (self.dies[die].free.len() as u32) < self.cfg.gc_free_blocks_min {
            if !self.gc(die, now) {
                break;
            }
        }
        self.dies[die]
            .free
            .pop()
            .expect("sim die out of free blocks: over-provisioning too small")
    }

    /// One greedy GC step on `die`: relocate the valid units of the block with fewest valid
    /// units into the GC block, then erase it. Blocks the die throughout.
    fn gc(&mut self, die: usize, now: u64) -> bool {
        let d = &self.dies[die];
        let victim = (0..self.blocks_per_die)
            .filter(|&b| b != d.host.0 && b != d.gc.0 && !d.free.contains(&b))
            .min_by_key(|&b| d.valid[b as usize]);
        let Some(victim) = victim else { return false };
        if d.valid[victim as usize] >= self.units_per_block {
            return false;
        }
        self.stats.gc_runs += 1;
        let start = self.dies[die].busy_until.max(now);
        let mut t = start;
        let mut pages_read = 0u32;
        let mut last_page = u32::MAX;
        for u in 0..self.units_per_block {
            let src = self.ppn(die, victim, u);
            let owner = self.p2l[src as usize];
            if owner == INVALID {
                continue;
            }
            let page = src / self.units_per_page;
            if page != last_page {
                last_page = page;
                pages_read += 1;
            }
            // Destination in the die's GC block; a full GC block takes a fresh free block.
            if self.dies[die].gc.1 == self.units_per_block {
                let b = self.dies[die]
                    .free
                    .pop()
                    .expect("sim: no free block for GC");
                self.dies[die].gc = (b, 0);
            }
            let (gb, gu) = self.dies[die].gc;
            let dst = self.ppn(die, gb, gu);
            self.dies[die].gc.1 += 1;
            self.p2l[dst as usize] = owner;
            self.p2l[src as usize] = INVALID;
            self.dies[die].valid[gb as usize] += 1;
            self.dies[die].valid[victim as usize] -= 1;
            self.set_unit((owner >> 32) as u32, owner & 0xffff_ffff, dst);
            if (gu + 1) % self.units_per_page == 0 {
                t += self.cfg.program_ns;
                self.prog_done[(dst / self.units_per_page) as usize] = t;
                self.stats.gc_pages_programmed += 1;
            }
        }
        t += pages_read as u64 * self.cfg.page_read_ns + self.cfg.erase_ns;
        // Partly filled GC pages are readable once this GC finishes.
        let (gb, gu) = self.dies[die].gc;
        if gu % self.units_per_page != 0 {
            let page = self.ppn(die, gb, gu - 1) / self.units_per_page;
            self.prog_done[page as usize] = t;
        }
        let first = self.ppn(die, victim, 0) / self.units_per_page;
        for p in first..first + self.cfg.pages_per_block {
            self.prog_done[p as usize] = NOT_PROGRAMMED;
        }
        self.stats.blocks_erased += 1;
        self.stats.gc_busy_ns += t - start;
        let d = &mut self.dies[die];
        d.busy_until = t;
        d.busy = Busy::Write;
        d.free.push(victim);
        d.valid[victim as usize] = 0;
        true
    }

    /// Allocates one host unit in the page being filled; programs the page when it is full.
    fn alloc_unit(&mut self, now: u64) -> u32 {
        let (die, filled) = match self.fill {
            Some(f) => f,
            None => {
                let die = self.next_die;
                self.next_die = (self.next_die + 1) % self.dies.len();
                if self.dies[die].host.1 == self.units_per_block {
                    let b = self.take_block(die, now);
                    self.dies[die].host = (b, 0);
                }
                (die, 0)
            }
        };
        let (b, u) = self.dies[die].host;
        let ppn = self.ppn(die, b, u);
        self.dies[die].host.1 += 1;
        self.dies[die].valid[b as usize] += 1;
        let filled = filled + 1;
        if filled == self.units_per_page {
            let done = self.program(die, ppn / self.units_per_page, now);
            self.buffer.push_back((done, self.units_per_page));
            self.stats.host_pages_programmed += 1;
            self.fill = None;
        } else {
            self.fill = Some((die, filled));
        }
        ppn
    }

    /// Time at which `units` more fit in the write buffer.
    fn admit(&mut self, units: u64, now: u64) -> u64 {
        let mut at = now;
        while let Some(&(done, n)) = self.buffer.front() {
            if done <= now || self.buffer_units + units > self.buffer_units_max {
                at = at.max(done);
                self.buffer_units -= n as u64;
                self.buffer.pop_front();
            } else {
                break;
            }
        }
        if at > now {
            self.stats.buffer_stalls += 1;
        }
        self.buffer_units += units;
        at
    }

    /// Physical unit of mapping unit `i` of id `id`'s value.
    fn unit(&self, id: u32, i: u64) -> u32 {
        match i {
            0 => self.first_unit[id as usize],
            _ => self.more_units[id as usize][i as usize - 1],
        }
    }

    fn set_unit(&mut self, id: u32, i: u64, ppn: u32) {
        match i {
            0 => self.first_unit[id as usize] = ppn,
            _ => self.more_units[id as usize][i as usize - 1] = ppn,
        }
    }

    /// The id of `key`, a new one if it has none, with room for `units` mapping units.
    fn id_of(&mut self, key: &[u8], units: u32) -> u32 {
        let id = match self.ids.get_mut(key) {
            Some(slot) => {
                slot.units = units;
                slot.id
            }
            None => {
                let id = self.free_ids.pop().unwrap_or_else(|| {
                    self.first_unit.push(0);
                    self.more_units.push(Box::default());
                    (self.first_unit.len() - 1) as u32
                });
                self.ids.insert(MapKey::new(key), Slot { id, units });
                id
            }
        };
        if units > 1 {
            self.more_units[id as usize] = vec![0; units as usize - 1].into_boxed_slice();
        }
        id
    }

    fn remove(&mut self, key: &[u8]) {
        if let Some(Slot { id, units }) = self.ids.remove(key) {
            self.logical_units_used -= units as u64;
            for i in 0..units as u64 {
                let p = self.unit(id, i);
                self.invalidate(p);
            }
            self.more_units[id as usize] = Box::default();
            self.free_ids.push(id);
        }
    }

    /// Reserves the logical space a store of `value_len` bytes under `key` needs, or fails if
    /// it does not fit; returns the units reserved. The check and the reservation happen under
    /// one lock, before the store awaits the inner device, so concurrent stores can never
    /// together take more than the logical space (the physical space behind it would run out,
    /// and `take_block` with it). Reservations of stores still in flight count in full, not net
    /// of what they replace: that may be gone (deleted, or freed for another store) before they
    /// land. Release with [`Model::release`] or by recording the store.
    fn reserve(&mut self, key: &[u8], value_len: usize) -> Result<u64> {
        let old = self.ids.get(key).map_or(0, |s| s.units as u64);
        let need = self.units_for(value_len);
        // `old` is part of `logical_units_used`, so this cannot underflow.
        let committed = self.logical_units_used + self.reserved_units;
        if committed + need - old > self.logical_units_max {
            let unit = self.cfg.unit_bytes as u64;
            return Err(DeviceError::Capacity {
                needed: need * unit,
                available: self.logical_units_max.saturating_sub(committed) * unit,
            });
        }
        self.reserved_units += need;
        Ok(need)
    }

    /// Gives back a reservation whose store did not happen.
    fn release(&mut self, units: u64) {
        self.reserved_units -= units;
    }

    /// Records a store; returns its completion time.
    fn store(&mut self, key: &[u8], value_len: usize, now: u64) -> u64 {
        self.remove(key);
        let n = self.units_for(value_len);
        let at = self.admit(n, now);
        let id = self.id_of(key, n as u32);
        for i in 0..n {
            let p = self.alloc_unit(at);
            self.p2l[p as usize] = (id as u64) << 32 | i;
            // Recorded at once: garbage collection while the next units are placed may move
            // this one, and then updates it here.
            self.set_unit(id, i, p);
        }
        self.logical_units_used += n;
        at + self.cfg.command_ns + self.xfer_ns(value_len as u64)
    }

    /// Records a read of value bytes `[start, end)`; returns its completion time.
    fn read(&mut self, key: &[u8], start: u64, end: u64, now: u64) -> u64 {
        let Some(&Slot { id, units }) = self.ids.get(key) else {
            return now + self.cfg.command_ns;
        };
        let n = units as u64;
        let unit = self.cfg.unit_bytes as u64;
        let (first, last) = (start / unit, end.saturating_sub(1).max(start) / unit);
        let mut done = now;
        let mut last_page = u32::MAX;
        for i in first..=last.min(n.saturating_sub(1)) {
            if i >= n {
                // Only for n == 0, which the range above does not exclude.
                break;
            }
            let ppn = self.unit(id, i);
            let page = ppn / self.units_per_page;
            if page == last_page {
                continue;
            }
            last_page = page;
            if self.prog_done[page as usize] > now {
                // Still in the DRAM write buffer (or being programmed): served from DRAM.
                continue;
            }
            let (die, _) = self.die_block(ppn);
            let ch = die % self.cfg.channels;
            let d = &mut self.dies[die];
            let read_start = match self.cfg.suspend_ns {
                Some(s) if d.busy == Busy::Write && d.busy_until > now => {
                    // Suspend the program/erase: the read goes first, the write resumes later.
                    d.busy_until += s + self.cfg.page_read_ns;
                    now + s
                }
                _ => {
                    let t = d.busy_until.max(now);
                    d.busy_until = t + self.cfg.page_read_ns;
                    d.busy = Busy::Read;
                    t
                }
            };
            let read_done = read_start + self.cfg.page_read_ns;
            let bytes = ((i + 1) * unit).min(end) - (i * unit).max(start);
            let xfer = self.xfer_ns(bytes.max(1));
            let t = self.chan_busy[ch].max(read_done) + xfer;
            self.chan_busy[ch] = t;
            self.stats.pages_read += 1;
            done = done.max(t);
        }
        done + self.cfg.command_ns + self.xfer_ns(end - start)
    }
}

/// Logical space held for a store in flight; given back on drop unless taken.
struct Reservation<'a> {
    model: &'a Mutex<Model>,
    units: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.units > 0 {
            self.model
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .release(self.units);
        }
    }
}

/// A simulated SSD: `inner` keeps the data, the model decides how long each operation takes.
pub struct SimDevice {
    inner: Arc<dyn Device>,
    model: Mutex<Model>,
    gate: QueueGate,
    logical_bytes: u64,
    /// The model's epoch and time dilation, fixed at creation; kept outside the lock so waits
    /// do not take it.
    epoch: Instant,
    dilation: u64,
}

impl SimDevice {
    /// Wraps `inner` with the timing model. Call inside a tokio runtime (the model's clock
    /// starts now).
    pub fn new(inner: Arc<dyn Device>, config: SimConfig) -> Result<SimDevice> {
        let gate = QueueGate::new(config.queue_depth_max);
        let logical_bytes = config.logical_bytes;
        let model = Model::new(config)?;
        Ok(SimDevice {
            inner,
            epoch: model.epoch,
            dilation: model.cfg.time_dilation,
            model: Mutex::new(model),
            gate,
            logical_bytes,
        })
    }

    fn model(&self) -> std::sync::MutexGuard<'_, Model> {
        self.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The model's counters.
    pub fn stats(&self) -> SimStats {
        self.model().stats
    }

    /// The model's configuration.
    pub fn config(&self) -> SimConfig {
        self.model().cfg.clone()
    }

    /// Waits until every die and channel is idle (the write buffer programmed, GC finished),
    /// e.g. between preconditioning and a measurement.
    pub async fn drain(&self) {
        let done = {
            let m = self.model();
            m.dies
                .iter()
                .map(|d| d.busy_until)
                .chain(m.chan_busy.iter().copied())
                .max()
                .unwrap_or(0)
        };
        self.wait(done).await;
    }

    async fn wait(&self, done: u64) {
        let at = self.epoch + Duration::from_nanos(done.saturating_mul(self.dilation));
        tokio::time::sleep_until(at).await;
    }
}

#[async_trait]
impl Device for SimDevice {
    async fn store(&self, key: &[u8], value: &[u8], mode: StoreMode) -> Result<()> {
        let _slot = self.gate.enter().await;
        let mut reserved = Reservation {
            model: &self.model,
            units: self.model().reserve(key, value.len())?,
        };
        // A failed or cancelled inner store gives the reservation back (`Reservation::drop`).
        self.inner.store(key, value, mode).await?;
        let done = {
            let mut m = self.model();
            m.release(std::mem::take(&mut reserved.units));
            let now = m.now();
            m.store(key, value.len(), now)
        };
        self.wait(done).await;
        Ok(())
    }

    async fn retrieve(&self, key: &[u8], range: ReadRange) -> Result<Retrieved> {
        let _slot = self.gate.enter().await;
        let r = self.inner.retrieve(key, range).await?;
        let done = {
            let mut m = self.model();
            let now = m.now();
            let start = range.offset;
            m.read(key, start, start + r.value.len() as u64, now)
        };
        self.wait(done).await;
        Ok(r)
    }

    async fn delete(&self, key: &[u8], must_exist: bool) -> Result<bool> {
        let _slot = self.gate.enter().await;
        let existed = self.inner.delete(key, must_exist).await?;
        let done = {
            let mut m = self.model();
            m.remove(key);
            m.now() + m.cfg.command_ns
        };
        self.wait(done).await;
        Ok(existed)
    }

    async fn exist(&self, keys: &[&[u8]]) -> Result<Vec<bool>> {
        let _slot = self.gate.enter().await;
        let r = self.inner.exist(keys).await?;
        let done = {
            let m = self.model();
            m.now() + m.cfg.command_ns
        };
        self.wait(done).await;
        Ok(r)
    }

    async fn iterate(&self, req: &IterRequest) -> Result<IterBatch> {
        let _slot = self.gate.enter().await;
        let b = self.inner.iterate(req).await?;
        let done = {
            let mut m = self.model();
            let now = m.now();
            let mut done = now + m.cfg.command_ns;
            if req.with_values {
                for e in &b.entries {
                    let len = e.value.as_ref().map_or(0, |v| v.len() as u64);
                    done = done.max(m.read(&e.key, 0, len, now));
                }
            }
            done
        };
        self.wait(done).await;
        Ok(b)
    }

    async fn info(&self) -> Result<DeviceInfo> {
        let mut i = self.inner.info().await?;
        let m = self.model();
        i.capacity_bytes = self.logical_bytes;
        i.used_bytes = m.logical_units_used * m.cfg.unit_bytes as u64;
        i.optimal_value_bytes = m.cfg.page_bytes as u64;
        i.queue_depth_max = self.gate.depth_max();
        Ok(i)
    }

    async fn sync(&self) -> Result<()> {
        // The write buffer is taken as power-loss protected (capacitors), as on enterprise SSDs.
        self.inner.sync().await?;
        let done = {
            let m = self.model();
            m.now() + m.cfg.command_ns
        };
        self.wait(done).await;
        Ok(())
    }

    async fn compact(&self, budget_bytes: u64) -> Result<CompactStats> {
        self.inner.compact(budget_bytes).await
    }

    fn memory_bytes(&self) -> u64 {
        self.inner.memory_bytes()
    }

    fn remote(&self) -> bool {
        self.inner.remote()
    }

    fn limits(&self) -> Limits {
        self.inner.limits()
    }
}

/// Fills a device with `key_count` values of `value_bytes` (keys are 8-byte big-endian
/// numbers), then overwrites `overwrites` random keys, with `concurrency` operations in flight:
/// the SSD preconditioning before a measurement, so garbage collection is in steady state.
pub async fn precondition(
    dev: Arc<dyn Device>,
    key_count: u64,
    value_bytes: usize,
    overwrites: u64,
    concurrency: usize,
    seed: u64,
) -> Result<()> {
    use rand::{Rng, SeedableRng};
    let value: Arc<[u8]> = (0..value_bytes)
        .map(|i| (i * 31 + 7) as u8)
        .collect::<Vec<_>>()
        .into();
    let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..concurrency.max(1) {
        let (dev, value, next) = (dev.clone(), value.clone(), next.clone());
        tasks.spawn(async move {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (t as u64) << 32);
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= key_count + overwrites {
                    return Ok::<(), DeviceError>(());
                }
                let k = if i < key_count {
                    i
                } else {
                    rng.gen_range(0..key_count)
                };
                dev.store(&k.to_be_bytes(), &value, StoreMode::Upsert)
                    .await?;
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.map_err(|_| DeviceError::Failed {
            reason: "precondition task panicked",
        })??;
    }
    Ok(())
}

/// A current-thread tokio runtime with its clock paused: timers take virtual time, which
/// advances whenever every task waits, so simulated hours take seconds and runs repeat exactly
/// (DESIGN §4). The same device code runs under a normal runtime in real time.
pub fn virtual_time_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Checks the model's mappings: each unit of each stored value is mapped back to that
    /// value and unit, and every block's valid count is the number of units mapped into it.
    fn check_mappings(m: &Model) {
        let mut valid = vec![0u32; m.p2l.len() / m.units_per_block as usize];
        let mut used = 0;
        for slot in m.ids.values() {
            for i in 0..slot.units as u64 {
                let p = m.unit(slot.id, i);
                assert_eq!(
                    m.p2l[p as usize],
                    (slot.id as u64) << 32 | i,
                    "unit {i} of id {}",
                    slot.id
                );
                valid[(p / m.units_per_block) as usize] += 1;
            }
            used += slot.units as u64;
        }
        assert_eq!(used, m.logical_units_used);
        assert_eq!(m.p2l.iter().filter(|&&o| o != INVALID).count() as u64, used);
        for (d, die) in m.dies.iter().enumerate() {
            for b in 0..m.blocks_per_die as usize {
                let global = d * m.blocks_per_die as usize + b;
                assert_eq!(die.valid[b], valid[global], "die {d} block {b}");
            }
        }
    }

    /// Values wider than all dies together (a die's open block fills up while one value is
    /// placed, and garbage collection may move units of that value placed just before),
    /// overwritten at random near full capacity: the mappings stay consistent. (Before units
    /// were recorded as they were placed, this underflowed a block's valid count.)
    #[test]
    fn mappings_stay_consistent_under_gc_with_wide_values() {
        let cfg = SimConfig {
            channels: 2,
            dies_per_channel: 1,
            pages_per_block: 4,
            logical_bytes: 4 << 20,
            ..Default::default()
        };
        let mut m = Model::new(cfg).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let mut now = 0;
        for _ in 0..4000 {
            let key = rng.gen_range(0..12u32).to_be_bytes();
            if rng.gen_range(0..10) == 0 {
                m.remove(&key);
                continue;
            }
            // 49-98 units, over 16 units per round of the two dies.
            let len = rng.gen_range(200_000..=400_000);
            let Ok(units) = m.reserve(&key, len) else {
                continue;
            };
            m.release(units);
            now = m.store(&key, len, now).max(now);
        }
        assert!(m.stats.gc_runs > 100, "{:?}", m.stats);
        check_mappings(&m);
        // Reads find every unit of every value.
        for k in 0..12u32 {
            if let Some(&s) = m.ids.get(&k.to_be_bytes()[..]) {
                let len = s.units as u64 * m.cfg.unit_bytes as u64;
                assert!(m.read(&k.to_be_bytes(), 0, len, now) > now);
            }
        }
    }
}
