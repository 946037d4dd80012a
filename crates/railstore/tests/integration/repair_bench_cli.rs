//! `railstore bench repair` end to end: a store served over S3 in the process, a device failed
//! and rebuilt twice (unthrottled without load, throttled under load), every figure reported.

use crate::common::json_report;
use std::process::Command;

#[test]
fn bench_repair_rebuilds_under_load_and_reports_both_ratios() {
    let dir = tempfile::tempdir().unwrap();
    let (r, stderr) = json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "bench",
                "repair",
                "--quick",
                "--clients",
                "4",
                "--json",
                "-",
            ])
            .arg("--path")
            .arg(dir.path()),
    );
    assert!(stderr.contains("| during rebuild |"), "no table:\n{stderr}");
    let load = r["load"].as_array().unwrap();
    assert_eq!(load.len(), 3, "{r:#}");
    for l in load {
        assert_eq!(l["errors"], 0, "{r:#}");
        assert!(l["get_p99_us"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(l["ops_per_s"].as_f64().unwrap() > 0.0, "{r:#}");
    }
    let rebuilds = r["rebuilds"].as_array().unwrap();
    assert_eq!(rebuilds.len(), 2, "{r:#}");
    for b in rebuilds {
        assert_eq!(b["objects_lost"], 0, "{r:#}");
        // Every object stored has a piece on the device: 300 objects, records and chunks.
        assert!(b["items"].as_u64().unwrap() >= 300, "{r:#}");
    }
    assert_eq!(rebuilds[0]["concurrency"], 16);
    // The configured throttle: the embedded default's.
    assert_eq!(
        rebuilds[1]["concurrency"],
        railstore_store::RepairConfig::default().concurrency
    );
    assert!(r["get_p99_ratio"].as_f64().unwrap() > 0.0, "{r:#}");
    assert!(r["rebuild_rate_ratio"].as_f64().unwrap() > 0.0, "{r:#}");
    // The temporary data folder is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
