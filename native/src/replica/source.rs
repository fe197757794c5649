//! One source's replica: its meta, its divergence, its block table (the GPU) and its lower
//! tiers, and how one event changes them. `super::store` keeps every source's; `super::prefix` walks them.

use super::blocks::BlockTable;
use super::error::{ConsistencyError, Inconsistency, Result};
use super::tiers::{is_gpu, Tiers};
use crate::digest::StateDigest;
use crate::events::{Event, Hashes, Medium, Stored};

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

/// What an event does to a source's blocks, in the terms the replica and the holder index
/// (`super::store`) both follow: the one place an event type's effect on a replica is said.
pub(crate) enum Effect<'a> {
    /// Its pages enter the tier it names.
    Store(&'a Stored),
    /// Its pages leave the tier `medium` (None: the GPU).
    Remove {
        hashes: &'a Hashes,
        medium: Option<&'a Medium>,
    },
    /// Its pages lose (`resident` false) or regain their SWA KV.
    Residency { hashes: &'a Hashes, resident: bool },
    /// Every block of the source is dropped.
    Clear,
}

impl<'a> Effect<'a> {
    pub(crate) fn of(event: &'a Event) -> Self {
        match event {
            Event::Stored(stored) => Effect::Store(stored),
            Event::Removed { hashes, medium, .. } => Effect::Remove {
                hashes,
                medium: medium.as_ref(),
            },
            Event::SwaEvicted { hashes } => Effect::Residency {
                hashes,
                resident: false,
            },
            Event::SwaRestored { hashes } => Effect::Residency {
                hashes,
                resident: true,
            },
            Event::Cleared => Effect::Clear,
        }
    }
}

/// One source's replica.
#[derive(Clone, Debug, PartialEq)]
pub struct Replica {
    pub name: String,
    pub meta: Option<SourceMeta>,
    pub diverged: Option<String>,
    pub blocks: BlockTable,
    /// The blocks held on other media than the GPU (see `super::tiers`).
    pub tiers: Tiers,
}

impl Replica {
    /// An empty replica of `name` whose block table keeps token ids when `keep_tokens`.
    pub(crate) fn new(name: &str, keep_tokens: bool) -> Self {
        Self {
            name: name.to_owned(),
            meta: None,
            diverged: None,
            blocks: BlockTable::keeping_tokens(keep_tokens),
            tiers: Tiers::new(),
        }
    }

    fn fail(&self, reason: Inconsistency) -> ConsistencyError {
        ConsistencyError {
            source: self.name.clone(),
            reason,
        }
    }

    /// Apply one event; the replica is unchanged when it does not fit. (Through
    /// `ReplicaStore::apply_events`, which keeps the holder index in step.)
    pub(crate) fn apply_event(&mut self, event: &Event) -> Result<()> {
        let result = match Effect::of(event) {
            Effect::Store(stored) => return self.store(stored),
            Effect::Remove { hashes, medium } => match medium {
                Some(medium) if !is_gpu(Some(medium)) => self.tiers.remove(medium, hashes),
                _ => self.blocks.remove(hashes),
            },
            Effect::Residency { hashes, resident } => self.blocks.set_residency(hashes, resident),
            Effect::Clear => {
                self.clear();
                Ok(())
            }
        };
        result.map_err(|reason| self.fail(reason))
    }

    /// Store the pages of `stored`; the replica is unchanged when they do not fit.
    pub(crate) fn store(&mut self, stored: &Stored) -> Result<()> {
        if !is_gpu(stored.medium.as_ref()) {
            return self.store_tier(stored, true);
        }
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

    /// Store the pages of `stored`, whose medium is a lower tier: `whole`, all of them or none;
    /// else (one event per page) the pages before one that does not fit stay. The page size is
    /// checked as on the GPU (against the meta's, or the earlier blocks').
    pub(crate) fn store_tier(&mut self, stored: &Stored, whole: bool) -> Result<()> {
        let Some(medium) = &stored.medium else {
            return self.store(stored);
        };
        let block_size = stored.block_size;
        let pages = stored.hashes.len();
        let checked = if block_size == 0 {
            Err(Inconsistency::ZeroBlockSize)
        } else if pages == 0 {
            Err(Inconsistency::NoBlock)
        } else if !stored.tokens_fit() {
            Err(Inconsistency::TokenCount {
                tokens: stored.tokens.len(),
                pages,
                block_size,
            })
        } else {
            match (self.meta.as_ref(), self.blocks.block_size()) {
                (Some(meta), _) if meta.page_size != block_size => {
                    Err(Inconsistency::DiffersFromMeta {
                        block_size,
                        medium: Some(medium.clone()),
                        page_size: meta.page_size,
                    })
                }
                (None, Some(earlier)) if earlier != block_size => {
                    Err(Inconsistency::DiffersFromEarlier {
                        block_size,
                        medium: Some(medium.clone()),
                        earlier,
                    })
                }
                _ => Ok(()),
            }
        };
        checked
            .and_then(|()| self.tiers.store(medium, &stored.hashes, block_size, whole))
            .map_err(|reason| self.fail(reason))
    }

    /// The digest of every block held, on the GPU and on the lower tiers.
    pub fn digest(&self) -> StateDigest {
        self.blocks.digest().combined(self.tiers.digest())
    }

    /// Drop every block; this also ends a divergence (the source starts over). (Through
    /// `ReplicaStore::clear`, which keeps the holder index in step.)
    pub(crate) fn clear(&mut self) {
        self.blocks.clear();
        self.tiers.clear();
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
            None => Some(self.digest().hexdigest()),
        }
    }
}
