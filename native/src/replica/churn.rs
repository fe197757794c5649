//! `Churn`: what batches did to a source's blocks, counted by kind of event (the follower's
//! `stats` view reports it). One definition for both paths: a decoded record counted alone
//! (`wire_churn`) and the records the replay fast lane applies (`super::replay`).

use smallvec::SmallVec;

use crate::events::{Event, Medium, RemovalReason};

/// Blocks removed from one tier (a medium of `None` is the GPU) for one reason (`None`: the
/// event did not say).
pub type RemovalKey = (Medium, Option<RemovalReason>);

/// Counts of batches and of blocks by what happened to them; `cleared` counts
/// `AllBlocksCleared` events; `removed_by` splits `removed` by tier and reason (a handful of
/// keys at most, in the order first seen).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Churn {
    pub batches: u64,
    pub stored: u64,
    pub removed: u64,
    pub swa_evicted: u64,
    pub swa_restored: u64,
    pub cleared: u64,
    pub removed_by: SmallVec<[(RemovalKey, u64); 2]>,
}

/// `Churn` as the Python face sees it: (batches, stored, removed, swa_evicted, swa_restored,
/// cleared, [(medium, reason, blocks removed)]).
pub type ChurnCounts = (
    u64,
    u64,
    u64,
    u64,
    u64,
    u64,
    Vec<(String, Option<&'static str>, u64)>,
);

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
                Event::Removed {
                    hashes,
                    medium,
                    reason,
                } => {
                    churn.removed += hashes.len() as u64;
                    churn.count_removal(medium, *reason, hashes.len() as u64);
                }
                Event::SwaEvicted { hashes } => churn.swa_evicted += hashes.len() as u64,
                Event::SwaRestored { hashes } => churn.swa_restored += hashes.len() as u64,
                Event::Cleared => churn.cleared += 1,
            }
        }
        churn
    }

    fn count_removal(&mut self, medium: &Option<Medium>, reason: Option<RemovalReason>, n: u64) {
        let medium = medium.as_ref().unwrap_or(&Medium::GPU);
        self.count_key(medium, reason, n);
    }

    fn count_key(&mut self, medium: &Medium, reason: Option<RemovalReason>, n: u64) {
        let found = self
            .removed_by
            .iter_mut()
            .find(|((m, r), _)| m == medium && *r == reason);
        match found {
            Some((_, count)) => *count += n,
            None => self.removed_by.push(((medium.clone(), reason), n)),
        }
    }

    /// Add `other` to these counts.
    pub fn add(&mut self, other: &Self) {
        self.batches += other.batches;
        self.stored += other.stored;
        self.removed += other.removed;
        self.swa_evicted += other.swa_evicted;
        self.swa_restored += other.swa_restored;
        self.cleared += other.cleared;
        for ((medium, reason), count) in &other.removed_by {
            self.count_key(medium, *reason, *count);
        }
    }

    /// The counts in `ChurnCounts` order.
    pub fn counts(&self) -> ChurnCounts {
        let removed_by = self
            .removed_by
            .iter()
            .map(|((medium, reason), count)| {
                (medium.to_string(), reason.map(RemovalReason::name), *count)
            })
            .collect();
        (
            self.batches,
            self.stored,
            self.removed,
            self.swa_evicted,
            self.swa_restored,
            self.cleared,
            removed_by,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removals_are_split_by_tier_and_reason() {
        let removed = |medium: Option<&str>, reason, n: usize| Event::Removed {
            hashes: (0..n as i64).collect(),
            medium: medium.map(Medium::from),
            reason,
        };
        let mut churn = Churn::of_batch(&[
            removed(None, Some(RemovalReason::Evicted), 2),
            removed(Some("CPU"), Some(RemovalReason::Evicted), 3),
            removed(Some("GPU"), Some(RemovalReason::Evicted), 1),
        ]);
        churn.add(&Churn::of_batch(&[removed(Some("GPU"), None, 4)]));
        let (batches, _, removed_total, _, _, _, by) = churn.counts();
        assert_eq!((batches, removed_total), (2, 10));
        assert_eq!(
            by,
            vec![
                ("GPU".to_string(), Some("evicted"), 3),
                ("CPU".to_string(), Some("evicted"), 3),
                ("GPU".to_string(), None, 4),
            ]
        );
    }
}
