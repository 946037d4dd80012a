//! `railstore bench mixed --preset erails-k3 --quick` end to end in virtual time: the JSON has the three
//! runs with their fields, and separation keeps the read tail below that of mixing reads and
//! writes on the same devices (the whole point of Rails).

use railstore_bench::mixed::{run, MixedBenchArgs, Preset};
use serde_json::Value;

#[test]
fn erails_k3_quick_separation_beats_mixing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mixed.json");
    let out = dir.path().join("out");
    let args = MixedBenchArgs {
        quick: true,
        json: Some(json.clone()),
        out: Some(out.clone()),
        no_plots: true,
        ..MixedBenchArgs::new(Preset::ErailsK3)
    };
    run(&args).unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["preset"], "erails-k3", "{v:#}");
    assert!(v["write_bound_mbps"].as_f64().unwrap() > 0.0, "{v:#}");
    assert_eq!(v["clock"], "virtual");
    assert_eq!(v["cpu_time_charged"], false);
    let runs = v["runs"].as_array().expect("runs");
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["separated", "mixed", "read-only"], "{v:#}");
    for r in runs {
        for f in [
            "read_p50_us",
            "read_p99_us",
            "read_p999_us",
            "read_p9999_us",
            "read_mbps",
            "write_mbps",
            "reads_over_1ms",
            "reads_over_10ms",
            "write_pct_of_bound",
        ] {
            assert!(r[f].as_f64().is_some(), "{f} missing in {r}");
        }
        assert!(r["reads"].as_u64().unwrap() > 1000, "{r}");
        assert!(r["read_p99_us"].as_f64().unwrap() >= r["read_p50_us"].as_f64().unwrap());
    }
    let run = |mode: &str| runs.iter().find(|r| r["mode"] == mode).unwrap();
    let (sep, mixed, ro) = (run("separated"), run("mixed"), run("read-only"));
    let p99 = |r: &Value| r["read_p99_us"].as_f64().unwrap();
    let numbers = format!(
        "read p99 µs: separated {}, mixed {}, read-only {}; p99.9: {} / {} / {}; \
         write MB/s: {} / {}; reads outside the window (separated): {}",
        p99(sep),
        p99(mixed),
        p99(ro),
        sep["read_p999_us"],
        mixed["read_p999_us"],
        ro["read_p999_us"],
        sep["write_mbps"],
        mixed["write_mbps"],
        sep["device_reads_outside_window"]
    );
    assert!(p99(sep) < p99(mixed), "separation lost: {numbers}");
    // Both modes write, and separation keeps reads at read-only latency.
    assert!(sep["writes"].as_u64().unwrap() > 0, "{numbers}");
    assert!(mixed["writes"].as_u64().unwrap() > 0, "{numbers}");
    assert_eq!(ro["writes"].as_u64(), Some(0), "{numbers}");
    assert!(
        p99(sep) <= 2.0 * p99(ro),
        "separated tail far above read-only: {numbers}"
    );
    assert_eq!(
        sep["device_reads_outside_window"].as_u64(),
        Some(0),
        "reads reached writer-role devices: {numbers}"
    );
    for f in [
        "results.json",
        "series.csv",
        "buffer.csv",
        "iops_cdf.csv",
        "summary.md",
    ] {
        assert!(out.join(f).exists(), "{f} not written");
    }
    let series = std::fs::read_to_string(out.join("series.csv")).unwrap();
    assert_eq!(series.lines().count(), 1 + 3 * 3, "{series}");
}
