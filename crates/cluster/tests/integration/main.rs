//! The cluster map against a real etcd (Debian's etcd-server; skipped with a note when none is
//! installed, failed when RAILSTORE_REQUIRE_ETCD is set, as CI does).

mod common;
mod liveness;
mod map_in_etcd;
mod shards;
