//! Buffers and the window sized from the devices' measured write rate (Rails §4.2.2, §4.3.1),
//! in virtual time over devices that take writes at a fixed rate.

use crate::common;

use common::Timed;
use railstore_device::{Device, StoreMode};
use railstore_rails::{
    write_buffer_bytes_min, AdaptiveWindow, Rails, RailsConfig, Role, ScheduleConfig,
};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// A device that writes one value at a time at `bytes_per_s`.
fn throttled(bytes_per_s: f64) -> Arc<dyn Device> {
    let free_at: Mutex<Option<Instant>> = Mutex::new(None);
    Timed::new(
        Box::new(move |_, v| {
            let mut f = free_at.lock().unwrap();
            let now = Instant::now();
            let start = f.map_or(now, |t| t.max(now));
            let done = start + Duration::from_secs_f64(v.len() as f64 / bytes_per_s);
            *f = Some(done);
            done - now
        }),
        Duration::ZERO,
    )
}

const RATE: f64 = 10e6;
const VALUE: usize = 64 << 10;

/// Four colours, one device each, frames of 500 ms, window 1 to 3, devices at 10 MB/s.
fn rails(adaptive: Option<AdaptiveWindow>) -> (Arc<Rails>, Vec<Arc<dyn Device>>) {
    let cfg = RailsConfig {
        adaptive,
        size_buffers: true,
        write_buffer_bytes_max: 64 << 20,
        ..RailsConfig::new(ScheduleConfig {
            colours: 4,
            frame: Duration::from_millis(500),
            window_min: 1,
            window_max: 3,
            guard: Duration::from_millis(10),
        })
    };
    let devices = (0..4).map(|_| throttled(RATE)).collect();
    Rails::new(cfg, devices, vec![0, 1, 2, 3]).unwrap()
}

/// Buffers 2 MiB for device 0 while it reads, then waits until it has written them out.
async fn backlog_on_device_0(rails: &Rails, devs: &[Arc<dyn Device>]) {
    while rails.role(0) != Role::Reader {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for i in 0..32 {
        let key = format!("k{i}");
        devs[0]
            .store(key.as_bytes(), &[7; VALUE], StoreMode::Upsert)
            .await
            .unwrap();
    }
    assert!(rails.snapshot()[0].buffer_bytes >= 2 << 20);
    while rails.snapshot()[0].buffer_bytes > 0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn buffers_are_sized_by_the_rails_rule_from_the_measured_write_rate() {
    let (rails, devs) = rails(None);
    // Nothing measured yet: every buffer has the memory setting as its bound.
    assert!(rails
        .snapshot()
        .iter()
        .all(|s| s.buffer_bytes_max == 64 << 20));
    assert_eq!(rails.measured_write_rate(0), None);
    backlog_on_device_0(&rails, &devs).await;
    let w = rails
        .measured_write_rate(0)
        .expect("the flush pass measured device 0");
    assert!((w - RATE).abs() < RATE * 0.1, "measured {w} B/s");
    // At the next frame the controller sizes device 0's buffer for the widest window the
    // load may ask for, here (no adaptive window) the fixed one: (1 + 1) x 0.5 s x 10 MB/s.
    tokio::time::sleep(Duration::from_millis(600)).await;
    let want = write_buffer_bytes_min(1, Duration::from_millis(500), w);
    assert!((9_000_000..11_000_000).contains(&want), "{want}");
    let snap = rails.snapshot();
    assert_eq!(snap[0].buffer_bytes_max, want);
    // The others are not measured yet and keep the memory setting.
    assert_eq!(snap[1].buffer_bytes_max, 64 << 20);
    let load = rails.load();
    assert_eq!(load.device_write_bytes_per_s, Some(w));
    assert_eq!(load.buffer_bytes_needed, Some(want));
    assert_eq!(load.buffer_bytes_max, 64 << 20);
    // Writers of the current window: one reader of four colours leaves three.
    assert_eq!(load.write_bound_bytes_per_s, Some(3.0 * w));
}

#[tokio::test(start_paused = true)]
async fn the_window_widens_once_the_write_rate_is_measured_and_writes_are_light() {
    let (rails, devs) = rails(Some(AdaptiveWindow::default()));
    // Without a measured rate the window keeps its minimum.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rails.window_size(), 1);
    assert_eq!(rails.partial_frames(), 0);
    backlog_on_device_0(&rails, &devs).await;
    assert!(rails.measured_write_rate(0).is_some());
    // No read rate configured: reads first, as wide as the (absent) writes allow.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(rails.window_size(), 3);
    assert_eq!(rails.partial_frames(), 0);
}

/// Live readers (devices reading, not failed) in the middle of each of `frames` frames of
/// 500 ms, starting after the first two (planned before the failure).
async fn live_readers_per_frame(window_max: usize, frames: usize) -> Vec<usize> {
    let cfg = RailsConfig::new(ScheduleConfig {
        colours: 6,
        frame: Duration::from_millis(500),
        window_min: 3,
        window_max,
        guard: Duration::from_millis(10),
    });
    let devices = (0..6).map(|_| throttled(RATE)).collect();
    let (rails, _devs) = Rails::new(cfg, devices, (0..6).collect()).unwrap();
    rails.mark_failed(2);
    tokio::time::sleep(Duration::from_millis(1250)).await;
    let mut live = Vec::new();
    for _ in 0..frames {
        live.push(
            (0..6)
                .filter(|&d| d != 2 && rails.role(d) == Role::Reader)
                .count(),
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    live
}

#[tokio::test(start_paused = true)]
async fn the_window_widens_past_a_failed_device_to_keep_its_live_readers() {
    // Device 2 failed: in every frame whose window would hold colour 2 the window takes one
    // colour more, so three live devices read throughout (Rails §4.2.1).
    let live = live_readers_per_frame(4, 12).await;
    assert!(live.iter().all(|&n| n == 3), "{live:?}");
    // Without room to widen (the widest window is the smallest), half the frames read with
    // two live devices: what the widening removes.
    let live = live_readers_per_frame(3, 12).await;
    assert_eq!(live.iter().filter(|&&n| n == 2).count(), 6, "{live:?}");
}
