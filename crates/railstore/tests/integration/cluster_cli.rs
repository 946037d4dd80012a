//! Three `railstore serve --cluster` processes on one real etcd: the map created once, the
//! layout formed over the three with any one node losable, each node's devices reachable at the
//! address the map gives, a killed node seen as down once its lease runs out, a data folder
//! refused under another node's name, members added and removed by `railstore cluster`, and a
//! clean stop taking the live record at once.

use crate::common::{cli, config_file, Served};
use railstore_cluster::testing::EtcdProcess;
use railstore_device::{Device, Fence, ReadRange, StoreMode};
use railstore_node::RemoteNode;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn node(url: &str, name: &str, dir: &Path, config: &Path, lease_ttl: u64) -> Served {
    Served::start(
        Command::new(env!("CARGO_BIN_EXE_railstore"))
            .arg("serve")
            .args(["--cluster", url, "--node", name, "--config"])
            .arg(config)
            .arg("--data")
            .arg(dir.join(name))
            .args(["--node-listen", "127.0.0.1:0"])
            .args(["--lease-ttl", &lease_ttl.to_string()]),
    )
}

fn status(url: &str) -> Value {
    let (ok, out) = cli(&["cluster", "status", "--cluster", url, "--json"]);
    assert!(ok, "{out}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Waits (up to 60 s) until the status satisfies `what`.
fn wait_status(url: &str, why: &str, what: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let s = status(url);
        if what(&s) {
            return s;
        }
        assert!(Instant::now() < deadline, "never {why}: {s:#}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn live(s: &Value) -> Vec<String> {
    s["live"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn three_nodes_form_a_cluster_and_a_lost_one_is_seen() {
    let Some(etcd) = EtcdProcess::start().expect("starting etcd") else {
        eprintln!(
            "no etcd: skipping (install etcd-server; set RAILSTORE_REQUIRE_ETCD to make this fail)"
        );
        return;
    };
    let url = format!("{}/test", etcd.cluster_url);
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());

    let (ok, out) = cli(&["cluster", "status", "--cluster", &url]);
    assert!(!ok && out.contains("no cluster \"test\""), "{out}");
    let (ok, out) = cli(&[
        "cluster",
        "init",
        "--cluster",
        &url,
        "--config",
        config.to_str().unwrap(),
    ]);
    assert!(ok, "{out}");
    let (ok, out) = cli(&["cluster", "init", "--cluster", &url]);
    assert!(!ok && out.contains("already exists"), "{out}");

    // n1 gets a short lease: it is the one killed.
    let mut nodes: Vec<Option<Served>> = ["n0", "n1", "n2"]
        .iter()
        .map(|n| {
            Some(node(
                &url,
                n,
                dir.path(),
                &config,
                if *n == "n1" { 2 } else { 60 },
            ))
        })
        .collect();
    for n in nodes.iter_mut().flatten() {
        n.wait_for("node serving its devices");
    }
    let s = wait_status(&url, "three live nodes", |s| live(s).len() == 3);
    let layout = &s["map"]["layout"];
    assert_eq!(layout["epoch"], 1, "{s:#}");
    assert_eq!(layout["devices"].as_array().unwrap().len(), 18);
    assert_eq!(s["node_loss"]["within"], true, "{s:#}");
    assert!(s["down"].as_array().unwrap().is_empty());
    let array_id = s["map"]["array_id"].as_u64().unwrap();

    // Every member's address serves its six devices; a value written through one reads back.
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (name, member) in s["map"]["members"].as_object().unwrap() {
        let address = member["address"].as_str().unwrap().to_string();
        rt.block_on(async {
            let remote = RemoteNode::connect(&address).await.unwrap();
            assert_eq!(remote.name(), name);
            assert_eq!(remote.device_names().len(), 6);
            let fence = Fence {
                array_id,
                layout_epoch: 1,
                shard: 0,
                token: 1,
            };
            let d = remote.device("0", fence).unwrap();
            d.store(b"probe", name.as_bytes(), StoreMode::Upsert)
                .await
                .unwrap();
            let back = d.retrieve(b"probe", ReadRange::ALL).await.unwrap();
            assert_eq!(&back.value[..], name.as_bytes());
        });
    }

    // kill -9: the node's record stays until its lease runs out, then it is down.
    nodes[1].as_mut().unwrap().child.kill().unwrap();
    nodes[1].take().unwrap().child.wait().unwrap();
    let s = wait_status(&url, "n1 down", |s| s["down"] == serde_json::json!(["n1"]));
    assert_eq!(live(&s), ["n0", "n2"]);

    // Another node's folder is refused, and changes nothing.
    let (ok, out) = {
        let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
            .args(["serve", "--cluster", &url, "--node", "n1", "--config"])
            .arg(&config)
            .arg("--data")
            .arg(dir.path().join("n0"))
            .args(["--node-listen", "127.0.0.1:0"])
            .output()
            .unwrap();
        crate::common::outcome(out)
    };
    assert!(!ok && out.contains("belongs to node n0"), "{out}");
    assert_eq!(status(&url)["down"], serde_json::json!(["n1"]));

    // Members by hand: a standby joins and leaves; a node in the layout may not leave.
    let (ok, out) = cli(&[
        "cluster",
        "join",
        "--cluster",
        &url,
        "--node",
        "spare",
        "--address",
        "127.0.0.1:1",
    ]);
    assert!(ok && out.contains("spare is a member"), "{out}");
    let (ok, out) = cli(&["cluster", "leave", "--cluster", &url, "--node", "n2"]);
    assert!(!ok && out.contains("must move to other nodes"), "{out}");
    let (ok, out) = cli(&["cluster", "leave", "--cluster", &url, "--node", "spare"]);
    assert!(ok, "{out}");
    let s = status(&url);
    assert_eq!(s["map"]["members"].as_object().unwrap().len(), 3);
    assert_eq!(s["map"]["layout"], *layout);

    // A clean stop revokes the lease before the process exits: down at once, not after its
    // 60 s.
    let (code, log) = nodes[0].take().unwrap().terminate();
    assert!(code.success(), "{log}");
    assert_eq!(live(&status(&url)), ["n2"]);
}
