//! Prefix matching across every source in one walk of the prompt.
//!
//! The prompt's pages are hashed once per page size, lazily, page by page, and each page's
//! block hash is looked up in every source that still holds the chain so far, advancing that
//! source's held length and its SWA walk (`super::swa_rule`). A source drops out at its first
//! missing page; the walk (and the hashing) stops when none is left.

use sha2::{Digest, Sha256};

use super::blocks::BlockTable;
use super::store::ReplicaStore;
use super::swa_rule::UsablePrefix;
use crate::hashing::{block_hash, PageDigest};

/// What one source holds of a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The source's state is unknown (diverged, or no meta): no claim either way.
    Unknown,
    /// The longest held prefix in tokens, and the longest SWA-usable one (None when the source's
    /// stream does not say which blocks are tombstones).
    Held { tokens: u64, usable: Option<u64> },
}

struct Walker<'a> {
    id: u32,
    table: &'a BlockTable,
    rule: UsablePrefix,
    swa_events: bool,
}

impl Walker<'_> {
    fn answer(&self, page_size: u64) -> Option<(u32, Answer)> {
        let held = self.rule.walked() as u64;
        (held > 0).then(|| {
            let usable = self
                .swa_events
                .then(|| self.rule.usable() as u64 * page_size);
            (
                self.id,
                Answer::Held {
                    tokens: held * page_size,
                    usable,
                },
            )
        })
    }
}

/// Hashes a prompt's pages one at a time, chaining each onto the last.
struct PageHasher<'a> {
    prior: &'a [u8],
    previous: Option<PageDigest>,
    buffer: Vec<u8>,
}

impl<'a> PageHasher<'a> {
    fn new(prior: &'a [u8], page_size: usize) -> Self {
        Self {
            prior,
            previous: None,
            buffer: Vec::with_capacity(32 + page_size * 4),
        }
    }

    fn next(&mut self, page: &[u32]) -> i64 {
        self.buffer.clear();
        match &self.previous {
            None => self.buffer.extend_from_slice(self.prior),
            Some(digest) => self.buffer.extend_from_slice(digest),
        }
        for token in page {
            self.buffer.extend_from_slice(&token.to_le_bytes());
        }
        let digest: PageDigest = Sha256::digest(&self.buffer).into();
        self.previous = Some(digest);
        block_hash(&digest)
    }
}

/// Per source id, what it holds of `tokens` (under the namespace `prior`): sources whose state
/// is unknown answer `Unknown`; sources holding none of it are absent. Sorted by source id.
pub fn match_prefix(store: &ReplicaStore, prior: &[u8], tokens: &[u32]) -> Vec<(u32, Answer)> {
    let mut answers = Vec::new();
    let mut groups: Vec<(u32, Vec<Walker<'_>>)> = Vec::new();
    for (id, replica) in store.replicas().iter().enumerate() {
        let id = id as u32;
        if replica.diverged.is_some() {
            answers.push((id, Answer::Unknown));
            continue;
        }
        if replica.blocks.is_empty() {
            continue;
        }
        let Some(meta) = &replica.meta else {
            answers.push((id, Answer::Unknown));
            continue;
        };
        let walker = Walker {
            id,
            table: &replica.blocks,
            rule: UsablePrefix::new(u64::from(meta.sliding_window_size)),
            swa_events: meta.swa_events,
        };
        match groups.iter_mut().find(|(size, _)| *size == meta.page_size) {
            Some((_, walkers)) => walkers.push(walker),
            None => groups.push((meta.page_size, vec![walker])),
        }
    }
    for (page_size, walkers) in groups {
        walk(page_size, walkers, prior, tokens, &mut answers);
    }
    answers.sort_unstable_by_key(|(id, _)| *id);
    answers
}

fn walk(
    page_size: u32,
    mut alive: Vec<Walker<'_>>,
    prior: &[u8],
    tokens: &[u32],
    answers: &mut Vec<(u32, Answer)>,
) {
    let size = u64::from(page_size);
    let mut hasher = PageHasher::new(prior, page_size as usize);
    for page in tokens.chunks_exact(page_size as usize) {
        if alive.is_empty() {
            return;
        }
        let block_hash = hasher.next(page);
        let mut at = 0;
        while at < alive.len() {
            match alive[at].table.residency(block_hash) {
                Some(resident) => {
                    alive[at].rule.step(size, resident);
                    at += 1;
                }
                None => {
                    let done = alive.swap_remove(at);
                    answers.extend(done.answer(size));
                }
            }
        }
    }
    answers.extend(alive.iter().filter_map(|walker| walker.answer(size)));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, Stored};
    use crate::hashing::chain_page_digests;
    use crate::replica::store::SourceMeta;

    fn hashes(prior: &[u8], tokens: &[u32], page_size: usize) -> Vec<i64> {
        chain_page_digests(prior, tokens, page_size)
            .iter()
            .map(block_hash)
            .collect()
    }

    fn hold(store: &mut ReplicaStore, source: &str, tokens: &[u32], page_size: u32, window: u32) {
        let id = store.id_or_create(source);
        let replica = store.by_id_mut(id);
        replica.meta = Some(SourceMeta {
            page_size,
            sliding_window_size: window,
            swa_events: true,
            json: "{}".to_owned(),
        });
        let pages = tokens.len() / page_size as usize;
        let event = Event::Stored(Stored {
            hashes: hashes(&[], tokens, page_size as usize),
            parent: None,
            tokens: tokens[..pages * page_size as usize].to_vec(),
            block_size: page_size,
            lora_id: None,
            medium: None,
        });
        store.apply_events(source, &[event]).unwrap();
    }

    #[test]
    fn every_source_answers_in_one_walk_with_its_own_page_size() {
        let mut store = ReplicaStore::new();
        let prompt: Vec<u32> = (0..10).collect();
        hold(&mut store, "small", &prompt, 1, 4);
        hold(&mut store, "large", &prompt, 4, 4);
        hold(&mut store, "short", &prompt[..3], 1, 4);
        let answers = match_prefix(&store, &[], &prompt);
        let held = |tokens| Answer::Held {
            tokens,
            usable: Some(tokens),
        };
        assert_eq!(answers, vec![(0, held(10)), (1, held(8)), (2, held(3))]);
        assert_eq!(match_prefix(&store, &[], &[99, 1]), vec![]);
    }

    #[test]
    fn tombstones_limit_the_usable_prefix_and_unknown_sources_make_no_claim() {
        let mut store = ReplicaStore::new();
        let prompt: Vec<u32> = (0..10).collect();
        hold(&mut store, "w", &prompt, 1, 3);
        let chain = hashes(&[], &prompt, 1);
        store
            .apply_events(
                "w",
                &[Event::SwaEvicted {
                    hashes: vec![chain[3]],
                }],
            )
            .unwrap();
        let answers = match_prefix(&store, &[], &prompt[..6]);
        assert_eq!(
            answers,
            vec![(
                0,
                Answer::Held {
                    tokens: 6,
                    usable: Some(3)
                }
            )]
        );
        store.replica_mut("w").meta.as_mut().unwrap().swa_events = false;
        let answers = match_prefix(&store, &[], &prompt[..6]);
        assert_eq!(
            answers,
            vec![(
                0,
                Answer::Held {
                    tokens: 6,
                    usable: None
                }
            )]
        );
        store.replica_mut("w").mark_diverged("gap");
        store.replica_mut("empty");
        assert_eq!(
            match_prefix(&store, &[], &prompt),
            vec![(0, Answer::Unknown)]
        );
    }
}
