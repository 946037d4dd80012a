//! Who is writing: the identity a writer presents with each mutation so that a device's owner
//! can refuse one that has been superseded (a shard owner that lost its lease, a writer of an
//! old layout). Checked by a node that exports devices; local devices have no need of it.

use std::fmt;

/// A writer's credentials for one mutation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Fence {
    /// The array the writer believes the device belongs to.
    pub array_id: u64,
    /// The layout epoch the writer works under; a write from an older epoch is stale.
    pub layout_epoch: u64,
    /// The shard of the key space the writer owns.
    pub shard: u32,
    /// The writer's token for that shard (in a cluster, the revision of the etcd lease that
    /// made it the owner); a higher token supersedes every lower one.
    pub token: u64,
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "array {:#x} epoch {} shard {} token {}",
            self.array_id, self.layout_epoch, self.shard, self.token
        )
    }
}
