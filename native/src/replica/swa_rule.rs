//! The sliding-window rule for a usable cached prefix, defined once (docs/design.md §3): the
//! replica's prefix walk, the tree's `match_prefix` (through `cache.events.swa_rule`) and the
//! segment walk below all answer with `SwaRule`. Its Python oracle, `tests/oracles/swa_rule.py`,
//! is a test's reference only.
//!
//! A cached path is a run of segments (tree nodes, or pages of a replica), each resident (SWA KV
//! kept) or a tombstone (SWA KV freed, full KV kept). A match may end after a segment only if no
//! tombstone precedes that point on the path, or at least `sliding_window_size` resident tokens
//! follow the last tombstone before it.

/// The rule fed only a path's tombstones, by position: between two tombstones every segment is
/// resident, so the longest usable prefix changes only at a tombstone and at the walk's end.
///
/// Positions count tokens, or pages for a path of whole pages (`in_pages`): after a tombstone
/// ending at `e`, a prefix ending at `p` is usable again once `p - e >= window`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwaRule {
    window: u64,
    /// Where the last tombstone fed ends; `None`: none yet.
    last_tombstone_end: Option<u64>,
    /// The longest usable prefix that ends at or before the last tombstone's start.
    usable_before: u64,
}

impl SwaRule {
    /// The rule under `sliding_window_size` tokens, positions in tokens.
    pub fn new(sliding_window_size: u64) -> Self {
        Self {
            window: sliding_window_size,
            last_tombstone_end: None,
            usable_before: 0,
        }
    }

    /// The rule for a path of whole pages of `page_size` tokens, positions in pages: `p` resident
    /// pages hold `p * page_size` tokens, at least the window once `p >= ceil(window / page_size)`.
    pub fn in_pages(sliding_window_size: u64, page_size: u64) -> Self {
        Self::new(sliding_window_size.div_ceil(page_size))
    }

    /// The longest usable prefix of the path's first `end` positions (`end` at a segment
    /// boundary, at or after every tombstone fed so far).
    #[inline]
    pub fn usable(&self, end: u64) -> u64 {
        match self.last_tombstone_end {
            Some(last) if end - last < self.window => self.usable_before,
            _ => end,
        }
    }

    /// The segment `[start, end)` is a tombstone (tombstones fed in path order).
    #[inline]
    pub fn tombstone(&mut self, start: u64, end: u64) {
        self.usable_before = self.usable(start);
        self.last_tombstone_end = Some(end);
    }
}

/// (segments walked, leading segments usable) of a whole path of `(tokens, resident)` segments.
pub fn usable_prefix(segments: &[(u64, bool)], sliding_window_size: u64) -> (usize, usize) {
    let mut rule = SwaRule::new(sliding_window_size);
    let (mut end, mut usable) = (0u64, 0usize);
    for (walked, &(tokens, resident)) in segments.iter().enumerate() {
        let start = end;
        end = end.saturating_add(tokens);
        if !resident {
            rule.tombstone(start, end);
        }
        if rule.usable(end) == end {
            usable = walked + 1;
        }
    }
    (segments.len(), usable)
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

    #[test]
    fn a_later_tombstone_keeps_what_was_usable_before_it() {
        // window 2: pages 0-1 usable, 2 tombstone, 3 resident, 4 tombstone, 5-6 resident
        let path = [
            (1, true),
            (1, true),
            (1, false),
            (1, true),
            (1, false),
            (1, true),
            (1, true),
        ];
        assert_eq!(usable_prefix(&path[..6], 2), (6, 2));
        assert_eq!(usable_prefix(&path, 2), (7, 7));
    }

    #[test]
    fn pages_count_the_window_rounded_up() {
        // window 5 over pages of 2 tokens: three resident pages after a tombstone
        let mut rule = SwaRule::in_pages(5, 2);
        rule.tombstone(1, 2);
        assert_eq!(rule.usable(4), 1);
        assert_eq!(rule.usable(5), 5);
    }
}
