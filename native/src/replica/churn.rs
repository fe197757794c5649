//! `Churn`: what batches did to a source's blocks, counted by kind of event (the follower's
//! `stats` view reports it). One definition for both paths: a decoded record counted alone
//! (`wire_churn`) and the records the replay fast lane applies (`super::replay`).

use smallvec::SmallVec;

use crate::event_types::{EventType, TYPE_COUNT};
use crate::events::{Event, Medium, RemovalReason};

/// Blocks removed from one tier (a medium of `None` is the GPU) for one reason (`None`: the
/// event did not say).
pub type RemovalKey = (Medium, Option<RemovalReason>);

/// Counts of batches and of blocks by the type of event that they met (one per block hash; one
/// per event for a type without hashes, e.g. `AllBlocksCleared`); `removed_by` splits the
/// removals by tier and reason (a handful of keys at most, in the order first seen).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Churn {
    pub batches: u64,
    /// Indexed by `EventType::index`.
    pub by_type: [u64; TYPE_COUNT],
    pub removed_by: SmallVec<[(RemovalKey, u64); 2]>,
}

/// `Churn` as the Python face sees it (`py` makes it a flat tuple): batches, the count of each
/// event type in `EventType::ALL`'s order, then `[(medium, reason, blocks removed)]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChurnCounts {
    pub batches: u64,
    pub by_type: [u64; TYPE_COUNT],
    pub removed_by: Vec<(String, Option<&'static str>, u64)>,
}

impl Churn {
    /// The churn of one batch made of `events`.
    pub fn of_batch(events: &[Event]) -> Self {
        let mut churn = Self {
            batches: 1,
            ..Self::default()
        };
        for event in events {
            let blocks = event.block_hashes().map_or(1, |hashes| hashes.len() as u64);
            churn.by_type[event.event_type().index()] += blocks;
            if let Event::Removed { medium, reason, .. } = event {
                churn.count_removal(medium, *reason, blocks);
            }
        }
        churn
    }

    /// The blocks counted for events of type `kind`.
    pub fn of(&self, kind: EventType) -> u64 {
        self.by_type[kind.index()]
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
        for (count, more) in self.by_type.iter_mut().zip(other.by_type) {
            *count += more;
        }
        for ((medium, reason), count) in &other.removed_by {
            self.count_key(medium, *reason, *count);
        }
    }

    /// The counts as the Python face gives them.
    pub fn counts(&self) -> ChurnCounts {
        let removed_by = self
            .removed_by
            .iter()
            .map(|((medium, reason), count)| {
                (medium.to_string(), reason.map(RemovalReason::name), *count)
            })
            .collect();
        ChurnCounts {
            batches: self.batches,
            by_type: self.by_type,
            removed_by,
        }
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
        let counts = churn.counts();
        assert_eq!((counts.batches, churn.of(EventType::Removed)), (2, 10));
        assert_eq!(
            counts.removed_by,
            vec![
                ("GPU".to_string(), Some("evicted"), 3),
                ("CPU".to_string(), Some("evicted"), 3),
                ("GPU".to_string(), None, 4),
            ]
        );
    }
}
