//! The map and the members' liveness in etcd.
//!
//! Under `/railstore/<cluster>/`:
//! - `map`: the [`ClusterMap`] as JSON, created only where absent and changed only by a
//!   transaction that compares its revision, so two nodes changing it at once cannot both win
//!   (the loser reads the new map and tries again);
//! - `live/<node>`: a running node's [`Live`] record, under a lease the node keeps alive; when
//!   the node stops answering, etcd deletes it after the lease's TTL.
//!
//! Consensus is etcd's: railstore never decides anything two nodes could decide differently.

use crate::clock::unix_ms;
use crate::error::{ClusterError, Result};
use crate::map::{check_name, ClusterMap, Member};
use etcd_client::{Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// A cluster's address: `etcd://HOST:PORT[,HOST:PORT...][/NAME]` (name `railstore` when none).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClusterUrl {
    /// etcd's client endpoints, as `http://HOST:PORT`.
    pub endpoints: Vec<String>,
    /// The cluster's name.
    pub name: String,
}

/// The cluster name when the URL gives none.
pub const DEFAULT_CLUSTER_NAME: &str = "railstore";

impl FromStr for ClusterUrl {
    type Err = ClusterError;

    fn from_str(s: &str) -> Result<ClusterUrl> {
        let bad = |why: &str| {
            ClusterError::Invalid(format!(
                "cluster address {s:?}: {why} (expected etcd://HOST:PORT[,HOST:PORT...][/NAME])"
            ))
        };
        let rest = s
            .strip_prefix("etcd://")
            .ok_or_else(|| bad("not etcd://"))?;
        let (hosts, name) = match rest.split_once('/') {
            Some((h, "")) => (h, DEFAULT_CLUSTER_NAME),
            Some((h, n)) => (h, n),
            None => (rest, DEFAULT_CLUSTER_NAME),
        };
        check_name("cluster", name)?;
        let endpoints = hosts
            .split(',')
            .map(|h| {
                let (host, port) = h
                    .rsplit_once(':')
                    .ok_or_else(|| bad("an endpoint without a port"))?;
                if host.is_empty() || port.parse::<u16>().is_err() {
                    return Err(bad("an endpoint is not HOST:PORT"));
                }
                Ok(format!("http://{h}"))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ClusterUrl {
            endpoints,
            name: name.to_string(),
        })
    }
}

/// A running node, as its leased key says.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Live {
    /// Where its node service listens.
    pub address: String,
    /// Its process id (for operators on the machine).
    pub pid: u32,
    /// When it registered (ms since the Unix epoch).
    pub since_unix_ms: u64,
    /// The lease that holds the key.
    #[serde(default)]
    pub lease: i64,
}

/// A connection to one cluster in etcd.
#[derive(Clone)]
pub struct Cluster {
    client: Client,
    name: String,
}

/// How long a call to etcd may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

impl Cluster {
    /// Connects to etcd (gives up after 5 s without an answer).
    pub async fn connect(url: &ClusterUrl) -> Result<Cluster> {
        let options = ConnectOptions::new()
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(CALL_TIMEOUT)
            // A connection gone silent is found and dropped, not waited on.
            // (every 5 s: etcd refuses pings more often than its --grpc-keepalive-min-time).
            .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3));
        let client = Client::connect(&url.endpoints, Some(options)).await?;
        Ok(Cluster {
            client,
            name: url.name.clone(),
        })
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn prefix(&self) -> String {
        format!("/railstore/{}/", self.name)
    }

    fn map_key(&self) -> String {
        format!("{}map", self.prefix())
    }

    fn live_key(&self, node: &str) -> String {
        format!("{}live/{node}", self.prefix())
    }

    /// The map and its revision, if the cluster exists.
    pub async fn map(&mut self) -> Result<Option<(ClusterMap, i64)>> {
        let got = self.client.get(self.map_key(), None).await?;
        match got.kvs().first() {
            None => Ok(None),
            Some(kv) => Ok(Some((ClusterMap::decode(kv.value())?, kv.mod_revision()))),
        }
    }

    /// The map; [`ClusterError::NoCluster`] when there is none.
    pub async fn existing_map(&mut self) -> Result<(ClusterMap, i64)> {
        self.map()
            .await?
            .ok_or_else(|| ClusterError::NoCluster(self.name.clone()))
    }

    /// Creates the cluster with `map` (checked first); [`ClusterError::Exists`] if it is there.
    pub async fn init(&mut self, map: &ClusterMap) -> Result<()> {
        if self.create(map).await? {
            Ok(())
        } else {
            Err(ClusterError::Exists(self.name.clone()))
        }
    }

    /// The existing map, or `map` created if there is none (the first node's way in).
    pub async fn init_or_load(&mut self, map: &ClusterMap) -> Result<ClusterMap> {
        if self.create(map).await? {
            return Ok(map.clone());
        }
        Ok(self.existing_map().await?.0)
    }

    /// Creates `map` where no map is; false when one is.
    async fn create(&mut self, map: &ClusterMap) -> Result<bool> {
        if map.name != self.name {
            return Err(ClusterError::Invalid(format!(
                "a map of cluster {:?} under cluster {:?}",
                map.name, self.name
            )));
        }
        map.validate()?;
        let key = self.map_key();
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, map.encode(), None)]);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Changes the map by `change` (run again on the newer map when another writer came
    /// first); nothing is written when `change` fails or says nothing changed.
    async fn update<T>(
        &mut self,
        mut change: impl FnMut(&mut ClusterMap) -> Result<(bool, T)>,
    ) -> Result<(ClusterMap, T)> {
        loop {
            let (mut map, revision) = self.existing_map().await?;
            let (changed, out) = change(&mut map)?;
            if !changed {
                return Ok((map, out));
            }
            let key = self.map_key();
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    revision,
                )])
                .and_then([TxnOp::put(key, map.encode(), None)]);
            if self.client.txn(txn).await?.succeeded() {
                return Ok((map, out));
            }
            tracing::debug!(cluster = %self.name, "the map changed under us; trying again");
        }
    }

    /// Makes `name` a member (or updates its addresses); forms the first layout when it makes
    /// enough members. The map after.
    pub async fn join(&mut self, name: &str, member: Member) -> Result<ClusterMap> {
        Ok(self
            .update(|map| Ok((map.join(name, member.clone())?, ())))
            .await?
            .0)
    }

    /// Removes member `name` (refused while the layout holds its devices, or while a process
    /// runs as it).
    pub async fn leave(&mut self, name: &str) -> Result<ClusterMap> {
        loop {
            let (mut map, revision) = self.existing_map().await?;
            map.leave(name)?;
            // Only while no process runs as the node: it would go on serving a name that is
            // no member, and another process could take the name.
            let key = self.map_key();
            let txn = Txn::new()
                .when([
                    Compare::mod_revision(key.clone(), CompareOp::Equal, revision),
                    Compare::create_revision(self.live_key(name), CompareOp::Equal, 0),
                ])
                .and_then([TxnOp::put(key, map.encode(), None)]);
            if self.client.txn(txn).await?.succeeded() {
                return Ok(map);
            }
            if self.live().await?.contains_key(name) {
                return Err(ClusterError::Refused(format!(
                    "node {name} is running: stop it before it leaves"
                )));
            }
        }
    }

    /// Every key under `prefix`.
    pub(crate) async fn get_prefix(&mut self, prefix: &str) -> Result<Vec<etcd_client::KeyValue>> {
        let mut got = self
            .client
            .get(prefix, Some(GetOptions::new().with_prefix()))
            .await?;
        Ok(got.take_kvs())
    }

    /// Puts `value` at `key` (under `lease`, if any) only where no such key is: the revision
    /// that created it, or `None` when the key was there.
    pub(crate) async fn put_if_absent(
        &mut self,
        key: String,
        value: String,
        lease: Option<i64>,
    ) -> Result<Option<i64>> {
        let options = lease.map(|l| PutOptions::new().with_lease(l));
        let txn = Txn::new()
            .when([Compare::create_revision(key.clone(), CompareOp::Equal, 0)])
            .and_then([TxnOp::put(key, value, options)]);
        let done = self.client.txn(txn).await?;
        if !done.succeeded() {
            return Ok(None);
        }
        // The transaction's revision is the key's create revision (a fencing token): never
        // guessed.
        match done.header() {
            Some(h) => Ok(Some(h.revision())),
            None => Err(ClusterError::Corrupt(
                "etcd answered a write without its revision".into(),
            )),
        }
    }

    /// Deletes `key` if the revision that created it is `revision` and it is under `lease`;
    /// whether it did.
    pub(crate) async fn delete_if_owned(
        &mut self,
        key: String,
        revision: i64,
        lease: i64,
    ) -> Result<bool> {
        let txn = Txn::new()
            .when([
                Compare::create_revision(key.clone(), CompareOp::Equal, revision),
                Compare::lease(key.clone(), CompareOp::Equal, lease),
            ])
            .and_then([TxnOp::delete(key, None)]);
        Ok(self.client.txn(txn).await?.succeeded())
    }

    /// Puts `value` at `key` under `lease`.
    pub(crate) async fn put_leased(
        &mut self,
        key: String,
        value: String,
        lease: i64,
    ) -> Result<()> {
        self.client
            .put(key, value, Some(PutOptions::new().with_lease(lease)))
            .await?;
        Ok(())
    }

    /// The running nodes, by name.
    pub async fn live(&mut self) -> Result<BTreeMap<String, Live>> {
        let prefix = format!("{}live/", self.prefix());
        let mut out = BTreeMap::new();
        for kv in self.get_prefix(&prefix).await? {
            let node = String::from_utf8_lossy(&kv.key()[prefix.len()..]).into_owned();
            let mut live: Live = serde_json::from_slice(kv.value())
                .map_err(|e| ClusterError::Corrupt(format!("live record of {node}: {e}")))?;
            live.lease = kv.lease();
            out.insert(node, live);
        }
        Ok(out)
    }

    /// Registers node `name` as running at `address` under a lease of `ttl` (etcd may grant
    /// more: it raises short leases to its minimum), kept alive in the background until the
    /// [`Registration`] is revoked or dropped. Refused while another process holds the name's
    /// live record.
    pub async fn register(
        &mut self,
        name: &str,
        address: &str,
        ttl: Duration,
    ) -> Result<Registration> {
        check_name("node", name)?;
        let sent = Instant::now();
        let grant = self
            .client
            .lease_grant(ttl.as_secs().max(1) as i64, None)
            .await?;
        let (lease, granted) = (grant.id(), Duration::from_secs(grant.ttl().max(1) as u64));
        let live = Live {
            address: address.to_string(),
            pid: std::process::id(),
            since_unix_ms: unix_ms(),
            lease,
        };
        let value = serde_json::to_string(&live).expect("a live record serialises");
        if self
            .put_if_absent(self.live_key(name), value, Some(lease))
            .await?
            .is_none()
        {
            let _ = self.client.lease_revoke(lease).await;
            return Err(ClusterError::Refused(format!(
                "node {name} is already running (its live record is held; a node that was killed holds it until its lease of {} s runs out)",
                granted.as_secs()
            )));
        }
        let (lost_tx, lost) = watch::channel(None);
        let task = tokio::spawn(keep_alive(
            self.client.clone(),
            lease,
            sent + granted,
            granted,
            lost_tx,
        ));
        Ok(Registration {
            client: self.client.clone(),
            node: name.to_string(),
            lease,
            ttl: granted,
            lost,
            task,
        })
    }
}

/// Pause before a renewal on a new stream.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

type Renewals = (etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream);

/// What one renewal found.
enum Renewal {
    /// The lease lives on for this many seconds from the request.
    Alive(i64),
    /// etcd says the lease is gone (expired or revoked).
    Expired,
    /// The stream broke or answered nothing: open another and try again.
    Broken,
}

/// One renewal, opening the renewal stream first where there is none (etcd-client opens it
/// with a renewal of its own, and refuses with "lease not found" a lease that is gone).
async fn renew(client: &mut Client, lease: i64, renewals: &mut Option<Renewals>) -> Renewal {
    if renewals.is_none() {
        match client.lease_keep_alive(lease).await {
            Ok(opened) => *renewals = Some(opened),
            Err(etcd_client::Error::LeaseKeepAliveError(m)) if m.contains("not found") => {
                return Renewal::Expired
            }
            Err(_) => return Renewal::Broken,
        }
    }
    let (keeper, stream) = renewals.as_mut().expect("opened above");
    if keeper.keep_alive().await.is_err() {
        return Renewal::Broken;
    }
    match stream.message().await {
        Ok(Some(answer)) if answer.ttl() > 0 => Renewal::Alive(answer.ttl()),
        Ok(Some(_)) => Renewal::Expired,
        Ok(None) | Err(_) => Renewal::Broken,
    }
}

/// Renews the lease three times per TTL. A renewal that breaks or goes unanswered for a third
/// of the TTL (etcd restarting, a leader change, a connection gone silent) is tried again on a
/// new stream, for as long as the lease is sure to be alive: until the last answered renewal's
/// send time plus the TTL it answered, less a margin. Past that, or when etcd says the lease
/// has expired, it says why.
async fn keep_alive(
    mut client: Client,
    lease: i64,
    mut alive_until: Instant,
    ttl: Duration,
    lost: watch::Sender<Option<String>>,
) {
    let every = (ttl / 3).max(Duration::from_millis(200));
    let margin = (ttl / 10).min(Duration::from_millis(500));
    let mut renewals = None;
    let why = loop {
        let give_up = alive_until - margin;
        let sent = Instant::now();
        if sent >= give_up {
            break format!(
                "no renewal answered before the lease's end ({} s TTL)",
                ttl.as_secs()
            );
        }
        // A third of the TTL per attempt, so a silent stream is replaced; the last attempt
        // before giving up gets all the time left (opening a stream costs two round trips).
        let attempt_until = if give_up.saturating_duration_since(sent) < 2 * every {
            give_up
        } else {
            sent + every
        };
        match tokio::time::timeout_at(
            attempt_until.into(),
            renew(&mut client, lease, &mut renewals),
        )
        .await
        {
            Ok(Renewal::Alive(left)) => {
                alive_until = sent + Duration::from_secs(left as u64);
                // Sooner than every third of the TTL when etcd answered a shorter one.
                let room = (alive_until - margin).saturating_duration_since(Instant::now());
                tokio::time::sleep(every.min(room / 2)).await;
            }
            Ok(Renewal::Expired) => break "etcd says the lease has expired".to_string(),
            Ok(Renewal::Broken) | Err(_) => {
                // A new stream (on whichever endpoint answers) and another try, if there is
                // time for one.
                renewals = None;
                if Instant::now() + RETRY_PAUSE >= give_up {
                    break format!(
                        "no renewal answered before the lease's end ({} s TTL)",
                        ttl.as_secs()
                    );
                }
                tokio::time::sleep(RETRY_PAUSE).await;
            }
        }
    };
    let _ = lost.send(Some(why));
}

/// A node's live record under a lease kept alive in the background.
pub struct Registration {
    client: Client,
    node: String,
    lease: i64,
    ttl: Duration,
    lost: watch::Receiver<Option<String>>,
    task: tokio::task::JoinHandle<()>,
}

impl Registration {
    /// The lease's id.
    pub fn lease(&self) -> i64 {
        self.lease
    }

    /// The TTL etcd granted.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Resolves once the lease can no longer be kept: from then on the cluster may treat the
    /// node as gone, so the node must stop serving.
    pub async fn lost(&mut self) -> ClusterError {
        let why = loop {
            if let Some(why) = self.lost.borrow().clone() {
                break why;
            }
            if self.lost.changed().await.is_err() {
                break "the renewal task ended".to_string();
            }
        };
        ClusterError::LeaseLost {
            node: self.node.clone(),
            why,
        }
    }

    /// Stops renewing and revokes the lease, so the live record goes at once (a clean stop).
    pub async fn revoke(mut self) -> Result<()> {
        self.task.abort();
        self.client.lease_revoke(self.lease).await?;
        Ok(())
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // Without a revoke the record stays until the TTL runs out, as after a crash.
        self.task.abort();
    }
}
