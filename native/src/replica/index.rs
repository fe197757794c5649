//! `SlotIndex`: block hash -> slot of one source's block table.
//!
//! An `OrderedTable` of u64 buckets, `(top 32 bits of the mixed hash) << 32 | (slot + 1)`, 0
//! meaning empty (see `super::ordered` for the layout and why a miss is cheap). The stored top
//! bits let a probe skip a non-matching bucket without touching the block table, so a lookup of
//! a hash that is not held (the common case when a block is stored) reads the index only. At a
//! load between 0.53 and 4/5 a block costs 10 to 15 bytes of index. The layout is plain data,
//! so a snapshot copies the buckets as they are (`from_parts` checks them back).

pub use super::ordered::mixed_top;
use super::ordered::{Bucket, OrderedTable};

impl Bucket for u64 {
    #[inline]
    fn top(&self) -> u32 {
        (*self >> 32) as u32
    }

    #[inline]
    fn is_empty(&self) -> bool {
        *self == 0
    }
}

#[inline]
fn slot_of(entry: u64) -> u32 {
    (entry as u32).wrapping_sub(1)
}

/// A map from block hash to slot (`u32`). The caller owns the hashes: lookups take a closure
/// that reads a slot's hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SlotIndex {
    table: OrderedTable<u64>,
}

impl SlotIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self::default()
    }

    /// An index of the given raw parts (from a snapshot); None when they do not fit together.
    pub fn from_parts(homes: usize, entries: Vec<u64>) -> Option<Self> {
        OrderedTable::from_parts(homes, entries).map(|table| Self { table })
    }

    /// `from_parts`, also asking `slot_ok` of every indexed slot in the same pass (None when it
    /// refuses one); `slot_ok` is asked of empty buckets too, whose answer is ignored.
    pub fn from_parts_checked(
        homes: usize,
        entries: Vec<u64>,
        slot_ok: impl Fn(u32) -> bool,
    ) -> Option<Self> {
        OrderedTable::from_parts_with(homes, entries, |&entry| slot_ok(slot_of(entry)))
            .map(|table| Self { table })
    }

    /// How many buckets are homes (for snapshots).
    pub fn homes(&self) -> usize {
        self.table.homes()
    }

    /// The raw entries (for snapshots).
    pub fn entries(&self) -> &[u64] {
        self.table.buckets()
    }

    /// How many hashes are indexed.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Bytes held by the entries.
    pub fn heap_bytes(&self) -> usize {
        self.table.heap_bytes()
    }

    /// Hint that `block_hash` will be looked up soon (see `super::prefetch`).
    #[inline]
    pub fn prefetch(&self, block_hash: i64) {
        self.table.prefetch(mixed_top(block_hash));
    }

    /// The slot of the first entry whose check bits are `block_hash`'s, without reading the
    /// block table (most likely `block_hash`'s own slot; for prefetching its record).
    #[inline]
    pub fn likely_slot(&self, block_hash: i64) -> Option<u32> {
        self.table
            .find(mixed_top(block_hash), |_| true)
            .map(|at| slot_of(*self.table.at(at)))
    }

    /// The slot of `block_hash`, reading slots' hashes through `hash_of`.
    #[inline]
    pub fn get(&self, block_hash: i64, hash_of: impl Fn(u32) -> i64) -> Option<u32> {
        self.table
            .find(mixed_top(block_hash), |&e| {
                hash_of(slot_of(e)) == block_hash
            })
            .map(|at| slot_of(*self.table.at(at)))
    }

    /// `Ok(slot)` of `block_hash`, or `Err(position)` to give `insert_at` when it is absent and
    /// the index has room for one more (`Err(None)`: no room; use `insert`).
    #[inline]
    pub fn search(
        &self,
        block_hash: i64,
        hash_of: impl Fn(u32) -> i64,
    ) -> Result<u32, Option<usize>> {
        match self.table.search(mixed_top(block_hash), |&e| {
            hash_of(slot_of(e)) == block_hash
        }) {
            Ok(at) => Ok(slot_of(*self.table.at(at))),
            Err(at) => Err(self.table.has_room().then_some(at)),
        }
    }

    /// Index `block_hash` at `slot`, at the position `search` gave (the index unchanged since).
    #[inline]
    pub fn insert_at(&mut self, at: usize, block_hash: i64, slot: u32) {
        self.table.insert_at(
            at,
            (u64::from(mixed_top(block_hash)) << 32) | u64::from(slot + 1),
        );
    }

    /// Index `block_hash` at `slot`; the caller has checked that it is not indexed yet.
    #[inline]
    pub fn insert(&mut self, block_hash: i64, slot: u32) {
        self.table
            .insert((u64::from(mixed_top(block_hash)) << 32) | u64::from(slot + 1));
    }

    /// Make room for `additional` more hashes at once (one rebuild instead of several).
    pub fn reserve(&mut self, additional: usize) {
        self.table.reserve(additional);
    }

    /// Drop `block_hash`; returns its slot, or None when it was not indexed.
    pub fn remove(&mut self, block_hash: i64, hash_of: impl Fn(u32) -> i64) -> Option<u32> {
        let at = self.table.find(mixed_top(block_hash), |&e| {
            hash_of(slot_of(e)) == block_hash
        })?;
        let slot = slot_of(*self.table.at(at));
        self.table.remove_at(at);
        Some(slot)
    }

    /// Forget everything (and give back the memory).
    pub fn clear(&mut self) {
        self.table.clear();
    }

    /// Every indexed slot, in no particular order.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.table
            .buckets()
            .iter()
            .filter(|&&e| e != 0)
            .map(|&e| slot_of(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::ordered::tests::hash_with_top;
    use std::collections::HashMap;

    /// A tiny deterministic generator for the tests (splitmix64).
    fn rng(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::digest::mix64(*seed)
    }

    fn check_invariants(index: &SlotIndex) {
        let rebuilt = SlotIndex::from_parts(index.homes(), index.entries().to_vec());
        assert_eq!(rebuilt.as_ref(), Some(index), "invariants broken");
    }

    #[test]
    fn insert_get_remove_agree_with_a_hash_map() {
        let mut seed = 7;
        let mut hashes: Vec<i64> = Vec::new();
        let mut index = SlotIndex::new();
        let mut model: HashMap<i64, u32> = HashMap::new();
        for step in 0..20_000 {
            let roll = rng(&mut seed) % 10;
            if roll < 6 || model.is_empty() {
                // small values collide in their top bits more than real hashes do
                let h = if step % 3 == 0 {
                    (rng(&mut seed) % 64) as i64
                } else {
                    rng(&mut seed) as i64
                };
                if model.contains_key(&h) {
                    assert!(index.get(h, |s| hashes[s as usize]).is_some());
                    continue;
                }
                assert_eq!(index.get(h, |s| hashes[s as usize]), None);
                let slot = hashes.len() as u32;
                hashes.push(h);
                index.insert(h, slot);
                model.insert(h, slot);
            } else {
                let &h = model.keys().next().unwrap();
                assert_eq!(index.remove(h, |s| hashes[s as usize]), model.remove(&h));
                assert_eq!(index.remove(h, |s| hashes[s as usize]), None);
            }
            if step % 997 == 0 {
                for (&h, &slot) in &model {
                    assert_eq!(index.get(h, |s| hashes[s as usize]), Some(slot));
                }
                assert_eq!(index.len(), model.len());
                check_invariants(&index);
            }
        }
        for (&h, &slot) in &model {
            assert_eq!(index.get(h, |s| hashes[s as usize]), Some(slot));
        }
        check_invariants(&index);
        let mut slots: Vec<u32> = index.slots().collect();
        slots.sort_unstable();
        let mut expected: Vec<u32> = model.values().copied().collect();
        expected.sort_unstable();
        assert_eq!(slots, expected);
    }

    #[test]
    fn equal_top_bits_and_runs_at_the_end_are_handled() {
        // ten hashes sharing one top, and a run of homes at the very end of the table
        let mut hashes: Vec<i64> = (0..10).map(|low| hash_with_top(12345, low)).collect();
        hashes.extend((0..10).map(|low| hash_with_top(u32::MAX - low, low)));
        let mut index = SlotIndex::new();
        for (slot, &h) in hashes.iter().enumerate() {
            index.insert(h, slot as u32);
            check_invariants(&index);
        }
        for (slot, &h) in hashes.iter().enumerate() {
            assert_eq!(index.get(h, |s| hashes[s as usize]), Some(slot as u32));
        }
        assert_eq!(
            index.get(hash_with_top(12345, 99), |s| hashes[s as usize]),
            None
        );
        for &h in hashes
            .iter()
            .rev()
            .step_by(2)
            .chain(hashes.iter().step_by(2))
        {
            assert!(index.remove(h, |s| hashes[s as usize]).is_some());
            check_invariants(&index);
        }
        assert!(index.is_empty());
    }

    #[test]
    fn the_load_stays_at_most_four_fifths() {
        let hashes: Vec<i64> = (0..10_000).map(|i| i * 7919).collect();
        let mut index = SlotIndex::new();
        for (slot, &h) in hashes.iter().enumerate() {
            index.insert(h, slot as u32);
            assert!(index.len() * 5 <= index.homes() * 4);
        }
        check_invariants(&index);
    }

    #[test]
    fn from_parts_refuses_bad_capacities_overfull_tables_and_disorder() {
        assert!(SlotIndex::from_parts(8, vec![0; 8 + 40]).is_none());
        assert!(SlotIndex::from_parts(16, vec![0; 16]).is_none());
        assert!(SlotIndex::from_parts(16, vec![1; 16 + 32]).is_none());
        let index = SlotIndex::from_parts(32, vec![0; 32 + 32]).unwrap();
        assert!(index.is_empty());
        // two entries out of order, and one far from its home after a gap
        let mut entries = vec![0u64; 16 + 32];
        entries[3] = (u64::from(u32::MAX / 16 * 3 + 100) << 32) | 1;
        entries[4] = (u64::from(u32::MAX / 16 * 3 + 10) << 32) | 2;
        assert!(SlotIndex::from_parts(16, entries.clone()).is_none());
        entries[4] = 0;
        entries[9] = (u64::from(u32::MAX / 16 * 3 + 10) << 32) | 2;
        assert!(SlotIndex::from_parts(16, entries).is_none());
    }
}
