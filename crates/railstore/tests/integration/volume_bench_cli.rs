//! The volume benchmarks end to end. `railstore bench ceph-study`: a store in the process, its
//! NBD export on loopback, volumes filled and driven by the own generator (and by fio's nbd
//! engine where fio is installed; CI requires it), every point's figures checked against what
//! the mechanisms must cost. `railstore bench volume-trace`: a trace replayed with separation
//! on and off, recorded by the export, and the recording replayed in turn.

use crate::common;

use common::{json_report, on_path};
use std::path::Path;
use std::process::Command;

/// A short run of the study's load, for `bench ceph-study` and `bench cluster` alike.
const SHORT_RUN: [&str; 10] = [
    "--mechanisms",
    "rep3,split4+2",
    "--object-size",
    "1MiB",
    "--runtime",
    "1",
    "--iodepth",
    "8",
    "--quiet",
    "--json",
];

/// Runs the study with these extra arguments and `PATH`; returns its JSON report or panics
/// with the output.
fn study(dir: &Path, path_var: &std::ffi::OsStr, extra: &[&str]) -> serde_json::Value {
    json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "bench",
                "ceph-study",
                "--sizes",
                "4KiB",
                "--volume-size",
                "8MiB",
            ])
            .args(SHORT_RUN)
            .args(extra)
            .arg("--path")
            .arg(dir)
            .env("PATH", path_var),
    )
    .0
}

/// Every point ran, moved data, and cost at least what its mechanism must.
fn check_rows(report: &serde_json::Value, generator: &str) {
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2 * 4, "2 mechanisms x 4 patterns: {report:#}");
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r:#}"));
        let what = format!("{} {}", r["mechanism"], r["pattern"]);
        assert_eq!(r["generator"], generator, "{what}");
        assert_eq!(r["errors"], 0, "{what}: {r:#}");
        assert!(f("ops") > 0.0, "{what}: no requests: {r:#}");
        assert_eq!(f("bytes"), f("ops") * 4096.0, "{what}: {r:#}");
        assert!(
            f("lat_p50_us") > 0.0
                && f("lat_p50_us") <= f("lat_p99_us")
                && f("lat_p99_us") <= f("lat_p999_us"),
            "{what}: latency percentiles out of order: {r:#}"
        );
        assert!(
            f("cpu_user_s_per_gb") + f("cpu_system_s_per_gb") > 0.0,
            "{what}: the server used no CPU: {r:#}"
        );
        let writes = r["pattern"].as_str().unwrap().contains("write");
        if writes {
            // rep3 stores three copies, split4+2 1.5 bytes per byte, both before headers.
            let least = if r["mechanism"] == "rep3" { 3.0 } else { 1.5 };
            assert!(
                f("device_write_per_byte") >= least,
                "{what}: fewer device bytes written than the mechanism's redundancy: {r:#}"
            );
        } else {
            // The volume was filled first, so every read reaches the devices.
            assert!(
                f("device_read_per_byte") >= 1.0,
                "{what}: reads did not reach the devices: {r:#}"
            );
        }
    }
}

#[test]
fn ceph_study_measures_every_point_with_the_own_generator() {
    let dir = tempfile::tempdir().unwrap();
    // A PATH without fio: `auto` falls back to the own generator, `fio` refuses clearly.
    let empty = dir.path().join("empty-path");
    std::fs::create_dir(&empty).unwrap();
    let report = study(dir.path(), empty.as_os_str(), &[]);
    assert_eq!(report["plan"]["generator"], "own");
    check_rows(&report, "own");

    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["bench", "ceph-study", "--generator", "fio", "--quick"])
        .env("PATH", &empty)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "ran without fio: {stderr}");
    assert!(
        stderr.contains("fio with its nbd engine was not found"),
        "{stderr}"
    );

    // Bad options are refused before anything starts.
    for (args, says) in [
        (&["--mechanisms", "split4"][..], "--mechanisms"),
        (&["--sizes", "1000"][..], "multiple of 512"),
        (
            &["--volume-size", "1MiB", "--sizes", "4MiB"][..],
            "--volume-size",
        ),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["bench", "ceph-study", "--generator", "own"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} accepted");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn ceph_study_drives_fio_over_nbd() {
    let Some(fio) = on_path("fio") else {
        assert!(
            std::env::var_os("RAILSTORE_REQUIRE_FIO").is_none(),
            "RAILSTORE_REQUIRE_FIO is set and no fio was found"
        );
        eprintln!("no fio: skipping the fio study (set RAILSTORE_REQUIRE_FIO to make this fail)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path_var = fio.parent().unwrap().as_os_str().to_owned();
    let out_dir = dir.path().join("out");
    let report = study(
        dir.path(),
        &path_var,
        &["--generator", "fio", "--out", out_dir.to_str().unwrap()],
    );
    assert_eq!(report["plan"]["generator"], "fio");
    check_rows(&report, "fio");
    let csv = std::fs::read_to_string(out_dir.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + 8, "{csv}");
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(
        summary.contains("| split4+2 | randwrite | 4KiB |"),
        "{summary}"
    );
    assert!(out_dir.join("bandwidth-randread.svg").is_file());
}

/// `bench volume-trace` with these arguments; returns its JSON report.
fn volume_trace(dir: &Path, args: &[&str]) -> serde_json::Value {
    json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "bench",
                "volume-trace",
                "--volume-size",
                "64MiB",
                "--quiet",
                "--json",
            ])
            .args(args)
            .arg("--path")
            .arg(dir),
    )
    .0
}

/// (offset, length, write) of each line of a Heimdall-format trace, in file order.
fn trace_requests(path: &Path) -> Vec<(u64, u64, bool)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(f.len(), 5, "{l:?}");
            (f[2].parse().unwrap(), f[3].parse().unwrap(), f[4] == "0")
        })
        .collect()
}

#[test]
fn volume_trace_replays_with_and_without_separation_and_records_what_it_served() {
    let dir = tempfile::tempdir().unwrap();
    // 150 requests over 0.75 s: 4 KiB to 64 KiB, a third reads, two devices (folded apart).
    let trace = dir.path().join("t.trace");
    let mut lines = String::new();
    for i in 0..150u64 {
        let len = 4096 << (i % 5);
        let op = (i % 3 == 0) as u8;
        lines += &format!(
            "{:.3} {} {} {len} {op}\n",
            i as f64 * 5.0,
            i % 2,
            (i * 7919 % 4000) * 8192
        );
    }
    std::fs::write(&trace, lines).unwrap();
    let rec = dir.path().join("rec.trace");
    let report = volume_trace(
        dir.path(),
        &[
            "--trace",
            trace.to_str().unwrap(),
            "--record",
            rec.to_str().unwrap(),
        ],
    );
    let runs = report["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{report:#}");
    for (run, sep) in runs.iter().zip(["on", "off"]) {
        assert_eq!(run["separation"], sep);
        assert_eq!(run["errors"], 0, "{run:#}");
        assert_eq!(run["reads"]["count"], 50, "{run:#}");
        assert_eq!(run["writes"]["count"], 100, "{run:#}");
        let p = |k: &str| run["reads"][k].as_f64().unwrap();
        assert!(p("p50_us") > 0.0 && p("p50_us") <= p("p99_us") && p("p99_us") <= p("max_us"));
        // split3+3 writes at least 2 device bytes per byte; the filled volume's reads reach
        // the devices.
        assert!(
            run["device_write_per_byte"].as_f64().unwrap() >= 2.0,
            "{run:#}"
        );
        assert!(
            run["device_read_per_byte"].as_f64().unwrap() >= 1.0,
            "{run:#}"
        );
        // The export recorded each request as it was sent, in the trace's order.
        let recorded = trace_requests(&dir.path().join(format!("rec.trace.{sep}")));
        assert_eq!(recorded.len(), 150, "{sep}");
        for (i, (off, len, write)) in recorded.iter().enumerate() {
            assert_eq!(*len, 4096 << (i % 5), "{sep} request {i}");
            assert_eq!(*write, i % 3 != 0, "{sep} request {i}");
            assert!(
                off % 512 == 0 && off + len <= 64 << 20,
                "{sep} request {i}: {off}"
            );
        }
    }
    // The recording replays in turn, the same requests at the same offsets.
    let rec_on = dir.path().join("rec.trace.on");
    let again = dir.path().join("again.trace");
    let report = volume_trace(
        dir.path(),
        &[
            "--trace",
            rec_on.to_str().unwrap(),
            "--separation",
            "off",
            "--record",
            again.to_str().unwrap(),
        ],
    );
    assert_eq!(report["runs"][0]["reads"]["count"], 50, "{report:#}");
    assert_eq!(trace_requests(&again), trace_requests(&rec_on));
}

/// `railstore bench cluster`: three nodes of two devices, node 0 serving. Each object has as
/// many pieces on every node (rep3: one, split4+2: two), so two thirds of what is written
/// crosses the network, rep3 reads take node 0's own copy, and no read brings more over the
/// network than the devices gave; impossible layouts are refused before anything starts.
#[test]
fn bench_cluster_counts_the_network_between_nodes() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let (report, _) = json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args([
                "bench",
                "cluster",
                "--nodes",
                "3",
                "--devices-per-node",
                "2",
                "--sizes",
                "64KiB",
                "--volume-size",
                "16MiB",
                "--generator",
                "own",
            ])
            .args(SHORT_RUN)
            .arg("--path")
            .arg(dir.path())
            .arg("--out")
            .arg(&out_dir),
    );
    assert_eq!(report["title"], "cluster");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 2 * 4, "{report:#}");
    for r in rows {
        let f = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("{k} in {r:#}"));
        let call = |c: &str| r["network_per_byte_by_call"][c].as_f64().unwrap_or(0.0);
        let what = format!("{} {}", r["mechanism"], r["pattern"]);
        assert_eq!(r["errors"], 0, "{what}: {r:#}");
        assert!(
            f("socket_per_byte") >= f("network_per_byte"),
            "{what}: {r:#}"
        );
        if r["pattern"].as_str().unwrap().contains("write") {
            let share = call("store") / f("device_write_per_byte");
            assert!(
                (0.6..0.75).contains(&share),
                "{what}: {share:.3} of the device writes crossed the network, not 2/3: {r:#}"
            );
        } else {
            assert_eq!(call("store"), 0.0, "{what}: a read stored: {r:#}");
            if r["mechanism"] == "rep3" {
                // Every object has a copy on node 0, which reads its own first.
                assert_eq!(call("retrieve"), 0.0, "{what}: a remote copy read: {r:#}");
            } else {
                // Two to four of a split object's four data shards are on other nodes.
                assert!(
                    call("retrieve") > 0.0,
                    "{what}: nothing read remotely: {r:#}"
                );
            }
            assert!(
                call("retrieve") <= f("device_read_per_byte") * 1.01,
                "{what}: more came over the network than the devices gave: {r:#}"
            );
        }
    }
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(summary.contains("## cluster results"), "{summary}");
    assert!(summary.contains("net/B"), "{summary}");
    assert!(out_dir.join("network-write.svg").exists());

    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args([
            "bench",
            "cluster",
            "--nodes",
            "2",
            "--devices-per-node",
            "3",
            "--mechanisms",
            "split4+2",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an impossible layout was accepted");
    assert!(stderr.contains("any one node may be lost"), "{stderr}");
}
