//! Which cluster and node a node's data folder belongs to (`node.json`), so that a folder is
//! never served under another node's name or in another cluster: its devices would then answer
//! for devices they are not, and the array would read data that is not there.

use crate::error::{ClusterError, Result};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;

/// The file in a node's data folder.
pub const IDENTITY_FILE: &str = "node.json";

/// A node's data folder's owner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIdentity {
    /// The cluster's name.
    pub cluster: String,
    /// The cluster's array id.
    pub array_id: u64,
    /// The node's name.
    pub node: String,
}

impl NodeIdentity {
    /// The identity `dir` has, if any.
    pub fn read(dir: &Path) -> Result<Option<NodeIdentity>> {
        let path = dir.join(IDENTITY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                ClusterError::Invalid(format!("{}: not a node identity: {e}", path.display()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(ClusterError::Invalid(format!(
                "reading {}: {e}",
                path.display()
            ))),
        }
    }

    /// Claims `dir` for this identity: accepted when its `node.json` says the same; written
    /// (durably) when the folder is new; refused when it names another node or cluster, or
    /// when the folder holds devices or a standalone store without one.
    pub fn claim(&self, dir: &Path) -> Result<()> {
        match NodeIdentity::read(dir)? {
            Some(found) => {
                if &found != self {
                    return Err(ClusterError::Refused(format!(
                        "{} belongs to node {} of cluster {} (array {:016x}), not node {} of cluster {} (array {:016x})",
                        dir.display(), found.node, found.cluster, found.array_id,
                        self.node, self.cluster, self.array_id
                    )));
                }
                Ok(())
            }
            None => {
                for used in ["devices", "array.json"] {
                    if dir.join(used).exists() {
                        return Err(ClusterError::Refused(format!(
                            "{} holds {used} but no {IDENTITY_FILE}: it is not a node's folder (a standalone store's, or another node's), so node {} will not serve it",
                            dir.display(), self.node
                        )));
                    }
                }
                self.write(dir)
            }
        }
    }

    fn write(&self, dir: &Path) -> Result<()> {
        let io = |what: &str, e: std::io::Error| {
            ClusterError::Invalid(format!("{what} in {}: {e}", dir.display()))
        };
        std::fs::create_dir_all(dir).map_err(|e| io("creating the folder", e))?;
        let tmp = dir.join(format!("{IDENTITY_FILE}.tmp"));
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("writing the identity", e))?;
        f.write_all(&serde_json::to_vec_pretty(self).expect("an identity serialises"))
            .and_then(|()| f.sync_all())
            .map_err(|e| io("writing the identity", e))?;
        std::fs::rename(&tmp, dir.join(IDENTITY_FILE))
            .map_err(|e| io("writing the identity", e))?;
        std::fs::File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io("syncing the folder", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(node: &str, array_id: u64) -> NodeIdentity {
        NodeIdentity {
            cluster: "c".into(),
            array_id,
            node: node.into(),
        }
    }

    #[test]
    fn a_folder_serves_one_node_of_one_cluster() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("node");
        id("a", 1).claim(&d).unwrap();
        id("a", 1).claim(&d).unwrap();
        let other_node = id("b", 1).claim(&d).unwrap_err();
        assert!(
            matches!(other_node, ClusterError::Refused(_)),
            "{other_node}"
        );
        let other_cluster = id("a", 2).claim(&d).unwrap_err();
        assert!(
            matches!(other_cluster, ClusterError::Refused(_)),
            "{other_cluster}"
        );
        assert_eq!(
            serde_json::from_slice::<NodeIdentity>(&std::fs::read(d.join(IDENTITY_FILE)).unwrap())
                .unwrap(),
            id("a", 1)
        );
        // Devices without an identity are someone else's.
        let bare = dir.path().join("bare");
        std::fs::create_dir_all(bare.join("devices")).unwrap();
        assert!(matches!(
            id("a", 1).claim(&bare),
            Err(ClusterError::Refused(_))
        ));
        assert!(!bare.join(IDENTITY_FILE).exists());
    }
}
