//! Where a step's events are cut into batches, known when the step is cut (before any hashing).
//!
//! The rule is the publisher's (`swa_es.publish.batching.split_events`): events in order, a new
//! batch when the current one holds `max_events` or the next event's size bound would take it
//! over `max_bytes`; an event over `max_bytes` on its own goes alone. Every per-page event of one
//! op has the same bound, so the plan is fed runs (count, bound) and costs O(ops + batches).

use crate::events::{Event, Stored};

/// An upper bound of the bytes one event takes in an encoded batch (mirrors
/// `swa_es.publish.batching.encoded_size_bound`).
pub mod bound {
    /// One per-page `BlockStored` of `page_size` tokens, medium "GPU".
    pub fn stored_page(page_size: usize) -> usize {
        160 + 21 + 11 * page_size + 6 * 3
    }

    /// Any event but a store, of `pages` pages (`BlockRemoved`, `BlockSWAEvicted`, ...).
    pub const fn node_event(pages: usize) -> usize {
        160 + 21 * pages
    }

    /// `AllBlocksCleared` (an event of no pages).
    pub const CLEARED: usize = node_event(0);
}

/// How big one batch may get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchLimits {
    /// At most this many (per-page) events per batch; at least 1.
    pub max_events: usize,
    /// At most this many bytes of event size bounds per batch (unless one event is bigger).
    pub max_bytes: usize,
}

impl BatchLimits {
    /// No limit: everything in one batch.
    pub const UNLIMITED: BatchLimits = BatchLimits {
        max_events: usize::MAX,
        max_bytes: usize::MAX,
    };
}

/// A run of `count` consecutive events of `bound` bytes each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    pub count: usize,
    pub bound: usize,
}

/// The batches of a sequence of events: `ends[i]` is the index just past batch i's last event.
pub fn plan_batches(runs: &[Run], limits: BatchLimits) -> Vec<usize> {
    let max_events = limits.max_events.max(1);
    let mut ends = Vec::new();
    let (mut index, mut start, mut size) = (0usize, 0usize, 0usize);
    for run in runs {
        let mut left = run.count;
        while left > 0 {
            let held = index - start;
            if held > 0 && (held >= max_events || size.saturating_add(run.bound) > limits.max_bytes)
            {
                ends.push(index);
                start = index;
                size = 0;
                continue;
            }
            let room_events = max_events - held;
            let room_bytes = match (limits.max_bytes - size).checked_div(run.bound) {
                Some(room) => room,
                None => usize::MAX,
            };
            // An empty batch takes the next event whatever its size.
            let take = left
                .min(room_events)
                .min(room_bytes.max(usize::from(held == 0)));
            index += take;
            size = size.saturating_add(take.saturating_mul(run.bound));
            left -= take;
        }
    }
    if index > start {
        ends.push(index);
    }
    ends
}

/// The number of per-page events `event` stands for (a `Stored` of n pages is n).
pub fn page_events(event: &Event) -> usize {
    match event {
        Event::Stored(stored) => stored.hashes.len(),
        _ => 1,
    }
}

/// The plan of `events` as they stand (per-page bounds): what a snapshot is cut by.
pub fn runs_of(events: &[Event], page_size: usize) -> Vec<Run> {
    events
        .iter()
        .map(|event| match event {
            Event::Stored(stored) => Run {
                count: stored.hashes.len(),
                bound: bound::stored_page(page_size),
            },
            // Any other event (`AllBlocksCleared` has no pages: `bound::CLEARED`).
            other => Run {
                count: 1,
                bound: bound::node_event(other.block_hashes().map_or(0, |hashes| hashes.len())),
            },
        })
        .collect()
}

/// Cut `events` into the batches that end (in per-page events) at `ends`; a `Stored` that
/// straddles an end is split there. Events past the last end, if any, form one more batch.
pub fn split_events(events: Vec<Event>, ends: &[usize]) -> Vec<Vec<Event>> {
    let mut batches: Vec<Vec<Event>> = Vec::with_capacity(ends.len());
    let mut ends = ends.iter().copied();
    let mut end = ends.next().unwrap_or(usize::MAX);
    let mut index = 0usize;
    let mut batch: Vec<Event> = Vec::new();
    for event in events {
        let mut event = Some(event);
        while let Some(current) = event.take() {
            if index >= end {
                batches.push(std::mem::take(&mut batch));
                end = ends.next().unwrap_or(usize::MAX);
                event = Some(current);
                continue;
            }
            let count = page_events(&current);
            if index + count <= end {
                index += count;
                batch.push(current);
                continue;
            }
            let Event::Stored(mut stored) = current else {
                unreachable!("only a Stored spans several events")
            };
            let head_pages = end - index;
            let size = stored.block_size as usize;
            let tail = Stored {
                hashes: stored.hashes[head_pages..].into(),
                parent: stored.hashes[..head_pages].last().copied(),
                tokens: stored.tokens[head_pages * size..].into(),
                block_size: stored.block_size,
                lora_id: stored.lora_id,
                medium: stored.medium.clone(),
            };
            stored.hashes.truncate(head_pages);
            stored.tokens.truncate(head_pages * size);
            index += head_pages;
            batch.push(Event::Stored(stored));
            event = Some(Event::Stored(tail));
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    batches
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The publisher's rule, one event at a time.
    fn naive(bounds: &[usize], limits: BatchLimits) -> Vec<usize> {
        let mut ends = Vec::new();
        let (mut start, mut size) = (0usize, 0usize);
        for (index, &cost) in bounds.iter().enumerate() {
            if index > start
                && (index - start >= limits.max_events || size + cost > limits.max_bytes)
            {
                ends.push(index);
                start = index;
                size = 0;
            }
            size += cost;
        }
        if start < bounds.len() {
            ends.push(bounds.len());
        }
        ends
    }

    fn expand(runs: &[Run]) -> Vec<usize> {
        runs.iter()
            .flat_map(|run| std::iter::repeat_n(run.bound, run.count))
            .collect()
    }

    #[test]
    fn runs_split_exactly_as_one_event_at_a_time() {
        // A small deterministic generator: every mix of run lengths, bounds and limits.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |modulo: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % modulo) as usize
        };
        for _ in 0..3000 {
            let runs: Vec<Run> = (0..next(6))
                .map(|_| Run {
                    count: next(9),
                    bound: 1 + next(40),
                })
                .collect();
            let limits = BatchLimits {
                max_events: 1 + next(7),
                max_bytes: 1 + next(120),
            };
            assert_eq!(
                plan_batches(&runs, limits),
                naive(&expand(&runs), limits),
                "{runs:?} {limits:?}"
            );
        }
    }

    #[test]
    fn unlimited_is_one_batch_and_nothing_is_no_batch() {
        let runs = [Run {
            count: 5,
            bound: 200,
        }];
        assert_eq!(plan_batches(&runs, BatchLimits::UNLIMITED), vec![5]);
        assert!(plan_batches(&[], BatchLimits::UNLIMITED).is_empty());
    }

    #[test]
    fn an_oversized_event_goes_alone() {
        let runs = [
            Run {
                count: 1,
                bound: 10,
            },
            Run {
                count: 2,
                bound: 500,
            },
        ];
        let limits = BatchLimits {
            max_events: 100,
            max_bytes: 100,
        };
        assert_eq!(plan_batches(&runs, limits), vec![1, 2, 3]);
    }

    fn stored(hashes: &[i64], parent: Option<i64>) -> Event {
        Event::Stored(Stored {
            hashes: hashes.to_vec().into(),
            parent,
            tokens: hashes.iter().map(|&h| h as u32).collect(),
            block_size: 1,
            lora_id: None,
            medium: Some("GPU".into()),
        })
    }

    #[test]
    fn split_events_cuts_a_chain_where_a_batch_ends() {
        let events = vec![
            Event::Cleared,
            stored(&[1, 2, 3, 4, 5], None),
            Event::SwaEvicted {
                hashes: vec![1].into(),
            },
        ];
        let batches = split_events(events, &[2, 4, 6, 7]);
        assert_eq!(
            batches,
            vec![
                vec![Event::Cleared, stored(&[1], None)],
                vec![stored(&[2, 3], Some(1))],
                vec![stored(&[4, 5], Some(3))],
                vec![Event::SwaEvicted {
                    hashes: vec![1].into()
                }],
            ]
        );
        let whole = split_events(vec![stored(&[1, 2], None)], &[2]);
        assert_eq!(whole, vec![vec![stored(&[1, 2], None)]]);
        assert!(split_events(Vec::new(), &[]).is_empty());
    }
}
