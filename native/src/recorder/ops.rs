//! What the tree records on the serving loop: one small op per node-level change.
//!
//! An op names nodes by the tree's node ids and carries no hash; a store's tokens go into one
//! shared arena, so recording a store is a push of 40 bytes plus a copy of its tokens.

use std::ops::Range;

/// The tree's id of a node (namespace roots included). Ids are never reused.
pub type NodeId = u64;

/// One node-level change of the tree, in the order the tree made it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A namespace root was made: `extra_key` `None` is the default namespace.
    Root {
        node: NodeId,
        extra_key: Option<Box<str>>,
    },
    /// `node` was linked under `parent` holding `tokens` (an arena range), every page resident.
    Stored {
        node: NodeId,
        parent: NodeId,
        tokens: Range<usize>,
    },
    /// `node` (every page of it) left the tree.
    Removed { node: NodeId },
    /// `node` was tombstoned.
    SwaEvicted { node: NodeId },
    /// `node` got its SWA KV back.
    SwaRestored { node: NodeId },
    /// `suffix` was split: the new node `prefix` took its first `prefix_pages` pages.
    Split {
        prefix: NodeId,
        suffix: NodeId,
        prefix_pages: usize,
    },
    /// Every node (roots included) was dropped.
    Cleared,
}

/// A run of ops with the arena their stores' tokens live in.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OpLog {
    pub ops: Vec<Op>,
    pub tokens: Vec<u32>,
}

impl OpLog {
    /// Whether no op was recorded.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Forget every op and token, keeping the buffers' capacity.
    pub fn clear(&mut self) {
        self.ops.clear();
        self.tokens.clear();
    }

    /// Record a store whose tokens are `tokens`.
    pub fn push_stored(&mut self, node: NodeId, parent: NodeId, tokens: &[u32]) {
        let start = self.tokens.len();
        self.tokens.extend_from_slice(tokens);
        self.ops.push(Op::Stored {
            node,
            parent,
            tokens: start..self.tokens.len(),
        });
    }

    /// The tokens of a store recorded in this log.
    pub fn tokens_of(&self, range: &Range<usize>) -> &[u32] {
        &self.tokens[range.clone()]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_op_stays_small() {
        // The serving loop pays for each op it pushes: keep it at five words.
        assert!(std::mem::size_of::<Op>() <= 40);
    }

    #[test]
    fn stores_share_one_token_arena() {
        let mut log = OpLog::default();
        log.push_stored(2, 1, &[5, 6]);
        log.push_stored(3, 2, &[7]);
        let Op::Stored { tokens, .. } = &log.ops[1] else {
            panic!("not a store")
        };
        assert_eq!(log.tokens_of(tokens), &[7]);
        assert_eq!(log.tokens, vec![5, 6, 7]);
    }
}
