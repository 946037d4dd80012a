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
            .args(["bench", "remote", "--duration", "0.3", "--rounds", "1"])
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
        let (local, remote) = (&c["local"][0], &c["remote"][0]);
        assert_eq!(local["remote"], false, "{c}");
        assert_eq!(remote["remote"], true, "{c}");
        for side in [local, remote] {
            assert!(side["ops"].as_u64().unwrap() > 0, "{c}");
            assert!(side["direct_io"].is_boolean(), "the file device: {c}");
        }
        let ratio = c["throughput_ratio"].as_f64().unwrap();
        let expect = remote["mbps"].as_f64().unwrap() / local["mbps"].as_f64().unwrap();
        assert!((ratio - expect).abs() < 1e-9, "{c}");
        let added = c["p50_added_us"].as_f64().unwrap();
        let expect = remote["p50_us"].as_f64().unwrap() - local["p50_us"].as_f64().unwrap();
        assert!((added - expect).abs() < 1e-9, "{c}");
    }
}
