//! `Tiers`: the blocks one source holds on its lower tiers (host memory, disk, ...), per medium.
//!
//! The GPU stays the source's `BlockTable`; every other medium named by a `BlockStored` or
//! `BlockRemoved` (`"CPU"`, `"STORAGE"`, `"CPU_PINNED"`, `"DISK"`, any other name kept as it
//! came) is a set of block hashes: a lower tier holds copies of pages, whose parents need not be
//! held anywhere, so it keeps no tree. A store of a hash the medium already holds, or a removal
//! of one it does not, does not fit (the set is unchanged); `AllBlocksCleared` empties every
//! medium. The media a source has reported are remembered in the order first reported, so an
//! emptied tier still answers (0 tokens). Each held block adds `digest::tier_term` to the
//! source's digest.

use std::collections::HashSet;
use std::hash::{BuildHasherDefault, Hasher};

use super::error::Inconsistency;
use crate::digest::{medium_key, mix64, StateDigest};
use crate::events::Medium;

/// Whether an event's medium is the GPU (`None` or `"GPU"`): the block table's, not a tier's.
#[inline]
pub fn is_gpu(medium: Option<&Medium>) -> bool {
    match medium {
        None => true,
        Some(medium) => &**medium == "GPU",
    }
}

/// Hashes a block hash (already a SHA-256 prefix, but tests use small ints) by `mix64`.
#[derive(Clone, Copy, Debug, Default)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = mix64(self.0 ^ u64::from(byte));
        }
    }

    fn write_i64(&mut self, value: i64) {
        self.0 = mix64(value as u64);
    }
}

/// A set of block hashes.
pub type BlockSet = HashSet<i64, BuildHasherDefault<MixHasher>>;

/// The blocks held on one lower tier.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tier {
    pub medium: Medium,
    /// `digest::medium_key` of the medium's name.
    pub key: u64,
    pub blocks: BlockSet,
}

impl Tier {
    /// An empty tier of `medium`.
    pub fn new(medium: Medium) -> Self {
        Self {
            key: medium_key(&medium),
            medium,
            blocks: BlockSet::default(),
        }
    }
}

/// Every lower tier of one source; see the module docs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tiers {
    /// In the order first reported (a handful at most).
    tiers: Vec<Tier>,
    /// The sum of every held block's tier term.
    digest: StateDigest,
    /// Tokens per block of the tier stores (None until the first one).
    block_size: Option<u32>,
}

impl Tiers {
    /// No tier reported yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Tiers as a snapshot holds them (the digest is recomputed); None when a medium is named
    /// twice or is the GPU.
    pub fn from_parts(tiers: Vec<Tier>, block_size: Option<u32>) -> Option<Self> {
        let mut digest = StateDigest::default();
        for (at, tier) in tiers.iter().enumerate() {
            if &*tier.medium == "GPU" || tiers[..at].iter().any(|t| t.medium == tier.medium) {
                return None;
            }
            for &block_hash in &tier.blocks {
                digest.add_tier(block_hash, tier.key);
            }
        }
        Some(Self {
            tiers,
            digest,
            block_size,
        })
    }

    /// Every medium reported, in the order first reported, with its blocks.
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// The tier of `medium`, when reported.
    pub fn get(&self, medium: &str) -> Option<&Tier> {
        self.tiers.iter().find(|tier| &*tier.medium == medium)
    }

    /// Whether any medium was reported.
    pub fn has_media(&self) -> bool {
        !self.tiers.is_empty()
    }

    /// Blocks held on every tier together.
    pub fn block_count(&self) -> usize {
        self.tiers.iter().map(|tier| tier.blocks.len()).sum()
    }

    /// Whether no tier holds a block.
    pub fn is_empty(&self) -> bool {
        self.tiers.iter().all(|tier| tier.blocks.is_empty())
    }

    /// The digest of the tiers' blocks.
    pub fn digest(&self) -> StateDigest {
        self.digest
    }

    /// Tokens per block of the tier stores (None until the first one).
    pub fn block_size(&self) -> Option<u32> {
        self.block_size
    }

    /// Bytes the sets hold (about: capacity times a bucket and its control byte).
    pub fn heap_bytes(&self) -> usize {
        self.tiers
            .iter()
            .map(|tier| tier.blocks.capacity() * 9 + tier.medium.len())
            .sum()
    }

    /// `medium` now holds `hashes` (pages of `block_size`, checked by the caller). `whole`: all
    /// of them or none; else (one event per page) the pages before one that does not fit stay.
    pub fn store(
        &mut self,
        medium: &Medium,
        hashes: &[i64],
        block_size: u32,
        whole: bool,
    ) -> Result<(), Inconsistency> {
        if let Some(earlier) = self.block_size.filter(|&earlier| earlier != block_size) {
            return Err(Inconsistency::DiffersFromEarlier {
                block_size,
                medium: Some(medium.clone()),
                earlier,
            });
        }
        let (at, created) = match self.position(medium) {
            Some(at) => (at, false),
            None => {
                self.tiers.push(Tier::new(medium.clone()));
                (self.tiers.len() - 1, true)
            }
        };
        let tier = &mut self.tiers[at];
        tier.blocks.reserve(hashes.len());
        let mut failed = None;
        for (page, &block_hash) in hashes.iter().enumerate() {
            if !tier.blocks.insert(block_hash) {
                failed = Some(page);
                break;
            }
        }
        let kept = match failed {
            None => hashes.len(),
            Some(_) if whole => 0,
            Some(page) => page,
        };
        if let Some(page) = failed {
            for &undo in &hashes[kept..page] {
                tier.blocks.remove(&undo);
            }
        }
        for &block_hash in &hashes[..kept] {
            self.digest.add_tier(block_hash, tier.key);
        }
        if kept > 0 {
            self.block_size = Some(block_size);
        }
        let Some(page) = failed else {
            return Ok(());
        };
        let error = Inconsistency::AlreadyHeld {
            block: hashes[page],
            medium: Some(tier.medium.clone()),
        };
        if created && kept == 0 {
            // a medium first named by a store that does not fit stays unreported
            self.tiers.pop();
        }
        Err(error)
    }

    /// `medium` no longer holds `hashes`: all of them or none.
    pub fn remove(&mut self, medium: &Medium, hashes: &[i64]) -> Result<(), Inconsistency> {
        let Some(at) = self.position(medium) else {
            return match hashes.first() {
                Some(&block_hash) => Err(Inconsistency::UnknownBlock {
                    event: "BlockRemoved",
                    block: block_hash,
                    medium: Some(medium.clone()),
                }),
                None => Ok(()),
            };
        };
        let tier = &mut self.tiers[at];
        for (page, &block_hash) in hashes.iter().enumerate() {
            if !tier.blocks.remove(&block_hash) {
                for &undo in &hashes[..page] {
                    tier.blocks.insert(undo);
                }
                return Err(Inconsistency::UnknownBlock {
                    event: "BlockRemoved",
                    block: block_hash,
                    medium: Some(tier.medium.clone()),
                });
            }
        }
        for &block_hash in hashes {
            self.digest.remove_tier(block_hash, tier.key);
        }
        Ok(())
    }

    /// Empty every tier (the media stay reported).
    pub fn clear(&mut self) {
        for tier in &mut self.tiers {
            tier.blocks = BlockSet::default();
        }
        self.digest = StateDigest::default();
        self.block_size = None;
    }

    fn position(&self, medium: &Medium) -> Option<usize> {
        self.tiers.iter().position(|tier| tier.medium == *medium)
    }
}

#[cfg(test)]
mod tests {
    use crate::digest::{block_term, tier_term, StateDigest};
    use crate::events::{Batch, Event, Header, Medium, Stored};
    use crate::replica::source::SourceMeta;
    use crate::replica::ReplicaStore;

    fn stored(medium: Option<&str>, hashes: &[i64], parent: Option<i64>) -> Event {
        Event::Stored(Stored {
            hashes: hashes.into(),
            parent,
            tokens: hashes.iter().map(|&h| h as u32).collect(),
            block_size: 1,
            lora_id: None,
            medium: medium.map(Medium::from),
        })
    }

    fn removed(medium: Option<&str>, hashes: &[i64]) -> Event {
        Event::Removed {
            hashes: hashes.into(),
            medium: medium.map(Medium::from),
            reason: None,
        }
    }

    fn media(store: &ReplicaStore, source: &str) -> Vec<(String, usize)> {
        let tiers = &store.get(source).unwrap().tiers;
        tiers
            .tiers()
            .iter()
            .map(|tier| (tier.medium.to_string(), tier.blocks.len()))
            .collect()
    }

    #[test]
    fn lower_tier_stores_and_removals_keep_their_own_sets() {
        let mut store = ReplicaStore::new();
        store.enable_holders();
        let events = [
            stored(None, &[1, 2], None),
            stored(Some("GPU"), &[3], Some(2)),
            // parents need not be held on the tier; GPU blocks may be on a tier too
            stored(Some("CPU"), &[2, 3, 4], Some(1)),
            stored(Some("X_CUSTOM"), &[9], Some(77)),
            removed(Some("CPU"), &[3]),
        ];
        store.apply_events("a", &events).unwrap();
        let replica = store.get("a").unwrap();
        assert_eq!(replica.blocks.len(), 3);
        assert_eq!(
            media(&store, "a"),
            vec![("CPU".to_owned(), 2), ("X_CUSTOM".to_owned(), 1)]
        );
        // the holder index holds the GPU blocks only
        assert_eq!(store.holders().unwrap().entries().count(), 3);
        let mut expected = StateDigest::default();
        expected.add(1, None, true);
        expected.add(2, Some(1), true);
        expected.add(3, Some(2), true);
        let gpu = expected;
        for (hash, medium) in [(2, "CPU"), (4, "CPU"), (9, "X_CUSTOM")] {
            expected.value = expected.value.wrapping_add(tier_term(hash, medium));
        }
        assert_eq!(replica.blocks.digest(), gpu);
        assert_eq!(replica.digest(), expected);
        assert_eq!(replica.state_digest().unwrap(), expected.hexdigest());
        // removing a GPU block leaves the tiers
        store.apply_events("a", &[removed(None, &[3])]).unwrap();
        assert_eq!(
            store.get("a").unwrap().digest().value,
            expected.value.wrapping_sub(block_term(3, Some(2), true))
        );
    }

    #[test]
    fn a_tier_event_that_does_not_fit_changes_nothing_and_names_the_medium() {
        let mut store = ReplicaStore::new();
        store
            .apply_events("a", &[stored(Some("CPU"), &[1, 2], None)])
            .unwrap();
        let before = store.get("a").unwrap().clone();
        let cases = [
            (
                stored(Some("CPU"), &[3, 2], None),
                "BlockStored for block 2, which is already held on CPU",
            ),
            (
                stored(Some("CPU"), &[5, 5], None),
                "BlockStored for block 5, which is already held on CPU",
            ),
            (
                removed(Some("CPU"), &[1, 7]),
                "BlockRemoved names unknown block 7 on CPU",
            ),
            (
                removed(Some("CPU"), &[1, 1]),
                "BlockRemoved names unknown block 1 on CPU",
            ),
            (
                removed(Some("DISK"), &[1]),
                "BlockRemoved names unknown block 1 on DISK",
            ),
            (
                Event::Stored(Stored {
                    hashes: [4][..].into(),
                    parent: None,
                    tokens: [1, 2][..].into(),
                    block_size: 2,
                    lora_id: None,
                    medium: Some(Medium::CPU),
                }),
                "block_size 2 on CPU differs from earlier 1",
            ),
            (
                Event::Stored(Stored {
                    hashes: [4][..].into(),
                    parent: None,
                    tokens: [1][..].into(),
                    block_size: 2,
                    lora_id: None,
                    medium: Some(Medium::from("DISK")),
                }),
                "BlockStored has 1 token ids for 1 block(s) of size 2",
            ),
        ];
        for (event, reason) in cases {
            let error = store.apply_events("a", &[event]).unwrap_err();
            assert_eq!(error.reason.to_string(), reason);
            assert_eq!(store.get("a").unwrap(), &before, "{reason}");
        }
        // a medium first named by a store that does not fit is not reported
        assert_eq!(media(&store, "a"), vec![("CPU".to_owned(), 2)]);
        // the meta's page size binds the tiers as it does the GPU
        store.replica_mut("b").meta = Some(SourceMeta {
            page_size: 2,
            sliding_window_size: 4,
            swa_events: true,
            json: "{}".to_owned(),
        });
        let error = store
            .apply_events("b", &[stored(Some("CPU"), &[1], None)])
            .unwrap_err();
        assert_eq!(
            error.reason.to_string(),
            "block_size 1 on CPU differs from meta.page_size 2"
        );
    }

    #[test]
    fn a_decoded_multi_page_tier_store_counts_as_its_pages() {
        let batch = |events| Batch {
            header: Header {
                version: 3,
                source: "a".to_owned(),
                epoch: "e".to_owned(),
                seq: 0,
                ts: 0.0,
                digest: None,
                meta_json: None,
            },
            events,
        };
        let mut store = ReplicaStore::new();
        store
            .apply(&batch(vec![stored(Some("CPU"), &[3], None)]))
            .unwrap();
        let error = store
            .apply(&batch(vec![stored(Some("CPU"), &[1, 2, 3, 4], None)]))
            .unwrap_err();
        assert_eq!(
            error.reason.to_string(),
            "BlockStored for block 3, which is already held on CPU"
        );
        assert_eq!(media(&store, "a"), vec![("CPU".to_owned(), 3)]);
        let mut expected = StateDigest::default();
        for hash in [1, 2, 3] {
            expected.value = expected.value.wrapping_add(tier_term(hash, "CPU"));
        }
        assert_eq!(store.get("a").unwrap().digest(), expected);
    }

    #[test]
    fn clearing_empties_every_tier_and_keeps_the_media_reported() {
        let mut store = ReplicaStore::new();
        let events = [
            stored(None, &[1], None),
            stored(Some("CPU"), &[1, 2], None),
            stored(Some("DISK"), &[3], None),
            Event::Cleared,
        ];
        store.apply_events("a", &events).unwrap();
        assert_eq!(
            media(&store, "a"),
            vec![("CPU".to_owned(), 0), ("DISK".to_owned(), 0)]
        );
        let replica = store.get("a").unwrap();
        assert_eq!(replica.digest().value, 0);
        assert!(replica.blocks.is_empty() && replica.tiers.is_empty());
        store
            .apply_events("a", &[stored(Some("CPU"), &[1, 2], None)])
            .unwrap();
        store.clear("a");
        assert_eq!(store.get("a").unwrap().digest().value, 0);
    }
}
