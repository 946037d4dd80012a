//! `railstore bench scale` end to end: objects loaded in two steps into an in-process store,
//! each step's memory by layer, disk, listing, rates and restart reported.

use crate::common::json_report;
use std::process::Command;

#[test]
fn bench_scale_reports_every_layer_at_every_step() {
    let dir = tempfile::tempdir().unwrap();
    let plots = tempfile::tempdir().unwrap();
    let (r, stderr) = json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["bench", "scale", "--quick", "--clients", "4", "--json", "-"])
            .arg("--path")
            .arg(dir.path())
            .arg("--plots")
            .arg(plots.path()),
    );
    assert!(stderr.contains("B/obj process"), "no table:\n{stderr}");
    let steps = r["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{r:#}");
    for (s, n) in steps.iter().zip([300u64, 1200]) {
        assert_eq!(s["objects"], n, "{r:#}");
        // Objects of 100 B to 4 KiB are rep3 under the embedded default; the listing saw all.
        assert_eq!(s["mechanisms"]["rep3"], n, "{r:#}");
        for layer in ["store_index", "manager", "devices"] {
            for when in ["memory", "memory_after_restart"] {
                let b = s[when][layer].as_f64().unwrap();
                assert!(b > 0.0, "{when}.{layer}: {r:#}");
            }
        }
        // An index entry holds at least its key twice (map and metadata) and its ETag.
        assert!(s["memory"]["store_index"].as_f64().unwrap() > 64.0, "{r:#}");
        // Three copies of at least 100 bytes each, live; used space holds them too.
        let live = s["disk_live_bytes_per_object"].as_f64().unwrap();
        assert!(live > 300.0, "{r:#}");
        assert!(
            s["disk_bytes_per_object"].as_f64().unwrap() >= live,
            "{r:#}"
        );
        for f in ["get_per_s", "put_per_s", "restart_s", "load_per_s"] {
            assert!(s[f].as_f64().unwrap() > 0.0, "{f}: {r:#}");
        }
    }
    assert_eq!(r["extrapolation"]["from"], serde_json::json!([300, 1200]));
    // Plots where a font is installed (CI installs one); said otherwise.
    let drawn = std::fs::read_dir(plots.path()).unwrap().count();
    assert!(
        drawn == 6 || stderr.contains("plots skipped"),
        "{drawn} plot files:\n{stderr}"
    );
    assert_eq!(r["via"], "store", "{r:#}");
    // Nothing packed: no fill to report.
    assert!(
        steps.iter().all(|s| s["pack_members_per_set"].is_null()),
        "{r:#}"
    );
    // The temporary data folder is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

/// With `--s3` the objects go through the S3 endpoint served in the process: the same steps,
/// every object listed, rates measured over HTTP. Sizes the hybrid policy packs, so the sets'
/// fill is reported.
#[test]
fn bench_scale_loads_through_s3() {
    let dir = tempfile::tempdir().unwrap();
    let (r, stderr) = json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["bench", "scale", "--quick", "--s3", "--clients", "4"])
            .args(["--sizes", "5KiB-16KiB"])
            .args(["--json", "-", "--path"])
            .arg(dir.path()),
    );
    assert_eq!(r["via"], "s3", "{r:#}");
    assert!(stderr.contains("through S3"), "{stderr}");
    let steps = r["steps"].as_array().unwrap();
    for (s, n) in steps.iter().zip([300u64, 1200]) {
        assert_eq!(s["mechanisms"]["pack3+3"], n, "{r:#}");
        for f in ["get_per_s", "put_per_s", "load_per_s"] {
            assert!(s[f].as_f64().unwrap() > 0.0, "{f}: {r:#}");
        }
        // pack3+3: one to three members per set.
        let fill = s["pack_members_per_set"].as_f64().unwrap();
        assert!((1.0..=3.0).contains(&fill), "{r:#}");
    }
    assert!(stderr.contains("members per set"), "{stderr}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
