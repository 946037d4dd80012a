//! `railstore bench mixed --preset erails-k3 --quick` end to end in virtual time: the JSON has the three
//! runs with their fields, and separation keeps the read tail below that of mixing reads and
//! writes on the same devices (the whole point of Rails).

use railstore_bench::harness::OutputArgs;
use railstore_bench::mixed::{run, MixedBenchArgs, Preset};
use serde_json::Value;

#[test]
fn erails_k3_quick_separation_beats_mixing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mixed.json");
    let out = dir.path().join("out");
    let args = MixedBenchArgs {
        quick: true,
        output: OutputArgs {
            json: Some(json.clone()),
            out: Some(out.clone()),
            no_plots: true,
            quiet: true,
        },
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
    // Per device and sample: role, buffer and the counters that follow roles.
    let buffer = std::fs::read_to_string(out.join("buffer.csv")).unwrap();
    let mut lines = buffer.lines();
    assert_eq!(
        lines.next(),
        Some("mode,time_s,device,role,buffer_bytes,flushed_bytes,buffer_reads,decodes,partial_frames")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    let flushed = |mode: &str| -> u64 {
        let mode_rows: Vec<_> = rows.iter().filter(|r| r[0] == mode).collect();
        let last_t = mode_rows.last().unwrap()[1];
        mode_rows
            .iter()
            .filter(|r| r[1] == last_t)
            .map(|r| r[5].parse::<u64>().unwrap())
            .sum()
    };
    assert!(flushed("separated") > 0, "nothing flushed: {buffer}");
    assert_eq!(flushed("mixed"), 0, "writes buffered without separation");
    assert!(
        rows.iter().any(|r| r[0] == "separated" && r[3] == "writer")
            && rows.iter().any(|r| r[0] == "separated" && r[3] == "reader"),
        "roles missing"
    );
}

/// `--preset erails-decode` (eRails §6.1) at k = 2: the no-decode variant reads only keys whose
/// data shards sit in the read window, so the manager decodes nothing; the decode variant reads
/// keys that need parity, so every read decodes, and each decode is charged its measured CPU
/// time on the virtual clock.
#[test]
fn erails_decode_separates_reads_that_decode_from_reads_that_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("decode.json");
    let out = dir.path().join("out");
    let args = MixedBenchArgs {
        quick: true,
        ks: Some(vec![2]),
        read_streams: Some(8),
        output: OutputArgs {
            json: Some(json.clone()),
            out: Some(out.clone()),
            no_plots: true,
            quiet: true,
        },
        ..MixedBenchArgs::new(Preset::ErailsDecode)
    };
    run(&args).unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["preset"], "erails-decode", "{v:#}");
    assert!(v["write_bound_mbps"].as_f64().is_some(), "{v:#}");
    assert_eq!(
        (v["devices"].as_u64(), v["readers"].as_u64()),
        (Some(4), Some(2))
    );
    assert_eq!(v["decode_threads"], 1);
    let cal = &v["decode_calibration"][0];
    assert_eq!(cal["k"], 2, "{v:#}");
    let us: Vec<f64> = cal["decode_us_by_first_shard"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    // The window holding shards 0..k needs no decode; every other position does.
    assert_eq!(us.len(), 4, "{cal}");
    assert_eq!(us[0], 0.0, "{cal}");
    assert!(us[1..].iter().all(|&u| u > 0.0), "{cal}");
    let runs = v["runs"].as_array().expect("runs");
    let variants: Vec<&str> = runs
        .iter()
        .map(|r| r["variant"].as_str().unwrap())
        .collect();
    assert_eq!(variants, ["no-decode", "decode"], "{v:#}");
    for r in runs {
        assert_eq!(r["mode"], "read-only", "{r}");
        assert_eq!(r["k"], 2, "{r}");
        for f in [
            "read_p50_us",
            "read_p99_us",
            "read_p999_us",
            "read_p9999_us",
            "read_mbps",
            "write_mbps",
        ] {
            assert!(r[f].as_f64().is_some(), "{f} missing in {r}");
        }
        assert!(r["reads"].as_u64().unwrap() > 1000, "{r}");
        assert_eq!(r["writes"], 0, "{r}");
        assert_eq!(r["device_reads_outside_window"], 0, "{r}");
        // What the bench predicted from placement and window is what the manager did.
        assert_eq!(r["decodes"], r["decoding_reads"], "{r}");
    }
    let (plain, coded) = (&runs[0], &runs[1]);
    assert_eq!(plain["decodes"], 0, "{plain}");
    assert_eq!(plain["decode_charged_ms"], 0.0, "{plain}");
    let decodes = coded["decodes"].as_u64().unwrap();
    // Every read decodes (reads still in flight at the deadline decode too, uncounted as reads).
    assert!(decodes >= coded["reads"].as_u64().unwrap(), "{coded}");
    // Each decode was charged one of the measured costs.
    let charged_us = coded["decode_charged_ms"].as_f64().unwrap() * 1000.0;
    let (lo, hi) = us[1..]
        .iter()
        .fold((f64::MAX, 0f64), |(a, b), &u| (a.min(u), b.max(u)));
    assert!(
        charged_us >= decodes as f64 * lo * 0.999 && charged_us <= decodes as f64 * hi * 1.001,
        "charged {charged_us} µs for {decodes} decodes of {lo}..{hi} µs"
    );
    let csv = std::fs::read_to_string(out.join("decode.csv")).unwrap();
    assert_eq!(csv.lines().count(), 3, "{csv}");
    assert!(out.join("summary.md").exists());
}

/// `--decode-threads 0` is the control: the same reads decode, but no time is charged for it.
#[test]
fn erails_decode_without_threads_charges_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("decode.json");
    let args = MixedBenchArgs {
        quick: true,
        ks: Some(vec![2]),
        read_streams: Some(8),
        decode_threads: 0,
        output: OutputArgs {
            json: Some(json.clone()),
            quiet: true,
            ..OutputArgs::default()
        },
        ..MixedBenchArgs::new(Preset::ErailsDecode)
    };
    run(&args).unwrap();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let coded = &v["runs"][1];
    assert_eq!(coded["variant"], "decode", "{v:#}");
    assert!(coded["decodes"].as_u64().unwrap() > 1000, "{coded}");
    assert_eq!(coded["decodes"], coded["decoding_reads"], "{coded}");
    assert_eq!(coded["decode_charged_ms"], 0.0, "{coded}");
}

#[test]
fn erails_decode_refuses_modes_with_writes() {
    let args = MixedBenchArgs {
        quick: true,
        modes: Some(vec![railstore_bench::mixed::Mode::Separated]),
        ..MixedBenchArgs::new(Preset::ErailsDecode)
    };
    let e = run(&args).unwrap_err();
    assert!(format!("{e:#}").contains("read-only"), "{e:#}");
}
