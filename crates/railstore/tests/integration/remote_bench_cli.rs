//! `railstore bench remote`, run as a user would (short, on the file device): every case runs
//! on both sides, the remote side really through a node, and the ratios are the medians'.

use crate::common::succeeded;
use std::process::Command;

#[test]
fn remote_bench_measures_each_case_locally_and_through_a_node() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("remote.json");
    let (stdout, _) = succeeded(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["bench", "remote", "--duration", "0.3", "--rounds", "3"])
            .args(["--size-large", "16777216", "--size-small", "1048576"])
            .arg("--path")
            .arg(dir.path().join("devices"))
            .arg("--json")
            .arg(&json),
    );
    assert!(stdout.contains("through a node on loopback"), "{stdout}");
    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 3, "{r}");
    for c in cases {
        let (local, remote) = (
            c["local"].as_array().unwrap(),
            c["remote"].as_array().unwrap(),
        );
        assert_eq!((local.len(), remote.len()), (3, 3), "{c}");
        for side in local.iter().chain(remote) {
            assert!(side["ops"].as_u64().unwrap() > 0, "{c}");
            assert!(side["direct_io"].is_boolean(), "the file device: {c}");
        }
        assert!(local.iter().all(|r| r["remote"] == false), "{c}");
        assert!(remote.iter().all(|r| r["remote"] == true), "{c}");
        // The comparison is of the medians (the middle of three runs).
        let median = |runs: &[serde_json::Value], field: &str| {
            let mut v: Vec<f64> = runs.iter().map(|r| r[field].as_f64().unwrap()).collect();
            v.sort_by(f64::total_cmp);
            v[1]
        };
        let ratio = c["throughput_ratio"].as_f64().unwrap();
        let expect = median(remote, "mbps") / median(local, "mbps");
        assert!((ratio - expect).abs() < 1e-9, "{c}");
        let added = c["p50_added_us"].as_f64().unwrap();
        let expect = median(remote, "p50_us") - median(local, "p50_us");
        assert!((added - expect).abs() < 1e-9, "{c}");
    }
}
