//! `railstore mttdl`, run as a user would: the KVMD §5.1 model and Table 4 with numbers.

use std::process::{Command, Output};

fn railstore(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_railstore"))
        .arg("mttdl")
        .args(args)
        .output()
        .unwrap()
}

fn ok(out: &Output) -> String {
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `log10` of the exact system MTTDL in years, per mechanism, from the JSON file.
fn log10_years(json: &std::path::Path) -> Vec<(String, f64)> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(json).unwrap()).unwrap();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["mechanism"].as_str().unwrap().to_string(),
                r["mttdl_exact_log10_years"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn default_table_has_a_row_per_mechanism_in_the_expected_order() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("mttdl.json");
    let stdout = ok(&railstore(&["--json", json.to_str().unwrap()]));
    let mechanisms = [
        "hash",
        "rep3",
        "split4+2",
        "pack4+2",
        "split6+3",
        "split10+4",
        "raid1x3",
        "raid6x6",
    ];
    for m in mechanisms {
        // One row in the MTTDL table, one in Table 4, one pros & cons line.
        let rows = stdout
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(m))
            .count();
        assert_eq!(rows, 3, "{m}:\n{stdout}");
    }
    assert!(stdout.contains("Table 4"), "{stdout}");
    // §4.2.1: packing 4+2 turns 4 user writes into 14 device writes.
    assert!(stdout.contains("[1/8, 4/14]"), "{stdout}");

    let years = log10_years(&json);
    assert_eq!(
        years.iter().map(|(m, _)| m.as_str()).collect::<Vec<_>>(),
        mechanisms
    );
    let y = |m: &str| years.iter().find(|(n, _)| n == m).unwrap().1;
    // Hashing: MTTF / devices = 2e6 h / 24 = 9.5 years.
    assert!((10f64.powf(y("hash")) - 2e6 / 24.0 / 8766.0).abs() < 1e-6);
    assert!(y("rep3") > y("hash"));
    assert!(y("raid1x3") > y("hash"));
    assert!(y("split6+3") > y("split4+2"));
    assert!(y("split10+4") > y("split6+3"));
    // KVMD repairs an object, RAID a whole device: same f, far higher MTTDL.
    assert!(y("rep3") > y("raid1x3"));
    assert!(y("split4+2") > y("raid6x6"));
    // log10 values stay finite even where the hours overflow f64.
    assert!(years.iter().all(|(_, v)| v.is_finite()));
}

#[test]
fn paper_testbed_and_repair_options() {
    // KVMD's evaluation: 6 devices, rep3, pack4+2, split4+2; MTTR given directly.
    let stdout = ok(&railstore(&[
        "--devices",
        "6",
        "--mechanisms",
        "hash,rep3,pack4+2,split4+2",
        "--mttr-hours",
        "0.001",
        "--capacity",
        "3.84TB",
        "--object-size",
        "4KiB",
    ]));
    assert!(stdout.contains("6 devices x 3.84 TB"), "{stdout}");
    assert!(
        stdout.contains("MTTR 0.001 h per lost set member"),
        "{stdout}"
    );
    assert!(!stdout.contains("split10+4"), "{stdout}");

    // Faster rebuilds, higher MTTDL.
    let dir = tempfile::tempdir().unwrap();
    let slow = dir.path().join("slow.json");
    let fast = dir.path().join("fast.json");
    for (mbps, path) in [("10", &slow), ("1000", &fast)] {
        ok(&railstore(&[
            "--mechanisms",
            "rep3,split4+2,raid6x6",
            "--repair-mbps",
            mbps,
            "--json",
            path.to_str().unwrap(),
        ]));
    }
    for ((m, s), (_, f)) in log10_years(&slow).iter().zip(log10_years(&fast).iter()) {
        assert!(f > s, "{m}: {f} <= {s}");
    }
}

#[test]
fn bad_options_fail_with_a_message() {
    let err = |args: &[&str]| {
        let out = railstore(args);
        assert!(!out.status.success(), "{args:?} succeeded");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let e = err(&["--devices", "6", "--mechanisms", "split10+4"]);
    assert!(e.contains("14 devices") && e.contains("only 6"), "{e}");
    let e = err(&["--mechanisms", "raid7"]);
    assert!(e.contains("unknown mechanism"), "{e}");
    let e = err(&["--mttr-hours", "1", "--repair-mbps", "100"]);
    assert!(e.contains("cannot be used with"), "{e}");
    let e = err(&["--capacity", "4XB"]);
    assert!(e.contains("unknown size unit"), "{e}");
    let e = err(&["--fill", "0"]);
    assert!(e.contains("fill"), "{e}");
}

#[test]
fn repair_rates_come_from_a_measured_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rebuild.json");
    let run = |mech: &str, objects: u64, mbps: f64| {
        format!(
            r#"{{"mechanism":"{mech}","objects":{objects},"rebuild_mb_per_s":{mbps},"full_copy_mb_per_s":1000.0}}"#
        )
    };
    std::fs::write(
        &path,
        format!(
            "[{},{},{}]",
            run("rep3", 2000, 10.0),
            run("rep3", 1000, 99.0),
            run("split4+2", 2000, 20.0)
        ),
    )
    .unwrap();
    let with = |mechs: &str| {
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["mttdl", "--mechanisms", mechs, "--rebuild-json"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = with("rep3,split4+2,raid6x6");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The larger rep3 run wins; RAID takes the full-device copy rate.
    assert!(text.contains("rep3 10 MB/s"), "{text}");
    assert!(text.contains("split4+2 20 MB/s"), "{text}");
    assert!(text.contains("raid6x6 1000 MB/s"), "{text}");
    let out = with("pack4+2");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("has no rebuild of pack4+2"), "{err}");
}
