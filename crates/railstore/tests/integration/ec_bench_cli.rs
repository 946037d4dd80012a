//! The README's main command, `railstore ec-bench --quick`, run as a user would.

use std::process::Command;

#[test]
fn quick_ec_bench_writes_its_table_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("points.json");
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["ec-bench", "--quick", "--min-time", "0.002", "--out"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("RS(6,3)") && stdout.contains("RS(10,4)"),
        "{stdout}"
    );
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let rows = rows.as_array().unwrap();
    // 2 codes x 2 chunks x 2 ops for each engine measured.
    assert_eq!(rows.len() % 8, 0);
    assert!(!rows.is_empty());
    for r in rows {
        assert!(r["data_gbps"].as_f64().unwrap() > 0.0);
        assert!([4096, 65536].contains(&r["chunk"].as_u64().unwrap()));
    }
    for f in ["results.csv", "summary.md"] {
        assert!(dir.path().join(f).exists(), "{f} missing");
    }
}

#[test]
fn bad_options_fail_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["ec-bench", "--k", "300", "--m", "2", "--no-plots", "--out"])
        .arg(std::env::temp_dir().join("railstore-never-written"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("k + m <= 256"), "{err}");
}

#[test]
fn the_offload_engine_says_why_it_cannot_run() {
    if let Some(why) = railstore_ec::gpu_unavailable_reason() {
        let dir = tempfile::tempdir().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "ec-bench",
                "--engine",
                "cuda",
                "--quick",
                "--no-plots",
                "--out",
            ])
            .arg(dir.path())
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("engine cuda is not available") && err.contains(&why),
            "{err}"
        );
        assert!(
            !dir.path().join("results.json").exists(),
            "nothing is written"
        );
    } else {
        eprintln!("a GPU is here: the offload rows run (.ci/gpu-check covers them)");
    }
}

#[test]
fn klauspost_is_timed_in_the_same_run_where_go_is() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("points.json");
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args([
            "ec-bench", "--config", "4+2", "--chunk", "4K", "--engine", "auto",
        ])
        .args(["--against", "klauspost", "--pin", "0", "--repeat", "1"])
        .args(["--min-time", "0.001", "--no-plots", "--out"])
        .arg(dir.path())
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let go = Command::new("go").arg("version").output();
    if !go.is_ok_and(|o| o.status.success()) {
        assert!(
            stdout.contains("--against klauspost skipped: Go is not installed"),
            "{stdout}"
        );
        return;
    }
    let rows: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let theirs: Vec<&serde_json::Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["engine"] == "klauspost")
        .collect();
    assert_eq!(theirs.len(), 2, "encode and decode: {stdout}");
    for r in theirs {
        assert!(r["data_gbps"].as_f64().unwrap() > 0.0, "{r}");
    }
    let summary = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(summary.contains("against klauspost"), "{summary}");
}

#[test]
fn pinning_refuses_several_threads() {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args([
            "ec-bench",
            "--quick",
            "--threads",
            "2",
            "--pin",
            "0",
            "--no-plots",
        ])
        .args(["--out", "/nonexistent/never-written"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("use --threads 1"), "{err}");
}
