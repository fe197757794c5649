//! A `ReplicaStore` to and from bytes: a bulk, checksummed copy of each table's arrays.
//!
//! Layout (little-endian throughout):
//!
//! ```text
//! b"SWAREPL\0" | u32 version | u32 replica count
//! per replica:
//!   str name | u8 has meta [u32 page_size, u32 sliding_window_size, u8 swa_events, str json]
//!   | u8 diverged [str reason] | u32 block_size (0: none yet) | u32 slots | u32 free
//!   | u32 index homes | u32 index capacity | u64 tombstones | u64 digest
//!   | (i64 hash, u32 parent, u32 state)[slots] | u32 tokens[slots * block_size]
//!   | u32 free[free] | u64 index[capacity]
//!   | u32 tier block_size (0: none yet) | u32 tier count            (version 3 on)
//!   | per tier: str medium | u32 blocks | i64 hashes[blocks], ascending
//! u32 crc32c of everything before it
//! ```
//! where `str` is a u32 byte length and UTF-8 bytes. The index is copied too, so loading is
//! array copies and one linear check, no rehashing. A snapshot whose magic, version or checksum
//! is wrong, or whose arrays do not fit together, is refused with a reason; nothing is loaded.
//! Version 2 (no lower tiers) still loads: its replicas hold no tier.

use super::blocks::{Block, BlockTable, FREE, MAX_SLOTS, NO_PARENT, TOMBSTONE};
use super::index::SlotIndex;
use super::source::{Replica, SourceMeta};
use super::store::ReplicaStore;
use super::tiers::{BlockSet, Tier, Tiers};
use crate::digest::StateDigest;
use crate::events::Medium;

/// The first bytes of a replica snapshot.
pub const MAGIC: &[u8; 8] = b"SWAREPL\0";
/// The layout version this build writes.
pub const VERSION: u32 = 3;
/// The layout versions this build reads (2: before lower tiers).
pub const READS: [u32; 2] = [2, 3];
const CHECKSUM_BYTES: usize = 4;

/// Why bytes are not a snapshot this build can load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotError {
    pub reason: String,
}

impl SnapshotError {
    fn new(reason: impl Into<String>) -> Self {
        Self {
            reason: reason.into(),
        }
    }
}

impl std::fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

impl std::error::Error for SnapshotError {}

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

/// The bytes of every replica of `store` in layout `version` (2 leaves the tiers out).
fn to_bytes_as(store: &ReplicaStore, version: u32) -> Vec<u8> {
    let size: usize = store.replicas().iter().map(replica_bytes).sum();
    let mut out = Vec::with_capacity(16 + size + CHECKSUM_BYTES);
    out.extend_from_slice(MAGIC);
    put_u32(&mut out, version);
    put_u32(&mut out, store.replicas().len() as u32);
    for replica in store.replicas() {
        write_replica(&mut out, replica, version);
    }
    let checksum = crc32c::crc32c(&out);
    put_u32(&mut out, checksum);
    out
}

// --- reading ----------------------------------------------------------------------------------

struct Reader<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize, what: &str) -> Result<&'a [u8], SnapshotError> {
        let end = self
            .at
            .checked_add(count)
            .filter(|&end| end <= self.data.len())
            .ok_or_else(|| {
                SnapshotError::new(format!("truncated in {what} at byte {}", self.at))
            })?;
        let bytes = &self.data[self.at..end];
        self.at = end;
        Ok(bytes)
    }

    fn u8(&mut self, what: &str) -> Result<u8, SnapshotError> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32, SnapshotError> {
        let bytes = self.take(4, what)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64, SnapshotError> {
        let mut bytes = [0u8; 8];
        bytes.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(bytes))
    }

    fn flag(&mut self, what: &str) -> Result<bool, SnapshotError> {
        match self.u8(what)? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(SnapshotError::new(format!("{what} flag is {other}"))),
        }
    }

    fn string(&mut self, what: &str) -> Result<String, SnapshotError> {
        let length = self.u32(what)? as usize;
        let bytes = self.take(length, what)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| SnapshotError::new(format!("{what} is not UTF-8")))
    }

    fn u32s(&mut self, count: usize, what: &str) -> Result<Vec<u32>, SnapshotError> {
        let bytes = self.take(count.saturating_mul(4), what)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    fn blocks(&mut self, count: usize) -> Result<Vec<Block>, SnapshotError> {
        let bytes = self.take(count.saturating_mul(16), "blocks")?;
        Ok(bytes
            .chunks_exact(16)
            .map(|c| Block {
                hash: i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]),
                parent: u32::from_le_bytes([c[8], c[9], c[10], c[11]]),
                state: u32::from_le_bytes([c[12], c[13], c[14], c[15]]),
            })
            .collect())
    }

    fn u64s(&mut self, count: usize, what: &str) -> Result<Vec<u64>, SnapshotError> {
        let bytes = self.take(count.saturating_mul(8), what)?;
        Ok(bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
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
        return Err(SnapshotError::new("meta with a zero page or window size"));
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
        let hashes = reader.u64s(blocks, "tier blocks")?;
        if hashes
            .windows(2)
            .any(|pair| pair[0] as i64 >= pair[1] as i64)
        {
            return Err(SnapshotError::new(format!(
                "{name:?}: the blocks of tier {medium:?} are not in ascending order"
            )));
        }
        let mut set = BlockSet::default();
        set.extend(hashes.into_iter().map(|hash| hash as i64));
        let mut tier = Tier::new(Medium::from(medium));
        tier.blocks = set;
        tiers.push(tier);
    }
    let any_blocks = tiers.iter().any(|tier| !tier.blocks.is_empty());
    if any_blocks && block_size == 0 {
        return Err(SnapshotError::new(format!(
            "{name:?}: tiers hold blocks of block_size 0"
        )));
    }
    Tiers::from_parts(tiers, (block_size > 0).then_some(block_size))
        .ok_or_else(|| SnapshotError::new(format!("{name:?}: a tier is named twice or is the GPU")))
}

fn read_replica(reader: &mut Reader<'_>, version: u32) -> Result<Replica, SnapshotError> {
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
        return Err(SnapshotError::new(format!(
            "{name:?}: {slots} slots of block size {block_size}"
        )));
    }
    let blocks = reader.blocks(slots)?;
    let tokens = reader.u32s(slots * block_size as usize, "token ids")?;
    let free = reader.u32s(free, "free slots")?;
    let entries = reader.u64s(capacity, "index")?;
    let index = SlotIndex::from_parts(homes, entries)
        .ok_or_else(|| SnapshotError::new(format!("{name:?}: malformed index")))?;
    let table = BlockTable {
        block_size: (block_size > 0).then_some(block_size),
        blocks,
        tokens,
        free,
        index,
        tombstones,
        digest: StateDigest { value: digest },
        ..BlockTable::default()
    };
    check_table(&table).map_err(|why| SnapshotError::new(format!("{name:?}: {why}")))?;
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

/// The arrays fit together: every slot named is in range, free slots are exactly the ones
/// marked free, the index names each live slot, and the counts agree.
///
/// Liveness is read from a bitmap of the slots (one bit each, built in one pass over the
/// blocks), so checking the parents, the free list and the index (whose slots come in hash
/// order) touches that small bitmap at random, not the block array.
fn check_table(table: &BlockTable) -> Result<(), String> {
    let blocks = &table.blocks;
    let slots = blocks.len();
    let mut live_slots = vec![0u64; slots.div_ceil(64)];
    for (slot, block) in blocks.iter().enumerate() {
        if block.parent != FREE {
            live_slots[slot / 64] |= 1 << (slot % 64);
        }
    }
    let is_live = |slot: u32| {
        let slot = slot as usize;
        slot < slots && live_slots[slot / 64] & (1 << (slot % 64)) != 0
    };
    let mut live = 0usize;
    let mut tombstones = 0u64;
    for block in blocks {
        if block.parent == FREE {
            continue;
        }
        if block.parent != NO_PARENT && !is_live(block.parent) {
            return Err(format!("parent slot {} is not a block", block.parent));
        }
        if block.state & !TOMBSTONE >= 1 << 30 {
            return Err("a child count is out of range".to_owned());
        }
        live += 1;
        tombstones += u64::from(block.state & TOMBSTONE != 0);
    }
    if tombstones != table.tombstones {
        return Err("tombstone count does not match the blocks".to_owned());
    }
    if live + table.free.len() != slots
        || table
            .free
            .iter()
            .any(|&slot| slot as usize >= slots || is_live(slot))
    {
        return Err("free slots do not match the blocks".to_owned());
    }
    if table.index.len() != live || table.index.slots().any(|slot| !is_live(slot)) {
        return Err("index does not match the blocks".to_owned());
    }
    Ok(())
}

/// The store `to_bytes` wrote; `SnapshotError` when `data` is not such a snapshot.
pub fn from_bytes(data: &[u8]) -> Result<ReplicaStore, SnapshotError> {
    if data.len() < MAGIC.len() + 8 + CHECKSUM_BYTES {
        return Err(SnapshotError::new(format!(
            "{} bytes is too short for a replica snapshot",
            data.len()
        )));
    }
    if &data[..MAGIC.len()] != MAGIC {
        return Err(SnapshotError::new(format!(
            "not a replica snapshot (magic {:?})",
            String::from_utf8_lossy(&data[..MAGIC.len()])
        )));
    }
    let (body, tail) = data.split_at(data.len() - CHECKSUM_BYTES);
    let mut reader = Reader {
        data: body,
        at: MAGIC.len(),
    };
    let version = reader.u32("version")?;
    if !READS.contains(&version) {
        return Err(SnapshotError::new(format!(
            "replica snapshot version {version}, this build reads 2 and 3"
        )));
    }
    let expected = u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]);
    if crc32c::crc32c(body) != expected {
        return Err(SnapshotError::new("checksum mismatch"));
    }
    let count = reader.u32("replica count")?;
    let mut replicas = Vec::new();
    for _ in 0..count {
        replicas.push(read_replica(&mut reader, version)?);
    }
    if reader.at != body.len() {
        return Err(SnapshotError::new(format!(
            "{} trailing bytes",
            body.len() - reader.at
        )));
    }
    ReplicaStore::from_replicas(replicas)
        .ok_or_else(|| SnapshotError::new("two replicas share a source name"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, Medium, Stored};

    fn sample() -> ReplicaStore {
        let mut store = ReplicaStore::new();
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
        let bytes = to_bytes(&store);
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
        let reason = from_bytes(&resealed(swapped)).unwrap_err().reason;
        assert!(reason.contains("not in ascending order"), "{reason}");
        let mut renamed = bytes[..tail].to_vec();
        let name_at = tail - 16 - 4 - 3;
        renamed[name_at..name_at + 3].copy_from_slice(b"GPU");
        let reason = from_bytes(&resealed(renamed)).unwrap_err().reason;
        assert!(reason.contains("named twice or is the GPU"), "{reason}");
    }

    #[test]
    fn every_flipped_bit_and_every_truncation_is_refused() {
        let bytes = to_bytes(&sample());
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
            from_bytes(&bytes).unwrap_err().reason,
            "replica snapshot version 9, this build reads 2 and 3"
        );
        bytes[0] = b'X';
        assert!(from_bytes(&bytes)
            .unwrap_err()
            .reason
            .starts_with("not a replica snapshot"));
    }

    #[test]
    fn arrays_that_do_not_fit_are_refused_even_with_a_valid_checksum() {
        let mut store = sample();
        store.replica_mut("a").blocks.blocks[2].parent = 10_000;
        let bytes = to_bytes(&store);
        let reason = from_bytes(&bytes).unwrap_err().reason;
        assert!(reason.contains("parent slot 10000"), "{reason}");
    }
}
