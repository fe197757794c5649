//! `HolderIndex`: block hash -> which sources hold the block, and which of them hold it as a
//! tombstone, over every source at once.
//!
//! The prefix walk (`super::prefix`) looks each page of a prompt up here once, whatever the
//! number of sources, instead of once per source. A bucket is 12 bytes, the block hash and the
//! id of its holder set (an `OrderedTable`, see `super::ordered`); sets are interned in
//! `SourceSets`, so the many blocks that share one set of holders (every block of a source that
//! no other source holds, or a system prompt that all hold) share one copy of its bit masks.
//! A set changes by a transition (add a source, drop one, flip its tombstone bit); transitions
//! are memoised, so keeping the index in step with the stores costs one bucket lookup and a
//! table read per page.
//!
//! The index is derived state: the per-source block tables stay the truth, and a store builds
//! the index from them when asked (`HolderIndex::build`). A snapshot stores it too (its buckets
//! and sets as they are), so a restore copies it instead of building it again
//! (`HolderIndex::from_parts`).

use std::collections::HashMap;

use super::error::SnapshotError;
use super::ordered::{mixed_top, Bucket, OrderedTable};

/// One bucket: a block hash (as two halves, so a bucket is 12 bytes) and its set id + 1 (0:
/// empty). `#[repr(C)]`, three u32 and no padding: a snapshot stores the buckets as they are.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct HolderBucket {
    pub(crate) hash_low: u32,
    pub(crate) hash_high: u32,
    pub(crate) set: u32,
}

impl HolderBucket {
    fn new(block_hash: i64, set: u32) -> Self {
        let bits = block_hash as u64;
        Self {
            hash_low: bits as u32,
            hash_high: (bits >> 32) as u32,
            set: set + 1,
        }
    }

    #[inline]
    fn hash(&self) -> i64 {
        ((u64::from(self.hash_high) << 32) | u64::from(self.hash_low)) as i64
    }

    #[inline]
    fn set_id(&self) -> u32 {
        self.set - 1
    }
}

impl Bucket for HolderBucket {
    #[inline]
    fn top(&self) -> u32 {
        mixed_top(self.hash())
    }

    #[inline]
    fn is_empty(&self) -> bool {
        self.set == 0
    }
}

/// A change of one source's membership in a set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    /// The source holds the block now, SWA-resident.
    Add,
    /// The source dropped the block.
    Drop,
    /// The source's copy became a tombstone (true) or resident again (false).
    Tombstone(bool),
}

impl Change {
    fn code(self, source: u32) -> u32 {
        let kind = match self {
            Change::Add => 0,
            Change::Drop => 1,
            Change::Tombstone(true) => 2,
            Change::Tombstone(false) => 3,
        };
        source << 2 | kind
    }
}

/// Memo slots of the transition cache (a power of two).
const MEMO_SLOTS: usize = 4096;
/// A memo slot that holds nothing.
const NO_MEMO: (u32, u32, u32) = (u32::MAX, u32::MAX, u32::MAX);

/// Interned sets of sources: each id names a (holders, tombstones) pair of bit masks over
/// source ids, `words` u64 each, stored back to back in `masks`.
#[derive(Clone, Debug)]
struct SourceSets {
    words: usize,
    masks: Vec<u64>,
    /// Buckets naming each set; a set with none is dead (kept until a compaction, since a
    /// later transition may bring it back).
    refs: Vec<u32>,
    ids: HashMap<Box<[u64]>, u32>,
    /// Direct-mapped cache of transitions: (from, change code) -> to (u32::MAX: the empty set).
    memo: Vec<(u32, u32, u32)>,
    dead: usize,
}

impl SourceSets {
    fn new(sources: usize) -> Self {
        Self {
            words: sources.div_ceil(64).max(1),
            masks: Vec::new(),
            refs: Vec::new(),
            ids: HashMap::new(),
            memo: vec![NO_MEMO; MEMO_SLOTS],
            dead: 0,
        }
    }

    fn masks_of(&self, id: u32) -> &[u64] {
        let start = id as usize * 2 * self.words;
        &self.masks[start..start + 2 * self.words]
    }

    /// Make room for source ids below `sources` (more words per mask when needed).
    fn cover(&mut self, sources: usize) {
        let words = sources.div_ceil(64).max(1);
        if words <= self.words {
            return;
        }
        let mut masks = vec![0u64; self.refs.len() * 2 * words];
        for (id, wide) in masks.chunks_exact_mut(2 * words).enumerate() {
            let narrow = self.masks_of(id as u32);
            wide[..self.words].copy_from_slice(&narrow[..self.words]);
            wide[words..words + self.words].copy_from_slice(&narrow[self.words..]);
        }
        self.words = words;
        self.masks = masks;
        self.reindex();
    }

    /// Rebuild the set -> id map from `masks` (after they were laid out anew).
    fn reindex(&mut self) {
        self.ids = self
            .masks
            .chunks_exact(2 * self.words)
            .enumerate()
            .map(|(id, m)| (m.to_vec().into_boxed_slice(), id as u32))
            .collect();
    }

    /// The id of `masks`, interned (a dead set comes back to life).
    fn intern(&mut self, masks: Vec<u64>) -> u32 {
        if let Some(&id) = self.ids.get(masks.as_slice()) {
            return id;
        }
        let id = self.refs.len() as u32;
        self.masks.extend_from_slice(&masks);
        self.refs.push(0);
        self.dead += 1; // no bucket names it yet; `retain` counts the first one
        self.ids.insert(masks.into_boxed_slice(), id);
        id
    }

    /// The set `from` (None: empty) after `change` of `source` (None: empty).
    fn transition(&mut self, from: Option<u32>, change: Change, source: u32) -> Option<u32> {
        let code = change.code(source);
        let from_key = from.unwrap_or(u32::MAX);
        let slot = (from_key.wrapping_mul(0x9e37_79b9) ^ code.wrapping_mul(0x85eb_ca6b)) as usize
            % MEMO_SLOTS;
        let (memo_from, memo_code, memo_to) = self.memo[slot];
        if memo_from == from_key && memo_code == code {
            return (memo_to != u32::MAX).then_some(memo_to);
        }
        let mut masks = match from {
            Some(id) => self.masks_of(id).to_vec(),
            None => vec![0; 2 * self.words],
        };
        let (word, bit) = (source as usize / 64, 1u64 << (source % 64));
        let (holders, tombstones) = masks.split_at_mut(self.words);
        match change {
            Change::Add => {
                holders[word] |= bit;
                tombstones[word] &= !bit;
            }
            Change::Drop => {
                holders[word] &= !bit;
                tombstones[word] &= !bit;
            }
            Change::Tombstone(true) => tombstones[word] |= bit & holders[word],
            Change::Tombstone(false) => tombstones[word] &= !bit,
        }
        let to = if holders.iter().all(|&w| w == 0) {
            None
        } else {
            Some(self.intern(masks))
        };
        self.memo[slot] = (from_key, code, to.unwrap_or(u32::MAX));
        to
    }

    fn retain(&mut self, id: u32) {
        if self.refs[id as usize] == 0 {
            self.dead -= 1;
        }
        self.refs[id as usize] += 1;
    }

    fn release(&mut self, id: u32) {
        self.refs[id as usize] -= 1;
        if self.refs[id as usize] == 0 {
            self.dead += 1;
        }
    }

    /// Whether enough sets are dead to be worth a compaction.
    fn wants_compaction(&self) -> bool {
        self.dead > 1024 && self.dead > self.refs.len() / 2
    }

    /// Drop the dead sets; returns old id -> new id (u32::MAX for dead ones).
    fn compact(&mut self) -> Vec<u32> {
        let mut renumbered = vec![u32::MAX; self.refs.len()];
        let mut masks = Vec::new();
        let mut refs = Vec::new();
        for (id, &count) in self.refs.iter().enumerate() {
            if count > 0 {
                renumbered[id] = refs.len() as u32;
                masks.extend_from_slice(self.masks_of(id as u32));
                refs.push(count);
            }
        }
        self.masks = masks;
        self.refs = refs;
        self.dead = 0;
        self.memo.fill(NO_MEMO);
        self.reindex();
        renumbered
    }
}

/// The positions of the set bits of `word`, lowest first.
fn bit_positions(mut word: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let at = word.trailing_zeros() as usize;
        word &= word.wrapping_sub(1);
        (at < 64).then_some(at)
    })
}

/// Block hash -> holder set, over every source of a store; see the module docs.
#[derive(Clone, Debug)]
pub struct HolderIndex {
    table: OrderedTable<HolderBucket>,
    sets: SourceSets,
}

impl Default for HolderIndex {
    fn default() -> Self {
        Self::new()
    }
}

/// (holders, tombstones): bit masks over source ids (bit `id % 64` of word `id / 64`).
pub type HolderMasks<'a> = (&'a [u64], &'a [u64]);

impl HolderIndex {
    /// An empty index.
    pub fn new() -> Self {
        Self {
            table: OrderedTable::new(),
            sets: SourceSets::new(0),
        }
    }

    /// Words per mask: the masks `holders` gives cover source ids below `64 * words()`.
    pub fn words(&self) -> usize {
        self.sets.words
    }

    /// Cover source ids below `sources` (call before changing a source with a larger id).
    pub fn cover(&mut self, sources: usize) {
        self.sets.cover(sources);
    }

    /// Distinct block hashes indexed.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// Whether no block is indexed.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// Bytes held (buckets and sets).
    pub fn heap_bytes(&self) -> usize {
        self.table.heap_bytes()
            + self.sets.masks.capacity() * 8
            + self.sets.refs.capacity() * 4
            + self.sets.ids.capacity() * (16 + 8 + 2 * self.sets.words * 8)
            + self.sets.memo.capacity() * 12
    }

    /// Hint that `block_hash` will be changed or looked up soon.
    #[inline]
    pub fn prefetch(&self, block_hash: i64) {
        self.table.prefetch(mixed_top(block_hash));
    }

    #[inline]
    fn position(&self, block_hash: i64) -> Option<usize> {
        self.table
            .find(mixed_top(block_hash), |b| b.hash() == block_hash)
    }

    /// Which sources hold `block_hash` and which of them as a tombstone; None when none does.
    #[inline]
    pub fn holders(&self, block_hash: i64) -> Option<HolderMasks<'_>> {
        let at = self.position(block_hash)?;
        let masks = self.sets.masks_of(self.table.at(at).set_id());
        Some(masks.split_at(self.sets.words))
    }

    fn change(&mut self, block_hash: i64, source: u32, change: Change) {
        debug_assert!(
            (source as usize) < 64 * self.sets.words,
            "cover() the source first"
        );
        if !self.table.has_room() {
            self.table.reserve(1);
        }
        let found = self
            .table
            .search(mixed_top(block_hash), |b| b.hash() == block_hash);
        let from = found.ok().map(|at| self.table.at(at).set_id());
        let to = self.sets.transition(from, change, source);
        if from == to {
            return;
        }
        if let Some(id) = to {
            self.sets.retain(id);
        }
        if let Some(id) = from {
            self.sets.release(id);
        }
        match (found, to) {
            (Ok(at), Some(id)) => self.table.at_mut(at).set = id + 1,
            (Ok(at), None) => self.table.remove_at(at),
            (Err(at), Some(id)) => self.table.insert_at(at, HolderBucket::new(block_hash, id)),
            (Err(_), None) => {}
        }
        if self.sets.wants_compaction() {
            self.compact();
        }
    }

    fn compact(&mut self) {
        let renumbered = self.sets.compact();
        for bucket in self.table.buckets_mut() {
            if !bucket.is_empty() {
                bucket.set = renumbered[bucket.set_id() as usize] + 1;
            }
        }
    }

    /// `source` now holds `block_hash`, SWA-resident (it did not before).
    pub fn add(&mut self, block_hash: i64, source: u32) {
        self.change(block_hash, source, Change::Add);
    }

    /// `source` no longer holds `block_hash`.
    pub fn remove(&mut self, block_hash: i64, source: u32) {
        self.change(block_hash, source, Change::Drop);
    }

    /// `source`'s copy of `block_hash` is a tombstone (`tombstone`) or SWA-resident again.
    pub fn set_tombstone(&mut self, block_hash: i64, source: u32, tombstone: bool) {
        self.change(block_hash, source, Change::Tombstone(tombstone));
    }

    /// The index of `holdings`: (block hash, source, SWA-resident) in order of the hashes'
    /// check bits (`mixed_top`), then of the hashes, so a hash's holders come together. Builds
    /// the table in one streaming pass instead of one random insertion per block.
    pub fn from_sorted(
        sources: usize,
        holdings: impl IntoIterator<Item = (i64, u32, bool)>,
    ) -> Self {
        let mut sets = SourceSets::new(sources);
        let mut buckets: Vec<HolderBucket> = Vec::new();
        let mut current: Option<(i64, Option<u32>)> = None;
        let mut finish = |current: Option<(i64, Option<u32>)>, sets: &mut SourceSets| {
            if let Some((hash, Some(set))) = current {
                sets.retain(set);
                buckets.push(HolderBucket::new(hash, set));
            }
        };
        for (hash, source, resident) in holdings {
            let set = match current {
                Some((held, set)) if held == hash => set,
                previous => {
                    finish(previous, &mut sets);
                    None
                }
            };
            let mut set = sets.transition(set, Change::Add, source);
            if !resident {
                set = sets.transition(set, Change::Tombstone(true), source);
            }
            current = Some((hash, set));
        }
        finish(current, &mut sets);
        debug_assert!(buckets.windows(2).all(|w| w[0].top() <= w[1].top()));
        let table = OrderedTable::from_sorted(&buckets, buckets.len());
        Self { table, sets }
    }

    /// The parts a snapshot stores: the interned sets' masks back to back (`2 * words()` words
    /// a set, holders then tombstones), the table's home count and its buckets.
    pub fn parts(&self) -> (&[u64], usize, &[HolderBucket]) {
        (&self.sets.masks, self.table.homes(), self.table.buckets())
    }

    /// The same holdings in canonical form, with masks of the words `sources` sources need
    /// (what a snapshot stores): only the sets some bucket names, numbered in order of first
    /// use over the buckets, and the buckets in order of (check bits, hash), laid out as
    /// `from_sorted` lays them. Indexes of the same holdings have the same canonical form,
    /// whatever history built them, so equal stores write equal snapshots.
    pub fn canonical(&self, sources: usize) -> Self {
        let mut buckets: Vec<HolderBucket> = self
            .table
            .buckets()
            .iter()
            .filter(|b| !b.is_empty())
            .copied()
            .collect();
        // already in order of check bits: a stable sort only orders the rare equal ones
        buckets.sort_by_key(|b| (b.top(), b.hash()));
        let mut sets = SourceSets::new(sources);
        let (old_words, words) = (self.sets.words, sets.words);
        let kept = old_words.min(words);
        let mut renumbered = vec![u32::MAX; self.sets.refs.len()];
        for bucket in &mut buckets {
            let old = bucket.set_id() as usize;
            if renumbered[old] == u32::MAX {
                renumbered[old] = sets.refs.len() as u32;
                let masks = self.sets.masks_of(old as u32);
                let start = sets.masks.len();
                sets.masks.resize(start + 2 * words, 0);
                sets.masks[start..start + kept].copy_from_slice(&masks[..kept]);
                sets.masks[start + words..start + words + kept]
                    .copy_from_slice(&masks[old_words..old_words + kept]);
                sets.refs.push(0);
            }
            let new = renumbered[old];
            sets.refs[new as usize] += 1;
            bucket.set = new + 1;
        }
        sets.reindex();
        let table = OrderedTable::from_sorted(&buckets, buckets.len());
        Self { table, sets }
    }

    /// The index of the parts `parts` gave, for a store of `held.len()` sources where source
    /// `id` holds `held[id]` = (blocks, tombstones); `Err` with the reason when they do not fit.
    ///
    /// Checked in one pass over the buckets and one over the sets: the words per mask, every
    /// set's bits (holders named, tombstones among them, no source out of range, no set twice),
    /// the table's layout, that each bucket names a set, and that the blocks and tombstones the
    /// index gives each source are the counts its table holds. Which hashes the buckets name is
    /// not looked up in the tables (that would cost the build this saves); the snapshot's
    /// checksum covers them.
    pub fn from_parts(
        held: &[(usize, u64)],
        masks: Vec<u64>,
        homes: usize,
        buckets: Vec<HolderBucket>,
    ) -> Result<Self, SnapshotError> {
        let sources = held.len();
        let words = sources.div_ceil(64).max(1);
        if masks.len() % (2 * words) != 0 || masks.len() / (2 * words) >= u32::MAX as usize {
            return Err(SnapshotError::HolderSetWords(masks.len()));
        }
        let set_count = masks.len() / (2 * words);
        // buckets naming each set, counted in the layout's own pass: `uses[set + 1]` (so an
        // empty bucket counts at 0, and one naming no set at the end, refused anyway)
        let mut uses = vec![0u32; set_count + 2];
        let table = OrderedTable::from_parts_with(homes, buckets, |b| {
            let at = (b.set as usize).min(set_count + 1);
            uses[at] += 1;
            at <= set_count
        })
        .ok_or(SnapshotError::MalformedHolderIndex)?;
        let refs = uses[1..=set_count].to_vec();
        let mut counted = vec![(0usize, 0u64); sources];
        let beyond = |word: usize| match sources.checked_sub(64 * word) {
            Some(left) if left < 64 => !0u64 << left,
            Some(_) => 0,
            None => !0,
        };
        for (set, pair) in masks.chunks_exact(2 * words).enumerate() {
            let (holders, tombstones) = pair.split_at(words);
            let fits = holders.iter().any(|&w| w != 0)
                && (0..words)
                    .all(|w| tombstones[w] & !holders[w] == 0 && holders[w] & beyond(w) == 0);
            if !fits {
                return Err(SnapshotError::HolderSetOutOfRange(set));
            }
            let uses = refs[set] as usize;
            for word in 0..words {
                for source in bit_positions(holders[word]) {
                    counted[64 * word + source].0 += uses;
                }
                for source in bit_positions(tombstones[word]) {
                    counted[64 * word + source].1 += uses as u64;
                }
            }
        }
        if counted[..] != *held {
            return Err(SnapshotError::HolderIndexMismatch);
        }
        let mut sets = SourceSets::new(sources);
        sets.masks = masks;
        sets.dead = refs.iter().filter(|&&uses| uses == 0).count();
        sets.refs = refs;
        sets.reindex();
        if sets.ids.len() != set_count {
            return Err(SnapshotError::HolderSetTwice);
        }
        Ok(Self { table, sets })
    }

    /// Make room for `additional` more distinct hashes at once.
    pub fn reserve(&mut self, additional: usize) {
        self.table.reserve(additional);
    }

    /// Every (block hash, holders, tombstones) indexed, in no particular order (for checks).
    pub fn entries(&self) -> impl Iterator<Item = (i64, HolderMasks<'_>)> + '_ {
        self.table
            .buckets()
            .iter()
            .filter(|b| !b.is_empty())
            .map(|b| {
                let masks = self.sets.masks_of(b.set_id());
                (b.hash(), masks.split_at(self.sets.words))
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::ordered::tests::hash_with_top;
    use std::collections::{BTreeMap, BTreeSet};

    fn rng(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::digest::mix64(*seed)
    }

    type Model = BTreeMap<i64, BTreeMap<u32, bool>>;

    fn check(index: &HolderIndex, model: &Model) {
        assert_eq!(index.len(), model.len());
        for (&hash, holders) in model {
            let (present, tomb) = index.holders(hash).expect("held hash indexed");
            for source in 0..(64 * index.words()) as u32 {
                let bit = present[source as usize / 64] >> (source % 64) & 1 == 1;
                let dead = tomb[source as usize / 64] >> (source % 64) & 1 == 1;
                assert_eq!(bit, holders.contains_key(&source));
                assert_eq!(dead, holders.get(&source) == Some(&true));
            }
        }
        let indexed: BTreeSet<i64> = index.entries().map(|(h, _)| h).collect();
        assert_eq!(indexed, model.keys().copied().collect());
    }

    #[test]
    fn random_changes_agree_with_a_model_across_compactions_and_wider_masks() {
        let mut seed = 3;
        let mut index = HolderIndex::new();
        let mut model = Model::new();
        let mut sources = 3u32;
        index.cover(sources as usize);
        for step in 0..60_000 {
            if step == 20_000 {
                sources = 150; // masks widen to three words
                index.cover(sources as usize);
            }
            let hash = (rng(&mut seed) % 2_000) as i64 - 1_000;
            let source = (rng(&mut seed) % u64::from(sources)) as u32;
            let held = model.get(&hash).and_then(|h| h.get(&source)).copied();
            match (held, rng(&mut seed) % 3) {
                (None, _) => {
                    index.add(hash, source);
                    model.entry(hash).or_default().insert(source, false);
                }
                (Some(_), 0) => {
                    index.remove(hash, source);
                    let holders = model.get_mut(&hash).unwrap();
                    holders.remove(&source);
                    if holders.is_empty() {
                        model.remove(&hash);
                    }
                }
                (Some(_), flip) => {
                    let tombstone = flip == 1;
                    index.set_tombstone(hash, source, tombstone);
                    model.get_mut(&hash).unwrap().insert(source, tombstone);
                }
            }
            if step % 4_999 == 0 {
                check(&index, &model);
            }
        }
        check(&index, &model);
    }

    #[test]
    fn equal_check_bits_keep_hashes_apart() {
        let mut index = HolderIndex::new();
        index.cover(2);
        let a = hash_with_top(99, 1);
        let b = hash_with_top(99, 2);
        index.add(a, 0);
        index.add(b, 1);
        index.set_tombstone(b, 1, true);
        assert_eq!(index.holders(a), Some((&[1u64][..], &[0u64][..])));
        assert_eq!(index.holders(b), Some((&[2u64][..], &[2u64][..])));
        index.remove(a, 0);
        assert_eq!(index.holders(a), None);
        assert_eq!(index.len(), 1);
    }
}
