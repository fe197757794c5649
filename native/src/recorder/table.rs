//! The recorder's node table: what each tree node holds, hashed, and the state digest.
//!
//! Applying the tree's ops in order keeps, per node, its parent, its tokens, every page's chain
//! digest and its SWA residency; a store hashes its pages onto the parent's last digest, a split
//! hands the first pages over to the new prefix node (hashes survive splits), and the digest is
//! updated by one term per page changed (`crate::digest`, the replicas' function).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use sha2::{Digest, Sha256};

use super::error::{Error, Result};
use super::ops::{NodeId, Op, OpLog};
use crate::digest::StateDigest;
use crate::events::{Event, Medium, RemovalReason, Stored};
use crate::hashing::{self, PageDigest, PageHasher};

/// Node ids are small distinct integers: one multiply spreads them over the hash table.
#[derive(Default)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.0 = value.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

type IdMap<V> = HashMap<NodeId, V, BuildHasherDefault<IdHasher>>;

/// One node of the tree as the recorder knows it.
#[derive(Clone, Debug)]
struct Node {
    /// `None` for a namespace root.
    parent: Option<NodeId>,
    /// A root's chain prior: `None` (empty) for the default namespace, sha256(extra_key) for a
    /// named one. Unused for other nodes.
    root_prior: Option<PageDigest>,
    /// One chain digest per page (empty for a root).
    digests: Vec<PageDigest>,
    tokens: Vec<u32>,
    tombstone: bool,
    /// How many nodes name this one as their parent.
    children: usize,
}

impl Node {
    fn hashes(&self) -> Vec<i64> {
        self.digests.iter().map(hashing::block_hash).collect()
    }

    /// What a child's first page chains onto: the prior digest (`None`: empty) and the parent
    /// block hash (`None` at a namespace root).
    fn chain_end(&self) -> (Option<PageDigest>, Option<i64>) {
        match self.digests.last() {
            Some(last) => (Some(*last), Some(hashing::block_hash(last))),
            None => (self.root_prior, None),
        }
    }
}

/// Every node of one tree, hashed, with the digest of every page it holds.
pub struct NodeTable {
    page_size: usize,
    nodes: IdMap<Node>,
    digest: StateDigest,
    /// Hashes the pages of a store chained onto a 32-byte prior (its padded message laid out
    /// once for the table's life: a page then costs one compression and no allocation).
    hasher: PageHasher<'static>,
}

impl NodeTable {
    /// An empty table for a tree of `page_size` tokens per page (positive).
    pub fn new(page_size: usize) -> Self {
        assert!(page_size > 0, "page_size must be positive");
        NodeTable {
            page_size,
            nodes: IdMap::default(),
            digest: StateDigest::default(),
            hasher: PageHasher::new(&[], page_size),
        }
    }

    /// Tokens per page.
    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// The digest accumulator of every page held now.
    pub fn digest(&self) -> u64 {
        self.digest.value
    }

    /// The number of nodes held (roots included).
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the table holds no node at all.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The block hashes of `node`'s pages (`None` for an unknown node; empty for a root).
    pub fn hashes_of(&self, node: NodeId) -> Option<Vec<i64>> {
        self.nodes.get(&node).map(Node::hashes)
    }

    /// Apply every op of `log` in order; the events they make go to `out` when given.
    ///
    /// On error the ops before the failing one stay applied and the table stays consistent.
    pub fn apply_log(&mut self, log: &OpLog, mut out: Option<&mut Vec<Event>>) -> Result<()> {
        for op in &log.ops {
            self.apply(op, log, out.as_deref_mut())?;
        }
        Ok(())
    }

    fn node(&self, id: NodeId) -> Result<&Node> {
        self.nodes.get(&id).ok_or(Error::UnknownNode(id))
    }

    fn page_node(&self, id: NodeId) -> Result<&Node> {
        let node = self.node(id)?;
        if node.parent.is_none() {
            return Err(Error::NamespaceRoot(id));
        }
        Ok(node)
    }

    /// The block hash `node`'s first page chains onto (`None` under a namespace root).
    fn first_parent_hash(&self, node: &Node) -> Option<i64> {
        node.parent
            .and_then(|parent| self.nodes.get(&parent))
            .and_then(|parent| parent.chain_end().1)
    }

    fn apply(&mut self, op: &Op, log: &OpLog, out: Option<&mut Vec<Event>>) -> Result<()> {
        match op {
            Op::Root { node, extra_key } => {
                if self.nodes.contains_key(node) {
                    return Err(Error::NodeExists(*node));
                }
                let prior = extra_key
                    .as_deref()
                    .map(|key| -> PageDigest { Sha256::digest(key.as_bytes()).into() });
                self.nodes.insert(
                    *node,
                    Node {
                        parent: None,
                        root_prior: prior,
                        digests: Vec::new(),
                        tokens: Vec::new(),
                        tombstone: false,
                        children: 0,
                    },
                );
            }
            Op::Stored {
                node,
                parent,
                tokens,
            } => self.store(*node, *parent, log.tokens_of(tokens), out)?,
            Op::Removed { node } => self.remove(*node, out)?,
            Op::SwaEvicted { node } => self.set_residency(*node, false, out)?,
            Op::SwaRestored { node } => self.set_residency(*node, true, out)?,
            Op::Split {
                prefix,
                suffix,
                prefix_pages,
            } => self.split(*prefix, *suffix, *prefix_pages)?,
            Op::Cleared => {
                self.nodes.clear();
                self.digest = StateDigest::default();
                if let Some(out) = out {
                    out.push(Event::Cleared);
                }
            }
        }
        Ok(())
    }

    /// Add (or take out) the digest terms of a node's pages `hashes` in residency `resident`.
    fn account(&mut self, first_parent: Option<i64>, hashes: &[i64], resident: bool, add: bool) {
        let mut parent = first_parent;
        for &hash in hashes {
            if add {
                self.digest.add(hash, parent, resident);
            } else {
                self.digest.remove(hash, parent, resident);
            }
            parent = Some(hash);
        }
    }

    fn store(
        &mut self,
        id: NodeId,
        parent_id: NodeId,
        tokens: &[u32],
        out: Option<&mut Vec<Event>>,
    ) -> Result<()> {
        let page_size = self.page_size;
        if tokens.is_empty() || tokens.len() % page_size != 0 {
            return Err(Error::NotWholePages {
                node: id,
                tokens: tokens.len(),
                page_size,
            });
        }
        if self.nodes.contains_key(&id) {
            return Err(Error::NodeExists(id));
        }
        let (prior, parent_hash) = self.node(parent_id)?.chain_end();
        let pages = tokens.len() / page_size;
        let mut digests: Vec<PageDigest> = Vec::with_capacity(pages);
        let mut hashes: Vec<i64> = Vec::with_capacity(pages);
        let mut previous = parent_hash;
        // A store under the default namespace's root chains onto the empty prior: a hasher of
        // its own for that (rare) case; any other chains onto a 32-byte digest.
        let mut from_empty;
        let hasher = match &prior {
            Some(prior) => {
                self.hasher.resume(&hashing::digest_state(prior));
                &mut self.hasher
            }
            None => {
                from_empty = PageHasher::new(&[], page_size);
                &mut from_empty
            }
        };
        for page in tokens.chunks_exact(page_size) {
            let state = hasher.next(page);
            let hash = hashing::state_block_hash(&state);
            self.digest.add(hash, previous, true);
            previous = Some(hash);
            digests.push(hashing::state_digest(&state));
            hashes.push(hash);
        }
        if let Some(parent) = self.nodes.get_mut(&parent_id) {
            parent.children += 1;
        }
        self.nodes.insert(
            id,
            Node {
                parent: Some(parent_id),
                root_prior: None,
                digests,
                tokens: tokens.to_vec(),
                tombstone: false,
                children: 0,
            },
        );
        if let Some(out) = out {
            out.push(Event::Stored(Stored {
                hashes: hashes.into(),
                parent: parent_hash,
                tokens: tokens.into(),
                block_size: page_size as u32,
                lora_id: None,
                medium: Some(Medium::GPU),
            }));
        }
        Ok(())
    }

    fn remove(&mut self, id: NodeId, out: Option<&mut Vec<Event>>) -> Result<()> {
        let node = self.page_node(id)?;
        if node.children > 0 {
            return Err(Error::HasChildren {
                node: id,
                children: node.children,
            });
        }
        let hashes = node.hashes();
        let first_parent = self.first_parent_hash(node);
        let (resident, parent) = (!node.tombstone, node.parent);
        self.account(first_parent, &hashes, resident, false);
        self.nodes.remove(&id);
        if let Some(parent) = parent.and_then(|parent| self.nodes.get_mut(&parent)) {
            parent.children -= 1;
        }
        if let Some(out) = out {
            out.push(Event::Removed {
                hashes: hashes.into(),
                medium: Some(Medium::GPU),
                reason: Some(RemovalReason::Evicted),
            });
        }
        Ok(())
    }

    fn set_residency(
        &mut self,
        id: NodeId,
        resident: bool,
        out: Option<&mut Vec<Event>>,
    ) -> Result<()> {
        let node = self.page_node(id)?;
        if node.tombstone != resident {
            return Err(Error::AlreadyResident { node: id, resident });
        }
        let hashes = node.hashes();
        let first_parent = self.first_parent_hash(node);
        self.account(first_parent, &hashes, !resident, false);
        self.account(first_parent, &hashes, resident, true);
        if let Some(node) = self.nodes.get_mut(&id) {
            node.tombstone = !resident;
        }
        if let Some(out) = out {
            out.push(if resident {
                Event::SwaRestored {
                    hashes: hashes.into(),
                }
            } else {
                Event::SwaEvicted {
                    hashes: hashes.into(),
                }
            });
        }
        Ok(())
    }

    fn split(&mut self, prefix: NodeId, suffix: NodeId, prefix_pages: usize) -> Result<()> {
        if self.nodes.contains_key(&prefix) {
            return Err(Error::NodeExists(prefix));
        }
        let page_size = self.page_size;
        let node = self
            .nodes
            .get_mut(&suffix)
            .ok_or(Error::UnknownNode(suffix))?;
        if node.parent.is_none() || prefix_pages == 0 || prefix_pages >= node.digests.len() {
            return Err(Error::CannotSplit {
                node: suffix,
                pages: node.digests.len(),
                prefix_pages,
            });
        }
        let head = Node {
            parent: node.parent,
            root_prior: None,
            digests: node.digests.drain(..prefix_pages).collect(),
            tokens: node.tokens.drain(..prefix_pages * page_size).collect(),
            tombstone: node.tombstone,
            children: 1,
        };
        node.parent = Some(prefix);
        self.nodes.insert(prefix, head);
        Ok(())
    }

    /// The whole table as events: a `Stored` per node (parents first: roots by id, then a
    /// depth-first walk with children by id), then a `SwaEvicted` per tombstoned node in the
    /// same order.
    pub fn snapshot(&self) -> Vec<Event> {
        let mut children: IdMap<Vec<NodeId>> = IdMap::default();
        let mut roots: Vec<NodeId> = Vec::new();
        for (&id, node) in &self.nodes {
            match node.parent {
                Some(parent) => children.entry(parent).or_default().push(id),
                None => roots.push(id),
            }
        }
        roots.sort_unstable();
        for list in children.values_mut() {
            // Reversed: the stack below pops the smallest id first.
            list.sort_unstable_by(|a, b| b.cmp(a));
        }
        let mut stored = Vec::new();
        let mut tombstones = Vec::new();
        for root in roots {
            let mut stack: Vec<NodeId> = children.get(&root).cloned().unwrap_or_default();
            while let Some(id) = stack.pop() {
                let node = &self.nodes[&id];
                let hashes = node.hashes();
                let parent = self.first_parent_hash(node);
                if node.tombstone {
                    tombstones.push(Event::SwaEvicted {
                        hashes: hashes.as_slice().into(),
                    });
                }
                stored.push(Event::Stored(Stored {
                    hashes: hashes.into(),
                    parent,
                    tokens: node.tokens.as_slice().into(),
                    block_size: self.page_size as u32,
                    lora_id: None,
                    medium: Some(Medium::GPU),
                }));
                if let Some(list) = children.get(&id) {
                    stack.extend_from_slice(list);
                }
            }
        }
        stored.extend(tombstones);
        stored
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::chain_page_digests;

    fn ids(digests: &[PageDigest]) -> Vec<i64> {
        digests.iter().map(hashing::block_hash).collect()
    }

    fn log(build: impl FnOnce(&mut OpLog)) -> OpLog {
        let mut log = OpLog::default();
        build(&mut log);
        log
    }

    /// `log` of the ops `build` pushes after the root of the tree (node 1, no extra key).
    fn rooted(build: impl FnOnce(&mut OpLog)) -> OpLog {
        log(|l| {
            l.ops.push(Op::Root {
                node: 1,
                extra_key: None,
            });
            build(l);
        })
    }

    fn apply(table: &mut NodeTable, log: &OpLog) -> Vec<Event> {
        let mut out = Vec::new();
        table.apply_log(log, Some(&mut out)).expect("ops apply");
        out
    }

    #[test]
    fn a_store_hashes_onto_the_parent_chain_as_sglang_does() {
        let mut table = NodeTable::new(1);
        let events = apply(
            &mut table,
            &rooted(|l| {
                l.push_stored(2, 1, &[1]);
                l.push_stored(3, 2, &[2]);
            }),
        );
        // The sglang test vectors: tokens [1, 2] at page size 1.
        let expect = [7470307888890966271, -1634645291211865391];
        assert_eq!(table.hashes_of(2), Some(vec![expect[0]]));
        assert_eq!(table.hashes_of(3), Some(vec![expect[1]]));
        let Event::Stored(second) = &events[1] else {
            panic!("not a store")
        };
        assert_eq!(second.parent, Some(expect[0]));
        assert_eq!(second.tokens.as_slice(), [2]);
        assert_eq!(second.medium.as_deref(), Some("GPU"));
    }

    #[test]
    fn a_named_namespace_seeds_the_chain() {
        let mut table = NodeTable::new(2);
        apply(
            &mut table,
            &log(|l| {
                l.ops.push(Op::Root {
                    node: 1,
                    extra_key: Some("lora".into()),
                });
                l.push_stored(2, 1, &[4, 5, 6, 7]);
            }),
        );
        let prior = hashing::namespace_prior(Some("lora"));
        let expect = ids(&chain_page_digests(&prior, &[4, 5, 6, 7], 2));
        assert_eq!(table.hashes_of(2), Some(expect));
    }

    #[test]
    fn split_keeps_every_page_hash_and_chains_new_children_on_the_prefix() {
        let mut table = NodeTable::new(1);
        apply(
            &mut table,
            &rooted(|l| {
                l.push_stored(2, 1, &[1, 2, 3]);
                l.ops.push(Op::Split {
                    prefix: 3,
                    suffix: 2,
                    prefix_pages: 1,
                });
                l.push_stored(4, 3, &[9]);
            }),
        );
        let whole = ids(&chain_page_digests(&[], &[1, 2, 3], 1));
        assert_eq!(table.hashes_of(3), Some(whole[..1].to_vec()));
        assert_eq!(table.hashes_of(2), Some(whole[1..].to_vec()));
        let branch = ids(&chain_page_digests(&[], &[1, 9], 1));
        assert_eq!(table.hashes_of(4), Some(branch[1..].to_vec()));
    }

    #[test]
    fn the_digest_equals_a_fresh_sum_whatever_happened_before() {
        let mut table = NodeTable::new(1);
        apply(
            &mut table,
            &rooted(|l| {
                l.push_stored(2, 1, &[1, 2, 3]);
                l.push_stored(5, 2, &[8]);
                l.ops.push(Op::Split {
                    prefix: 3,
                    suffix: 2,
                    prefix_pages: 2,
                });
                l.ops.push(Op::SwaEvicted { node: 3 });
                l.ops.push(Op::Removed { node: 5 });
                l.push_stored(6, 3, &[7]);
                l.ops.push(Op::SwaEvicted { node: 6 });
                l.ops.push(Op::SwaRestored { node: 6 });
            }),
        );
        // Pages now: [1, 2] tombstoned (node 3), [3] (node 2) and [7] (node 6) resident.
        let main = ids(&chain_page_digests(&[], &[1, 2, 3], 1));
        let side = ids(&chain_page_digests(&[], &[1, 2, 7], 1));
        let mut fresh = StateDigest::default();
        fresh.add(main[0], None, false);
        fresh.add(main[1], Some(main[0]), false);
        fresh.add(main[2], Some(main[1]), true);
        fresh.add(side[2], Some(main[1]), true);
        assert_eq!(table.digest(), fresh.value);
    }

    #[test]
    fn removal_and_residency_events_name_every_page_of_the_node() {
        let mut table = NodeTable::new(2);
        let events = apply(
            &mut table,
            &rooted(|l| {
                l.push_stored(2, 1, &[1, 2, 3, 4]);
                l.ops.push(Op::SwaEvicted { node: 2 });
                l.ops.push(Op::SwaRestored { node: 2 });
                l.ops.push(Op::Removed { node: 2 });
                l.ops.push(Op::Cleared);
            }),
        );
        let hashes = ids(&chain_page_digests(&[], &[1, 2, 3, 4], 2));
        assert_eq!(
            events[1..],
            [
                Event::SwaEvicted {
                    hashes: hashes.clone().into()
                },
                Event::SwaRestored {
                    hashes: hashes.clone().into()
                },
                Event::Removed {
                    hashes: hashes.into(),
                    medium: Some("GPU".into()),
                    reason: Some(RemovalReason::Evicted),
                },
                Event::Cleared,
            ]
        );
        assert_eq!(table.digest(), 0);
        assert!(table.is_empty());
    }

    #[test]
    fn snapshot_lists_parents_first_by_id_then_tombstones() {
        let mut table = NodeTable::new(1);
        apply(
            &mut table,
            &rooted(|l| {
                l.push_stored(2, 1, &[1, 2]);
                l.push_stored(3, 2, &[5]);
                l.push_stored(4, 1, &[9]);
                // The new prefix (id 5) is older in the tree than its id says.
                l.ops.push(Op::Split {
                    prefix: 5,
                    suffix: 2,
                    prefix_pages: 1,
                });
                l.ops.push(Op::SwaEvicted { node: 5 });
            }),
        );
        let snapshot = table.snapshot();
        let firsts: Vec<(i64, Option<i64>)> = snapshot
            .iter()
            .filter_map(|e| match e {
                Event::Stored(s) => Some((s.hashes[0], s.parent)),
                _ => None,
            })
            .collect();
        let h = |tokens: &[u32]| *ids(&chain_page_digests(&[], tokens, 1)).last().unwrap();
        assert_eq!(
            firsts,
            vec![
                (h(&[9]), None),
                (h(&[1]), None),
                (h(&[1, 2]), Some(h(&[1]))),
                (h(&[1, 2, 5]), Some(h(&[1, 2]))),
            ]
        );
        assert_eq!(
            snapshot.last(),
            Some(&Event::SwaEvicted {
                hashes: vec![h(&[1])].into()
            })
        );
    }

    #[test]
    fn ops_the_table_cannot_follow_are_errors_not_panics() {
        let mut table = NodeTable::new(1);
        let bad = [
            log(|l| l.push_stored(2, 1, &[1])),
            log(|l| l.ops.push(Op::Removed { node: 9 })),
            rooted(|l| l.ops.push(Op::SwaEvicted { node: 1 })),
        ];
        for ops in &bad {
            assert!(table.apply_log(ops, None).is_err(), "{ops:?}");
        }
        table
            .apply_log(&log(|l| l.push_stored(2, 1, &[3])), None)
            .unwrap();
        let again = [
            log(|l| l.push_stored(2, 1, &[1])),
            log(|l| l.push_stored(7, 1, &[])),
            log(|l| {
                l.ops.push(Op::Split {
                    prefix: 8,
                    suffix: 2,
                    prefix_pages: 1,
                })
            }),
            log(|l| l.ops.push(Op::SwaRestored { node: 2 })),
        ];
        for ops in &again {
            assert!(table.apply_log(ops, None).is_err(), "{ops:?}");
        }
    }
}
