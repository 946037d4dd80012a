//! `railstore bench s3` end to end: the binary starts a store on memory devices and its S3
//! endpoint, loads it through HTTP, then the store directly, and reports both.

use crate::common::json_report;
use std::process::Command;

#[test]
fn bench_s3_measures_the_endpoint_and_the_store_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    // With a bare --json, stdout is the JSON alone; the table goes to stderr.
    let (report, stderr) = json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "bench",
                "s3",
                "--quick",
                "--devices-kind",
                "mem",
                "--size",
                "4KiB",
                "--clients",
                "4",
                "--duration",
                "2s",
                "--workload",
                "put,get",
                "--objects",
                "50",
                "--quiet",
                "--no-plots",
                "--json",
            ])
            .arg("--path")
            .arg(dir.path())
            .arg("--out")
            .arg(&out_dir),
    );
    assert!(stderr.contains("% store"), "no table on stderr:\n{stderr}");
    assert_eq!(report["errors"], 0, "{report:#}");
    let runs = report["runs"].as_array().expect("runs");
    for target in ["s3", "store"] {
        for workload in ["put", "get"] {
            let run = runs
                .iter()
                .find(|r| r["target"] == target && r["workload"] == workload)
                .unwrap_or_else(|| panic!("no {target} {workload} run in {report:#}"));
            assert!(
                run["ops"].as_u64().unwrap() > 0,
                "{target} {workload}: no operations: {run:#}"
            );
            assert_eq!(run["errors"], 0, "{target} {workload}: {run:#}");
            assert!(run["ops_per_s"].as_f64().unwrap() > 0.0);
            let kind = &run["kinds"][0];
            assert_eq!(kind["kind"], workload);
            assert_eq!(
                kind["bytes"].as_u64().unwrap(),
                kind["ops"].as_u64().unwrap() * 4096
            );
            assert!(kind["latency"]["p99_us"].as_f64().unwrap() > 0.0);
        }
    }
    let comparison = report["comparison"].as_array().expect("comparison");
    assert_eq!(comparison.len(), 2, "{report:#}");
    for c in comparison {
        assert!(c["pct_of_store"].as_f64().unwrap() > 0.0, "{c:#}");
    }
    assert_eq!(report["setup"]["in_process"], true);
    for f in ["results.json", "results.csv", "series.csv", "summary.md"] {
        assert!(out_dir.join(f).exists(), "{f} not written");
    }
    // The temporary data folder is gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("railstore-s3bench-"))
        .collect();
    assert!(left.is_empty(), "data folders left behind: {left:?}");
}

#[test]
fn bench_s3_rejects_bad_options() {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["bench", "s3", "--size", "0", "--quiet"])
        .output()
        .expect("running railstore");
    assert!(!out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["bench", "s3", "--access-key", "a", "--quiet"])
        .output()
        .expect("running railstore");
    assert!(!out.status.success(), "--access-key without --endpoint");
}
