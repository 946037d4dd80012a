use railstore_cluster::clock::{unix_ms, FrameClock};
use railstore_cluster::testing::EtcdProcess;
use railstore_cluster::{Cluster, ClusterMap, ClusterUrl, Member, PolicySpec, MAP_FORMAT};
use railstore_redundancy::{Mechanism, Policy};
use std::collections::BTreeMap;

/// A fresh etcd, or `None` (after saying so) when none is installed and none is required.
pub fn etcd() -> Option<EtcdProcess> {
    let etcd = EtcdProcess::start().expect("starting etcd");
    if etcd.is_none() {
        eprintln!(
            "no etcd: skipping (install etcd-server; set RAILSTORE_REQUIRE_ETCD to make this fail)"
        );
    }
    etcd
}

pub async fn connect(etcd: &EtcdProcess, name: &str) -> Cluster {
    let url: ClusterUrl = format!("{}/{name}", etcd.cluster_url).parse().unwrap();
    Cluster::connect(&url).await.expect("connecting to etcd")
}

/// The embedded default's policy and clock, `nodes_to_form` nodes of six devices.
pub fn new_map(name: &str, nodes_to_form: usize) -> ClusterMap {
    let mech = |s| Mechanism::parse(s).unwrap();
    let policy = Policy::Hybrid {
        rules: vec![(4 << 10, mech("rep3")), (64 << 10, mech("pack3+3"))],
        rest: mech("split3+3"),
    };
    ClusterMap {
        format: MAP_FORMAT,
        name: name.to_string(),
        array_id: 0x5eed,
        policy: PolicySpec::of(&policy),
        width: 6,
        rounds: 4,
        seed: 42,
        devices_per_node: 6,
        nodes_to_form,
        shards: 64,
        clock: FrameClock {
            origin_unix_ms: unix_ms(),
            frame_ms: 2000,
            guard_ms: 50,
            window: 3,
        },
        members: BTreeMap::new(),
        layout: None,
    }
}

pub fn member(port: u16, devices: usize) -> Member {
    Member {
        address: format!("127.0.0.1:{port}"),
        s3: None,
        devices: (0..devices).map(|i| i.to_string()).collect(),
        capacity_bytes: 1 << 30,
        joined_unix_ms: unix_ms(),
    }
}
