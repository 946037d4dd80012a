//! What can go wrong with the cluster map.

/// An error of the cluster layer.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The request itself is wrong (a bad name, a bad address, a member that does not fit the
    /// map); nothing was changed.
    #[error("{0}")]
    Invalid(String),
    /// `init` found a map already there; nothing was changed.
    #[error("cluster {0:?} already exists in etcd")]
    Exists(String),
    /// No map under that name.
    #[error("no cluster {0:?} in etcd (start a node with `railstore serve --cluster`, or run `railstore cluster init`)")]
    NoCluster(String),
    /// The map cannot do what was asked as it stands (leaving a node that holds data); nothing
    /// was changed.
    #[error("{0}")]
    Refused(String),
    /// The node's lease ran out: the cluster may already treat its devices as failed.
    #[error("node {node:?} lost its lease: {why}")]
    LeaseLost {
        /// The node.
        node: String,
        /// What ended it.
        why: String,
    },
    /// etcd could not be reached or refused a call.
    #[error("etcd: {0}")]
    Etcd(#[from] etcd_client::Error),
    /// The map in etcd does not parse (written by an incompatible railstore, or edited).
    #[error("the cluster map in etcd does not parse: {0}")]
    Corrupt(String),
}

/// The cluster layer's result.
pub type Result<T> = std::result::Result<T, ClusterError>;
