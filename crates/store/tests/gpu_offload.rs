//! `[redundancy] ec_offload = "cuda"`: with a GPU, the store codes large objects there and reads
//! them back byte for byte; without one, the store refuses to open and says why, rather than
//! failing on its first large object.

use railstore_store::{body_from, collect_body, PutOptions, Store, StoreConfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn config(dir: &std::path::Path) -> StoreConfig {
    let text = format!(
        r#"
data_dir = "{}"
[devices]
kind = "mem"
count = 6
[redundancy]
mode = "hybrid"
ec_offload = "cuda"
ec_offload_min_shard_bytes = 65536
[[redundancy.hybrid]]
max_bytes = 4096
mechanism = "rep3"
[[redundancy.hybrid]]
mechanism = "split4+2"
[separation]
enabled = false
[objects]
inline_bytes_max = 4096
chunk_bytes = 1048576
"#,
        dir.display()
    );
    StoreConfig::from_toml(&text).unwrap()
}

#[tokio::test]
async fn large_objects_are_coded_on_the_gpu_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let opened = Store::open(config(dir.path())).await;
    if let Some(why) = railstore_ec::gpu_unavailable_reason() {
        let Err(e) = opened else {
            panic!("no GPU, yet the store opened");
        };
        let e = e.to_string();
        assert!(
            e.contains("cuda is not available") && e.contains(&why),
            "{e}"
        );
        eprintln!("no GPU ({why}): the store refused to open, as it should");
        return;
    }
    let store = opened.unwrap();
    store.create_bucket("gpu").await.unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(19);
    // 3 MiB + 5: three full 1 MiB chunks (256 KiB shards, on the GPU) and a 5-byte tail.
    let mut big = vec![0u8; (3 << 20) + 5];
    rng.fill(&mut big[..]);
    let small = b"small objects stay on the CPU".to_vec();
    let (calls, direct) = railstore_ec::gpu_call_counts();
    for (key, body) in [("big", &big), ("small", &small)] {
        store
            .put_object("gpu", key, body_from(body.clone()), PutOptions::default())
            .await
            .unwrap();
    }
    let (calls_now, direct_now) = railstore_ec::gpu_call_counts();
    assert!(
        calls_now - calls >= 3,
        "{} GPU calls for three 1 MiB chunks",
        calls_now - calls
    );
    // The write path codes in the codec's pinned buffers: no staging copy.
    assert!(
        direct_now - direct >= 3,
        "{} direct GPU calls",
        direct_now - direct
    );
    for (key, body) in [("big", &big), ("small", &small)] {
        let got = collect_body(store.get_object("gpu", key, None).await.unwrap().body)
            .await
            .unwrap();
        assert!(got == *body, "{key} came back different");
    }
    assert_eq!(railstore_ec::gpu_fallbacks().0, 0);
}
