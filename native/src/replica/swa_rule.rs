//! The sliding-window rule for a usable cached prefix, written once for the native core
//! (docs/design.md §3; its Python twin is `cache/events/swa_rule.py`, held equal by a differential test).
//!
//! A cached path is a run of segments (pages of a replica), each resident (SWA KV kept) or a
//! tombstone (SWA KV freed, full KV kept). A match may end after a segment only if no tombstone
//! precedes that point on the path, or at least `sliding_window_size` resident tokens follow the
//! last tombstone before it.

/// The rule as a walk: feed it the path's segments, root first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsablePrefix {
    window: u64,
    /// Resident tokens since the last tombstone; `u64::MAX`: no tombstone yet.
    since_tombstone: u64,
    walked: usize,
    usable: usize,
}

impl UsablePrefix {
    /// A walk under `sliding_window_size`.
    pub fn new(sliding_window_size: u64) -> Self {
        Self {
            window: sliding_window_size,
            since_tombstone: u64::MAX,
            walked: 0,
            usable: 0,
        }
    }

    /// One more segment of `tokens` tokens on the path.
    #[inline]
    pub fn step(&mut self, tokens: u64, resident: bool) {
        self.walked += 1;
        self.since_tombstone = if resident {
            self.since_tombstone.saturating_add(tokens)
        } else {
            0
        };
        if self.since_tombstone >= self.window {
            self.usable = self.walked;
        }
    }

    /// Segments walked so far.
    pub fn walked(&self) -> usize {
        self.walked
    }

    /// How many leading segments form the longest SWA-usable prefix.
    pub fn usable(&self) -> usize {
        self.usable
    }
}

/// (segments walked, leading segments usable) of a whole path of `(tokens, resident)`.
pub fn usable_prefix(segments: &[(u64, bool)], sliding_window_size: u64) -> (usize, usize) {
    let mut walk = UsablePrefix::new(sliding_window_size);
    for &(tokens, resident) in segments {
        walk.step(tokens, resident);
    }
    (walk.walked(), walk.usable())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_tombstones_everything_is_usable() {
        assert_eq!(usable_prefix(&[(1, true); 5], 3), (5, 5));
        assert_eq!(usable_prefix(&[], 3), (0, 0));
    }

    #[test]
    fn a_tombstone_needs_a_window_of_resident_tokens_after_it() {
        // page 3 tombstoned, window 3: usable again once pages 4, 5, 6 follow
        let mut path = [(1, true); 10];
        path[3] = (1, false);
        for (length, usable) in [(4, 3), (5, 3), (6, 3), (7, 7), (10, 10)] {
            assert_eq!(usable_prefix(&path[..length], 3), (length, usable));
        }
    }

    #[test]
    fn multi_token_segments_count_their_tokens() {
        assert_eq!(
            usable_prefix(&[(4, true), (4, false), (4, true)], 4),
            (3, 3)
        );
        assert_eq!(
            usable_prefix(&[(4, true), (4, false), (2, true)], 4),
            (3, 1)
        );
    }
}
