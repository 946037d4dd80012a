//! A journal device that fails while copies are still on their way to it: the copies land after
//! the failure, are lost one by one over several sync rounds, and every one is journalled again
//! elsewhere; the device being synced is not blamed for it. (Found by the whole-system simulator,
//! seed 13841 of `rep3-sep-n12` with partial separation: after three rounds the sync gave up
//! with an error that took the synced device, healthy, out of service.)

use crate::common;

use common::Timed;
use railstore_device::{Device, ReadRange, StoreMode};
use railstore_rails::journal::JOURNAL_KEY_PREFIX;
use railstore_rails::{Rails, RailsConfig, Role, ScheduleConfig};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A memory device whose journal records land one after another, `record_gap` apart (the
/// n-th after n gaps), and whose sync takes `sync_wait`.
fn slow_journal(record_gap: Duration, sync_wait: Duration) -> Arc<dyn Device> {
    let records = AtomicU32::new(0);
    Timed::new(
        Box::new(move |k, _| {
            if k.starts_with(&JOURNAL_KEY_PREFIX) {
                record_gap * (records.fetch_add(1, Ordering::SeqCst) + 1)
            } else {
                Duration::ZERO
            }
        }),
        sync_wait,
    )
}

#[tokio::test(start_paused = true)]
async fn copies_landing_on_a_failed_journal_device_are_journalled_again_without_failing_the_synced_device(
) {
    const WRITES: usize = 24;
    let ms = Duration::from_millis;
    // Device 0 reads (its writes are buffered and journalled on 1 or 2); device 1's journal
    // records land 2 ms apart and a device sync takes 3 ms, so every sync round (which syncs
    // device 2, holding the copies journalled again) sees another copy lost.
    let devices = vec![
        slow_journal(Duration::ZERO, ms(3)),
        slow_journal(ms(2), ms(3)),
        slow_journal(Duration::ZERO, ms(3)),
    ];
    let cfg = RailsConfig::new(ScheduleConfig {
        colours: 3,
        frame: Duration::from_secs(10),
        window_min: 1,
        window_max: 1,
        guard: ms(10),
    });
    let (rails, devs) = Rails::new(cfg, devices, vec![0, 1, 2]).unwrap();
    assert_eq!(rails.role(0), Role::Reader);
    assert_eq!(rails.role(1), Role::Writer);
    let failed = Arc::new(Mutex::new(Vec::new()));
    let seen = failed.clone();
    rails.on_failure(Arc::new(move |d| seen.lock().unwrap().push(d)));

    let writes: Vec<_> = (0..WRITES)
        .map(|i| {
            let dev = devs[0].clone();
            tokio::spawn(async move {
                dev.store(format!("k{i}").as_bytes(), b"v", StoreMode::Upsert)
                    .await
            })
        })
        .collect();
    // Every write has picked its journal device; device 1 fails with its copies in flight,
    // and the sync starts once the first of them has landed there.
    tokio::time::sleep(ms(1)).await;
    rails.mark_failed(1);
    tokio::time::sleep(ms(2)).await;
    devs[0].sync().await.expect("a sync of a healthy device");
    for w in writes {
        w.await.unwrap().unwrap();
    }
    devs[0].sync().await.unwrap();

    assert_eq!(*failed.lock().unwrap(), vec![1], "only device 1 failed");
    let records = rails.counters(0).journal_records.load(Ordering::Relaxed) as usize;
    let landed_late = records - WRITES;
    println!("{landed_late} copies landed on device 1 after it failed");
    // Several copies landed on device 1 after it failed, each one journalled again.
    assert!(landed_late >= 4, "{landed_late} copies journalled again");
    for i in 0..WRITES {
        let got = devs[0]
            .retrieve(format!("k{i}").as_bytes(), ReadRange::ALL)
            .await
            .unwrap();
        assert_eq!(&got.value[..], b"v");
    }
}
