//! `railstore init`, `status`, `scrub` and `rebuild` on a data folder.

use railstore_store::{body_from, collect_body, PutOptions, Store, StoreConfig};
use std::path::Path;
use std::process::Command;

fn railstore(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(args)
        .output()
        .expect("runs railstore")
}

fn config_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("railstore.toml");
    let text = format!(
        "data_dir = {:?}\n[devices]\ncapacity_bytes = 1073741824\ndirect_io = false\n",
        dir.join("data")
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn store_config(path: &Path) -> StoreConfig {
    let mut table: toml::Table = toml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    table.remove("server");
    StoreConfig::from_table(table).unwrap()
}

#[test]
fn init_writes_a_config_that_loads_and_refuses_to_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.toml");
    let p = path.to_str().unwrap();
    let out = railstore(&["init", p]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(store_config(&path), StoreConfig::default());
    let again = railstore(&["init", p]);
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("--force"));
}

#[test]
fn status_scrub_and_rebuild_on_a_data_folder() {
    let dir = tempfile::tempdir().unwrap();
    let cfg_path = config_file(dir.path());
    let cfg = store_config(&cfg_path);
    let objects: Vec<(String, Vec<u8>)> = (0..40)
        .map(|i| (format!("k{i}"), vec![i as u8; [10, 5000, 100_000][i % 3]]))
        .collect();
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
    let c = cfg_path.to_str().unwrap();

    let out = railstore(&["status", "--config", c, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["objects"], 40);
    assert_eq!(status["devices"].as_array().unwrap().len(), 6);

    let out = railstore(&["scrub", "--config", c, "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("scrub:"));

    // Lose device 2 entirely, then rebuild it.
    std::fs::remove_dir_all(dir.path().join("data/devices/2")).unwrap();
    let out = railstore(&["rebuild", "--config", c, "--device", "2", "--quiet"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("rebuild of device 2"), "{text}");
    assert!(!text.contains("LOST"), "{text}");
    rt.block_on(async {
        let store = Store::open(cfg.clone()).await.unwrap();
        // Every object reads back with device 2 as the only copy of some pieces' positions.
        for (k, v) in &objects {
            let g = store.get_object("cli", k, None).await.unwrap();
            assert_eq!(&collect_body(g.body).await.unwrap(), v, "{k}");
        }
        let keys = store.status().await.devices[2].keys;
        assert!(keys > 0, "the rebuilt device holds pieces again");
        store.shutdown().await.unwrap();
    });

    let out = railstore(&["rebuild", "--config", c, "--device", "9", "--quiet"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("device 9"));
}
