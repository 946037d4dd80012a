//! The node as the failure domain: which array position each node's devices take, and the check
//! that losing any one node loses no more pieces of any object than its mechanism tolerates.
//!
//! `placement` gives array device d the colour d mod width and makes each group of one device
//! of every colour, matched at random within each colour class. So what one node can lose of a
//! group is bounded by the colours its devices have. [`arrange`] gives each node's devices as
//! few colours as it can: the devices, node by node, fill the colours in turn, each colour's
//! class (N / width devices) before the next, so a node of D devices spans at most
//! ceil(D / class) + 1 colours. [`node_loss`] then checks the layout itself: for every group,
//! node, mechanism of the policy and rotation, the pieces that sit on that node's devices (for a
//! packed object, whose set may use any colours of the group, the group's colours on the node,
//! at most its k + m). Pieces are placed spread (`PieceOrder::Spread`), as every layout made now.

use railstore_placement::{Layout, PieceOrder};
use railstore_redundancy::Mechanism;

/// Array positions for `devices_per_node` devices on each of `nodes` nodes (`nodes ×
/// devices_per_node` a multiple of `width`): `positions[node][j]` is the array index of the
/// node's device j.
pub fn arrange(nodes: usize, devices_per_node: usize, width: usize) -> Vec<Vec<usize>> {
    let total = nodes * devices_per_node;
    let class = total / width;
    (0..nodes)
        .map(|node| {
            (0..devices_per_node)
                .map(|j| {
                    let p = node * devices_per_node + j;
                    // The p-th device overall is member p % class of colour p / class.
                    (p % class) * width + p / class
                })
                .collect()
        })
        .collect()
}

/// Device index -> node index from per-node positions (as [`arrange`] gives them); a position
/// no node has is `usize::MAX`.
pub fn node_of(positions: &[Vec<usize>]) -> Vec<usize> {
    let mut out = vec![usize::MAX; positions.iter().map(Vec::len).sum()];
    for (node, ps) in positions.iter().enumerate() {
        for &p in ps {
            out[p] = node;
        }
    }
    out
}

/// The worst a node's loss does to the layout: the most pieces of one object that a single
/// node holds, against what that object's mechanism tolerates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeLoss {
    /// The node (index into the members' order given to [`node_loss`]).
    pub node: usize,
    /// The group where it is worst.
    pub group: usize,
    /// The mechanism.
    pub mechanism: Mechanism,
    /// Pieces of one object of that mechanism the node holds.
    pub pieces: usize,
    /// Pieces the mechanism may lose.
    pub tolerance: usize,
}

impl NodeLoss {
    /// Whether losing the node stays within the tolerance.
    pub fn within(&self) -> bool {
        self.pieces <= self.tolerance
    }
}

/// The worst node loss of `layout` whose device d is on node `node_of[d]`, over `mechanisms`
/// (pieces spread as `layout` places them): the case with the largest excess over the
/// tolerance (the first found on ties). `None` when there is no mechanism or no group.
pub fn node_loss(layout: &Layout, node_of: &[usize], mechanisms: &[Mechanism]) -> Option<NodeLoss> {
    let width = layout.width();
    let order: PieceOrder = layout.piece_order();
    let nodes = node_of.iter().copied().max().map_or(0, |n| n + 1);
    let mut worst: Option<(isize, NodeLoss)> = None;
    for g in 0..layout.group_count() {
        // colour -> node of the group's device of that colour
        let owner: Vec<usize> = layout.group(g).map(|d| node_of[d]).collect();
        for node in 0..nodes {
            for &mech in mechanisms {
                // The positions an object depends on: its pieces, or for a packed object the
                // whole group (its set's members and parity may sit on any of the group's
                // colours), of which it loses at most its k + m.
                let span = mech.span(width);
                let most = (0..width)
                    .map(|rotation| {
                        (0..span)
                            .filter(|&i| {
                                owner[(order.shard(i, span, width) + rotation) % width] == node
                            })
                            .count()
                            .min(mech.width())
                    })
                    .max()
                    .unwrap_or(0);
                let excess = most as isize - mech.tolerance() as isize;
                if worst.as_ref().is_none_or(|(e, _)| excess > *e) {
                    worst = Some((
                        excess,
                        NodeLoss {
                            node,
                            group: g,
                            mechanism: mech,
                            pieces: most,
                            tolerance: mech.tolerance(),
                        },
                    ));
                }
            }
        }
    }
    worst.map(|(_, loss)| loss)
}

#[cfg(test)]
mod tests {
    use super::*;
    use railstore_placement::LayoutSpec;

    fn mechs(names: &[&str]) -> Vec<Mechanism> {
        names.iter().map(|n| Mechanism::parse(n).unwrap()).collect()
    }

    fn layout(devices: usize, width: usize, rounds: usize) -> Layout {
        Layout::new(LayoutSpec {
            devices,
            width,
            rounds,
            seed: 7,
            version: 1,
        })
        .unwrap()
    }

    #[test]
    fn arrange_is_a_permutation_with_few_colours_per_node() {
        for (nodes, per, width) in [
            (3, 6, 6),
            (4, 6, 6),
            (2, 6, 6),
            (5, 6, 6),
            (3, 4, 6),
            (7, 3, 3),
        ] {
            let positions = arrange(nodes, per, width);
            let owner = node_of(&positions);
            assert!(owner.iter().all(|&n| n < nodes));
            let class = nodes * per / width;
            for ps in &positions {
                let mut colours: Vec<usize> = ps.iter().map(|p| p % width).collect();
                colours.sort();
                colours.dedup();
                assert!(
                    colours.len() <= per.div_ceil(class) + 1,
                    "{nodes}x{per} w{width}: {colours:?}"
                );
            }
        }
    }

    #[test]
    fn the_embedded_policy_survives_any_one_node_of_two_to_five() {
        let policy = mechs(&["rep3", "pack3+3", "split3+3"]);
        for nodes in [2, 3, 4, 5] {
            let positions = arrange(nodes, 6, 6);
            let loss = node_loss(&layout(nodes * 6, 6, 4), &node_of(&positions), &policy).unwrap();
            assert!(loss.within(), "{nodes} nodes: {loss:?}");
        }
    }

    #[test]
    fn one_node_or_a_narrow_tolerance_is_caught() {
        // One node holds every piece.
        let loss = node_loss(&layout(6, 6, 1), &[0; 6], &mechs(&["split3+3"])).unwrap();
        assert_eq!((loss.pieces, loss.tolerance, loss.within()), (6, 3, false));
        // RS(4,2) over two nodes: each node has three colours of every group.
        let positions = arrange(2, 6, 6);
        let loss = node_loss(
            &layout(12, 6, 2),
            &node_of(&positions),
            &mechs(&["split4+2"]),
        )
        .unwrap();
        assert!(!loss.within(), "{loss:?}");
        assert_eq!(loss.pieces, 3);
    }

    #[test]
    fn a_packed_object_counts_its_whole_group() {
        // pack2+1 in groups of 6 over three nodes: each node has two colours of every group,
        // and a set's two members may both sit on them, so a node's loss can take two pieces
        // of a set that survives one.
        let positions = arrange(3, 6, 6);
        let l = layout(18, 6, 3);
        let loss = node_loss(&l, &node_of(&positions), &mechs(&["pack2+1"])).unwrap();
        assert_eq!((loss.pieces, loss.tolerance, loss.within()), (2, 1, false));
        // split2+1 places its three pieces spread (colours r, r+2, r+4): one per node.
        let loss = node_loss(&l, &node_of(&positions), &mechs(&["split2+1"])).unwrap();
        assert!(loss.within(), "{loss:?}");
    }

    #[test]
    fn the_check_bites_on_a_careless_arrangement() {
        // Node-major positions (node i takes array devices 6i..6i+6): each node has all six
        // colours, so a group can lie wholly on one node. `arrange` exists to avoid this.
        let careless: Vec<Vec<usize>> = (0..4).map(|n| (n * 6..n * 6 + 6).collect()).collect();
        let policy = mechs(&["rep3", "pack3+3", "split3+3"]);
        let l = layout(24, 6, 4);
        let bad = node_loss(&l, &node_of(&careless), &policy).unwrap();
        assert!(!bad.within(), "{bad:?}");
        let good = node_loss(&l, &node_of(&arrange(4, 6, 6)), &policy).unwrap();
        assert!(good.within(), "{good:?}");
    }
}
