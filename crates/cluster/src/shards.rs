//! Shards of the key space and their owners.
//!
//! A key belongs to one of the map's `shards` by a hash of its bucket and name. Each shard has
//! at most one owner at a time: the node that holds `owners/<shard>` in etcd, put under the
//! node's lease (the one that holds its live record), so a node that dies lets go of all its
//! shards when its lease runs out. The key's create revision is the owner's **fencing token**:
//! etcd revisions only rise, so every new owner's token is higher than every earlier owner's,
//! and a node's `FenceBook` refuses a superseded owner's writes (docs/cluster.md, Fencing).
//!
//! Every live node runs [`keep_shards`]: it claims unowned shards until it holds its fair share
//! (the shards over the live nodes, rounded up) and lets go of shards above it, so a new node
//! gets its share and a dead node's shards are taken over. Claims are transactions that succeed
//! only where the key is absent, so two nodes never own one shard.

use crate::error::Result;
use crate::etcd::Cluster;
use crate::map::ClusterMap;
use railstore_placement::{jump_hash, key_hash};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::sync::watch;

/// Shards in a map made now.
pub const SHARDS_DEFAULT: u32 = 64;

/// Most shards a map may have (the bound of a node's fence book).
pub const SHARDS_MAX: u32 = 65_536;

/// Keeps the shard hash apart from the placement hash of the same key.
const SHARD_SEED: u64 = 0x5348_4152_4453_0001;

/// The shard of `key` in `bucket`.
pub fn shard_of(map: &ClusterMap, bucket: &str, key: &str) -> u32 {
    let mut name = Vec::with_capacity(bucket.len() + 1 + key.len());
    name.extend_from_slice(bucket.as_bytes());
    name.push(0);
    name.extend_from_slice(key.as_bytes());
    jump_hash(key_hash(&name, map.seed ^ SHARD_SEED), map.shards as usize) as u32
}

/// A shard's owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Owner {
    /// The owning node.
    pub node: String,
    /// Its fencing token: the create revision of its ownership key.
    pub token: u64,
    /// The lease the key is under: which process of the node owns it (a node restarted while
    /// its old process still lived would share the name, never the lease).
    pub lease: i64,
}

/// What the ownership key holds (the token and lease are the key's own).
#[derive(Serialize, Deserialize)]
struct OwnerRecord {
    node: String,
}

/// What the process holding `lease` on node `me` should do to move toward its fair share
/// among `claimers` nodes: shards to claim (unowned ones, in an order that starts at a point of
/// its own so nodes do not all try the same shard first) and shards to let go of.
pub fn rebalance(
    shards: u32,
    claimers: usize,
    owners: &BTreeMap<u32, Owner>,
    me: &str,
    lease: i64,
) -> (Vec<u32>, Vec<u32>) {
    let fair = shards.div_ceil(claimers.max(1) as u32) as usize;
    let mine: Vec<u32> = owners
        .iter()
        .filter(|(_, o)| o.lease == lease)
        .map(|(s, _)| *s)
        .collect();
    if mine.len() > fair {
        // Let go of the newest claims first: the oldest have been served longest.
        let mut by_token: Vec<u32> = mine.clone();
        by_token.sort_by_key(|s| std::cmp::Reverse(owners[s].token));
        return (
            Vec::new(),
            by_token.into_iter().take(mine.len() - fair).collect(),
        );
    }
    let start = (key_hash(me.as_bytes(), SHARD_SEED) % shards.max(1) as u64) as u32;
    let claim = (0..shards)
        .map(|i| (start + i) % shards)
        .filter(|s| !owners.contains_key(s))
        .take(fair - mine.len())
        .collect();
    (claim, Vec::new())
}

impl Cluster {
    fn owner_key(&self, shard: u32) -> String {
        format!("{}owners/{shard:05}", self.prefix())
    }

    fn claimer_key(&self, node: &str) -> String {
        format!("{}claimers/{node}", self.prefix())
    }

    /// Says, under `lease`, that `node` claims shards: the fair share counts only nodes that
    /// do, so a node still starting (or one that never claims) does not make the others let
    /// go of shards nobody takes.
    pub async fn announce_claimer(&mut self, node: &str, lease: i64) -> Result<()> {
        self.put_leased(self.claimer_key(node), node.to_string(), lease)
            .await
    }

    /// How many nodes claim shards now.
    pub async fn claimers(&mut self) -> Result<usize> {
        let prefix = format!("{}claimers/", self.prefix());
        Ok(self.get_prefix(&prefix).await?.len())
    }

    /// Every owned shard and its owner.
    pub async fn owners(&mut self) -> Result<BTreeMap<u32, Owner>> {
        let prefix = format!("{}owners/", self.prefix());
        let mut out = BTreeMap::new();
        for kv in self.get_prefix(&prefix).await? {
            let Ok(shard) = String::from_utf8_lossy(&kv.key()[prefix.len()..]).parse::<u32>()
            else {
                continue;
            };
            let record: OwnerRecord = serde_json::from_slice(kv.value()).map_err(|e| {
                crate::ClusterError::Corrupt(format!("owner of shard {shard}: {e}"))
            })?;
            out.insert(
                shard,
                Owner {
                    node: record.node,
                    token: kv.create_revision() as u64,
                    lease: kv.lease(),
                },
            );
        }
        Ok(out)
    }

    /// Claims `shard` for `node` under `lease`: its fencing token, or `None` when another
    /// node owns it.
    pub async fn claim(&mut self, shard: u32, node: &str, lease: i64) -> Result<Option<u64>> {
        let value = serde_json::to_string(&OwnerRecord {
            node: node.to_string(),
        })
        .expect("an owner serialises");
        self.put_if_absent(self.owner_key(shard), value, Some(lease))
            .await
            .map(|r| r.map(|rev| rev as u64))
    }

    /// Lets go of `shard` if it is still owned under `token` and `lease`; whether it was.
    pub async fn release(&mut self, shard: u32, token: u64, lease: i64) -> Result<bool> {
        self.delete_if_owned(self.owner_key(shard), token as i64, lease)
            .await
    }
}

/// Claims and releases the map's `shards` for `node` (holding `lease`) every `period`, publishing the
/// shards it owns with their tokens; runs until the task is dropped. etcd errors are logged and
/// retried: ownership itself lives in etcd, so a node that cannot reach it only stops claiming.
pub async fn keep_shards(
    mut cluster: Cluster,
    shards: u32,
    node: String,
    lease: i64,
    period: Duration,
    owned: watch::Sender<BTreeMap<u32, u64>>,
) {
    while let Err(e) = cluster.announce_claimer(&node, lease).await {
        tracing::warn!(error = %e, node = %node, "announcing the node as a shard claimer");
        tokio::time::sleep(period).await;
    }
    loop {
        if let Err(e) = keep_once(&mut cluster, shards, &node, lease, &owned).await {
            tracing::warn!(error = %e, node = %node, "keeping shards");
        }
        tokio::time::sleep(period).await;
    }
}

async fn keep_once(
    cluster: &mut Cluster,
    shards: u32,
    node: &str,
    lease: i64,
    owned: &watch::Sender<BTreeMap<u32, u64>>,
) -> Result<()> {
    let claimers = cluster.claimers().await?;
    let mut owners = cluster.owners().await?;
    let (claim, release) = rebalance(shards, claimers, &owners, node, lease);
    for shard in release {
        let token = owners[&shard].token;
        if cluster.release(shard, token, lease).await? {
            owners.remove(&shard);
        }
    }
    for shard in claim {
        if let Some(token) = cluster.claim(shard, node, lease).await? {
            owners.insert(
                shard,
                Owner {
                    node: node.to_string(),
                    token,
                    lease,
                },
            );
        }
    }
    let mine: BTreeMap<u32, u64> = owners
        .into_iter()
        .filter(|(_, o)| o.lease == lease)
        .map(|(s, o)| (s, o.token))
        .collect();
    owned.send_if_modified(|held| {
        let changed = *held != mine;
        *held = mine;
        changed
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Owners by (shard, node, token); node "a"'s process holds lease 1, every other node's 2.
    fn owned(pairs: &[(u32, &str, u64)]) -> BTreeMap<u32, Owner> {
        pairs
            .iter()
            .map(|(s, n, t)| {
                (
                    *s,
                    Owner {
                        node: n.to_string(),
                        token: *t,
                        lease: if *n == "a" { 1 } else { 2 },
                    },
                )
            })
            .collect()
    }

    #[test]
    fn nodes_claim_their_share_and_no_more() {
        let none = BTreeMap::new();
        let (claim, release) = rebalance(64, 3, &none, "a", 1);
        assert_eq!((claim.len(), release.len()), (22, 0));
        let mut distinct = claim.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(distinct.len(), 22);
        // Only unowned shards are claimed.
        let some = owned(&[(0, "b", 5), (1, "b", 6)]);
        let (claim, _) = rebalance(4, 2, &some, "a", 1);
        assert_eq!(
            {
                let mut c = claim;
                c.sort();
                c
            },
            [2, 3]
        );
        // At its share a node does nothing; above it, it lets go of its newest claims.
        let (claim, release) = rebalance(4, 2, &owned(&[(0, "a", 1), (1, "a", 2)]), "a", 1);
        assert!(claim.is_empty() && release.is_empty());
        let three = owned(&[(0, "a", 1), (1, "a", 9), (2, "a", 3)]);
        assert_eq!(rebalance(4, 2, &three, "a", 1), (Vec::new(), vec![1]));
        // Another process under the same name (another lease) owns nothing of this one's: its
        // shards are neither released nor counted.
        let mut other_process = owned(&[(0, "a", 1), (1, "a", 2), (2, "a", 3)]);
        for o in other_process.values_mut() {
            o.lease = 7;
        }
        assert_eq!(
            rebalance(4, 2, &other_process, "a", 1),
            (vec![3], Vec::new())
        );
    }

    #[test]
    fn a_key_has_one_shard_and_keys_spread() {
        let mut map = crate::map::tests_support::small_map();
        map.shards = 16;
        let mut counts = [0u32; 16];
        for i in 0..16_000 {
            let s = shard_of(&map, "bucket", &format!("key-{i}"));
            assert_eq!(s, shard_of(&map, "bucket", &format!("key-{i}")));
            counts[s as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (700..1300).contains(&c)),
            "{counts:?}"
        );
        // The bucket is part of it.
        let other: usize = (0..1000)
            .filter(|i| {
                shard_of(&map, "a", &format!("k{i}")) != shard_of(&map, "b", &format!("k{i}"))
            })
            .count();
        assert!(other > 800, "{other}");
    }
}
