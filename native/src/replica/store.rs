//! `ReplicaStore`: every source's replica, and applying decoded batches to them.
//!
//! One `BlockTable` per source. Per-source tables keep each replica exactly what its own
//! primary's events say (its own parents, child counts, tombstones and digest, even where two
//! sources hold the same block), make `AllBlocksCleared` O(1), and let a snapshot copy each
//! table as it is. The prefix walk (`super::prefix`) still visits the prompt once for all
//! sources.

use std::collections::HashMap;

use super::blocks::BlockTable;
use super::ConsistencyError;
use crate::events::{Batch, Event};

/// What a replica needs of its source's `meta` (parsed by the caller; the JSON is kept as is
/// for snapshots).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceMeta {
    pub page_size: u32,
    pub sliding_window_size: u32,
    /// False when the source's stream carries no tombstone events (`"swa_events": false`):
    /// its SWA-usable lengths are unknown.
    pub swa_events: bool,
    pub json: String,
}

/// One source's replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Replica {
    pub name: String,
    pub meta: Option<SourceMeta>,
    pub diverged: Option<String>,
    pub blocks: BlockTable,
}

impl Replica {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            meta: None,
            diverged: None,
            blocks: BlockTable::new(),
        }
    }

    fn fail(&self, reason: String) -> ConsistencyError {
        ConsistencyError {
            source: self.name.clone(),
            reason,
        }
    }

    /// Apply one event; the replica is unchanged when it does not fit.
    pub fn apply_event(&mut self, event: &Event) -> Result<(), ConsistencyError> {
        let result = match event {
            Event::Stored(stored) => self.blocks.store(
                &stored.hashes,
                stored.parent,
                &stored.tokens,
                stored.block_size,
                self.meta.as_ref().map(|meta| meta.page_size),
            ),
            Event::Removed { hashes, .. } => self.blocks.remove(hashes),
            Event::SwaEvicted { hashes } => self.blocks.set_residency(hashes, false),
            Event::SwaRestored { hashes } => self.blocks.set_residency(hashes, true),
            Event::Cleared => {
                self.clear();
                Ok(())
            }
        };
        result.map_err(|reason| self.fail(reason))
    }

    /// Drop every block; this also ends a divergence (the source starts over).
    pub fn clear(&mut self) {
        self.blocks.clear();
        self.diverged = None;
    }

    /// Answer "unknown" until the next `AllBlocksCleared` (the first reason is kept).
    pub fn mark_diverged(&mut self, reason: &str) {
        if self.diverged.is_none() {
            self.diverged = Some(reason.to_owned());
        }
    }

    /// The digest as held, or None while diverged.
    pub fn state_digest(&self) -> Option<String> {
        match self.diverged {
            Some(_) => None,
            None => Some(self.blocks.digest().hexdigest()),
        }
    }
}

/// Every source's replica, by name and by a dense id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ReplicaStore {
    replicas: Vec<Replica>,
    ids: HashMap<String, u32>,
}

impl ReplicaStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A store of the given replicas (from a snapshot); None when two share a name.
    pub fn from_replicas(replicas: Vec<Replica>) -> Option<Self> {
        let mut ids = HashMap::with_capacity(replicas.len());
        for (id, replica) in replicas.iter().enumerate() {
            if ids.insert(replica.name.clone(), id as u32).is_some() {
                return None;
            }
        }
        Some(Self { replicas, ids })
    }

    /// Every replica, in the order their sources were first seen.
    pub fn replicas(&self) -> &[Replica] {
        &self.replicas
    }

    /// The id of `source`, None when never seen.
    pub fn id(&self, source: &str) -> Option<u32> {
        self.ids.get(source).copied()
    }

    /// The id of `source`, creating an empty replica when new.
    pub fn id_or_create(&mut self, source: &str) -> u32 {
        if let Some(&id) = self.ids.get(source) {
            return id;
        }
        let id = self.replicas.len() as u32;
        self.replicas.push(Replica::new(source));
        self.ids.insert(source.to_owned(), id);
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

    /// The replica with id `id`, mutably.
    pub fn by_id_mut(&mut self, id: u32) -> &mut Replica {
        &mut self.replicas[id as usize]
    }

    /// The replica of `source`, created empty when new.
    pub fn replica_mut(&mut self, source: &str) -> &mut Replica {
        let id = self.id_or_create(source);
        &mut self.replicas[id as usize]
    }

    /// Apply the events of one in-order batch to its source's replica (the caller sets the
    /// meta first). Events before a failing one stay applied; the failing one changes nothing.
    pub fn apply(&mut self, batch: &Batch) -> Result<(), ConsistencyError> {
        self.apply_events(&batch.header.source, &batch.events)
    }

    /// Apply `events` to the replica of `source`.
    pub fn apply_events(&mut self, source: &str, events: &[Event]) -> Result<(), ConsistencyError> {
        let replica = self.replica_mut(source);
        events
            .iter()
            .try_for_each(|event| replica.apply_event(event))
    }

    /// Total bytes the block tables hold.
    pub fn heap_bytes(&self) -> usize {
        self.replicas.iter().map(|r| r.blocks.heap_bytes()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Header, Stored};

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
            hashes: hashes.to_vec(),
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
        assert_eq!(err.reason, "BlockStored names unknown parent block 2");
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
        assert_eq!(err.reason, "BlockStored for block 1, which is already held");
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
        assert_eq!(err.reason, "block_size 1 differs from meta.page_size 2");
    }
}
