use crate::common::{connect, etcd, member, new_map};
use railstore_cluster::ClusterError;
use std::collections::BTreeSet;

#[tokio::test]
async fn init_creates_once_and_refuses_what_cannot_lose_a_node() {
    let Some(etcd) = etcd() else { return };
    let mut c = connect(&etcd, "one").await;
    assert!(c.map().await.unwrap().is_none());
    // One node of six devices holds every piece of a group: refused, nothing created.
    let err = c.init(&new_map("one", 1)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("cannot lose a node"), "{err}");
    assert!(c.map().await.unwrap().is_none());

    c.init(&new_map("one", 3)).await.unwrap();
    let (first, revision) = c.existing_map().await.unwrap();
    let mut other = new_map("one", 4);
    other.array_id = 7;
    let err = c.init(&other).await.unwrap_err();
    assert!(matches!(err, ClusterError::Exists(_)), "{err}");
    // init_or_load hands back the map that is there, unchanged.
    assert_eq!(c.init_or_load(&other).await.unwrap(), first);
    assert_eq!(c.existing_map().await.unwrap(), (first, revision));
    // Another name is another cluster.
    let mut two = connect(&etcd, "two").await;
    assert!(two.map().await.unwrap().is_none());
}

#[tokio::test]
async fn the_layout_forms_once_however_many_nodes_join_at_once() {
    let Some(etcd) = etcd() else { return };
    let mut c = connect(&etcd, "race").await;
    c.init(&new_map("race", 4)).await.unwrap();
    let mut joins = Vec::new();
    for i in 0..6u16 {
        let mut conn = connect(&etcd, "race").await;
        joins.push(tokio::spawn(async move {
            conn.join(&format!("node-{i}"), member(7000 + i, 6)).await
        }));
    }
    for j in joins {
        j.await.unwrap().unwrap();
    }
    let (map, _) = c.existing_map().await.unwrap();
    assert_eq!(map.members.len(), 6);
    let layout = map.layout.clone().expect("a layout formed");
    assert_eq!(layout.epoch, 1);
    // Exactly the first four members' devices, each once; the other two wait as standbys.
    assert_eq!(layout.devices.len(), 24);
    let distinct: BTreeSet<_> = layout.devices.iter().cloned().collect();
    assert_eq!(distinct.len(), 24);
    let nodes: BTreeSet<_> = layout.devices.iter().map(|d| d.node.clone()).collect();
    assert_eq!(nodes.len(), 4);
    for n in &nodes {
        assert_eq!(layout.devices.iter().filter(|d| &d.node == n).count(), 6);
    }
    let loss = map.check_layout(&layout).unwrap().unwrap();
    assert!(loss.within(), "{loss:?}");
    // A later join leaves the layout as it is.
    c.join("node-late", member(7100, 6)).await.unwrap();
    assert_eq!(c.existing_map().await.unwrap().0.layout, Some(layout));
}

#[tokio::test]
async fn bad_joins_and_leaves_change_nothing() {
    let Some(etcd) = etcd() else { return };
    let mut c = connect(&etcd, "strict").await;
    c.init(&new_map("strict", 3)).await.unwrap();
    for i in 0..3u16 {
        c.join(&format!("n{i}"), member(7200 + i, 6)).await.unwrap();
    }
    c.join("spare", member(7300, 6)).await.unwrap();
    let before = c.existing_map().await.unwrap();

    let err = c.join("short", member(7400, 5)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Invalid(_)), "{err}");
    let err = c.join("a/b", member(7400, 6)).await.unwrap_err();
    assert!(matches!(err, ClusterError::Invalid(_)), "{err}");
    let mut renamed = member(7200, 6);
    renamed.devices[0] = "other".into();
    let err = c.join("n0", renamed).await.unwrap_err();
    assert!(matches!(err, ClusterError::Refused(_)), "{err}");
    let err = c.leave("n1").await.unwrap_err();
    assert!(matches!(err, ClusterError::Refused(_)), "{err}");
    let err = c.leave("nobody").await.unwrap_err();
    assert!(matches!(err, ClusterError::Invalid(_)), "{err}");
    // Rejoining as it was is no change at all.
    c.join("n2", member(7202, 6)).await.unwrap();
    assert_eq!(c.existing_map().await.unwrap(), before);

    // A standby leaves; a node rejoining at a new address keeps its place.
    let after = c.leave("spare").await.unwrap();
    assert!(!after.members.contains_key("spare"));
    let moved = c.join("n0", member(7999, 6)).await.unwrap();
    assert_eq!(moved.members["n0"].address, "127.0.0.1:7999");
    assert_eq!(moved.layout, before.0.layout);
}
