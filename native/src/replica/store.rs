//! `ReplicaStore`: every source's replica, and applying decoded batches to them.
//!
//! One `BlockTable` per source. Per-source tables keep each replica exactly what its own
//! primary's events say (its own parents, child counts, tombstones and digest, even where two
//! sources hold the same block), make `AllBlocksCleared` O(1), and let a snapshot copy each
//! table as it is. Once enabled, a `HolderIndex` (block hash -> the sources holding it) is
//! kept in step with every change, so the prefix walk (`super::prefix`) looks each page of a
//! prompt up once for all sources.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use super::chains::ChainCache;
use super::error::ConsistencyError;
use super::holders::HolderIndex;
use super::prefetch::prefetch;
use super::prefix::{
    match_hashes, match_hashes_tiers, match_prefix, match_prefix_tiers, Answer, TierHits,
};
use super::source::{Effect, Replica};
use super::tiers::is_gpu;
use crate::events::{Batch, Event, Hashes, Stored};

/// How far ahead `apply_events` prefetches an event's hash list, its index buckets, and the
/// records it reads.
const LOAD_AHEAD: usize = 16;
const PROBE_AHEAD: usize = 8;
const RECORD_AHEAD: usize = 4;
/// How many pages of a multi-page store the holder index prefetches ahead.
const HOLDER_PREFETCH_PAGES: usize = 8;
/// Up to this many sources, a source is found by comparing names instead of through `ids`.
const FEW_SOURCES: usize = 8;

/// Every source's replica, by name and by a dense id, and (once enabled) the holder index that
/// the prefix walk reads.
#[derive(Clone, Debug)]
pub struct ReplicaStore {
    replicas: Vec<Replica>,
    /// Whether every replica's block table keeps token ids (see `super::blocks`).
    keep_tokens: bool,
    ids: HashMap<String, u32>,
    /// Derived from the replicas, kept in step by every change once enabled (see
    /// `enable_holders`); never part of a snapshot or of equality.
    holders: Option<HolderIndex>,
    /// Page digests of recent prompts, which the prefix walk reuses (see `super::chains`).
    chains: ChainCache,
}

impl PartialEq for ReplicaStore {
    fn eq(&self, other: &Self) -> bool {
        self.replicas == other.replicas
            && self.ids == other.ids
            && self.keep_tokens == other.keep_tokens
    }
}

impl Default for ReplicaStore {
    fn default() -> Self {
        Self::keeping_tokens(true)
    }
}

impl ReplicaStore {
    /// An empty store that keeps token ids.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store whose replicas keep each block's token ids when `keep_tokens`, else none
    /// (the same blocks, digests and answers either way; only reads of token ids differ).
    pub fn keeping_tokens(keep_tokens: bool) -> Self {
        Self {
            replicas: Vec::new(),
            keep_tokens,
            ids: HashMap::new(),
            holders: None,
            chains: ChainCache::new(),
        }
    }

    /// Whether the replicas keep each block's token ids.
    pub fn keeps_tokens(&self) -> bool {
        self.keep_tokens
    }

    /// Keep no token ids from now on, dropping those held.
    pub fn drop_tokens(&mut self) {
        self.keep_tokens = false;
        for replica in &mut self.replicas {
            replica.blocks.drop_tokens();
        }
    }

    /// A store of the given replicas (from a snapshot), which keep token ids exactly when
    /// `keep_tokens` says; None when two share a name.
    pub fn from_replicas(replicas: Vec<Replica>, keep_tokens: bool) -> Option<Self> {
        debug_assert!(replicas
            .iter()
            .all(|replica| replica.blocks.keeps_tokens() == keep_tokens));
        let mut ids = HashMap::with_capacity(replicas.len());
        for (id, replica) in replicas.iter().enumerate() {
            if ids.insert(replica.name.clone(), id as u32).is_some() {
                return None;
            }
        }
        Some(Self {
            replicas,
            keep_tokens,
            ids,
            holders: None,
            chains: ChainCache::new(),
        })
    }

    /// Every replica, in the order their sources were first seen.
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// The id of `source`, None when never seen.
    #[inline]
    pub fn id(&self, source: &str) -> Option<u32> {
        if self.replicas.len() <= FEW_SOURCES {
            // comparing a few names costs less than hashing one
            return self
                .replicas
                .iter()
                .position(|replica| replica.name == source)
                .map(|id| id as u32);
        }
        self.ids.get(source).copied()
    }

    /// The id of `source`, creating an empty replica when new.
    pub fn id_or_create(&mut self, source: &str) -> u32 {
        if let Some(id) = self.id(source) {
            return id;
        }
        let id = self.replicas.len() as u32;
        self.replicas.push(Replica::new(source, self.keep_tokens));
        self.ids.insert(source.to_owned(), id);
        if let Some(holders) = &mut self.holders {
            holders.cover(self.replicas.len());
        }
        id
    }

    /// The replica of `source`.
    pub fn get(&self, source: &str) -> Option<&Replica> {
        self.id(source).map(|id| &self.replicas[id as usize])
    }

    /// The replica with id `id` (ids come from `id` / `id_or_create`).
    pub fn by_id(&self, id: u32) -> &Replica {
        &self.replicas[id as usize]
    }

    /// The replica with id `id`, mutably (for its meta and divergence; blocks change through
    /// `apply_events` and `clear`, which keep the holder index in step).
    pub fn by_id_mut(&mut self, id: u32) -> &mut Replica {
        &mut self.replicas[id as usize]
    }

    /// The replica of `source`, created empty when new (see `by_id_mut`).
    pub fn replica_mut(&mut self, source: &str) -> &mut Replica {
        let id = self.id_or_create(source);
        &mut self.replicas[id as usize]
    }

    /// Apply the events of one decoded record (`crate::codec::decode`) to its source's
    /// replica (the caller sets the meta first). Events before a failing one stay applied; the
    /// failing one changes nothing. A multi-page `Stored` counts as its pages, one event each,
    /// as a decoder that yields one event per page gives them (`decode_batch`, docs/design.md §4): when
    /// it does not fit, the pages before the failing page stay applied.
    pub fn apply(&mut self, batch: &Batch) -> Result<(), ConsistencyError> {
        self.apply_in(&batch.header.source, &batch.events, Pages::OneEventEach)
    }

    /// Apply `events` to the replica of `source`, each as a whole (a multi-page `Stored` is one
    /// event: all of its pages or none).
    pub fn apply_events(&mut self, source: &str, events: &[Event]) -> Result<(), ConsistencyError> {
        self.apply_in(source, events, Pages::Whole)
    }

    fn apply_in(
        &mut self,
        source: &str,
        events: &[Event],
        pages: Pages,
    ) -> Result<(), ConsistencyError> {
        let id = self.id_or_create(source);
        let replica = &mut self.replicas[id as usize];
        let mut holders = self.holders.as_mut();
        // A software pipeline over the events, so the cache misses of successive events
        // overlap instead of queueing: the hash list of the event `LOAD_AHEAD` ahead is
        // prefetched; the index buckets of the one `PROBE_AHEAD` ahead (its hashes are loaded by
        // now); and the records of the blocks that the one `RECORD_AHEAD` ahead reads (its
        // buckets are loaded by now, so finding the slots is cheap).
        for (at, event) in events.iter().enumerate() {
            if let Some(first) = events.get(at + LOAD_AHEAD).and_then(first_hash) {
                prefetch(first);
            }
            if let Some(ahead) = events.get(at + PROBE_AHEAD) {
                if let Some(&first) = first_hash(ahead) {
                    replica.blocks.prefetch(first);
                    if let Some(holders) = holders.as_deref() {
                        holders.prefetch(first);
                    }
                }
                if let Event::Stored(Stored {
                    parent: Some(parent),
                    ..
                }) = ahead
                {
                    replica.blocks.prefetch(*parent);
                }
            }
            match events.get(at + RECORD_AHEAD) {
                Some(Event::Stored(Stored {
                    parent: Some(parent),
                    ..
                })) => replica.blocks.prefetch_block(*parent),
                Some(Event::Stored(_)) | None => {}
                Some(ahead) => {
                    if let Some(&first) = first_hash(ahead) {
                        replica.blocks.prefetch_block(first);
                    }
                }
            }
            apply_one(replica, holders.as_deref_mut(), id, event, pages)?;
        }
        Ok(())
    }

    /// Drop every block of `source` (created empty when new); this also ends a divergence.
    pub fn clear(&mut self, source: &str) {
        let id = self.id_or_create(source);
        let replica = &mut self.replicas[id as usize];
        if let Some(holders) = &mut self.holders {
            drop_holdings(replica, holders, id);
        }
        replica.clear();
    }

    /// Keep the holder index (block hash -> sources) from now on, building it from the
    /// replicas when it is not kept yet; the prefix walk needs it.
    pub fn enable_holders(&mut self) {
        if self.holders.is_none() {
            self.holders = Some(HolderIndex::build(&self.replicas));
        }
    }

    /// Keep `holders` as the holder index (a snapshot's, checked against these replicas).
    pub fn set_holders(&mut self, holders: HolderIndex) {
        self.holders = Some(holders);
    }

    /// Stop keeping the holder index (a bulk replay builds it once at its end with
    /// `enable_holders`, which costs less than keeping it in step event by event).
    pub fn disable_holders(&mut self) {
        self.holders = None;
    }

    /// The holder index, when kept.
    pub fn holders(&self) -> Option<&HolderIndex> {
        self.holders.as_ref()
    }

    /// Per source id, what it holds of `tokens` under the namespace `prior` (see
    /// `super::prefix`); enables the holder index first when it is not kept yet.
    pub fn match_prefix(&mut self, prior: &[u8], tokens: &[u32]) -> Vec<(u32, Answer)> {
        let Self {
            replicas,
            holders,
            chains,
            ..
        } = self;
        let holders = holders.get_or_insert_with(|| HolderIndex::build(replicas));
        match_prefix(replicas, holders, chains, prior, tokens)
    }

    /// Per source id, what it holds of a prompt given as the block hashes of its pages of
    /// `page_size` tokens (`super::prefix::match_hashes`); enables the holder index first when
    /// it is not kept yet.
    pub fn match_hashes(&mut self, page_size: u32, hashes: &[i64]) -> Vec<(u32, Answer)> {
        let Self {
            replicas, holders, ..
        } = self;
        let holders = holders.get_or_insert_with(|| HolderIndex::build(replicas));
        match_hashes(replicas, holders, page_size, hashes)
    }

    /// `match_prefix` with what each source's lower tiers hold after its GPU hit
    /// (`super::prefix::match_prefix_tiers`).
    pub fn match_prefix_tiers(
        &mut self,
        prior: &[u8],
        tokens: &[u32],
    ) -> (Vec<(u32, Answer)>, TierHits) {
        let Self {
            replicas,
            holders,
            chains,
            ..
        } = self;
        let holders = holders.get_or_insert_with(|| HolderIndex::build(replicas));
        match_prefix_tiers(replicas, holders, chains, prior, tokens)
    }

    /// `match_hashes` with what each source's lower tiers hold after its GPU hit.
    pub fn match_hashes_tiers(
        &mut self,
        page_size: u32,
        hashes: &[i64],
    ) -> (Vec<(u32, Answer)>, TierHits) {
        let Self {
            replicas, holders, ..
        } = self;
        let holders = holders.get_or_insert_with(|| HolderIndex::build(replicas));
        match_hashes_tiers(replicas, holders, page_size, hashes)
    }

    /// Total bytes the block tables and the lower tiers hold.
    pub fn heap_bytes(&self) -> usize {
        self.replicas
            .iter()
            .map(|r| r.blocks.heap_bytes() + r.tiers.heap_bytes())
            .sum()
    }

    /// Bytes the holder index holds (0 when not kept).
    pub fn holders_heap_bytes(&self) -> usize {
        self.holders.as_ref().map_or(0, HolderIndex::heap_bytes)
    }
}

/// The first block hash an event names (None for one that names none).
fn first_hash(event: &Event) -> Option<&i64> {
    event.block_hashes().and_then(|hashes| hashes.first())
}

/// How a multi-page `Stored` is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pages {
    /// As one event: all of its pages or none.
    Whole,
    /// As one event per page: the pages before one that does not fit stay applied.
    OneEventEach,
}

/// Apply one event to `replica` (source id `id`), keeping `holders` in step.
fn apply_one(
    replica: &mut Replica,
    holders: Option<&mut HolderIndex>,
    id: u32,
    event: &Event,
    pages: Pages,
) -> Result<(), ConsistencyError> {
    let effect = Effect::of(event);
    // a lower tier's store or removal: its own sets, never the block table or holder index
    match effect {
        Effect::Store(stored) if !is_gpu(stored.medium.as_ref()) => {
            return replica.store_tier(stored, pages == Pages::Whole);
        }
        Effect::Remove { medium, .. } if !is_gpu(medium) => return replica.apply_event(event),
        _ => {}
    }
    if let Effect::Store(stored) = effect {
        let result = replica.store(stored);
        let stored_pages = match result {
            Ok(()) => stored.hashes.len(),
            Err(error) if pages == Pages::Whole || stored.hashes.len() < 2 => return Err(error),
            // (rare) the whole event does not fit, which changed nothing: apply its pages one
            // by one to keep those before the first that does not fit
            Err(error) => match store_page_by_page(replica, stored) {
                Ok(()) => stored.hashes.len(),
                Err((done, page_error)) => {
                    if let Some(holders) = holders {
                        add_holders(holders, &stored.hashes[..done], id);
                    }
                    return Err(page_error.unwrap_or(error));
                }
            },
        };
        if let Some(holders) = holders {
            add_holders(holders, &stored.hashes[..stored_pages], id);
        }
        return Ok(());
    }
    let Some(holders) = holders else {
        return replica.apply_event(event);
    };
    if let Effect::Clear = effect {
        drop_holdings(replica, holders, id);
    }
    replica.apply_event(event)?;
    match effect {
        Effect::Remove { hashes, .. } => {
            for &block_hash in hashes {
                holders.remove(block_hash, id);
            }
        }
        Effect::Residency { hashes, resident } => {
            for &block_hash in hashes {
                holders.set_tombstone(block_hash, id, !resident);
            }
        }
        Effect::Store(_) | Effect::Clear => {}
    }
    Ok(())
}

/// Store the pages of `stored` one event each; on a page that does not fit, (pages stored
/// before it, its error). The error is None when the pages cannot be split (a token count that
/// fits no page split, `Stored::tokens_fit`: the caller's whole-event error stands).
fn store_page_by_page(
    replica: &mut Replica,
    stored: &Stored,
) -> Result<(), (usize, Option<ConsistencyError>)> {
    if stored.block_size == 0 || !stored.tokens_fit() {
        return Err((0, None));
    }
    let mut parent = stored.parent;
    for (page, (&block_hash, tokens)) in stored.hashes.iter().zip(stored.page_tokens()).enumerate()
    {
        let one = Event::Stored(Stored {
            hashes: Hashes::from_slice(&[block_hash]),
            parent,
            tokens: tokens.into(),
            block_size: stored.block_size,
            lora_id: stored.lora_id,
            medium: stored.medium.clone(),
        });
        replica
            .apply_event(&one)
            .map_err(|error| (page, Some(error)))?;
        parent = Some(block_hash);
    }
    Ok(())
}

/// `id` now holds `hashes` (just stored, SWA-resident).
fn add_holders(holders: &mut HolderIndex, hashes: &[i64], id: u32) {
    holders.reserve(hashes.len());
    for &block_hash in hashes.iter().take(HOLDER_PREFETCH_PAGES) {
        holders.prefetch(block_hash);
    }
    for (page, &block_hash) in hashes.iter().enumerate() {
        if let Some(&ahead) = hashes.get(page + HOLDER_PREFETCH_PAGES) {
            holders.prefetch(ahead);
        }
        holders.add(block_hash, id);
    }
}

/// Take every block of `replica` out of `holders` (before the replica is cleared).
fn drop_holdings(replica: &Replica, holders: &mut HolderIndex, id: u32) {
    for (block_hash, _) in replica.blocks.hashes() {
        holders.remove(block_hash, id);
    }
}

impl HolderIndex {
    /// The holder index of `replicas` (source id = position): each table's blocks in order of
    /// their hashes' check bits (its index is kept in that order), merged across sources, then
    /// laid into the table in one pass (`HolderIndex::from_sorted`).
    pub fn build(replicas: &[Replica]) -> Self {
        let held: Vec<usize> = (0..replicas.len())
            .filter(|&id| !replicas[id].blocks.is_empty())
            .collect();
        if let [only] = held[..] {
            // one source holds blocks: its own order is the order
            let blocks = replicas[only].blocks.by_check_bits();
            let holdings = blocks
                .into_iter()
                .map(|(_, hash, resident)| (hash, only as u32, resident));
            return HolderIndex::from_sorted(replicas.len(), holdings);
        }
        let mut streams: Vec<std::vec::IntoIter<(u32, i64, bool)>> = replicas
            .iter()
            .map(|replica| replica.blocks.by_check_bits().into_iter())
            .collect();
        let mut heads: BinaryHeap<Reverse<(u32, i64, u32, bool)>> =
            BinaryHeap::with_capacity(streams.len());
        for (id, stream) in streams.iter_mut().enumerate() {
            if let Some((top, hash, resident)) = stream.next() {
                heads.push(Reverse((top, hash, id as u32, resident)));
            }
        }
        let merged = std::iter::from_fn(|| {
            let Reverse((_, hash, id, resident)) = heads.pop()?;
            if let Some((top, next, resident)) = streams[id as usize].next() {
                heads.push(Reverse((top, next, id, resident)));
            }
            Some((hash, id, resident))
        });
        HolderIndex::from_sorted(replicas.len(), merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Header, Stored};
    use crate::replica::error::Inconsistency;
    use crate::replica::source::SourceMeta;

    fn batch(source: &str, events: Vec<Event>) -> Batch {
        Batch {
            header: Header {
                version: 2,
                source: source.to_owned(),
                epoch: "e".to_owned(),
                seq: 0,
                ts: 0.0,
                digest: None,
                meta_json: None,
            },
            events,
        }
    }

    fn stored(hashes: &[i64], parent: Option<i64>) -> Event {
        Event::Stored(Stored {
            hashes: hashes.to_vec().into(),
            parent,
            tokens: hashes.iter().map(|&h| h as u32).collect(),
            block_size: 1,
            lora_id: None,
            medium: None,
        })
    }

    #[test]
    fn sources_are_separate_and_errors_name_theirs() {
        let mut store = ReplicaStore::new();
        store
            .apply(&batch("a", vec![Event::Cleared, stored(&[1, 2], None)]))
            .unwrap();
        store.apply(&batch("b", vec![stored(&[1], None)])).unwrap();
        let err = store
            .apply(&batch("b", vec![stored(&[3], Some(2))]))
            .unwrap_err();
        assert_eq!(err.source, "b");
        assert_eq!(err.reason, Inconsistency::UnknownParent(2));
        assert_eq!(
            err.reason.to_string(),
            "BlockStored names unknown parent block 2"
        );
        assert_eq!(store.get("a").unwrap().blocks.len(), 2);
        assert_eq!(store.get("b").unwrap().blocks.len(), 1);
    }

    #[test]
    fn events_before_a_failure_stay_and_clear_heals_a_divergence() {
        let mut store = ReplicaStore::new();
        let err = store
            .apply(&batch(
                "a",
                vec![stored(&[1], None), stored(&[1], None), stored(&[2], None)],
            ))
            .unwrap_err();
        assert_eq!(
            err.reason.to_string(),
            "BlockStored for block 1, which is already held"
        );
        let replica = store.replica_mut("a");
        assert_eq!(replica.blocks.len(), 1);
        replica.mark_diverged("first");
        replica.mark_diverged("second");
        assert_eq!(replica.diverged.as_deref(), Some("first"));
        assert_eq!(replica.state_digest(), None);
        store.apply(&batch("a", vec![Event::Cleared])).unwrap();
        assert_eq!(
            store.get("a").unwrap().state_digest().unwrap(),
            "0000000000000000"
        );
    }

    #[test]
    fn sources_are_found_by_name_among_few_and_many() {
        let mut store = ReplicaStore::new();
        for count in 1..=2 * FEW_SOURCES as u32 {
            assert_eq!(store.id_or_create(&format!("s{count}")), count - 1);
            for id in 0..count {
                assert_eq!(store.id(&format!("s{}", id + 1)), Some(id));
            }
            assert_eq!(store.id("other"), None);
        }
    }

    #[test]
    fn a_meta_page_size_is_enforced_on_the_first_block() {
        let mut store = ReplicaStore::new();
        store.replica_mut("a").meta = Some(SourceMeta {
            page_size: 2,
            sliding_window_size: 4,
            swa_events: true,
            json: "{}".to_owned(),
        });
        let err = store
            .apply(&batch("a", vec![stored(&[1], None)]))
            .unwrap_err();
        assert_eq!(
            err.reason.to_string(),
            "block_size 1 differs from meta.page_size 2"
        );
    }

    #[test]
    fn a_decoded_multi_page_store_counts_as_its_pages() {
        // pages 1, 2, 3 where 3 is held already: whole, nothing is stored; page by page (a
        // decoded record, docs/design.md §4), pages 1 and 2 stay
        for (whole, held_after) in [(true, 1), (false, 3)] {
            let mut store = ReplicaStore::new();
            store.apply_events("a", &[stored(&[3], None)]).unwrap();
            let event = stored(&[1, 2, 3], None);
            let err = if whole {
                store.apply_events("a", &[event]).unwrap_err()
            } else {
                store.apply(&batch("a", vec![event])).unwrap_err()
            };
            assert_eq!(
                err.reason.to_string(),
                "BlockStored for block 3, which is already held"
            );
            assert_eq!(store.get("a").unwrap().blocks.len(), held_after);
        }
        // a page named twice is, page by page, a page stored twice
        let mut store = ReplicaStore::new();
        store.enable_holders();
        let err = store
            .apply(&batch("a", vec![stored(&[1, 2, 1], None)]))
            .unwrap_err();
        assert_eq!(
            err.reason.to_string(),
            "BlockStored for block 1, which is already held"
        );
        assert_eq!(store.get("a").unwrap().blocks.len(), 2);
        let kept: Vec<i64> = store.holders().unwrap().entries().map(|(h, _)| h).collect();
        assert_eq!(kept.len(), 2);
    }
}
