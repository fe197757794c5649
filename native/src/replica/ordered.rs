//! `OrderedTable`: the open-addressing layout under both block-hash indexes of the store.
//!
//! Each bucket carries 32 check bits (`top`, the top bits of the mixed block hash). A bucket's
//! home is `top * homes >> 32`, which grows with `top`, and the buckets are kept sorted by
//! `top` (Robin Hood order with no wrap-around: a slack of buckets after the last home takes
//! the overflow, and the very last bucket always stays empty, ending every probe). So a probe
//! for a hash that is absent stops at the first bucket with a larger `top`, after about three
//! buckets even at a load of 4/5 (plain linear probing reads about thirteen). Growing is one
//! streaming pass, since the old buckets are already in the new table's order, and deletion
//! shifts the following buckets back, without tombstones.
//!
//! The number of homes grows by 3/2 or 4/3 in turn (powers of two and 1.5 times them) and the
//! load stays at most 4/5, so a table costs `size_of::<B>() / load` bytes per entry.

use super::prefetch::prefetch;

/// Multiplier of the mixing step (2^64 / golden ratio, odd).
const MIX: u64 = 0x9e37_79b9_7f4a_7c15;
const MIN_HOMES: usize = 16;
/// The most home buckets.
pub const MAX_HOMES: usize = 1 << 31;

/// The top 32 bits of a block hash, mixed: the check bits, which also place its home bucket.
/// Block hashes are already SHA-256 prefixes, so one multiply by an odd constant is mixing
/// enough (and spreads the small ints of tests too).
#[inline]
pub fn mixed_top(block_hash: i64) -> u32 {
    ((block_hash as u64).wrapping_mul(MIX) >> 32) as u32
}

/// What a table stores: plain data whose default value is the empty bucket.
pub trait Bucket: Copy + Default + PartialEq {
    /// The check bits of a filled bucket (its order and home).
    fn top(&self) -> u32;
    /// Whether this bucket is empty.
    fn is_empty(&self) -> bool;
}

/// Buckets after the last home: room for the runs that start near the end (at least one, the
/// empty sentinel).
fn slack(homes: usize) -> usize {
    32 + homes / 64
}

/// Sorted open addressing over buckets `B`; see the module docs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderedTable<B> {
    len: usize,
    homes: usize,
    buckets: Vec<B>,
}

impl<B: Bucket> Default for OrderedTable<B> {
    fn default() -> Self {
        Self::new()
    }
}

impl<B: Bucket> OrderedTable<B> {
    /// An empty table.
    pub fn new() -> Self {
        Self::with_homes(MIN_HOMES)
    }

    fn with_homes(homes: usize) -> Self {
        Self {
            len: 0,
            homes,
            buckets: vec![B::default(); homes + slack(homes)],
        }
    }

    /// A table of the given raw parts (from a snapshot); None when they do not fit together (a
    /// wrong size, an overfull table, buckets out of order, before their home or after a gap,
    /// or a filled last bucket).
    pub fn from_parts(homes: usize, buckets: Vec<B>) -> Option<Self> {
        Self::from_parts_with(homes, buckets, |_| true)
    }

    /// `from_parts`, also asking `keep` of every bucket in the same pass (what it says of an
    /// empty one is ignored): None when the layout is wrong or `keep` refuses a filled bucket
    /// (the caller's own checks of what the buckets hold, without a second pass over them).
    ///
    /// The pass is branch-free per bucket: which buckets are filled follows the hashes, so a
    /// branch on it would be mispredicted about half the time at the loads a table keeps.
    pub fn from_parts_with(
        homes: usize,
        buckets: Vec<B>,
        mut keep: impl FnMut(&B) -> bool,
    ) -> Option<Self> {
        if !(MIN_HOMES..=MAX_HOMES).contains(&homes) || buckets.len() != homes + slack(homes) {
            return None;
        }
        if !buckets.last()?.is_empty() {
            return None;
        }
        // Every bucket sits at or after its home, with no empty bucket between (so a probe from
        // the home reaches it), and in order of top bits. `run_start` is the bucket after the
        // last empty one; `previous_top` is 0 after an empty bucket (no bound: tops are >= 0).
        let mut len = 0usize;
        let mut bad = false;
        let mut run_start = 0usize;
        let mut previous_top = 0u32;
        for (at, bucket) in buckets.iter().enumerate() {
            let filled = !bucket.is_empty();
            let top = bucket.top();
            let home = ((u64::from(top) * homes as u64) >> 32) as usize;
            let misplaced = (home > at) | (home < run_start) | (previous_top > top);
            let kept = keep(bucket);
            bad |= filled & (misplaced | !kept);
            len += usize::from(filled);
            run_start = if filled { run_start } else { at + 1 };
            previous_top = if filled { top } else { 0 };
        }
        if bad || len * 5 > homes * 4 {
            return None;
        }
        Some(Self {
            len,
            homes,
            buckets,
        })
    }

    /// How many buckets are homes (the rest is slack); for snapshots.
    pub fn homes(&self) -> usize {
        self.homes
    }

    /// Every bucket, empty ones included (for snapshots and rebuilds).
    pub fn buckets(&self) -> &[B] {
        &self.buckets
    }

    /// Every bucket, mutably: for changes that keep each bucket's `top` (and so the order).
    pub fn buckets_mut(&mut self) -> &mut [B] {
        &mut self.buckets
    }

    /// How many buckets are filled.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no bucket is filled.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes held by the buckets.
    pub fn heap_bytes(&self) -> usize {
        self.buckets.capacity() * std::mem::size_of::<B>()
    }

    #[inline]
    fn home(&self, top: u32) -> usize {
        ((u64::from(top) * self.homes as u64) >> 32) as usize
    }

    /// Ask the CPU to start loading the bucket where a probe for `top` begins (a hint: a batch
    /// of lookups then waits for memory once, not once per lookup).
    #[inline]
    pub fn prefetch(&self, top: u32) {
        prefetch(&self.buckets[self.home(top)]);
    }

    /// The position of the bucket with check bits `top` that `is_match` accepts.
    #[inline]
    pub fn find(&self, top: u32, is_match: impl Fn(&B) -> bool) -> Option<usize> {
        self.search(top, is_match).ok()
    }

    /// `Ok(position)` of the bucket with check bits `top` that `is_match` accepts, or
    /// `Err(position)` where such a bucket would be inserted (for `insert_at`, as long as the
    /// table does not change in between).
    #[inline]
    pub fn search(&self, top: u32, is_match: impl Fn(&B) -> bool) -> Result<usize, usize> {
        let mut at = self.home(top);
        // The last bucket is always empty, so the loop ends inside the table.
        loop {
            let bucket = &self.buckets[at];
            if bucket.is_empty() || bucket.top() > top {
                return Err(at);
            }
            if bucket.top() == top && is_match(bucket) {
                return Ok(at);
            }
            at += 1;
        }
    }

    /// Whether one more bucket fits without growing the table.
    #[inline]
    pub fn has_room(&self) -> bool {
        (self.len + 1) * 5 <= self.homes * 4
    }

    /// Add `bucket` at `at`, where `search` said it belongs; the table must have room (see
    /// `has_room`). Falls back to `insert` when the run would overflow the slack.
    #[inline]
    pub fn insert_at(&mut self, at: usize, bucket: B) {
        debug_assert!(self.has_room());
        let mut end = at;
        while !self.buckets[end].is_empty() {
            end += 1;
        }
        if end + 1 >= self.buckets.len() {
            self.insert(bucket);
            return;
        }
        if end > at {
            self.buckets.copy_within(at..end, at + 1);
        }
        self.buckets[at] = bucket;
        self.len += 1;
    }

    /// The bucket at `at` (a position `find` gave).
    #[inline]
    pub fn at(&self, at: usize) -> &B {
        &self.buckets[at]
    }

    /// The bucket at `at`, mutably: the caller keeps its `top`.
    #[inline]
    pub fn at_mut(&mut self, at: usize) -> &mut B {
        &mut self.buckets[at]
    }

    /// Add `bucket` (not empty); the caller has checked that its key is not there yet.
    pub fn insert(&mut self, bucket: B) {
        if (self.len + 1) * 5 > self.homes * 4 {
            self.grow();
        }
        while !self.place(bucket) {
            // The run at the end filled the slack: make the table larger and try again.
            self.grow();
        }
        self.len += 1;
    }

    /// Make room for `additional` more buckets at once (one rebuild instead of several).
    pub fn reserve(&mut self, additional: usize) {
        while (self.len + additional) * 5 > self.homes * 4 {
            self.grow();
        }
    }

    /// Put `bucket` in its place in the order, shifting the rest of its run one bucket on;
    /// false (and nothing changed) when the run would reach the last bucket.
    fn place(&mut self, bucket: B) -> bool {
        let top = bucket.top();
        let mut at = self.home(top);
        while !self.buckets[at].is_empty() && self.buckets[at].top() <= top {
            at += 1;
        }
        let mut end = at;
        while !self.buckets[end].is_empty() {
            end += 1;
        }
        if end + 1 >= self.buckets.len() {
            return false;
        }
        if end > at {
            self.buckets.copy_within(at..end, at + 1);
        }
        self.buckets[at] = bucket;
        true
    }

    #[cold]
    fn grow(&mut self) {
        // 2^k -> 1.5 * 2^k -> 2^(k+1): steps of 3/2 and 4/3, so the load after a growth is
        // never below 0.53.
        let mut homes = if self.homes.is_power_of_two() {
            self.homes + self.homes / 2
        } else {
            self.homes / 3 * 4
        };
        loop {
            if let Some(grown) = self.rebuilt(homes.min(MAX_HOMES)) {
                *self = grown;
                return;
            }
            homes *= 2;
        }
    }

    /// A table of `buckets`, already in order of their top bits (none empty), with room for
    /// at least `capacity` buckets: one streaming pass, no probing.
    pub fn from_sorted(buckets: &[B], capacity: usize) -> Self {
        let wanted = capacity.max(buckets.len());
        let mut homes = MIN_HOMES;
        while wanted * 5 > homes * 4 && homes < MAX_HOMES {
            homes = if homes.is_power_of_two() {
                homes + homes / 2
            } else {
                homes / 3 * 4
            };
        }
        let source = Self {
            len: buckets.len(),
            homes: 0,
            buckets: Vec::new(),
        };
        loop {
            if let Some(table) = source.placed(buckets, homes.min(MAX_HOMES)) {
                return table;
            }
            homes *= 2;
        }
    }

    /// The buckets in a table of `homes` homes (None when they overflow its slack). The old
    /// buckets are already in order, so each goes to its home or just after the previous one.
    fn rebuilt(&self, homes: usize) -> Option<Self> {
        self.placed(&self.buckets, homes)
    }

    /// `buckets` (in order; empty ones skipped) in a new table of `homes` homes, each at its
    /// home or just after the previous one (None when they overflow its slack).
    fn placed(&self, buckets: &[B], homes: usize) -> Option<Self> {
        let mut grown = Self::with_homes(homes);
        let last = grown.buckets.len() - 1;
        let mut next = 0;
        for &bucket in buckets.iter().filter(|b| !b.is_empty()) {
            let at = grown.home(bucket.top()).max(next);
            if at >= last {
                return None;
            }
            grown.buckets[at] = bucket;
            next = at + 1;
        }
        grown.len = self.len;
        Some(grown)
    }

    /// Empty the bucket at `at` (a position `find` gave), shifting later buckets of its run
    /// back by one while they are not at their home: that keeps the order and every bucket
    /// reachable from its home.
    pub fn remove_at(&mut self, mut hole: usize) {
        loop {
            let next = self.buckets[hole + 1];
            if next.is_empty() || self.home(next.top()) > hole {
                break;
            }
            self.buckets[hole] = next;
            hole += 1;
        }
        self.buckets[hole] = B::default();
        self.len -= 1;
    }

    /// Forget everything (and give back the memory).
    pub fn clear(&mut self) {
        *self = Self::new();
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A hash whose mixed top bits are `top` (and low bits `low`): MIX is odd, so it has an
    /// inverse mod 2^64.
    pub(crate) fn hash_with_top(top: u32, low: u32) -> i64 {
        let mut inverse: u64 = MIX; // Newton's iteration doubles the correct low bits each step
        for _ in 0..6 {
            inverse = inverse.wrapping_mul(2u64.wrapping_sub(MIX.wrapping_mul(inverse)));
        }
        ((u64::from(top) << 32 | u64::from(low)).wrapping_mul(inverse)) as i64
    }

    #[test]
    fn hash_with_top_inverts_the_mixing() {
        assert_eq!(mixed_top(hash_with_top(77, 5)), 77);
        assert_eq!(mixed_top(hash_with_top(u32::MAX, 0)), u32::MAX);
    }
}
