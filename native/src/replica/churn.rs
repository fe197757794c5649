//! `Churn`: what batches did to a source's blocks, counted by kind of event (the follower's
//! `stats` view reports it). One definition for both paths: a decoded record counted alone
//! (`wire_churn`) and the records the replay fast lane applies (`super::replay`).

use crate::events::Event;

/// Counts of batches and of blocks by what happened to them; `cleared` counts
/// `AllBlocksCleared` events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Churn {
    pub batches: u64,
    pub stored: u64,
    pub removed: u64,
    pub swa_evicted: u64,
    pub swa_restored: u64,
    pub cleared: u64,
}

/// `Churn` as the Python face sees it: (batches, stored, removed, swa_evicted, swa_restored,
/// cleared).
pub type ChurnCounts = (u64, u64, u64, u64, u64, u64);

impl Churn {
    /// The churn of one batch made of `events`.
    pub fn of_batch(events: &[Event]) -> Self {
        let mut churn = Self {
            batches: 1,
            ..Self::default()
        };
        for event in events {
            match event {
                Event::Stored(stored) => churn.stored += stored.hashes.len() as u64,
                Event::Removed { hashes, .. } => churn.removed += hashes.len() as u64,
                Event::SwaEvicted { hashes } => churn.swa_evicted += hashes.len() as u64,
                Event::SwaRestored { hashes } => churn.swa_restored += hashes.len() as u64,
                Event::Cleared => churn.cleared += 1,
            }
        }
        churn
    }

    /// Add `other` to these counts.
    pub fn add(&mut self, other: &Self) {
        self.batches += other.batches;
        self.stored += other.stored;
        self.removed += other.removed;
        self.swa_evicted += other.swa_evicted;
        self.swa_restored += other.swa_restored;
        self.cleared += other.cleared;
    }

    /// The counts in `ChurnCounts` order.
    pub fn counts(&self) -> ChurnCounts {
        (
            self.batches,
            self.stored,
            self.removed,
            self.swa_evicted,
            self.swa_restored,
            self.cleared,
        )
    }
}
