//! `railstore bench mixed --preset serve` end to end: each mode opens the embedded default
//! store on simulated SSDs, serves S3 in the process and loads it with objects of every
//! mechanism's size; the report carries the S3 figures and what the store counted. Also
//! `bench mixed`'s bare `--json`, on the cheapest preset.

use crate::common::{json_report, succeeded};
use std::process::Command;

#[test]
fn the_serve_preset_measures_each_mode_through_s3() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let json = dir.path().join("serve.json");
    let (stdout, _) = succeeded(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "bench",
                "mixed",
                "--preset",
                "serve",
                "--quick",
                "--duration",
                "2",
                "--quiet",
            ])
            .arg("--json")
            .arg(&json)
            .arg("--out")
            .arg(&out_dir)
            .env("TMPDIR", dir.path()),
    );
    assert!(stdout.contains("separated GET p99.9 ="), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let modes = report["modes"].as_array().expect("modes");
    let names: Vec<&str> = modes.iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["separated", "mixed", "read-only"], "{report:#}");
    for m in modes {
        let name = m["mode"].as_str().unwrap();
        let run = &m["run"];
        assert_eq!(run["errors"], 0, "{name}: {run:#}");
        let kind = |k: &str| {
            run["kinds"]
                .as_array()
                .unwrap()
                .iter()
                .find(|x| x["kind"] == k)
        };
        let get = kind("get").unwrap_or_else(|| panic!("{name}: no GETs: {run:#}"));
        assert!(get["ops"].as_u64().unwrap() > 0, "{name}: {run:#}");
        // Objects of 1 KiB to 8 MiB: the mean read is far from either end.
        let mean = get["bytes"].as_u64().unwrap() / get["ops"].as_u64().unwrap();
        assert!(
            (4 << 10..4 << 20).contains(&mean),
            "{name}: mean GET {mean} B"
        );
        let separated = name != "mixed";
        assert_eq!(m["off_window_reads"].is_u64(), separated, "{name}: {m:#}");
        assert_eq!(m["window"].is_object(), separated, "{name}: {m:#}");
        if separated {
            assert!(
                m["window"]["samples"].as_u64().unwrap() > 0,
                "{name}: {m:#}"
            );
        }
        if name == "read-only" {
            assert!(kind("put").is_none(), "read-only wrote: {run:#}");
        } else {
            let put = kind("put").unwrap_or_else(|| panic!("{name}: no PUTs: {run:#}"));
            assert!(put["bytes"].as_u64().unwrap() > 0, "{name}: {run:#}");
        }
    }
    assert!(report["separated_get_p999_vs_read_only"].as_f64().unwrap() > 0.0);
    assert!(report["separated_put_vs_mixed"].as_f64().unwrap() > 0.0);
    for f in ["results.json", "summary.md"] {
        assert!(out_dir.join(f).exists(), "{f} not written");
    }
    // Every mode's temporary data folder is gone.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("railstore-s3bench-"))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn the_serve_preset_refuses_what_does_not_apply() {
    for extra in [
        &["--durability", "memory"][..],
        &["--cold-cache"],
        &["--clock", "real"],
        &["--frame", "0"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["bench", "mixed", "--preset", "serve", "--quick", "--quiet"])
            .args(extra)
            .output()
            .expect("running railstore");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{extra:?} was accepted");
        assert!(
            stderr.contains("--preset serve") || stderr.contains("--frame"),
            "{extra:?}: {stderr}"
        );
    }
}

/// A bare `--json` puts the report alone on stdout; the lines for people go to stderr.
#[test]
fn a_bare_json_prints_the_report_on_stdout() {
    let (report, stderr) = json_report(Command::new(env!("CARGO_BIN_EXE_railstore")).args([
        "bench",
        "mixed",
        "--preset",
        "rails-2",
        "--quick",
        "--modes",
        "read-only",
        "--json",
    ]));
    assert_eq!(report["preset"], "rails-2", "{report:#}");
    assert_eq!(report["runs"][0]["mode"], "read-only", "{report:#}");
    assert!(stderr.contains("w = "), "no table on stderr:\n{stderr}");
}
