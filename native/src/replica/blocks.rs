//! `BlockTable`: the blocks one source holds, in parallel arrays indexed by slot.
//!
//! Per block: its hash (8 bytes), its parent's slot (4), its child count with the tombstone flag
//! in the top bit (4), its page's token ids (4 per token) and one index entry (8 / load, 10 to
//! 15 bytes): 30 to 35 bytes at page size 1. A parent is named by slot, not hash: a block with
//! children cannot be removed, so a child's parent slot stays valid for the child's whole life.
//! Freed slots are reused.
//!
//! Every change is checked before anything is written, so an event that does not fit (unknown
//! parent or block, a block stored twice, removing a block that still has children, a block size
//! that differs from the meta's or the earlier one) leaves the table as it was and returns the
//! reason, worded as the Python reference words it.

use super::index::SlotIndex;
use crate::digest::StateDigest;

/// `parents[slot]` of a block at the root.
pub const NO_PARENT: u32 = u32::MAX;
/// `parents[slot]` of a free slot.
pub const FREE: u32 = u32::MAX - 1;
/// The most blocks one table holds: a child count (30 bits) never overflows.
pub const MAX_SLOTS: usize = (1 << 30) - 1;
/// `state[slot]`: set when the block is a tombstone (its SWA KV freed).
pub const TOMBSTONE: u32 = 1 << 31;
/// `state[slot]`: set while a removal is being checked.
const MARK: u32 = 1 << 30;
const CHILDREN: u32 = MARK - 1;

/// One block as a value (for reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockView<'a> {
    pub block_hash: i64,
    pub parent: Option<i64>,
    pub token_ids: &'a [u32],
    pub swa_resident: bool,
}

/// The blocks of one source; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct BlockTable {
    pub(crate) block_size: Option<u32>,
    pub(crate) hashes: Vec<i64>,
    pub(crate) parents: Vec<u32>,
    pub(crate) state: Vec<u32>,
    pub(crate) tokens: Vec<u32>,
    pub(crate) free: Vec<u32>,
    pub(crate) index: SlotIndex,
    pub(crate) tombstones: u64,
    pub(crate) digest: StateDigest,
    /// Scratch space for the duplicate check of a multi-page store (kept to avoid allocating).
    pub(crate) scratch: Vec<i64>,
}

impl PartialEq for BlockTable {
    fn eq(&self, other: &Self) -> bool {
        self.block_size == other.block_size
            && self.hashes == other.hashes
            && self.parents == other.parents
            && self.state == other.state
            && self.tokens == other.tokens
            && self.free == other.free
            && self.index == other.index
            && self.tombstones == other.tombstones
            && self.digest == other.digest
    }
}

impl BlockTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Tokens per block (None until the first block arrives).
    pub fn block_size(&self) -> Option<u32> {
        self.block_size
    }

    /// Blocks held as tombstones.
    pub fn tombstone_count(&self) -> u64 {
        self.tombstones
    }

    /// The digest of the blocks held.
    pub fn digest(&self) -> StateDigest {
        self.digest
    }

    /// Bytes of memory the arrays and the index hold (capacity, not length).
    pub fn heap_bytes(&self) -> usize {
        self.hashes.capacity() * 8
            + (self.parents.capacity() + self.state.capacity() + self.tokens.capacity()) * 4
            + self.free.capacity() * 4
            + self.index.heap_bytes()
    }

    /// The slot holding `block_hash`.
    #[inline]
    pub fn slot_of(&self, block_hash: i64) -> Option<u32> {
        let hashes = &self.hashes;
        self.index.get(block_hash, |slot| hashes[slot as usize])
    }

    /// True: held and SWA-resident; false: held as a tombstone; None: not held.
    #[inline]
    pub fn residency(&self, block_hash: i64) -> Option<bool> {
        self.slot_of(block_hash)
            .map(|slot| self.state[slot as usize] & TOMBSTONE == 0)
    }

    fn parent_hash(&self, slot: u32) -> Option<i64> {
        match self.parents[slot as usize] {
            NO_PARENT => None,
            parent => Some(self.hashes[parent as usize]),
        }
    }

    fn view(&self, slot: u32) -> BlockView<'_> {
        let size = self.block_size.unwrap_or(0) as usize;
        let start = slot as usize * size;
        BlockView {
            block_hash: self.hashes[slot as usize],
            parent: self.parent_hash(slot),
            token_ids: &self.tokens[start..start + size],
            swa_resident: self.state[slot as usize] & TOMBSTONE == 0,
        }
    }

    /// The block `block_hash`, or None when not held.
    pub fn block(&self, block_hash: i64) -> Option<BlockView<'_>> {
        self.slot_of(block_hash).map(|slot| self.view(slot))
    }

    /// Every block held, in slot order.
    pub fn blocks(&self) -> impl Iterator<Item = BlockView<'_>> + '_ {
        (0..self.parents.len() as u32)
            .filter(|&slot| self.parents[slot as usize] != FREE)
            .map(|slot| self.view(slot))
    }

    /// Drop every block.
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    // --- stores ---------------------------------------------------------------------------

    /// Store the chained pages `hashes` under `parent`; `meta_page_size` is the source's
    /// `meta.page_size` when known.
    pub fn store(
        &mut self,
        hashes: &[i64],
        parent: Option<i64>,
        tokens: &[u32],
        block_size: u32,
        meta_page_size: Option<u32>,
    ) -> Result<(), String> {
        if block_size == 0 {
            return Err("BlockStored has block_size 0".to_owned());
        }
        if hashes.is_empty() {
            return Err("BlockStored names no block".to_owned());
        }
        if tokens.len() as u64 != u64::from(block_size) * hashes.len() as u64 {
            return Err(format!(
                "BlockStored has {} token ids for {} block(s) of size {block_size}",
                tokens.len(),
                hashes.len()
            ));
        }
        match (self.block_size, meta_page_size) {
            (None, Some(page_size)) if page_size != block_size => {
                return Err(format!(
                    "block_size {block_size} differs from meta.page_size {page_size}"
                ));
            }
            (Some(earlier), _) if earlier != block_size => {
                return Err(format!(
                    "block_size {block_size} differs from earlier {earlier}"
                ));
            }
            _ => {}
        }
        let parent_slot = match parent {
            None => NO_PARENT,
            Some(parent) => self
                .slot_of(parent)
                .ok_or_else(|| format!("BlockStored names unknown parent block {parent}"))?,
        };
        for &block_hash in hashes {
            if self.slot_of(block_hash).is_some() {
                return Err(format!(
                    "BlockStored for block {block_hash}, which is already held"
                ));
            }
        }
        if hashes.len() > 1 && self.has_duplicates(hashes) {
            return Err("BlockStored names one block twice".to_owned());
        }
        let fresh = hashes.len().saturating_sub(self.free.len());
        if self.parents.len() + fresh > MAX_SLOTS {
            return Err(format!("a replica holds at most {MAX_SLOTS} blocks"));
        }
        // Checked: from here on nothing fails.
        self.block_size = Some(block_size);
        if parent_slot != NO_PARENT {
            self.state[parent_slot as usize] += 1;
        }
        self.index.reserve(hashes.len());
        let size = block_size as usize;
        let mut previous = parent_slot;
        let mut previous_hash = parent;
        for (page, &block_hash) in hashes.iter().enumerate() {
            let children = u32::from(page + 1 < hashes.len());
            let page_tokens = &tokens[page * size..(page + 1) * size];
            let slot = self.new_slot(block_hash, previous, children, page_tokens);
            self.index.insert(block_hash, slot);
            self.digest.add(block_hash, previous_hash, true);
            previous = slot;
            previous_hash = Some(block_hash);
        }
        Ok(())
    }

    fn has_duplicates(&mut self, hashes: &[i64]) -> bool {
        self.scratch.clear();
        self.scratch.extend_from_slice(hashes);
        self.scratch.sort_unstable();
        self.scratch.windows(2).any(|pair| pair[0] == pair[1])
    }

    fn new_slot(&mut self, block_hash: i64, parent: u32, children: u32, tokens: &[u32]) -> u32 {
        if let Some(slot) = self.free.pop() {
            let at = slot as usize;
            self.hashes[at] = block_hash;
            self.parents[at] = parent;
            self.state[at] = children;
            self.tokens[at * tokens.len()..(at + 1) * tokens.len()].copy_from_slice(tokens);
            return slot;
        }
        let slot = self.parents.len() as u32;
        self.hashes.push(block_hash);
        self.parents.push(parent);
        self.state.push(children);
        self.tokens.extend_from_slice(tokens);
        slot
    }

    // --- removals -------------------------------------------------------------------------

    /// Remove the blocks `hashes` (one node's pages).
    pub fn remove(&mut self, hashes: &[i64]) -> Result<(), String> {
        let mut slots = Vec::with_capacity(hashes.len());
        // Mark each block as it is found; a block named twice is unknown the second time.
        for &block_hash in hashes {
            match self.slot_of(block_hash) {
                Some(slot) if self.state[slot as usize] & MARK == 0 => {
                    self.state[slot as usize] |= MARK;
                    slots.push(slot);
                }
                _ => {
                    self.unmark(&slots);
                    return Err(format!("BlockRemoved names unknown block {block_hash}"));
                }
            }
        }
        // Children removed with their parent do not count against it.
        self.uncount_marked_children(&slots, true);
        if let Some(position) = slots
            .iter()
            .position(|&slot| self.state[slot as usize] & CHILDREN != 0)
        {
            self.uncount_marked_children(&slots, false);
            self.unmark(&slots);
            return Err(format!(
                "BlockRemoved for block {}, which still has children",
                hashes[position]
            ));
        }
        for &slot in &slots {
            let at = slot as usize;
            let block_hash = self.hashes[at];
            let parent = self.parents[at];
            let resident = self.state[at] & TOMBSTONE == 0;
            self.digest
                .remove(block_hash, self.parent_hash(slot), resident);
            if parent != NO_PARENT && self.state[parent as usize] & MARK == 0 {
                self.state[parent as usize] -= 1;
            }
            self.tombstones -= u64::from(!resident);
        }
        for &slot in &slots {
            let hashes = &self.hashes;
            self.index
                .remove(hashes[slot as usize], |s| hashes[s as usize]);
            self.parents[slot as usize] = FREE;
            self.state[slot as usize] = 0;
            self.free.push(slot);
        }
        Ok(())
    }

    fn unmark(&mut self, slots: &[u32]) {
        for &slot in slots {
            self.state[slot as usize] &= !MARK;
        }
    }

    /// Subtract (`undo`: add back) one child from every marked parent of a marked block.
    fn uncount_marked_children(&mut self, slots: &[u32], subtract: bool) {
        for &slot in slots {
            let parent = self.parents[slot as usize];
            if parent != NO_PARENT && self.state[parent as usize] & MARK != 0 {
                let state = &mut self.state[parent as usize];
                *state = if subtract { *state - 1 } else { *state + 1 };
            }
        }
    }

    // --- residency ------------------------------------------------------------------------

    /// Tombstone (`resident` false) or restore the blocks `hashes`; a block already in that
    /// state is left alone.
    pub fn set_residency(&mut self, hashes: &[i64], resident: bool) -> Result<(), String> {
        let kind = if resident {
            "BlockSWARestored"
        } else {
            "BlockSWAEvicted"
        };
        let mut slots = Vec::with_capacity(hashes.len());
        for &block_hash in hashes {
            let slot = self
                .slot_of(block_hash)
                .ok_or_else(|| format!("{kind} names unknown block {block_hash}"))?;
            slots.push(slot);
        }
        for slot in slots {
            let at = slot as usize;
            if (self.state[at] & TOMBSTONE == 0) == resident {
                continue;
            }
            self.state[at] ^= TOMBSTONE;
            self.digest
                .set_residency(self.hashes[at], self.parent_hash(slot), resident);
            if resident {
                self.tombstones -= 1;
            } else {
                self.tombstones += 1;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(table: &mut BlockTable, hashes: &[i64], parent: Option<i64>) -> Result<(), String> {
        let tokens: Vec<u32> = hashes.iter().map(|&h| h as u32).collect();
        table.store(hashes, parent, &tokens, 1, None)
    }

    #[test]
    fn a_chain_is_held_with_parents_tokens_and_digest() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2, 3], None).unwrap();
        stored(&mut table, &[4], Some(2)).unwrap();
        assert_eq!(table.len(), 4);
        let block = table.block(4).unwrap();
        assert_eq!(block.parent, Some(2));
        assert_eq!(block.token_ids, &[4]);
        let mut expected = StateDigest::default();
        expected.add(1, None, true);
        expected.add(2, Some(1), true);
        expected.add(3, Some(2), true);
        expected.add(4, Some(2), true);
        assert_eq!(table.digest(), expected);
    }

    #[test]
    fn inconsistent_stores_are_refused_and_change_nothing() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2], None).unwrap();
        let before = table.clone();
        let cases: [(&[i64], Option<i64>, &str); 4] = [
            (&[5], Some(9), "BlockStored names unknown parent block 9"),
            (
                &[5, 2],
                Some(1),
                "BlockStored for block 2, which is already held",
            ),
            (&[5, 6, 5], Some(1), "BlockStored names one block twice"),
            (&[1], None, "BlockStored for block 1, which is already held"),
        ];
        for (hashes, parent, reason) in cases {
            assert_eq!(stored(&mut table, hashes, parent).unwrap_err(), reason);
            assert_eq!(table, before);
        }
        let err = table.store(&[7], None, &[1, 2], 2, None).unwrap_err();
        assert_eq!(err, "block_size 2 differs from earlier 1");
        let mut fresh = BlockTable::new();
        let err = fresh.store(&[7], None, &[1, 2], 2, Some(4)).unwrap_err();
        assert_eq!(err, "block_size 2 differs from meta.page_size 4");
        assert_eq!(fresh.block_size(), None);
    }

    #[test]
    fn removal_checks_children_counting_those_removed_with_it() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2, 3], None).unwrap();
        stored(&mut table, &[4], Some(2)).unwrap();
        let before = table.clone();
        assert_eq!(
            table.remove(&[2, 3]).unwrap_err(),
            "BlockRemoved for block 2, which still has children"
        );
        assert_eq!(table, before);
        assert_eq!(
            table.remove(&[3, 3]).unwrap_err(),
            "BlockRemoved names unknown block 3"
        );
        assert_eq!(table, before);
        table.remove(&[4]).unwrap();
        table.remove(&[2, 3]).unwrap();
        assert_eq!(table.len(), 1);
        let mut expected = StateDigest::default();
        expected.add(1, None, true);
        assert_eq!(table.digest(), expected);
        // freed slots are reused
        stored(&mut table, &[8, 9], Some(1)).unwrap();
        assert_eq!(table.parents.len(), 4);
        assert_eq!(table.block(9).unwrap().parent, Some(8));
    }

    #[test]
    fn residency_flips_once_and_unknown_blocks_change_nothing() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2], None).unwrap();
        table.set_residency(&[2, 2], false).unwrap();
        assert_eq!(table.tombstone_count(), 1);
        assert_eq!(table.residency(2), Some(false));
        let before = table.clone();
        assert_eq!(
            table.set_residency(&[1, 5], false).unwrap_err(),
            "BlockSWAEvicted names unknown block 5"
        );
        assert_eq!(table, before);
        table.set_residency(&[2], true).unwrap();
        let mut expected = StateDigest::default();
        expected.add(1, None, true);
        expected.add(2, Some(1), true);
        assert_eq!(table.digest(), expected);
        assert_eq!(table.tombstone_count(), 0);
    }

    #[test]
    fn removing_a_tombstone_updates_the_count_and_digest() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2], None).unwrap();
        table.set_residency(&[2], false).unwrap();
        table.remove(&[2]).unwrap();
        assert_eq!(table.tombstone_count(), 0);
        let mut expected = StateDigest::default();
        expected.add(1, None, true);
        assert_eq!(table.digest(), expected);
    }
}
