//! Three `railstore serve --cluster` processes on one real etcd: the map created once, the
//! layout formed over the three with any one node losable, every shard owned, each node's
//! devices reachable at the address the map gives, a killed node seen as down once its lease
//! runs out and its shards taken over with higher fencing tokens, a data folder
//! refused under another node's name, members added and removed by `railstore cluster`, and a
//! clean stop taking the live record at once.

use crate::common::{cli, config_file, Served};
use railstore_cluster::testing::EtcdProcess;
use railstore_device::{Device, Fence, ReadRange, StoreMode};
use railstore_node::RemoteNode;
use serde_json::Value;
use std::path::{Path, PathBuf};
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

/// `serve --cluster` as `name` over `data`, run until it exits (for starts that must fail).
fn serve_to_the_end(url: &str, name: &str, data: &Path, config: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_railstore"))
        .args(["serve", "--cluster", url, "--node", name, "--config"])
        .arg(config)
        .arg("--data")
        .arg(data)
        .args(["--node-listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    crate::common::outcome(out)
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

/// A fresh etcd, the URL of cluster `name` on it, a folder and a configuration for the nodes;
/// `None` (after saying so) when no etcd is installed and none is required.
fn cluster_of(name: &str) -> Option<(EtcdProcess, String, tempfile::TempDir, PathBuf)> {
    let Some(etcd) = EtcdProcess::start().expect("starting etcd") else {
        eprintln!(
            "no etcd: skipping (install etcd-server; set RAILSTORE_REQUIRE_ETCD to make this fail)"
        );
        return None;
    };
    let url = format!("{}/{name}", etcd.cluster_url);
    let dir = tempfile::tempdir().unwrap();
    let config = config_file(dir.path());
    Some((etcd, url, dir, config))
}

/// Shards `node` owns in a status.
fn owned_by(s: &Value, node: &str) -> usize {
    s["owners"]
        .as_object()
        .unwrap()
        .values()
        .filter(|o| o["node"] == node)
        .count()
}

/// Settled: every shard owned and each of `nodes` at its fair share of 64, ceil(64 / n), or
/// at most two under it.
fn at_fair_shares(s: &Value, nodes: &[&str]) -> bool {
    let fair = 64usize.div_ceil(nodes.len());
    s["owners"].as_object().unwrap().len() == 64
        && nodes
            .iter()
            .all(|n| (fair - 2..=fair).contains(&owned_by(s, n)))
}

fn live(s: &Value) -> Vec<String> {
    s["live"].as_object().unwrap().keys().cloned().collect()
}

#[test]
fn three_nodes_form_a_cluster_and_a_lost_one_is_seen() {
    let Some((_etcd, url, dir, config)) = cluster_of("test") else {
        return;
    };

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
                if *n == "n1" { 5 } else { 60 },
            ))
        })
        .collect();
    for n in nodes.iter_mut().flatten() {
        n.wait_for("node serving its devices");
    }
    let s = wait_status(&url, "three live nodes owning their shares", |s| {
        live(s).len() == 3 && at_fair_shares(s, &["n0", "n1", "n2"])
    });
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

    // Each node counted the probe's store and retrieve on its cluster network.
    let s = status(&url);
    for name in ["n0", "n1", "n2"] {
        let n = &s["network"][name];
        let store = &n["calls"]["store"];
        assert_eq!(store[0], 1, "{name}: {n:#}");
        assert!(
            store[1].as_u64().unwrap() > ("probe".len() + name.len()) as u64,
            "{name}: {n:#}"
        );
        assert_eq!(n["calls"]["retrieve"][0], 1, "{name}: {n:#}");
        assert!(
            n["socket_received"].as_u64() >= n["received"].as_u64(),
            "{n:#}"
        );
    }
    let (ok, metrics) = cli(&["cluster", "status", "--cluster", &url, "--metrics"]);
    assert!(ok, "{metrics}");
    for name in ["n0", "n1", "n2"] {
        let series = format!("railstore_node_calls_total{{node=\"{name}\",call=\"store\"}} 1");
        assert!(metrics.contains(&series), "{metrics}");
    }
    let (ok, text) = cli(&["cluster", "status", "--cluster", &url]);
    assert!(ok && text.contains("cluster network"), "{text}");

    // A second process under a running node's name is refused before it changes anything.
    let n2_address = s["map"]["members"]["n2"]["address"].clone();
    let (ok, out) = serve_to_the_end(&url, "n2", &dir.path().join("n2-again"), &config);
    assert!(!ok && out.contains("already running"), "{out}");
    assert_eq!(status(&url)["map"]["members"]["n2"]["address"], n2_address);

    // kill -9: the node's record stays until its lease runs out, then it is down.
    nodes[1].as_mut().unwrap().child.kill().unwrap();
    nodes[1].take().unwrap().child.wait().unwrap();
    let before = s.clone();
    assert!(owned_by(&before, "n1") > 0);
    let s = wait_status(&url, "n1 down and its shards taken over", |s| {
        s["down"] == serde_json::json!(["n1"])
            && owned_by(s, "n1") == 0
            && s["owners"].as_object().unwrap().len() == 64
    });
    assert_eq!(live(&s), ["n0", "n2"]);
    // Each shard n1 owned has a new owner with a higher fencing token.
    for (shard, old) in before["owners"].as_object().unwrap() {
        if old["node"] == "n1" {
            let new = &s["owners"][shard];
            assert!(
                new["token"].as_u64() > old["token"].as_u64(),
                "{old} -> {new}"
            );
        }
    }

    // Another node's folder is refused, and changes nothing.
    let (ok, out) = serve_to_the_end(&url, "n1", &dir.path().join("n0"), &config);
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

/// SIGSTOP an owner past its lease: the others take its shards over under higher tokens; woken
/// by SIGCONT, it finds its lease gone and stops instead of going on as an owner.
#[test]
fn a_paused_owner_loses_its_shards_and_stops_when_it_wakes() {
    let Some((_etcd, url, dir, config)) = cluster_of("paused") else {
        return;
    };
    let mut nodes: Vec<Served> = [("a", 60), ("b", 60), ("p", 5)]
        .iter()
        .map(|(n, ttl)| node(&url, n, dir.path(), &config, *ttl))
        .collect();
    for n in &mut nodes {
        n.wait_for("node serving its devices");
    }
    let tokens_of = |s: &Value, node: &str| -> Vec<(String, u64)> {
        s["owners"]
            .as_object()
            .unwrap()
            .iter()
            .filter(|(_, o)| o["node"] == node)
            .map(|(shard, o)| (shard.clone(), o["token"].as_u64().unwrap()))
            .collect()
    };
    let before = wait_status(&url, "every shard owned by three", |s| {
        live(s).len() == 3 && at_fair_shares(s, &["a", "b", "p"])
    });
    let paused = nodes.pop().unwrap();
    let pid = paused.child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    let after = wait_status(&url, "p's shards taken over", |s| {
        s["down"] == serde_json::json!(["p"])
            && owned_by(s, "p") == 0
            && s["owners"].as_object().unwrap().len() == 64
    });
    for (shard, token) in tokens_of(&before, "p") {
        let now = &after["owners"][&shard];
        assert_ne!(now["node"], "p");
        assert!(
            now["token"].as_u64().unwrap() > token,
            "shard {shard}: {now}"
        );
    }
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let mut paused = paused;
    paused.wait_for("lost its lease");
    let code = paused.child.wait().unwrap();
    assert!(
        !code.success(),
        "a node that lost its lease exits with an error"
    );
    // Nothing of p's came back.
    let s = status(&url);
    assert_eq!(owned_by(&s, "p"), 0);
    assert_eq!(live(&s), ["a", "b"]);
}
