//! `SlotIndex`: block hash -> slot of one source's block table, by open addressing.
//!
//! Block hashes are already SHA-256 prefixes, so the index needs no real hash function: one
//! multiply by an odd constant spreads any input (tests use small ints) over the top bits. Each
//! entry is one u64, `(top 32 bits of the mixed hash) << 32 | (slot + 1)`, 0 meaning empty.
//! The stored top bits let a probe skip a non-matching entry without touching the block table
//! (a miss, the common case when a block is stored, reads one or two cache lines of the index
//! only), and they give each entry's home bucket, so deletion shifts entries back without
//! tombstones and without reading the table. The capacity grows by 3/2 or 4/3 in turn (powers of two
//! and 1.5 times them; a bucket is `top * capacity >> 32`) and the load stays at most 4/5: 8 / load
//! bytes per block, 10 to 15.
//!
//! The layout is plain data, so a snapshot copies `entries` as they are.

/// Multiplier of the mixing step (2^64 / golden ratio, odd).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
const MIN_BITS: u32 = 4;

/// The top 32 bits of a block hash, mixed: a bucket's number and the entry's check bits.
#[inline]
pub fn mixed_top(block_hash: i64) -> u32 {
    ((block_hash as u64).wrapping_mul(MIX) >> 32) as u32
}

/// An open-addressing map from block hash to slot (`u32`). The caller owns the hashes: lookups
/// take a closure that reads a slot's hash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotIndex {
    len: usize,
    entries: Vec<u64>,
}

impl Default for SlotIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl SlotIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self {
            len: 0,
            entries: vec![0; 1 << MIN_BITS],
        }
    }

    /// An index of the given raw parts (from a snapshot); None when they do not fit together.
    pub fn from_parts(entries: Vec<u64>) -> Option<Self> {
        let capacity = entries.len();
        if !((1 << MIN_BITS)..=(1 << 32)).contains(&capacity) {
            return None;
        }
        let len = entries.iter().filter(|&&e| e != 0).count();
        if len * 5 > capacity * 4 {
            return None;
        }
        Some(Self { len, entries })
    }

    /// The raw entries (for snapshots).
    pub fn entries(&self) -> &[u64] {
        &self.entries
    }

    /// How many hashes are indexed.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is indexed.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the entries.
    pub fn heap_bytes(&self) -> usize {
        self.entries.capacity() * 8
    }

    #[inline]
    fn home(&self, top: u32) -> usize {
        ((u64::from(top) * self.entries.len() as u64) >> 32) as usize
    }

    #[inline]
    fn next(&self, at: usize) -> usize {
        if at + 1 == self.entries.len() {
            0
        } else {
            at + 1
        }
    }

    /// The slot of `block_hash`, reading slots' hashes through `hash_of`.
    #[inline]
    pub fn get(&self, block_hash: i64, hash_of: impl Fn(u32) -> i64) -> Option<u32> {
        self.find(block_hash, &hash_of).map(|(_, slot)| slot)
    }

    /// (position in `entries`, slot) of `block_hash`.
    #[inline]
    fn find(&self, block_hash: i64, hash_of: &impl Fn(u32) -> i64) -> Option<(usize, u32)> {
        let top = mixed_top(block_hash);
        let mut at = self.home(top);
        loop {
            let entry = self.entries[at];
            if entry == 0 {
                return None;
            }
            if (entry >> 32) as u32 == top {
                let slot = (entry as u32).wrapping_sub(1);
                if hash_of(slot) == block_hash {
                    return Some((at, slot));
                }
            }
            at = self.next(at);
        }
    }

    /// Index `block_hash` at `slot`; the caller has checked that it is not indexed yet.
    pub fn insert(&mut self, block_hash: i64, slot: u32) {
        if (self.len + 1) * 5 > self.entries.len() * 4 {
            self.grow();
        }
        self.place(mixed_top(block_hash), slot);
        self.len += 1;
    }

    /// Make room for `additional` more hashes at once (one rebuild instead of several).
    pub fn reserve(&mut self, additional: usize) {
        while (self.len + additional) * 5 > self.entries.len() * 4 {
            self.grow();
        }
    }

    fn place(&mut self, top: u32, slot: u32) {
        let mut at = self.home(top);
        while self.entries[at] != 0 {
            at = self.next(at);
        }
        self.entries[at] = (u64::from(top) << 32) | u64::from(slot + 1);
    }

    fn grow(&mut self) {
        let capacity = self.entries.len();
        // 2^k -> 1.5 * 2^k -> 2^(k+1): steps of 3/2 and 4/3, so the load after a growth is
        // never below 0.53.
        let grown = if capacity.is_power_of_two() {
            capacity + capacity / 2
        } else {
            capacity / 3 * 4
        };
        let old = std::mem::replace(&mut self.entries, vec![0; grown]);
        // Entries keep their top bits, so a rebuild reads nothing but the old entries.
        for entry in old.into_iter().filter(|&e| e != 0) {
            self.place((entry >> 32) as u32, (entry as u32).wrapping_sub(1));
        }
    }

    /// Drop `block_hash`; returns its slot, or None when it was not indexed.
    pub fn remove(&mut self, block_hash: i64, hash_of: impl Fn(u32) -> i64) -> Option<u32> {
        let (mut hole, slot) = self.find(block_hash, &hash_of)?;
        let capacity = self.entries.len();
        // Backward-shift deletion: move later entries of the run into the hole when the hole
        // lies between their home and where they sit, so every probe still finds them.
        let mut at = hole;
        loop {
            at = self.next(at);
            let entry = self.entries[at];
            if entry == 0 {
                break;
            }
            let home = self.home((entry >> 32) as u32);
            // cyclic distances: from the entry's home, and from the hole, to where it sits
            let from_home = (at + capacity - home) % capacity;
            let from_hole = (at + capacity - hole) % capacity;
            if from_home >= from_hole {
                self.entries[hole] = entry;
                hole = at;
            }
        }
        self.entries[hole] = 0;
        self.len -= 1;
        Some(slot)
    }

    /// Forget everything (and give back the memory).
    pub fn clear(&mut self) {
        *self = Self::new();
    }

    /// Every indexed slot, in no particular order.
    pub fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        self.entries
            .iter()
            .filter(|&&e| e != 0)
            .map(|&e| (e as u32).wrapping_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A tiny deterministic generator for the tests (splitmix64).
    fn rng(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::digest::mix64(*seed)
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
                    continue;
                }
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
            }
        }
        for (&h, &slot) in &model {
            assert_eq!(index.get(h, |s| hashes[s as usize]), Some(slot));
        }
        let mut slots: Vec<u32> = index.slots().collect();
        slots.sort_unstable();
        let mut expected: Vec<u32> = model.values().copied().collect();
        expected.sort_unstable();
        assert_eq!(slots, expected);
    }

    #[test]
    fn the_load_stays_at_most_four_fifths() {
        let hashes: Vec<i64> = (0..10_000).map(|i| i * 7919).collect();
        let mut index = SlotIndex::new();
        for (slot, &h) in hashes.iter().enumerate() {
            index.insert(h, slot as u32);
            assert!(index.len() * 5 <= index.entries().len() * 4);
        }
    }

    #[test]
    fn from_parts_refuses_bad_capacities_and_overfull_tables() {
        assert!(SlotIndex::from_parts(vec![0; 8]).is_none());
        assert!(SlotIndex::from_parts(vec![1; 16]).is_none());
        let index = SlotIndex::from_parts(vec![0; 32]).unwrap();
        assert!(index.is_empty());
    }
}
