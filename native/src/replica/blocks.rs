//! `BlockTable`: the blocks one source holds, one 16-byte record per slot.
//!
//! Per block: a record of its hash (8 bytes), its parent's slot (4) and its child count with the
//! tombstone flag in the top bit (4), one index entry (8 / load, 10 to 15 bytes) and, in a table
//! that keeps token ids, its page's token ids (4 per token, in a separate array): 26 to 31 bytes
//! without token ids, 30 to 35 with them at page size 1. Only the stream out reads token ids (the
//! digest and prefix matching read hashes), so a table keeps them only when asked
//! (`BlockTable::keeping_tokens`); one that keeps none still checks each store's token count
//! exactly as one that keeps them. The record keeps
//! what one lookup needs in one cache line: an index hit is checked against the hash, and the
//! residency or parent read right after is already loaded. A parent is named by slot, not hash: a
//! block with children cannot be removed, so a child's parent slot stays valid for the child's
//! whole life. Freed slots are reused.
//!
//! Every change is checked before anything is written, so an event that does not fit (unknown
//! parent or block, a block stored twice, removing a block that still has children, a block size
//! that differs from the meta's or the earlier one) leaves the table as it was and returns the
//! reason, worded as the Python reference words it.

use super::error::Inconsistency;
use super::index::{mixed_top, SlotIndex};
use super::prefetch::prefetch;
use crate::digest::StateDigest;
use crate::events::{page_tokens, tokens_fit};

/// `Block::parent` of a block at the root.
pub const NO_PARENT: u32 = u32::MAX;
/// `Block::parent` of a free slot.
pub const FREE: u32 = u32::MAX - 1;
/// The most blocks one table holds: a child count (30 bits) never overflows.
pub const MAX_SLOTS: usize = (1 << 30) - 1;
/// `Block::state`: set when the block is a tombstone (its SWA KV freed).
pub const TOMBSTONE: u32 = 1 << 31;
/// `Block::state`: set while a removal is being checked.
const MARK: u32 = 1 << 30;
const CHILDREN: u32 = MARK - 1;
/// How many pages of a multi-page store the duplicate check prefetches ahead.
const PREFETCH_PAGES: usize = 16;

/// One slot of a table.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Block {
    pub hash: i64,
    /// The parent's slot, `NO_PARENT` at the root, `FREE` for a free slot.
    pub parent: u32,
    /// Child count, with `TOMBSTONE` (and `MARK` while a removal is checked).
    pub state: u32,
}

/// One block as a value (for reads).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockView<'a> {
    pub block_hash: i64,
    pub parent: Option<i64>,
    /// The page's token ids; None when the table keeps none.
    pub token_ids: Option<&'a [u32]>,
    pub swa_resident: bool,
}

/// The blocks of one source; see the module docs.
#[derive(Clone, Debug)]
pub struct BlockTable {
    pub(crate) block_size: Option<u32>,
    pub(crate) blocks: Vec<Block>,
    /// Whether `tokens` holds each slot's token ids (else it stays empty).
    pub(crate) keep_tokens: bool,
    pub(crate) tokens: Vec<u32>,
    pub(crate) free: Vec<u32>,
    pub(crate) index: SlotIndex,
    pub(crate) tombstones: u64,
    pub(crate) digest: StateDigest,
    /// Scratch space for the duplicate check of a multi-page store (kept to avoid allocating).
    pub(crate) scratch: Vec<i64>,
    /// Scratch space for the slots a removal or residency change names.
    pub(crate) slots: Vec<u32>,
}

impl PartialEq for BlockTable {
    fn eq(&self, other: &Self) -> bool {
        self.block_size == other.block_size
            && self.blocks == other.blocks
            && self.keep_tokens == other.keep_tokens
            && self.tokens == other.tokens
            && self.free == other.free
            && self.index == other.index
            && self.tombstones == other.tombstones
            && self.digest == other.digest
    }
}

impl Default for BlockTable {
    fn default() -> Self {
        Self::keeping_tokens(true)
    }
}

impl BlockTable {
    /// An empty table that keeps token ids.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty table that keeps each block's token ids when `keep_tokens`, else none.
    pub fn keeping_tokens(keep_tokens: bool) -> Self {
        Self {
            block_size: None,
            blocks: Vec::new(),
            keep_tokens,
            tokens: Vec::new(),
            free: Vec::new(),
            index: SlotIndex::default(),
            tombstones: 0,
            digest: StateDigest::default(),
            scratch: Vec::new(),
            slots: Vec::new(),
        }
    }

    /// Whether the table keeps each block's token ids.
    pub fn keeps_tokens(&self) -> bool {
        self.keep_tokens
    }

    /// Keep no token ids from now on, dropping those held.
    pub fn drop_tokens(&mut self) {
        self.keep_tokens = false;
        self.tokens = Vec::new();
    }

    /// Blocks held.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether no block is held.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Slots in use or free (the length of the record array).
    pub fn slot_count(&self) -> usize {
        self.blocks.len()
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
        self.blocks.capacity() * std::mem::size_of::<Block>()
            + (self.tokens.capacity() + self.free.capacity()) * 4
            + self.index.heap_bytes()
    }

    /// Hint that `block_hash` will be looked up soon: its index bucket (see `super::prefetch`).
    #[inline]
    pub fn prefetch(&self, block_hash: i64) {
        self.index.prefetch(block_hash);
    }

    /// Hint that the record of `block_hash` will be read soon: finds its likely slot in the
    /// index now (call it after `prefetch` had time to load the bucket; the record itself is not
    /// read, so this never waits for it) and prefetches the record.
    #[inline]
    pub fn prefetch_block(&self, block_hash: i64) {
        if let Some(slot) = self.index.likely_slot(block_hash) {
            if let Some(block) = self.blocks.get(slot as usize) {
                prefetch(block);
            }
        }
    }

    /// The slot holding `block_hash`.
    #[inline]
    pub fn slot_of(&self, block_hash: i64) -> Option<u32> {
        let blocks = &self.blocks;
        self.index
            .get(block_hash, |slot| blocks[slot as usize].hash)
    }

    /// True: held and SWA-resident; false: held as a tombstone; None: not held.
    #[inline]
    pub fn residency(&self, block_hash: i64) -> Option<bool> {
        self.slot_of(block_hash)
            .map(|slot| self.blocks[slot as usize].state & TOMBSTONE == 0)
    }

    #[inline]
    fn parent_hash(&self, slot: u32) -> Option<i64> {
        match self.blocks[slot as usize].parent {
            NO_PARENT => None,
            parent => Some(self.blocks[parent as usize].hash),
        }
    }

    fn view(&self, slot: u32) -> BlockView<'_> {
        let size = self.block_size.unwrap_or(0) as usize;
        let start = slot as usize * size;
        let block = &self.blocks[slot as usize];
        BlockView {
            block_hash: block.hash,
            parent: self.parent_hash(slot),
            token_ids: self.keep_tokens.then(|| &self.tokens[start..start + size]),
            swa_resident: block.state & TOMBSTONE == 0,
        }
    }

    /// The block `block_hash`, or None when not held.
    pub fn block(&self, block_hash: i64) -> Option<BlockView<'_>> {
        self.slot_of(block_hash).map(|slot| self.view(slot))
    }

    /// Every block held, in slot order.
    pub fn blocks(&self) -> impl Iterator<Item = BlockView<'_>> + '_ {
        (0..self.blocks.len() as u32)
            .filter(|&slot| self.blocks[slot as usize].parent != FREE)
            .map(|slot| self.view(slot))
    }

    /// Every held block's (hash, SWA-resident), in slot order (cheaper than `blocks`).
    pub fn hashes(&self) -> impl Iterator<Item = (i64, bool)> + '_ {
        self.blocks
            .iter()
            .filter(|block| block.parent != FREE)
            .map(|block| (block.hash, block.state & TOMBSTONE == 0))
    }

    /// Every held block's (check bits, hash, SWA-resident), in order of check bits then hash
    /// (read in the index's order, which is already by check bits).
    pub fn by_check_bits(&self) -> Vec<(u32, i64, bool)> {
        let slots: Vec<u32> = self.index.slots().collect();
        let mut out = Vec::with_capacity(slots.len());
        for (at, &slot) in slots.iter().enumerate() {
            if let Some(&ahead) = slots.get(at + 16) {
                prefetch(&self.blocks[ahead as usize]);
            }
            let block = &self.blocks[slot as usize];
            out.push((
                mixed_top(block.hash),
                block.hash,
                block.state & TOMBSTONE == 0,
            ));
        }
        // equal check bits are rare; order their run by hash
        let mut start = 0;
        while start < out.len() {
            let mut end = start + 1;
            while end < out.len() && out[end].0 == out[start].0 {
                end += 1;
            }
            if end - start > 1 {
                out[start..end].sort_unstable();
            }
            start = end;
        }
        out
    }

    /// Drop every block (the table still keeps token ids, or not, as before).
    pub fn clear(&mut self) {
        *self = Self::keeping_tokens(self.keep_tokens);
    }

    // --- stores ---------------------------------------------------------------------------

    /// Store the chained pages `hashes` under `parent`; `meta_page_size` is the source's
    /// `meta.page_size` when known. `tokens` are `block_size` a page, or none (the writer
    /// withheld them), which a table that keeps token ids refuses.
    pub fn store(
        &mut self,
        hashes: &[i64],
        parent: Option<i64>,
        tokens: &[u32],
        block_size: u32,
        meta_page_size: Option<u32>,
    ) -> Result<(), Inconsistency> {
        if block_size == 0 {
            return Err(Inconsistency::ZeroBlockSize);
        }
        if hashes.is_empty() {
            return Err(Inconsistency::NoBlock);
        }
        if !tokens_fit(tokens.len(), hashes.len(), u128::from(block_size)) {
            return Err(Inconsistency::TokenCount {
                tokens: tokens.len(),
                pages: hashes.len(),
                block_size,
            });
        }
        if tokens.is_empty() && self.keep_tokens {
            return Err(Inconsistency::TokenIdsWithheld { block: hashes[0] });
        }
        match (self.block_size, meta_page_size) {
            (None, Some(page_size)) if page_size != block_size => {
                return Err(Inconsistency::DiffersFromMeta {
                    block_size,
                    medium: None,
                    page_size,
                });
            }
            (Some(earlier), _) if earlier != block_size => {
                return Err(Inconsistency::DiffersFromEarlier {
                    block_size,
                    medium: None,
                    earlier,
                });
            }
            _ => {}
        }
        let parent_slot = match parent {
            None => NO_PARENT,
            Some(parent) => self
                .slot_of(parent)
                .ok_or(Inconsistency::UnknownParent(parent))?,
        };
        // Every page is (almost always) new, so every lookup misses the cache: prefetch a few
        // pages ahead so those misses overlap; the insertions below then find the lines loaded.
        for &block_hash in hashes.iter().take(PREFETCH_PAGES) {
            self.index.prefetch(block_hash);
        }
        // Where a one-page store goes in the index (it stays valid: nothing changes the index
        // before the insertion), so its insertion does not probe again.
        let mut position = None;
        for (page, &block_hash) in hashes.iter().enumerate() {
            if let Some(&ahead) = hashes.get(page + PREFETCH_PAGES) {
                self.index.prefetch(ahead);
            }
            let held = &self.blocks;
            match self
                .index
                .search(block_hash, |slot| held[slot as usize].hash)
            {
                Ok(_) => {
                    return Err(Inconsistency::AlreadyHeld {
                        block: block_hash,
                        medium: None,
                    })
                }
                Err(at) => position = at.filter(|_| hashes.len() == 1),
            }
        }
        if has_duplicates(hashes, &mut self.scratch) {
            return Err(Inconsistency::Duplicate);
        }
        let fresh = hashes.len().saturating_sub(self.free.len());
        if self.blocks.len() + fresh > MAX_SLOTS {
            return Err(Inconsistency::Full { limit: MAX_SLOTS });
        }
        // Checked: from here on nothing fails.
        self.block_size = Some(block_size);
        if parent_slot != NO_PARENT {
            self.blocks[parent_slot as usize].state += 1;
        }
        self.index.reserve(hashes.len());
        let mut previous = parent_slot;
        let mut previous_hash = parent;
        let pages = page_tokens(tokens, block_size, hashes.len());
        for ((page, &block_hash), page_tokens) in hashes.iter().enumerate().zip(pages) {
            let children = u32::from(page + 1 < hashes.len());
            let slot = self.new_slot(block_hash, previous, children, page_tokens);
            match position.take() {
                Some(at) => self.index.insert_at(at, block_hash, slot),
                None => self.index.insert(block_hash, slot),
            }
            self.digest.add(block_hash, previous_hash, true);
            previous = slot;
            previous_hash = Some(block_hash);
        }
        Ok(())
    }

    fn new_slot(&mut self, hash: i64, parent: u32, children: u32, tokens: &[u32]) -> u32 {
        let block = Block {
            hash,
            parent,
            state: children,
        };
        if let Some(slot) = self.free.pop() {
            let at = slot as usize;
            self.blocks[at] = block;
            if !self.keep_tokens {
                return slot;
            }
            match tokens {
                // page size 1: one store, not a memcpy call
                &[token] => self.tokens[at] = token,
                _ => {
                    self.tokens[at * tokens.len()..(at + 1) * tokens.len()].copy_from_slice(tokens)
                }
            }
            return slot;
        }
        let slot = self.blocks.len() as u32;
        self.blocks.push(block);
        if !self.keep_tokens {
            return slot;
        }
        match tokens {
            &[token] => self.tokens.push(token),
            _ => self.tokens.extend_from_slice(tokens),
        }
        slot
    }

    // --- removals -------------------------------------------------------------------------

    /// Remove the blocks `hashes` (one node's pages).
    pub fn remove(&mut self, hashes: &[i64]) -> Result<(), Inconsistency> {
        let mut slots = std::mem::take(&mut self.slots);
        let result = self.remove_with(hashes, &mut slots);
        slots.clear();
        self.slots = slots;
        result
    }

    fn remove_with(&mut self, hashes: &[i64], slots: &mut Vec<u32>) -> Result<(), Inconsistency> {
        slots.clear();
        // Mark each block as it is found; a block named twice is unknown the second time.
        for &block_hash in hashes {
            match self.slot_of(block_hash) {
                Some(slot) if self.blocks[slot as usize].state & MARK == 0 => {
                    self.blocks[slot as usize].state |= MARK;
                    slots.push(slot);
                }
                _ => {
                    self.unmark(slots);
                    return Err(Inconsistency::UnknownBlock {
                        event: "BlockRemoved",
                        block: block_hash,
                        medium: None,
                    });
                }
            }
        }
        // Children removed with their parent do not count against it.
        self.uncount_marked_children(slots, true);
        if let Some(position) = slots
            .iter()
            .position(|&slot| self.blocks[slot as usize].state & CHILDREN != 0)
        {
            self.uncount_marked_children(slots, false);
            self.unmark(slots);
            return Err(Inconsistency::HasChildren(hashes[position]));
        }
        for &slot in slots.iter() {
            let block = self.blocks[slot as usize];
            let resident = block.state & TOMBSTONE == 0;
            self.digest
                .remove(block.hash, self.parent_hash(slot), resident);
            if block.parent != NO_PARENT && self.blocks[block.parent as usize].state & MARK == 0 {
                self.blocks[block.parent as usize].state -= 1;
            }
            self.tombstones -= u64::from(!resident);
        }
        for &slot in slots.iter() {
            let blocks = &self.blocks;
            self.index
                .remove(blocks[slot as usize].hash, |s| blocks[s as usize].hash);
            self.blocks[slot as usize] = Block {
                hash: 0,
                parent: FREE,
                state: 0,
            };
            self.free.push(slot);
        }
        Ok(())
    }

    fn unmark(&mut self, slots: &[u32]) {
        for &slot in slots {
            self.blocks[slot as usize].state &= !MARK;
        }
    }

    /// Subtract (`undo`: add back) one child from every marked parent of a marked block.
    fn uncount_marked_children(&mut self, slots: &[u32], subtract: bool) {
        for &slot in slots {
            let parent = self.blocks[slot as usize].parent;
            if parent != NO_PARENT && self.blocks[parent as usize].state & MARK != 0 {
                let state = &mut self.blocks[parent as usize].state;
                *state = if subtract { *state - 1 } else { *state + 1 };
            }
        }
    }

    // --- residency ------------------------------------------------------------------------

    /// Tombstone (`resident` false) or restore the blocks `hashes`; a block already in that
    /// state is left alone.
    pub fn set_residency(&mut self, hashes: &[i64], resident: bool) -> Result<(), Inconsistency> {
        let event = if resident {
            "BlockSWARestored"
        } else {
            "BlockSWAEvicted"
        };
        let mut slots = std::mem::take(&mut self.slots);
        slots.clear();
        for &block_hash in hashes {
            match self.slot_of(block_hash) {
                Some(slot) => slots.push(slot),
                None => {
                    self.slots = slots;
                    return Err(Inconsistency::UnknownBlock {
                        event,
                        block: block_hash,
                        medium: None,
                    });
                }
            }
        }
        for &slot in &slots {
            let at = slot as usize;
            if (self.blocks[at].state & TOMBSTONE == 0) == resident {
                continue;
            }
            self.blocks[at].state ^= TOMBSTONE;
            self.digest
                .set_residency(self.blocks[at].hash, self.parent_hash(slot), resident);
            if resident {
                self.tombstones -= 1;
            } else {
                self.tombstones += 1;
            }
        }
        self.slots = slots;
        Ok(())
    }
}

/// Whether `hashes` names one block twice (`scratch`: room to sort a long list in).
#[inline]
fn has_duplicates(hashes: &[i64], scratch: &mut Vec<i64>) -> bool {
    match hashes {
        [_] => false,
        [first, second] => first == second,
        _ if hashes.len() <= 16 => hashes
            .iter()
            .enumerate()
            .any(|(at, hash)| hashes[at + 1..].contains(hash)),
        _ => sorted_has_duplicates(hashes, scratch),
    }
}

#[cold]
fn sorted_has_duplicates(hashes: &[i64], scratch: &mut Vec<i64>) -> bool {
    scratch.clear();
    scratch.extend_from_slice(hashes);
    scratch.sort_unstable();
    scratch.windows(2).any(|pair| pair[0] == pair[1])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(
        table: &mut BlockTable,
        hashes: &[i64],
        parent: Option<i64>,
    ) -> Result<(), Inconsistency> {
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
        assert_eq!(block.token_ids, Some(&[4][..]));
        let mut expected = StateDigest::default();
        expected.add(1, None, true);
        expected.add(2, Some(1), true);
        expected.add(3, Some(2), true);
        expected.add(4, Some(2), true);
        assert_eq!(table.digest(), expected);
    }

    #[test]
    fn a_table_without_token_ids_holds_the_same_blocks_and_refuses_the_same_stores() {
        let mut kept = BlockTable::new();
        let mut bare = BlockTable::keeping_tokens(false);
        for table in [&mut kept, &mut bare] {
            table.store(&[1, 2], None, &[5, 6, 7, 8], 2, None).unwrap();
            table.store(&[3], Some(1), &[9, 9], 2, None).unwrap();
            table.remove(&[3]).unwrap();
            table.store(&[4], Some(2), &[1, 2], 2, None).unwrap(); // a reused slot
            table.set_residency(&[2], false).unwrap();
        }
        assert_eq!(bare.digest(), kept.digest());
        assert_eq!(
            bare.hashes().collect::<Vec<_>>(),
            kept.hashes().collect::<Vec<_>>()
        );
        assert_eq!(kept.block(4).unwrap().token_ids, Some(&[1, 2][..]));
        let block = bare.block(4).unwrap();
        assert_eq!((block.parent, block.token_ids), (Some(2), None));
        assert!(bare.tokens.is_empty() && bare.tokens.capacity() == 0);
        assert!(bare.heap_bytes() < kept.heap_bytes());
        let before = bare.clone();
        let err = bare.store(&[7], None, &[1], 2, None).unwrap_err();
        assert_eq!(err, kept.store(&[7], None, &[1], 2, None).unwrap_err());
        assert_eq!(
            err,
            Inconsistency::TokenCount {
                tokens: 1,
                pages: 1,
                block_size: 2
            }
        );
        assert_eq!(bare, before);
        bare.clear();
        assert!(!bare.keeps_tokens());
        kept.drop_tokens();
        assert_eq!(kept.block(4).unwrap().token_ids, None);
    }

    #[test]
    fn a_store_without_token_ids_fits_a_table_without_them_only() {
        let mut kept = BlockTable::new();
        let mut bare = BlockTable::keeping_tokens(false);
        let mut fed = BlockTable::keeping_tokens(false);
        fed.store(&[1, 2], None, &[5, 6, 7, 8], 2, Some(2)).unwrap();
        bare.store(&[1, 2], None, &[], 2, Some(2)).unwrap();
        assert_eq!(bare, fed);
        assert_eq!(bare.digest(), fed.digest());
        assert_eq!(bare.block(2).unwrap().parent, Some(1));
        let before = kept.clone();
        assert_eq!(
            kept.store(&[1, 2], None, &[], 2, Some(2)).unwrap_err(),
            Inconsistency::TokenIdsWithheld { block: 1 }
        );
        assert_eq!(kept, before);
        // a partial list stays a token count error, for either table
        for table in [&mut kept, &mut bare] {
            assert_eq!(
                table.store(&[3, 4], None, &[1, 2], 2, None).unwrap_err(),
                Inconsistency::TokenCount {
                    tokens: 2,
                    pages: 2,
                    block_size: 2
                }
            );
        }
    }

    #[test]
    fn inconsistent_stores_are_refused_and_change_nothing() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2], None).unwrap();
        let before = table.clone();
        let long: Vec<i64> = (10..30).chain([12]).collect();
        let cases: [(&[i64], Option<i64>, &str); 6] = [
            (&[5], Some(9), "BlockStored names unknown parent block 9"),
            (&[5, 5], Some(1), "BlockStored names one block twice"),
            (&long, None, "BlockStored names one block twice"),
            (
                &[5, 2],
                Some(1),
                "BlockStored for block 2, which is already held",
            ),
            (&[5, 6, 5], Some(1), "BlockStored names one block twice"),
            (&[1], None, "BlockStored for block 1, which is already held"),
        ];
        for (hashes, parent, reason) in cases {
            assert_eq!(
                stored(&mut table, hashes, parent).unwrap_err().to_string(),
                reason
            );
            assert_eq!(table, before);
        }
        let err = table.store(&[7], None, &[1, 2], 2, None).unwrap_err();
        assert_eq!(err.to_string(), "block_size 2 differs from earlier 1");
        let mut fresh = BlockTable::new();
        let err = fresh.store(&[7], None, &[1, 2], 2, Some(4)).unwrap_err();
        assert_eq!(
            err.to_string(),
            "block_size 2 differs from meta.page_size 4"
        );
        assert_eq!(fresh.block_size(), None);
    }

    #[test]
    fn removal_checks_children_counting_those_removed_with_it() {
        let mut table = BlockTable::new();
        stored(&mut table, &[1, 2, 3], None).unwrap();
        stored(&mut table, &[4], Some(2)).unwrap();
        let before = table.clone();
        assert_eq!(
            table.remove(&[2, 3]).unwrap_err().to_string(),
            "BlockRemoved for block 2, which still has children"
        );
        assert_eq!(table, before);
        assert_eq!(
            table.remove(&[3, 3]).unwrap_err().to_string(),
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
        assert_eq!(table.slot_count(), 4);
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
            table.set_residency(&[1, 5], false).unwrap_err().to_string(),
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
