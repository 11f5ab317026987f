//! The lease owner the storage tests claim with, shared by `lease.rs` and `snapshot.rs`.

use protocol::NodeId;
use storage::lease::LeaseOwner;

/// The owner string of node `node` with a boot id of its own (`"<node>/boot-<node>"`): owners
/// of the same node are equal, owners of different nodes differ.
pub(crate) fn owner(node: &str) -> LeaseOwner {
    LeaseOwner::new(&NodeId::from(node), &format!("boot-{node}"))
}
