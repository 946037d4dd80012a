//! `railstore grow` and `railstore drain` on a data folder, and `railstore bench grow` end to
//! end (a store grown and drained back under an S3 load, every figure reported).

use crate::common;

use common::{cli, config_file, json_report, load, serve_in};
use railstore_store::{body_from, collect_body, PutOptions, Store, StoreConfig};
use std::path::Path;
use std::process::Command;

/// The store configuration `railstore --config F --data D` uses.
fn store_config(path: &Path, data: &Path) -> StoreConfig {
    let mut table: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    table.remove("server");
    let mut cfg = StoreConfig::from_table(table).unwrap();
    cfg.data_dir = data.to_path_buf();
    cfg
}

/// `railstore` with these arguments, which must succeed: its output.
fn ok(args: &[&str]) -> String {
    let (success, out) = cli(args);
    assert!(success, "railstore {args:?}: {out}");
    out
}

/// `railstore` with these arguments, which must fail saying `why`.
fn refused(args: &[&str], why: &str) {
    let (success, out) = cli(args);
    assert!(!success && out.contains(why), "railstore {args:?}: {out}");
}

#[test]
fn grow_and_drain_a_data_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = config_file(dir.path());
    let data = dir.path().join("data");
    let cfg = store_config(&cfg_path, &data);
    let (c, d) = (cfg_path.to_str().unwrap(), data.to_str().unwrap());
    let objects: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("k{i}"), vec![i as u8; [10, 5000, 100_000][i % 3]]))
        .collect();

    refused(
        &["grow", "-c", c, "--data", d, "--devices", "6"],
        "no array yet",
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(cfg.clone()).await.unwrap();
        store.create_bucket("cli").await.unwrap();
        for (k, v) in &objects {
            store
                .put_object("cli", k, body_from(v.clone()), PutOptions::default())
                .await
                .unwrap();
        }
        store.shutdown().await.unwrap();
    });

    refused(
        &["grow", "-c", c, "--data", d, "--devices", "5"],
        "multiple of 6",
    );
    refused(&["drain", "-c", c, "--data", d], "never grown");

    let elsewhere = dir.path().join("ssd7");
    let mut args = vec!["grow", "-c", c, "--data", d, "--devices", "6"];
    let paths: Vec<String> = (0..6)
        .map(|i| elsewhere.join(format!("dev{i}")).display().to_string())
        .collect();
    for p in &paths {
        args.extend(["--path", p.as_str()]);
    }
    let text = ok(&args);
    assert!(text.contains("grown from 6 to 12 devices"), "{text}");
    assert!(text.contains(&paths[5]), "{text}");

    // The next open moves the objects; status lists twelve devices.
    rt.block_on(async {
        let store = Store::open(cfg.clone()).await.unwrap();
        let status = store.wait_for_repair().await.expect("the move ran");
        assert_eq!((status.kind.as_str(), status.error), ("grow", None));
        for (k, v) in &objects {
            let g = store.get_object("cli", k, None).await.unwrap();
            assert_eq!(&collect_body(g.body).await.unwrap(), v, "{k}");
        }
        let s = store.status().await;
        assert_eq!(s.devices.len(), 12);
        assert!(s.devices[11].keys > 0, "an added device holds pieces");
        store.shutdown().await.unwrap();
    });
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["status", "-c", c, "--data", d, "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["devices"].as_array().unwrap().len(), 12);

    let text = ok(&["drain", "-c", c, "--data", d]);
    assert!(text.contains("devices 6 to 11"), "{text}");
    rt.block_on(async {
        let store = Store::open(cfg.clone()).await.unwrap();
        let status = store.wait_for_repair().await.expect("the move ran");
        assert_eq!((status.kind.as_str(), status.error), ("drain", None));
        store.shutdown().await.unwrap();
        drop(store);
        let store = Store::open(cfg.clone()).await.unwrap();
        assert_eq!(store.status().await.devices.len(), 6);
        for (k, v) in &objects {
            let g = store.get_object("cli", k, None).await.unwrap();
            assert_eq!(&collect_body(g.body).await.unwrap(), v, "{k}");
        }
        store.shutdown().await.unwrap();
    });
}

/// `railstore device add` and `railstore device remove`: devices join a running server and
/// are drained from it again while it serves, and leave the array at its clean shutdown.
#[test]
fn devices_are_added_to_and_removed_from_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let d = data.to_str().unwrap();
    let (access, secret) = ("remove-test", "remove-test-secret-0123");
    let (served, endpoint) = serve_in(dir.path(), access, secret);
    let addr = endpoint.trim_start_matches("http://").to_string();
    let (loaded, errors, out) = load(&endpoint, access, secret);
    assert!(loaded && errors == 0, "{out}");
    let with = |args: &[&str]| {
        let mut a = args.to_vec();
        a.extend(["--server", &addr, "--data", d]);
        cli(&a)
    };
    let (done, out) = with(&["device", "remove"]);
    assert!(!done && out.contains("never grown"), "{out}");
    let (done, out) = with(&["device", "add", "--devices", "4"]);
    assert!(!done && out.contains("400"), "{out}");
    let (done, out) = with(&["device", "add", "--devices", "6"]);
    assert!(
        done && out.contains("added devices 6, 7, 8, 9, 10, 11") && out.contains("finished"),
        "{out}"
    );
    let (loaded, errors, out) = load(&endpoint, access, secret);
    assert!(loaded && errors == 0, "{out}");
    let (done, out) = with(&["device", "remove"]);
    assert!(
        done && out.contains("draining devices 6, 7, 8, 9, 10, 11") && out.contains("finished"),
        "{out}"
    );
    let (done, out) = with(&["device", "remove"]);
    assert!(!done && out.contains("drained already"), "{out}");
    let (loaded, errors, out) = load(&endpoint, access, secret);
    assert!(loaded && errors == 0, "{out}");
    let (status, log) = served.terminate();
    assert!(status.success(), "{log}");
    let cfg = config_file(dir.path());
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["status", "-c", cfg.to_str().unwrap(), "--data", d, "--json"])
        .output()
        .unwrap();
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["devices"].as_array().unwrap().len(), 6);
}

#[test]
fn bench_grow_moves_half_the_keys_and_reports_every_figure() {
    let dir = tempfile::tempdir().unwrap();
    let (r, stderr) = json_report(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["bench", "grow", "--quick", "--clients", "4", "--json", "-"])
            .arg("--path")
            .arg(dir.path()),
    );
    assert!(
        stderr.contains("| during the grow's move |"),
        "no table:\n{stderr}"
    );
    let load = r["load"].as_array().unwrap();
    assert_eq!(load.len(), 4, "{r:#}");
    for l in load {
        assert_eq!(l["errors"], 0, "{r:#}");
        assert!(l["get_p99_us"].as_f64().unwrap() > 0.0, "{r:#}");
    }
    let moves = r["moves"].as_array().unwrap();
    assert_eq!(moves.len(), 2, "{r:#}");
    for m in moves {
        // Half the groups are new: about half the keys move (300 objects; the goal is 55 %).
        let share = m["share_moved"].as_f64().unwrap();
        assert!((0.35..0.65).contains(&share), "{r:#}");
    }
    assert_eq!(moves[0]["devices_after"], 12);
    assert_eq!(moves[1]["devices_after"], 6);
    assert!(r["drain_start_ms"].as_f64().unwrap() >= 0.0, "{r:#}");
    // The temporary data folder is gone.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}
