//! One source's replica: its meta, its divergence and its block table, and how one event
//! changes it. `super::store` keeps every source's; `super::prefix` walks them.

use super::blocks::BlockTable;
use super::ConsistencyError;
use crate::events::{Event, Stored};

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
    pub(crate) fn new(name: &str) -> Self {
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

    /// Apply one event; the replica is unchanged when it does not fit. (Through
    /// `ReplicaStore::apply_events`, which keeps the holder index in step.)
    pub(crate) fn apply_event(&mut self, event: &Event) -> Result<(), ConsistencyError> {
        let result = match event {
            Event::Stored(stored) => return self.store(stored),
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

    /// Store the pages of `stored`; the replica is unchanged when they do not fit.
    pub(crate) fn store(&mut self, stored: &Stored) -> Result<(), ConsistencyError> {
        self.blocks
            .store(
                &stored.hashes,
                stored.parent,
                &stored.tokens,
                stored.block_size,
                self.meta.as_ref().map(|meta| meta.page_size),
            )
            .map_err(|reason| self.fail(reason))
    }

    /// Drop every block; this also ends a divergence (the source starts over). (Through
    /// `ReplicaStore::clear`, which keeps the holder index in step.)
    pub(crate) fn clear(&mut self) {
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
