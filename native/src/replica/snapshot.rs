//! A `ReplicaStore` to and from bytes: a bulk, checksummed copy of each table's arrays.
//!
//! Layout (little-endian throughout):
//!
//! ```text
//! b"SWAREPL\0" | u32 version | u32 replica count
//! u8 keeps token ids                                                (version 5 on)
//! per replica:
//!   str name | u8 has meta [u32 page_size, u32 sliding_window_size, u8 swa_events, str json]
//!   | u8 diverged [str reason] | u32 block_size (0: none yet) | u32 slots | u32 free
//!   | u32 index homes | u32 index capacity | u64 tombstones | u64 digest
//!   | (i64 hash, u32 parent, u32 state)[slots]
//!   | u32 tokens[slots * block_size]                   (only when the store keeps token ids)
//!   | u32 free[free] | u64 index[capacity]
//!   | u32 tier block_size (0: none yet) | u32 tier count            (version 3 on)
//!   | per tier: str medium | u32 blocks | i64 hashes[blocks], ascending
//! u8 has holder index                                               (version 4 on)
//!   [u32 holder sets | u64 masks[sets * 2 * words] | u32 homes | u32 capacity
//!    | (u32 hash low, u32 hash high, u32 set + 1)[capacity]]
//! u32 crc32c of everything before it
//! ```
//! where `str` is a u32 byte length and UTF-8 bytes, and `words` is the u64 words of a mask
//! over the store's sources (`ceil(replicas / 64)`, at least 1). The indexes are copied too
//! (each table's slot index, and the store's holder index when it keeps one), so loading is
//! array copies and linear checks, no rehashing. A snapshot whose magic, version or checksum
//! is wrong, or whose arrays do not fit together, is refused with a reason; nothing is loaded.
//! Version 2 (no lower tiers) still loads: its replicas hold no tier; versions 2 and 3 hold no
//! holder index (a store that keeps one builds it from the blocks); versions 2 to 4 always hold
//! token ids.
//!
//! A store that keeps no token ids (`ReplicaStore::keeping_tokens`) writes none. Loaded into a
//! store that keeps none (`from_bytes_keeping`), a snapshot's token ids are skipped; a snapshot
//! without them is refused by a store that keeps them (`SnapshotError::NoTokenIds`): they
//! cannot be made up.

use super::blocks::{Block, BlockTable, FREE, MAX_SLOTS, NO_PARENT, TOMBSTONE};
use super::error::{SnapshotError, TableFault};
use super::holders::{HolderBucket, HolderIndex};
use super::index::SlotIndex;
use super::source::{Replica, SourceMeta};
use super::store::ReplicaStore;
use super::tiers::{BlockSet, Tier, Tiers};
use crate::digest::StateDigest;
use crate::events::Medium;

/// The first bytes of a replica snapshot.
pub const MAGIC: &[u8; 8] = b"SWAREPL\0";
/// The layout version this build writes.
pub const VERSION: u32 = 5;
/// The layout versions this build reads (2: before lower tiers; 3: before the holder index; 4:
/// before stores without token ids).
pub const READS: [u32; 4] = [2, 3, 4, 5];
const CHECKSUM_BYTES: usize = 4;

// --- writing ----------------------------------------------------------------------------------

fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, value: &str) {
    put_u32(out, value.len() as u32);
    out.extend_from_slice(value.as_bytes());
}

fn put_u32s(out: &mut Vec<u8>, values: &[u32]) {
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn put_u64s(out: &mut Vec<u8>, values: impl Iterator<Item = u64>) {
    for value in values {
        out.extend_from_slice(&value.to_le_bytes());
    }
}

fn replica_bytes(replica: &Replica) -> usize {
    let table = &replica.blocks;
    64 + replica.name.len()
        + replica.meta.as_ref().map_or(0, |m| m.json.len())
        + replica.diverged.as_ref().map_or(0, String::len)
        + table.blocks.len() * 16
        + table.tokens.len() * 4
        + table.free.len() * 4
        + table.index.entries().len() * 8
        + replica.tiers.block_count() * 8
        + replica.tiers.tiers().len() * 16
}

fn write_replica(out: &mut Vec<u8>, replica: &Replica, version: u32) {
    put_str(out, &replica.name);
    match &replica.meta {
        None => out.push(0),
        Some(meta) => {
            out.push(1);
            put_u32(out, meta.page_size);
            put_u32(out, meta.sliding_window_size);
            out.push(u8::from(meta.swa_events));
            put_str(out, &meta.json);
        }
    }
    match &replica.diverged {
        None => out.push(0),
        Some(reason) => {
            out.push(1);
            put_str(out, reason);
        }
    }
    let table = &replica.blocks;
    put_u32(out, table.block_size.unwrap_or(0));
    put_u32(out, table.blocks.len() as u32);
    put_u32(out, table.free.len() as u32);
    put_u32(out, table.index.homes() as u32);
    put_u32(out, table.index.entries().len() as u32);
    out.extend_from_slice(&table.tombstones.to_le_bytes());
    out.extend_from_slice(&table.digest.value.to_le_bytes());
    for block in &table.blocks {
        out.extend_from_slice(&block.hash.to_le_bytes());
        out.extend_from_slice(&block.parent.to_le_bytes());
        out.extend_from_slice(&block.state.to_le_bytes());
    }
    put_u32s(out, &table.tokens);
    put_u32s(out, &table.free);
    put_u64s(out, table.index.entries().iter().copied());
    if version < 3 {
        return;
    }
    let tiers = &replica.tiers;
    put_u32(out, tiers.block_size().unwrap_or(0));
    put_u32(out, tiers.tiers().len() as u32);
    for tier in tiers.tiers() {
        put_str(out, &tier.medium);
        let mut hashes: Vec<i64> = tier.blocks.iter().copied().collect();
        hashes.sort_unstable();
        put_u32(out, hashes.len() as u32);
        put_u64s(out, hashes.into_iter().map(|hash| hash as u64));
    }
}

/// The bytes of every replica of `store`.
pub fn to_bytes(store: &ReplicaStore) -> Vec<u8> {
    to_bytes_as(store, VERSION)
}

/// The bytes of every replica of `store` in layout `version` (2 leaves the tiers out; before 5,
/// `store` must keep token ids).
fn to_bytes_as(store: &ReplicaStore, version: u32) -> Vec<u8> {
    debug_assert!(version >= 5 || store.keeps_tokens());
    let size: usize = store.replicas().iter().map(replica_bytes).sum::<usize>()
        + store.holders().map_or(1, |h| {
            let (masks, _, buckets) = h.parts();
            16 + masks.len() * 8 + buckets.len() * 12
        });
    let mut out = Vec::with_capacity(16 + size + CHECKSUM_BYTES);
    out.extend_from_slice(MAGIC);
    put_u32(&mut out, version);
    put_u32(&mut out, store.replicas().len() as u32);
    if version >= 5 {
        out.push(u8::from(store.keeps_tokens()));
    }
    for replica in store.replicas() {
        write_replica(&mut out, replica, version);
    }
    if version >= 4 {
        let canonical = store
            .holders()
            .map(|holders| holders.canonical(store.replicas().len()));
        write_holders(&mut out, canonical.as_ref());
    }
    let checksum = crc32c::crc32c(&out);
    put_u32(&mut out, checksum);
    out
}

fn write_holders(out: &mut Vec<u8>, holders: Option<&HolderIndex>) {
    let Some(holders) = holders else {
        out.push(0);
        return;
    };
    out.push(1);
    let (masks, homes, buckets) = holders.parts();
    put_u32(out, (masks.len() / (2 * holders.words())) as u32);
    put_u64s(out, masks.iter().copied());
    put_u32(out, homes as u32);
    put_u32(out, buckets.len() as u32);
    for bucket in buckets {
        put_u32s(out, &[bucket.hash_low, bucket.hash_high, bucket.set]);
    }
}

// --- reading ----------------------------------------------------------------------------------

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &'static str) -> Result<&'a [u8], SnapshotError> {
        let end = self
            .at
            .checked_add(count)
            .filter(|&end| end <= self.data.len())
            .ok_or(SnapshotError::Truncated { what, at: self.at })?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, SnapshotError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, SnapshotError> {
        let bytes = self.take(4, what)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, SnapshotError> {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn flag(&mut self, what: &'static str) -> Result<bool, SnapshotError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            value => Err(SnapshotError::BadFlag { what, value }),
        }
    }

    fn string(&mut self, what: &'static str) -> Result<String, SnapshotError> {
        let length = self.u32(what)? as usize;
        let bytes = self.take(length, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| SnapshotError::NotUtf8 { what })
    }

    /// `count` values of `T` copied straight from the bytes (see `Plain`).
    fn plain<T: Plain>(
        &mut self,
        count: usize,
        what: &'static str,
    ) -> Result<Vec<T>, SnapshotError> {
        let bytes = self.take(count.saturating_mul(T::SIZE), what)?;
        Ok(T::vec_from_le(bytes, count))
    }
}

/// A value stored as its little-endian bytes: a run of them is read with one copy on a
/// little-endian machine (and value by value elsewhere).
///
/// # Safety
///
/// An implementer is plain data: `size_of::<Self>() == SIZE`, no padding, every bit pattern a
/// valid value, and its in-memory bytes on a little-endian machine are exactly what `from_le`
/// reads (for a struct: `#[repr(C)]` with its fields in the stored order). Each impl below
/// backs that with const assertions of its size, alignment and field offsets.
unsafe trait Plain: Copy {
    const SIZE: usize;
    fn from_le(bytes: &[u8]) -> Self;

    /// `count` values from `bytes` (exactly `count * SIZE` of them).
    fn vec_from_le(bytes: &[u8], count: usize) -> Vec<Self> {
        assert_eq!(Some(bytes.len()), count.checked_mul(Self::SIZE));
        if cfg!(target_endian = "little") {
            let mut values = Vec::<Self>::with_capacity(count);
            advise_huge_pages(values.spare_capacity_mut());
            // SAFETY: `values` owns room for `count` values, `count * SIZE` bytes (asserted
            // equal to `bytes.len()` above, and `SIZE` is `size_of::<Self>()` by the trait's
            // contract), aligned for `Self`; a fresh allocation cannot overlap `bytes`. After
            // the copy every value is initialised: `Self` has no padding and no invalid bit
            // patterns, and on a little-endian machine its bytes are the stored ones.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    values.as_mut_ptr().cast::<u8>(),
                    bytes.len(),
                );
                values.set_len(count);
            }
            values
        } else {
            bytes.chunks_exact(Self::SIZE).map(Self::from_le).collect()
        }
    }
}

/// Ask the kernel to back the 2 MiB-aligned part of `memory` (a fresh allocation about to be
/// filled) with huge pages where it allows them on request (transparent huge pages in
/// `madvise` mode): filling it then takes one page fault per 2 MiB instead of one per 4 KiB,
/// which is much of the cost of copying a large snapshot's arrays. Only a hint: a refusal
/// leaves ordinary pages.
#[cfg(target_os = "linux")]
fn advise_huge_pages<T>(memory: &mut [std::mem::MaybeUninit<T>]) {
    const HUGE_PAGE: usize = 2 << 20;
    let start = memory.as_mut_ptr() as usize;
    let end = start + std::mem::size_of_val(memory);
    let (first, last) = (
        start.next_multiple_of(HUGE_PAGE),
        end / HUGE_PAGE * HUGE_PAGE,
    );
    if last > first {
        // SAFETY: [first, last) lies inside `memory`, which the caller owns; the advice changes
        // no contents and no mapping the program relies on, only how pages are backed.
        unsafe {
            libc::madvise(
                first as *mut libc::c_void,
                last - first,
                libc::MADV_HUGEPAGE,
            );
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn advise_huge_pages<T>(_memory: &mut [std::mem::MaybeUninit<T>]) {}

// SAFETY: a u32 is 4 bytes, any bits a value, stored little-endian.
unsafe impl Plain for u32 {
    const SIZE: usize = 4;
    fn from_le(c: &[u8]) -> Self {
        u32::from_le_bytes([c[0], c[1], c[2], c[3]])
    }
}

// SAFETY: a u64 is 8 bytes, any bits a value, stored little-endian.
unsafe impl Plain for u64 {
    const SIZE: usize = 8;
    fn from_le(c: &[u8]) -> Self {
        u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])
    }
}

// SAFETY: `HolderBucket` is `#[repr(C)]` `(u32 hash low, u32 hash high, u32 set + 1)`, three
// u32 at offsets 0, 4 and 8 with no padding (asserted below): the snapshot's own layout; any
// bits are a value (`HolderIndex::from_parts` checks what they mean).
unsafe impl Plain for HolderBucket {
    const SIZE: usize = 12;
    fn from_le(c: &[u8]) -> Self {
        HolderBucket {
            hash_low: <u32 as Plain>::from_le(&c[..4]),
            hash_high: <u32 as Plain>::from_le(&c[4..8]),
            set: <u32 as Plain>::from_le(&c[8..]),
        }
    }
}

const _: () = assert!(
    std::mem::size_of::<HolderBucket>() == 12
        && std::mem::offset_of!(HolderBucket, hash_high) == 4
        && std::mem::offset_of!(HolderBucket, set) == 8
);

// SAFETY: `Block` is `#[repr(C)]` `(i64 hash, u32 parent, u32 state)`, at offsets 0, 8 and 12
// with no padding (asserted below): the snapshot's own layout; any bits are a value
// (`check_table` checks what they mean).
unsafe impl Plain for Block {
    const SIZE: usize = 16;
    fn from_le(c: &[u8]) -> Self {
        Block {
            hash: <u64 as Plain>::from_le(&c[..8]) as i64,
            parent: <u32 as Plain>::from_le(&c[8..12]),
            state: <u32 as Plain>::from_le(&c[12..]),
        }
    }
}

const _: () = assert!(
    std::mem::size_of::<Block>() == 16
        && std::mem::offset_of!(Block, parent) == 8
        && std::mem::offset_of!(Block, state) == 12
);

/// A fault of the arrays of the replica named `name`.
fn replica_fault(name: &str, fault: TableFault) -> SnapshotError {
    SnapshotError::Replica {
        source: name.to_owned(),
        fault,
    }
}

fn read_meta(reader: &mut Reader<'_>) -> Result<Option<SourceMeta>, SnapshotError> {
    if !reader.flag("meta")? {
        return Ok(None);
    }
    let page_size = reader.u32("meta page_size")?;
    let sliding_window_size = reader.u32("meta sliding_window_size")?;
    let swa_events = reader.flag("meta swa_events")?;
    let json = reader.string("meta json")?;
    if page_size == 0 || sliding_window_size == 0 {
        return Err(SnapshotError::ZeroMetaSize);
    }
    Ok(Some(SourceMeta {
        page_size,
        sliding_window_size,
        swa_events,
        json,
    }))
}

/// The lower tiers of replica `name` (version 3 on).
fn read_tiers(reader: &mut Reader<'_>, name: &str) -> Result<Tiers, SnapshotError> {
    let block_size = reader.u32("tier block_size")?;
    let count = reader.u32("tier count")?;
    let mut tiers = Vec::new();
    for _ in 0..count {
        let medium = reader.string("tier medium")?;
        let blocks = reader.u32("tier block count")? as usize;
        let hashes: Vec<u64> = reader.plain(blocks, "tier blocks")?;
        if hashes
            .windows(2)
            .any(|pair| pair[0] as i64 >= pair[1] as i64)
        {
            return Err(replica_fault(name, TableFault::UnorderedTier { medium }));
        }
        let mut set = BlockSet::default();
        set.extend(hashes.into_iter().map(|hash| hash as i64));
        let mut tier = Tier::new(Medium::from(medium));
        tier.blocks = set;
        tiers.push(tier);
    }
    let any_blocks = tiers.iter().any(|tier| !tier.blocks.is_empty());
    if any_blocks && block_size == 0 {
        return Err(replica_fault(name, TableFault::ZeroTierBlockSize));
    }
    Tiers::from_parts(tiers, (block_size > 0).then_some(block_size))
        .ok_or_else(|| replica_fault(name, TableFault::TierNamedTwice))
}

/// What a snapshot's replicas hold of token ids, and what the loading store keeps.
#[derive(Clone, Copy)]
struct TokenIds {
    held: bool,
    kept: bool,
}

fn read_replica(
    reader: &mut Reader<'_>,
    version: u32,
    token_ids: TokenIds,
) -> Result<Replica, SnapshotError> {
    let name = reader.string("source name")?;
    let meta = read_meta(reader)?;
    let diverged = if reader.flag("diverged")? {
        Some(reader.string("diverged reason")?)
    } else {
        None
    };
    let block_size = reader.u32("block_size")?;
    let slots = reader.u32("slot count")? as usize;
    let free = reader.u32("free count")? as usize;
    let homes = reader.u32("index homes")? as usize;
    let capacity = reader.u32("index capacity")? as usize;
    let tombstones = reader.u64("tombstone count")?;
    let digest = reader.u64("digest")?;
    if slots > MAX_SLOTS || (slots > 0 && block_size == 0) {
        return Err(replica_fault(
            &name,
            TableFault::Slots { slots, block_size },
        ));
    }
    let blocks: Vec<Block> = reader.plain(slots, "blocks")?;
    let tokens = match token_ids {
        TokenIds { held: false, .. } => Vec::new(),
        TokenIds { kept: true, .. } => reader.plain(slots * block_size as usize, "token ids")?,
        TokenIds { kept: false, .. } => {
            let count = (slots * block_size as usize).saturating_mul(4);
            reader.take(count, "token ids")?;
            Vec::new()
        }
    };
    let free: Vec<u32> = reader.plain(free, "free slots")?;
    let entries = reader.plain(capacity, "index")?;
    let table = check_table(blocks, tokens, free, homes, entries, tombstones)
        .map_err(|fault| replica_fault(&name, fault))?;
    let table = BlockTable {
        block_size: (block_size > 0).then_some(block_size),
        keep_tokens: token_ids.kept,
        digest: StateDigest { value: digest },
        ..table
    };
    let tiers = if version >= 3 {
        read_tiers(reader, &name)?
    } else {
        Tiers::new()
    };
    Ok(Replica {
        name,
        meta,
        diverged,
        blocks: table,
        tiers,
    })
}

/// The live slots of a table, one bit each (small: checks that name slots at random read it,
/// not the block array).
///
/// The bits run one past the last slot (that bit never set), so a slot out of range is read
/// there, without a branch: the index check asks of empty buckets too, which fall at random.
struct LiveSlots {
    bits: Vec<u64>,
    slots: usize,
}

impl LiveSlots {
    fn new(slots: usize) -> Self {
        Self {
            bits: vec![0u64; slots / 64 + 1],
            slots,
        }
    }

    #[inline]
    fn set(&mut self, slot: usize) {
        self.bits[slot / 64] |= 1 << (slot % 64);
    }

    #[inline]
    fn has(&self, slot: u32) -> bool {
        let slot = (slot as usize).min(self.slots);
        self.bits[slot / 64] & (1 << (slot % 64)) != 0
    }
}

/// One pass over the blocks: which slots are live, how many, and that each live block's parent
/// is live and its child count in range; the tombstones counted must be `tombstones`.
///
/// A parent at an earlier slot is checked at once (its bit is already set); one at a later
/// slot (a slot reused after a removal) is kept and checked after the pass.
fn check_blocks(blocks: &[Block], tombstones: u64) -> Result<(LiveSlots, usize), TableFault> {
    let slots = blocks.len();
    let mut live_slots = LiveSlots::new(slots);
    let mut later_parents = Vec::new();
    let mut live = 0usize;
    let mut counted = 0u64;
    let mut counts_in_range = true;
    for (slot, block) in blocks.iter().enumerate() {
        if block.parent == FREE {
            continue;
        }
        live_slots.set(slot);
        live += 1;
        counted += u64::from(block.state & TOMBSTONE != 0);
        counts_in_range &= block.state & !TOMBSTONE < 1 << 30;
        let parent = block.parent;
        if parent == NO_PARENT {
            continue;
        }
        if (parent as usize) >= slot {
            later_parents.push(parent);
        } else if !live_slots.has(parent) {
            return Err(TableFault::ParentNotBlock(parent));
        }
    }
    if let Some(parent) = later_parents.into_iter().find(|&p| !live_slots.has(p)) {
        return Err(TableFault::ParentNotBlock(parent));
    }
    if !counts_in_range {
        return Err(TableFault::ChildCount);
    }
    if counted != tombstones {
        return Err(TableFault::TombstoneCount);
    }
    Ok((live_slots, live))
}

/// The table of the arrays read, when they fit together: every slot named is in range, free
/// slots are exactly the ones marked free, the index is well formed and names each live slot,
/// and the counts agree. Each array is read once (the index's own layout is checked in the
/// same pass as the slots it names).
fn check_table(
    blocks: Vec<Block>,
    tokens: Vec<u32>,
    free: Vec<u32>,
    homes: usize,
    entries: Vec<u64>,
    tombstones: u64,
) -> Result<BlockTable, TableFault> {
    let (live_slots, live) = check_blocks(&blocks, tombstones)?;
    if live + free.len() != blocks.len()
        || free
            .iter()
            .any(|&slot| slot as usize >= blocks.len() || live_slots.has(slot))
    {
        return Err(TableFault::FreeSlots);
    }
    let index = SlotIndex::from_parts_checked(homes, entries, |slot| live_slots.has(slot))
        .ok_or(TableFault::MalformedIndex)?;
    if index.len() != live {
        return Err(TableFault::IndexMismatch);
    }
    Ok(BlockTable {
        blocks,
        tokens,
        free,
        index,
        tombstones,
        ..BlockTable::default()
    })
}

/// The store `to_bytes` wrote, keeping token ids exactly when it did; `SnapshotError` when
/// `data` is not such a snapshot.
pub fn from_bytes(data: &[u8]) -> Result<ReplicaStore, SnapshotError> {
    from_bytes_with(data, None)
}

/// The store `to_bytes` wrote, as a store that keeps token ids when `keep_tokens`: a snapshot's
/// token ids are dropped when not, and a snapshot that holds none is refused when so
/// (`SnapshotError::NoTokenIds`); `SnapshotError` when `data` is not such a snapshot.
pub fn from_bytes_keeping(data: &[u8], keep_tokens: bool) -> Result<ReplicaStore, SnapshotError> {
    from_bytes_with(data, Some(keep_tokens))
}

fn from_bytes_with(data: &[u8], keep_tokens: Option<bool>) -> Result<ReplicaStore, SnapshotError> {
    if data.len() < MAGIC.len() + 8 + CHECKSUM_BYTES {
        return Err(SnapshotError::TooShort(data.len()));
    }
    let mut magic = [0u8; MAGIC.len()];
    magic.copy_from_slice(&data[..MAGIC.len()]);
    if &magic != MAGIC {
        return Err(SnapshotError::NotSnapshot { magic });
    }
    let (body, tail) = data.split_at(data.len() - CHECKSUM_BYTES);
    let mut reader = Reader {
        data: body,
        at: MAGIC.len(),
    };
    let version = reader.u32("version")?;
    if !READS.contains(&version) {
        return Err(SnapshotError::UnsupportedVersion {
            version,
            reads: &READS,
        });
    }
    let expected = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if crc32c::crc32c(body) != expected {
        return Err(SnapshotError::ChecksumMismatch);
    }
    let count = reader.u32("replica count")?;
    let held = version < 5 || reader.flag("keeps token ids")?;
    let kept = keep_tokens.unwrap_or(held);
    if kept && !held {
        return Err(SnapshotError::NoTokenIds);
    }
    let token_ids = TokenIds { held, kept };
    let mut replicas = Vec::new();
    for _ in 0..count {
        replicas.push(read_replica(&mut reader, version, token_ids)?);
    }
    let holders = if version >= 4 && reader.flag("holder index")? {
        Some(read_holders(&mut reader, &replicas)?)
    } else {
        None
    };
    if reader.at != body.len() {
        return Err(SnapshotError::TrailingBytes(body.len() - reader.at));
    }
    let mut store =
        ReplicaStore::from_replicas(replicas, kept).ok_or(SnapshotError::SharedSourceName)?;
    if let Some(holders) = holders {
        store.set_holders(holders);
    }
    Ok(store)
}

/// The holder index (version 4 on), checked against `replicas`.
fn read_holders(
    reader: &mut Reader<'_>,
    replicas: &[Replica],
) -> Result<HolderIndex, SnapshotError> {
    let words = replicas.len().div_ceil(64).max(1);
    let sets = reader.u32("holder set count")? as usize;
    let masks = reader.plain(sets.saturating_mul(2 * words), "holder sets")?;
    let homes = reader.u32("holder index homes")? as usize;
    let capacity = reader.u32("holder index capacity")? as usize;
    let buckets = reader.plain(capacity, "holder index")?;
    let held: Vec<(usize, u64)> = replicas
        .iter()
        .map(|r| (r.blocks.len(), r.blocks.tombstone_count()))
        .collect();
    HolderIndex::from_parts(&held, masks, homes, buckets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, Medium, Stored};

    fn sample() -> ReplicaStore {
        sample_from(ReplicaStore::new())
    }

    /// The sample's replicas, applied to `store`.
    fn sample_from(mut store: ReplicaStore) -> ReplicaStore {
        for (source, page_size) in [("a", 1u32), ("b", 4)] {
            let id = store.id_or_create(source);
            store.by_id_mut(id).meta = Some(SourceMeta {
                page_size,
                sliding_window_size: 8,
                swa_events: source == "a",
                json: format!("{{\"page_size\":{page_size}}}"),
            });
            let hashes: Vec<i64> = (1..=40)
                .map(|h| h * 1_000_003 + i64::from(page_size))
                .collect();
            let tokens = (0..40 * page_size).collect();
            let events = [
                Event::Stored(Stored {
                    hashes: hashes.clone().into(),
                    parent: None,
                    tokens,
                    block_size: page_size,
                    lora_id: None,
                    medium: None,
                }),
                Event::SwaEvicted {
                    hashes: hashes[3..5].into(),
                },
                Event::Removed {
                    hashes: hashes[30..].into(),
                    medium: None,
                    reason: None,
                },
            ];
            store.apply_events(source, &events).unwrap();
            if source == "a" {
                // lower tiers: CPU continues the GPU chain and holds some of it, DISK emptied
                let tier_events = [
                    tier_store("CPU", &hashes[20..40], page_size),
                    tier_store("DISK", &hashes[..2], page_size),
                    Event::Removed {
                        hashes: hashes[..2].into(),
                        medium: Some(Medium::from("DISK")),
                        reason: None,
                    },
                ];
                store.apply_events(source, &tier_events).unwrap();
            }
        }
        store.replica_mut("b").mark_diverged("gap");
        store.replica_mut("never-stored");
        // a source whose only tier was emptied (its page size is kept)
        let emptied = [
            tier_store("CPU", &[7, 8], 1),
            Event::Removed {
                hashes: [7, 8][..].into(),
                medium: Some(Medium::CPU),
                reason: None,
            },
        ];
        store.apply_events("emptied", &emptied).unwrap();
        store
    }

    fn tier_store(medium: &str, hashes: &[i64], page_size: u32) -> Event {
        Event::Stored(Stored {
            hashes: hashes.into(),
            parent: None,
            tokens: (0..hashes.len() as u32 * page_size).collect(),
            block_size: page_size,
            lora_id: None,
            medium: Some(Medium::from(medium)),
        })
    }

    #[test]
    fn round_trip_gives_the_same_store() {
        let store = sample();
        let bytes = to_bytes(&store);
        let loaded = from_bytes(&bytes).unwrap();
        assert_eq!(loaded, store);
        assert_eq!(to_bytes(&loaded), bytes);
        let a = loaded.get("a").unwrap();
        assert_eq!(a.tiers.get("CPU").unwrap().blocks.len(), 20);
        assert!(a.tiers.get("DISK").unwrap().blocks.is_empty());
        assert_eq!(a.digest(), store.get("a").unwrap().digest());
        assert_ne!(a.digest(), a.blocks.digest());
    }

    /// The holder index of `store`, as (hash, holders, tombstones) in hash order.
    fn holdings(store: &ReplicaStore) -> Vec<(i64, Vec<u64>, Vec<u64>)> {
        let mut all: Vec<_> = store
            .holders()
            .unwrap()
            .entries()
            .map(|(hash, (held, tomb))| (hash, held.to_vec(), tomb.to_vec()))
            .collect();
        all.sort_unstable();
        all
    }

    #[test]
    fn the_holder_index_is_stored_and_loaded_as_built() {
        let mut store = sample();
        store.enable_holders();
        let bytes = to_bytes(&store);
        let loaded = from_bytes(&bytes).unwrap();
        assert_eq!(loaded, store);
        assert_eq!(holdings(&loaded), holdings(&store));
        assert_eq!(to_bytes(&loaded), bytes);
        // kept in step event by event or built at once: the same bytes
        let mut in_step = ReplicaStore::new();
        in_step.enable_holders();
        assert_eq!(to_bytes(&sample_from(in_step)), bytes);
        // a store that keeps none writes none, and loads none
        assert!(from_bytes(&to_bytes(&sample()))
            .unwrap()
            .holders()
            .is_none());
        // version 3 (before the holder index) still loads; the store builds it when asked
        let mut old = from_bytes(&to_bytes_as(&store, 3)).unwrap();
        assert!(old.holders().is_none());
        old.enable_holders();
        assert_eq!(holdings(&old), holdings(&store));
    }

    #[test]
    fn a_holder_index_that_does_not_fit_is_refused_even_with_a_valid_checksum() {
        let mut store = sample();
        store.enable_holders();
        let bytes = to_bytes(&store);
        let tail = bytes.len() - CHECKSUM_BYTES;
        let resealed = |mut body: Vec<u8>| {
            let checksum = crc32c::crc32c(&body);
            put_u32(&mut body, checksum);
            body
        };
        let canonical = store.holders().unwrap().canonical(store.replicas().len());
        let (masks, _, buckets) = canonical.parts();
        let buckets_at = tail - buckets.len() * 12;
        let filled = buckets.iter().position(|b| b.set != 0).unwrap();
        // a bucket that names another holder set than its own: the counts no longer agree
        let mut renamed = bytes[..tail].to_vec();
        let set_at = buckets_at + filled * 12 + 8;
        let other = if buckets[filled].set == 1 { 2u32 } else { 1 };
        renamed[set_at..set_at + 4].copy_from_slice(&other.to_le_bytes());
        let reason = from_bytes(&resealed(renamed)).unwrap_err().to_string();
        assert!(reason.contains("holder index does not match"), "{reason}");
        // a bucket that names no set
        let mut dangling = bytes[..tail].to_vec();
        dangling[set_at..set_at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        let reason = from_bytes(&resealed(dangling)).unwrap_err().to_string();
        assert!(reason.contains("names no set"), "{reason}");
        // a bucket moved away from its place in the table
        let mut moved = bytes[..tail].to_vec();
        let empty = buckets.iter().position(|b| b.set == 0).unwrap();
        let (from, to) = (buckets_at + filled * 12, buckets_at + empty * 12);
        let bucket = moved[from..from + 12].to_vec();
        moved[to..to + 12].copy_from_slice(&bucket);
        moved[from..from + 12].fill(0);
        assert!(from_bytes(&resealed(moved)).is_err());
        // a set naming a source the store does not have
        let mut foreign = bytes[..tail].to_vec();
        let sets_at = buckets_at - 8 - masks.len() * 8;
        foreign[sets_at..sets_at + 8].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let reason = from_bytes(&resealed(foreign)).unwrap_err().to_string();
        assert!(reason.contains("out of range"), "{reason}");
    }

    #[test]
    fn a_store_without_token_ids_writes_none_and_a_store_keeping_them_refuses_it() {
        let mut kept = sample();
        kept.enable_holders();
        let mut bare = sample_from(ReplicaStore::keeping_tokens(false));
        bare.enable_holders();
        let (kept_bytes, bare_bytes) = (to_bytes(&kept), to_bytes(&bare));
        // the same replicas but the token ids (40 page-1 and 30 page-4 blocks' worth)
        assert_eq!(kept_bytes.len() - bare_bytes.len(), (40 + 40 * 4) * 4);
        let loaded = from_bytes(&bare_bytes).unwrap();
        assert!(!loaded.keeps_tokens());
        assert_eq!(loaded, bare);
        assert_eq!(holdings(&loaded), holdings(&kept));
        assert_eq!(to_bytes(&loaded), bare_bytes);
        assert_eq!(
            from_bytes_keeping(&bare_bytes, true).unwrap_err(),
            SnapshotError::NoTokenIds
        );
        // a snapshot with token ids, into a store that keeps none: dropped
        for bytes in [&kept_bytes, &to_bytes_as(&kept, 4), &to_bytes_as(&kept, 2)] {
            let dropped = from_bytes_keeping(bytes, false).unwrap();
            assert!(!dropped.keeps_tokens());
            for (new, old) in dropped.replicas().iter().zip(bare.replicas()) {
                assert_eq!(new.blocks, old.blocks); // the GPU's digest too (version 2: no tiers)
                assert!(new.blocks.tokens.is_empty());
            }
            assert!(from_bytes_keeping(bytes, true).unwrap().keeps_tokens());
        }
        assert_eq!(
            to_bytes(&from_bytes_keeping(&kept_bytes, false).unwrap()),
            bare_bytes
        );
        // a cleared replica still keeps none
        let mut store = from_bytes(&bare_bytes).unwrap();
        store.clear("a");
        assert!(!store.replica_mut("a").blocks.keeps_tokens());
        assert!(!store.replica_mut("new").blocks.keeps_tokens());
    }

    #[test]
    fn a_version_2_snapshot_still_loads_without_tiers() {
        let store = sample();
        let loaded = from_bytes(&to_bytes_as(&store, 2)).unwrap();
        for (old, new) in store.replicas().iter().zip(loaded.replicas()) {
            assert_eq!(new.blocks, old.blocks);
            assert_eq!((&new.meta, &new.diverged), (&old.meta, &old.diverged));
            assert!(!new.tiers.has_media());
        }
    }

    #[test]
    fn tiers_that_do_not_fit_are_refused_even_with_a_valid_checksum() {
        // hashes out of order (a block named twice), a tier named twice, the GPU as a tier
        let mut store = ReplicaStore::new();
        store
            .apply_events("a", &[tier_store("CPU", &[5, 6], 1)])
            .unwrap();
        let bytes = to_bytes_as(&store, 3); // the tiers last (version 4 adds the holder index)
        let tail = bytes.len() - CHECKSUM_BYTES;
        let resealed = |mut body: Vec<u8>| {
            let checksum = crc32c::crc32c(&body);
            put_u32(&mut body, checksum);
            body
        };
        let mut swapped = bytes[..tail].to_vec();
        let at = tail - 16;
        swapped[at..at + 8].copy_from_slice(&6i64.to_le_bytes());
        swapped[at + 8..].copy_from_slice(&5i64.to_le_bytes());
        let reason = from_bytes(&resealed(swapped)).unwrap_err().to_string();
        assert!(reason.contains("not in ascending order"), "{reason}");
        let mut renamed = bytes[..tail].to_vec();
        let name_at = tail - 16 - 4 - 3;
        renamed[name_at..name_at + 3].copy_from_slice(b"GPU");
        let reason = from_bytes(&resealed(renamed)).unwrap_err().to_string();
        assert!(reason.contains("named twice or is the GPU"), "{reason}");
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        let mut store = sample();
        store.enable_holders();
        let bytes = to_bytes(&store);
        for at in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            assert!(from_bytes(&bad).is_err(), "flip at {at}");
        }
        for length in (0..bytes.len()).step_by(13) {
            assert!(
                from_bytes(&bytes[..length]).is_err(),
                "truncated to {length}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(from_bytes(&longer).is_err());
    }

    #[test]
    fn foreign_magic_and_version_are_named() {
        let mut bytes = to_bytes(&sample());
        bytes[8] = 9;
        assert_eq!(
            from_bytes(&bytes).unwrap_err().to_string(),
            "replica snapshot version 9, this build reads 2, 3, 4 and 5"
        );
        bytes[0] = b'X';
        assert!(from_bytes(&bytes)
            .unwrap_err()
            .to_string()
            .starts_with("not a replica snapshot"));
    }

    #[test]
    fn arrays_that_do_not_fit_are_refused_even_with_a_valid_checksum() {
        let mut store = sample();
        store.replica_mut("a").blocks.blocks[2].parent = 10_000;
        let bytes = to_bytes(&store);
        let reason = from_bytes(&bytes).unwrap_err().to_string();
        assert!(reason.contains("parent slot 10000"), "{reason}");
    }
}
