use crate::common::{connect, etcd, new_map};
use railstore_cluster::ClusterError;
use std::time::{Duration, Instant};

#[tokio::test]
async fn a_live_record_is_held_by_one_process_and_goes_with_it() {
    let Some(etcd) = etcd() else { return };
    let mut c = connect(&etcd, "live").await;
    c.init(&new_map("live", 3)).await.unwrap();
    let reg = c
        .register("a", "127.0.0.1:1", Duration::from_secs(5))
        .await
        .unwrap();
    let live = c.live().await.unwrap();
    assert_eq!(live["a"].address, "127.0.0.1:1");
    assert_eq!(live["a"].lease, reg.lease());
    // A second process under the same name is refused while the first holds it.
    let err = c
        .register("a", "127.0.0.1:2", Duration::from_secs(5))
        .await
        .err()
        .unwrap();
    assert!(matches!(err, ClusterError::Refused(_)), "{err}");
    assert_eq!(c.live().await.unwrap()["a"].address, "127.0.0.1:1");
    // A member may not leave while a process runs as it.
    c.join("a", crate::common::member(7000, 6)).await.unwrap();
    let err = c.leave("a").await.unwrap_err();
    assert!(matches!(err, ClusterError::Refused(_)), "{err}");
    assert!(c.existing_map().await.unwrap().0.members.contains_key("a"));
    // A clean stop takes the record away at once; then it may leave.
    reg.revoke().await.unwrap();
    assert!(c.live().await.unwrap().is_empty());
    c.leave("a").await.unwrap();
    let again = c
        .register("a", "127.0.0.1:2", Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(c.live().await.unwrap()["a"].address, "127.0.0.1:2");
    drop(again);
}

#[tokio::test]
async fn a_silent_node_expires_and_a_node_whose_lease_ends_hears_of_it() {
    let Some(etcd) = etcd() else { return };
    let mut c = connect(&etcd, "expiry").await;
    c.init(&new_map("expiry", 3)).await.unwrap();
    // Renewals keep the record past its TTL (5 s, so that a renewal late on a loaded machine
    // is still in time).
    let mut kept = c
        .register("kept", "127.0.0.1:1", Duration::from_secs(5))
        .await
        .unwrap();
    let silent = c
        .register("silent", "127.0.0.1:2", Duration::from_secs(2))
        .await
        .unwrap();
    drop(silent); // stops renewing without revoking, as a killed process does
    let deadline = Instant::now() + Duration::from_secs(30);
    while c.live().await.unwrap().contains_key("silent") {
        assert!(
            Instant::now() < deadline,
            "the silent node's record outlived its lease"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(c.live().await.unwrap().contains_key("kept"));

    // The lease revoked behind the node's back (as when etcd expired it during a pause): the
    // node learns it at its next renewal.
    let mut raw = etcd_client::Client::connect([etcd.client_url.as_str()], None)
        .await
        .unwrap();
    raw.lease_revoke(kept.lease()).await.unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(20), kept.lost())
        .await
        .expect("the loss was noticed");
    assert!(
        matches!(lost, ClusterError::LeaseLost { ref node, .. } if node == "kept"),
        "{lost}"
    );
}
