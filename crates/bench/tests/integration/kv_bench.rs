//! `railstore bench kv` and `railstore bench rebuild` end to end on in-memory devices: the JSON
//! they write has every field, and the I/O amplification matches what the mechanisms store.

use railstore_bench::device::Backend;
use railstore_bench::harness::OutputArgs;
use railstore_bench::kv::{run, run_rebuild, KvBenchArgs, RebuildBenchArgs};
use serde_json::Value;

fn read_rows(path: &std::path::Path) -> Vec<Value> {
    let v: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    v.as_array().expect("a JSON array").clone()
}

fn row<'a>(rows: &'a [Value], mechanism: &str, phase: &str) -> &'a Value {
    rows.iter()
        .find(|r| r["mechanism"] == mechanism && r["phase"] == phase)
        .unwrap_or_else(|| panic!("no row for {mechanism} {phase}"))
}

#[test]
fn kv_bench_reports_throughput_amplification_and_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("kv.json");
    let out = dir.path().join("out");
    let args = KvBenchArgs {
        backend: Backend::Mem,
        // `none` is left out on purpose: the baseline runs first anyway.
        mechanism: vec!["rep3".into(), "pack4+2".into()],
        objects: 400,
        ops: Some(400),
        value_size: "4KiB".into(),
        mix: vec!["read=100".into(), "read=50,update=40,delete=10".into()],
        qd: 8,
        threads: 1,
        quick: true,
        output: OutputArgs {
            json: Some(json.clone()),
            out: Some(out.clone()),
            quiet: true,
            ..OutputArgs::default()
        },
        ..Default::default()
    };
    run(&args).unwrap();
    let rows = read_rows(&json);
    assert_eq!(
        rows.len(),
        3 * 3,
        "three mechanisms, three phases: {rows:#?}"
    );
    assert_eq!(rows[0]["mechanism"], "none", "the baseline runs first");
    for r in &rows {
        for f in [
            "mechanism",
            "phase",
            "ops_per_s",
            "mb_per_s",
            "pct_of_raw",
            "write_amp",
            "read_amp",
            "cpu_s_per_gb",
            "ctx_switches_per_mb",
            "p50_us",
            "p99_us",
            "p999_us",
        ] {
            assert!(r.get(f).is_some(), "{f} missing in {r}");
        }
        assert!(r["ops_per_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["pct_of_raw"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["cpu_s_per_gb"].as_f64().is_some(), "{r}");
        assert!(r["p99_us"].as_f64().unwrap() >= r["p50_us"].as_f64().unwrap());
    }
    for phase in ["load", "run1", "run2"] {
        assert_eq!(
            row(&rows, "none", phase)["pct_of_raw"].as_f64(),
            Some(100.0)
        );
    }
    let amp = |m: &str, phase: &str, f: &str| row(&rows, m, phase)[f].as_f64();
    let w = amp("none", "load", "write_amp").unwrap();
    assert!((0.99..=1.2).contains(&w), "none write_amp {w}");
    let w = amp("rep3", "load", "write_amp").unwrap();
    assert!((2.9..=3.5).contains(&w), "rep3 write_amp {w}");
    // Packing: the member, m parity pieces per set of up to k, pointers and set descriptors.
    let w = amp("pack4+2", "load", "write_amp").unwrap();
    assert!((1.4..=3.5).contains(&w), "pack4+2 write_amp {w}");
    // A load writes and does not read: no read amplification to speak of.
    assert_eq!(amp("rep3", "load", "read_amp"), None);
    // Reads fetch one copy (plus its header).
    for m in ["none", "rep3", "pack4+2"] {
        let r = amp(m, "run1", "read_amp").unwrap();
        assert!((0.99..=1.2).contains(&r), "{m} read_amp {r}");
        assert_eq!(amp(m, "run1", "write_amp"), None);
    }
    let mixed = row(&rows, "rep3", "run2");
    assert_eq!(mixed["mix"], "read=50,update=40,delete=10");
    assert!(mixed["updates"].as_u64().unwrap() > 0 && mixed["deletes"].as_u64().unwrap() > 0);
    assert_eq!(
        mixed["objects"].as_u64().unwrap(),
        400 - mixed["deletes"].as_u64().unwrap()
    );
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), rows.len() + 1);
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("| pack4+2 | load |"), "{summary}");
}

#[test]
fn kv_bench_mixed_sizes_in_hybrid_mode() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("kv.json");
    run(&KvBenchArgs {
        backend: Backend::Mem,
        mechanism: vec!["none".into(), "hybrid".into()],
        objects: 300,
        ops: Some(300),
        value_mix: Some("4KiB:30,16KiB:40,64KiB:30".into()),
        qd: 6,
        quick: true,
        output: OutputArgs {
            json: Some(json.clone()),
            quiet: true,
            ..OutputArgs::default()
        },
        ..Default::default()
    })
    .unwrap();
    let rows = read_rows(&json);
    let h = row(&rows, "hybrid", "load");
    // rep3 for 4 KiB, pack4+2 for 16 KiB, split4+2 for 64 KiB: between 1.5x and 3x.
    let w = h["write_amp"].as_f64().unwrap();
    assert!((1.3..=3.2).contains(&w), "hybrid write_amp {w}");
    assert_eq!(h["value_size"], "4KiB:30,16KiB:40,64KiB:30");
}

#[test]
fn bad_options_are_refused_before_running() {
    for (mechanism, devices) in [("split10+4", 6), ("raid5", 6), ("rep3", 2)] {
        let e = run(&KvBenchArgs {
            backend: Backend::Mem,
            mechanism: vec![mechanism.into()],
            devices,
            quick: true,
            ..Default::default()
        })
        .unwrap_err();
        assert!(format!("{e:#}").contains(mechanism), "{mechanism}: {e:#}");
    }
    let e = run_rebuild(&RebuildBenchArgs {
        backend: Backend::Mem,
        mechanism: vec!["hash".into()],
        quick: true,
        ..Default::default()
    })
    .unwrap_err();
    assert!(format!("{e:#}").contains("cannot be rebuilt"), "{e:#}");
}

#[test]
fn rebuild_bench_restores_the_failed_device() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("rebuild.json");
    run_rebuild(&RebuildBenchArgs {
        backend: Backend::Mem,
        mechanism: vec!["rep3".into(), "pack4+2".into(), "split4+2".into()],
        objects: 300,
        device_capacity: "16MiB".into(),
        qd: 8,
        quick: true,
        output: OutputArgs {
            json: Some(json.clone()),
            out: Some(dir.path().join("out")),
            quiet: true,
            ..OutputArgs::default()
        },
        ..Default::default()
    })
    .unwrap();
    let rows = read_rows(&json);
    assert_eq!(rows.len(), 6, "{rows:#?}");
    for r in &rows {
        for f in [
            "mechanism",
            "objects",
            "live_bytes",
            "rebuild_s",
            "rebuild_mb_per_s",
            "full_copy_s",
        ] {
            assert!(r.get(f).is_some(), "{f} missing in {r}");
        }
        assert!(r["rebuild_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["full_copy_s"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["live_bytes"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(r["keys_before"], r["keys_after"], "incomplete rebuild: {r}");
    }
    for m in ["rep3", "pack4+2", "split4+2"] {
        let counts: Vec<u64> = rows
            .iter()
            .filter(|r| r["mechanism"] == m)
            .map(|r| r["objects"].as_u64().unwrap())
            .collect();
        assert_eq!(counts, [300, 150], "{m}");
    }
    assert!(dir.path().join("out/summary.md").exists());
}
