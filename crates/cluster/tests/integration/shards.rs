use crate::common::{connect, etcd, new_map};
use railstore_cluster::{keep_shards, Owner};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

async fn wait_owners(
    c: &mut railstore_cluster::Cluster,
    why: &str,
    done: impl Fn(&BTreeMap<u32, Owner>) -> bool,
) -> BTreeMap<u32, Owner> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let owners = c.owners().await.unwrap();
        if done(&owners) {
            return owners;
        }
        assert!(Instant::now() < deadline, "never {why}: {owners:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn count(owners: &BTreeMap<u32, Owner>, node: &str) -> usize {
    owners.values().filter(|o| o.node == node).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_are_shared_out_and_a_dead_owners_are_taken_over_with_higher_tokens() {
    let Some(etcd) = etcd() else { return };
    let mut c = connect(&etcd, "shards").await;
    c.init(&new_map("shards", 3)).await.unwrap();
    let mut keepers = BTreeMap::new();
    let mut registrations = BTreeMap::new();
    for node in ["a", "b", "c"] {
        // b is the one that dies: a short lease; the survivors' are long enough that a slow
        // renewal on a loaded machine does not end them.
        let ttl = Duration::from_secs(if node == "b" { 2 } else { 5 });
        let reg = c.register(node, "127.0.0.1:1", ttl).await.unwrap();
        let (tx, _rx) = tokio::sync::watch::channel(BTreeMap::new());
        let keeper = tokio::spawn(keep_shards(
            connect(&etcd, "shards").await,
            64,
            node.to_string(),
            reg.lease(),
            Duration::from_millis(200),
            tx,
        ));
        keepers.insert(node, keeper);
        registrations.insert(node, reg);
    }
    // Every shard owned, each node at most its fair share (ceil(64 / 3) = 22).
    let before = wait_owners(&mut c, "all 64 shards owned by three", |o| {
        o.len() == 64
            && ["a", "b", "c"]
                .iter()
                .all(|n| (20..=22).contains(&count(o, n)))
    })
    .await;

    // b dies: its keeper stops and its lease is not renewed (as after kill -9).
    keepers.remove("b").unwrap().abort();
    drop(registrations.remove("b"));
    let after = wait_owners(&mut c, "b's shards taken over", |o| {
        o.len() == 64 && count(o, "b") == 0
    })
    .await;
    for (shard, old) in &before {
        let new = &after[shard];
        if old.node == "b" {
            assert_ne!(new.node, "b");
            assert!(new.token > old.token, "shard {shard}: {old:?} -> {new:?}");
        } else {
            // A survivor keeps what it had, under the same token.
            assert_eq!(new, old, "shard {shard}");
        }
    }
    assert!(count(&after, "a") <= 32 && count(&after, "c") <= 32);

    // A claim on an owned shard fails; a release with a stale token changes nothing.
    let lease = registrations["a"].lease();
    let (shard, owner) = after.iter().find(|(_, o)| o.node == "c").unwrap();
    assert_eq!(c.claim(*shard, "a", lease).await.unwrap(), None);
    assert!(!c
        .release(*shard, owner.token - 1, owner.lease)
        .await
        .unwrap());
    // Nor does a release under another lease (another process of the same name).
    assert!(!c.release(*shard, owner.token, lease).await.unwrap());
    assert_eq!(c.owners().await.unwrap()[shard], *owner);
    for k in keepers.values() {
        k.abort();
    }
}
