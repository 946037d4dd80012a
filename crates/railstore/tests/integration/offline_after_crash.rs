//! The offline commands see what `serve` would see. A child process puts small objects with
//! read/write separation on, deletes them all (every delete acknowledged) and is killed with
//! SIGKILL while deletes for readers are still buffered (and journalled). Then `railstore
//! status` and `railstore scrub` run on the data folder, and a restart must find none of the
//! deleted objects: the offline commands replay the separation journal before they look, and
//! `status` does not mark the folder as cleanly shut down.

use railstore_store::{body_from, PutOptions, Store, StoreConfig, StoreError};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const CHILD_ENV: &str = "RAILSTORE_OFFLINE_CHILD";
const OBJECTS: usize = 600;
const TEST: &str = "deletes_stay_deleted_through_kill_status_scrub_and_restart";

fn config_text(dir: &Path) -> String {
    format!(
        "data_dir = {:?}\n[devices]\ncapacity_bytes = 1073741824\ndirect_io = false\n",
        dir.join("data").display().to_string()
    )
}

fn config(dir: &Path) -> StoreConfig {
    StoreConfig::from_toml(&config_text(dir)).unwrap()
}

/// The child: puts and deletes every object, says so, and waits to be killed.
fn child(dir: &Path) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(config(dir)).await.unwrap();
        assert!(
            store.config().separation.is_some(),
            "the test needs separation"
        );
        store.create_bucket("gone").await.unwrap();
        for i in 0..OBJECTS {
            store
                .put_object(
                    "gone",
                    &format!("k{i}"),
                    body_from(vec![i as u8; 1024]),
                    PutOptions::default(),
                )
                .await
                .unwrap();
        }
        for i in 0..OBJECTS {
            assert!(store.delete_object("gone", &format!("k{i}")).await.unwrap());
        }
        println!("DELETED");
        std::future::pending::<()>().await;
    });
}

fn railstore(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(args)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "railstore {args:?} failed:\n{text}");
    text
}

#[test]
fn deletes_stay_deleted_through_kill_status_scrub_and_restart() {
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        child(Path::new(&dir));
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("railstore.toml");
    std::fs::write(&file, config_text(dir.path())).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            format!("{}::{TEST}", module_path!().split_once("::").unwrap().1).as_str(),
            "--exact",
            "--nocapture",
        ])
        .env(CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let done = lines.map_while(Result::ok).any(|l| l.trim() == "DELETED");
    assert!(done, "the child stopped before deleting everything");
    child.kill().unwrap(); // SIGKILL
    child.wait().unwrap();

    let file = file.to_str().unwrap();
    let status = railstore(&["status", "--config", file, "--json"]);
    let status: serde_json::Value = serde_json::from_str(&status).unwrap();
    assert_eq!(
        status["objects"], 0,
        "status lists deleted objects: {status}"
    );
    let marker = dir.path().join("data").join("clean-shutdown");
    assert!(
        !marker.exists(),
        "status marked a folder that owes a scrub as cleanly shut down"
    );
    railstore(&["scrub", "--config", file, "--quiet"]);
    assert!(marker.exists(), "a finished scrub leaves the folder clean");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = Store::open(config(dir.path())).await.unwrap();
        let back: Vec<usize> = readable(&store).await;
        assert!(
            back.is_empty(),
            "{} of {OBJECTS} acknowledged deletes were undone, e.g. k{:?}",
            back.len(),
            &back[..back.len().min(5)]
        );
        let listed = store
            .list_objects(
                "gone",
                &railstore_store::ListQuery {
                    max_keys: 1000,
                    ..Default::default()
                },
            )
            .unwrap()
            .objects
            .len();
        assert_eq!(listed, 0, "deleted objects are listed");
        store.shutdown().await.unwrap();
    });
}

/// The objects a GET finds.
async fn readable(store: &Store) -> Vec<usize> {
    let mut back = Vec::new();
    for i in 0..OBJECTS {
        match store.get_object("gone", &format!("k{i}"), None).await {
            Ok(_) => back.push(i),
            Err(StoreError::NoSuchKey { .. }) => {}
            Err(e) => panic!("k{i}: {e}"),
        }
    }
    back
}
