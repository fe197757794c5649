//! Prefix matching across every source in one walk of the prompt.
//!
//! The prompt's pages are hashed once per page size, lazily, page by page, and each page's
//! block hash is looked up once in the `HolderIndex`, which gives the set of sources holding it
//! (and which of them hold it as a tombstone) as bit masks. The walk keeps the set of sources
//! that still hold the chain so far: a page drops the ones missing from its holders (their held
//! length is the pages walked so far) and stops when none is left; a source whose copy of a
//! page is a tombstone records it for the SWA rule. A page costs its hash, one lookup and a few
//! word operations, whatever the number of sources; the hash is read from `super::chains` when a
//! recent prompt shared the page.
//!
//! A lower tier (`super::tiers`) continues a source's GPU hit: from the first page the GPU walk
//! did not find, the tier holds the pages it has without a gap (what the engine would load from
//! it). The tier walk reads the same page hashes (recorded as the GPU walk asks for them, then
//! hashed on only as far as some tier still holds the prompt), for the sources that have tiers.
//!
//! The SWA rule (`super::swa_rule::SwaRule`, docs/design.md §3) is fed each source's tombstones
//! as page positions and asked once, at the end of the source's walk.

use smallvec::SmallVec;

use super::chains::{ChainCache, PromptChain};
use super::holders::HolderIndex;
use super::source::Replica;
use super::swa_rule::SwaRule;

/// Per source id whose lower tiers take part in an answer: the tokens each of its tiers holds
/// continuing after its GPU hit, in the order of its `Tiers::tiers`. Sorted by source id.
pub type TierHits = Vec<(u32, SmallVec<[u64; 2]>)>;

/// What one source holds of a prompt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// The source's state is unknown (diverged, or no meta): no claim either way.
    Unknown,
    /// The longest held prefix in tokens, and the longest SWA-usable one (None when the source's
    /// stream does not say which blocks are tombstones).
    Held { tokens: u64, usable: Option<u64> },
}

/// A source taking part in a walk.
struct Walker {
    swa: SwaRule,
    swa_events: bool,
}

/// The sources taking part in a walk, by page size (a handful of sizes at most), and the
/// answers of the sources that cannot: `Unknown` for a diverged source or one without meta;
/// sources holding nothing are left out.
struct Setup {
    answers: Vec<(u32, Answer)>,
    groups: Vec<(u32, Vec<u32>)>,
    walkers: Vec<Option<Walker>>,
    /// Whether lower tiers take part (`TierHits`).
    with_tiers: bool,
    tier_hits: TierHits,
}

impl Setup {
    fn new(replicas: &[Replica], with_tiers: bool) -> Self {
        let mut setup = Self {
            answers: Vec::new(),
            groups: Vec::new(),
            walkers: Vec::with_capacity(replicas.len()),
            with_tiers,
            tier_hits: Vec::new(),
        };
        for (id, replica) in replicas.iter().enumerate() {
            let id = id as u32;
            setup.walkers.push(None);
            if replica.diverged.is_some() {
                setup.answers.push((id, Answer::Unknown));
                continue;
            }
            let tiered = with_tiers && !replica.tiers.is_empty();
            if replica.blocks.is_empty() && !tiered {
                continue;
            }
            let Some(meta) = &replica.meta else {
                setup.answers.push((id, Answer::Unknown));
                continue;
            };
            setup.walkers[id as usize] = Some(Walker {
                swa: SwaRule::in_pages(
                    u64::from(meta.sliding_window_size),
                    u64::from(meta.page_size),
                ),
                swa_events: meta.swa_events,
            });
            match setup
                .groups
                .iter_mut()
                .find(|(size, _)| *size == meta.page_size)
            {
                Some((_, members)) => members.push(id),
                None => setup.groups.push((meta.page_size, vec![id])),
            }
        }
        setup
    }

    /// Record the answers of one page-size group's walk: (id, held pages).
    fn answer(&mut self, page_size: u32, held: Vec<(u32, u64)>) {
        for (id, pages) in held {
            if pages == 0 {
                continue;
            }
            let Some(walker) = &self.walkers[id as usize] else {
                continue;
            };
            let size = u64::from(page_size);
            let usable = walker.swa_events.then(|| walker.swa.usable(pages) * size);
            self.answers.push((
                id,
                Answer::Held {
                    tokens: pages * size,
                    usable,
                },
            ));
        }
    }

    /// Whether some member of a group has a lower tier holding blocks.
    fn tiers_in(&self, replicas: &[Replica], members: &[u32]) -> bool {
        self.with_tiers
            && members
                .iter()
                .any(|&id| !replicas[id as usize].tiers.is_empty())
    }

    /// Walk the lower tiers of the members in `held` (id, GPU pages) that have some, each from
    /// its GPU hit on. A source holding nothing on the GPU but some pages on a tier answers 0
    /// GPU tokens.
    fn walk_tiers<H: PageHashes>(
        &mut self,
        replicas: &[Replica],
        page_size: u32,
        held: &[(u32, u64)],
        hashes: &mut Recording<'_, H>,
    ) {
        let size = u64::from(page_size);
        let total = hashes.pages() as u64;
        for &(id, pages) in held {
            let tiers = &replicas[id as usize].tiers;
            if tiers.is_empty() {
                continue;
            }
            let counts: SmallVec<[u64; 2]> = tiers
                .tiers()
                .iter()
                .map(|tier| {
                    let mut end = pages;
                    while end < total && tier.blocks.contains(&hashes.page(end as usize)) {
                        end += 1;
                    }
                    (end - pages) * size
                })
                .collect();
            if pages == 0 {
                if counts.iter().all(|&tokens| tokens == 0) {
                    continue;
                }
                let Some(walker) = &self.walkers[id as usize] else {
                    continue;
                };
                let usable = walker.swa_events.then_some(0);
                self.answers.push((id, Answer::Held { tokens: 0, usable }));
            }
            self.tier_hits.push((id, counts));
        }
    }

    fn finish(mut self) -> (Vec<(u32, Answer)>, TierHits) {
        self.answers.sort_unstable_by_key(|(id, _)| *id);
        self.tier_hits.sort_unstable_by_key(|(id, _)| *id);
        (self.answers, self.tier_hits)
    }
}

/// The most pages a walk reads ahead (see `PageHashes::AHEAD`).
const LOOKAHEAD_MAX: usize = 8;

/// The block hashes of a prompt's pages, as a walk reads them: one page at a time, in order.
trait PageHashes {
    /// How many pages ahead of the one being looked up the walk asks for hashes, so that their
    /// holder-index buckets are loaded (prefetched) by the time it looks them up. At most
    /// `LOOKAHEAD_MAX`.
    const AHEAD: usize;
    /// How many whole pages the prompt has.
    fn pages(&self) -> usize;
    /// The block hash of page `index` (each index asked once, in order).
    fn hash(&mut self, index: usize) -> i64;
}

impl PageHashes for PromptChain<'_> {
    // Hashing the next page takes about as long as a bucket's cache miss: one ahead hides it.
    const AHEAD: usize = 1;

    fn pages(&self) -> usize {
        self.page_count()
    }

    fn hash(&mut self, index: usize) -> i64 {
        PromptChain::hash(self, index)
    }
}

/// Hashes a caller already has (the hash form of a query): read as they are.
struct GivenHashes<'a>(&'a [i64]);

impl PageHashes for GivenHashes<'_> {
    const AHEAD: usize = LOOKAHEAD_MAX;

    fn pages(&self) -> usize {
        self.0.len()
    }

    fn hash(&mut self, index: usize) -> i64 {
        self.0[index]
    }
}

/// The hashes a walk asked for, kept so the tier walk reads them again (and asks for more, in
/// order, only as far as it needs).
struct Recording<'h, H> {
    inner: &'h mut H,
    seen: Vec<i64>,
}

impl<'h, H: PageHashes> Recording<'h, H> {
    fn new(inner: &'h mut H) -> Self {
        let seen = Vec::with_capacity(inner.pages().min(1024));
        Self { inner, seen }
    }

    /// The block hash of page `index`, asking for the pages up to it when not asked yet.
    fn page(&mut self, index: usize) -> i64 {
        while self.seen.len() <= index {
            let next = self.seen.len();
            self.hash(next);
        }
        self.seen[index]
    }
}

impl<H: PageHashes> PageHashes for Recording<'_, H> {
    const AHEAD: usize = H::AHEAD;

    fn pages(&self) -> usize {
        self.inner.pages()
    }

    fn hash(&mut self, index: usize) -> i64 {
        let hash = self.inner.hash(index);
        self.seen.push(hash);
        hash
    }
}

/// Per source id, what it holds of `tokens` (under the namespace `prior`): sources whose state
/// is unknown answer `Unknown`; sources holding none of it are absent. Sorted by source id.
/// `holders` must be the holder index of `replicas` (source id = position); `chains` keeps the
/// page digests of recent prompts (it only saves hashing: answers are the same without it).
pub fn match_prefix(
    replicas: &[Replica],
    holders: &HolderIndex,
    chains: &mut ChainCache,
    prior: &[u8],
    tokens: &[u32],
) -> Vec<(u32, Answer)> {
    match_tokens(replicas, holders, chains, prior, tokens, false).0
}

/// `match_prefix` with the lower tiers: also what each source's tiers hold of the prompt
/// after its GPU hit (`TierHits`); a source holding pages on a tier but none on the GPU
/// answers 0 GPU tokens.
pub fn match_prefix_tiers(
    replicas: &[Replica],
    holders: &HolderIndex,
    chains: &mut ChainCache,
    prior: &[u8],
    tokens: &[u32],
) -> (Vec<(u32, Answer)>, TierHits) {
    match_tokens(replicas, holders, chains, prior, tokens, true)
}

fn match_tokens(
    replicas: &[Replica],
    holders: &HolderIndex,
    chains: &mut ChainCache,
    prior: &[u8],
    tokens: &[u32],
    with_tiers: bool,
) -> (Vec<(u32, Answer)>, TierHits) {
    let mut setup = Setup::new(replicas, with_tiers);
    for (page_size, members) in std::mem::take(&mut setup.groups) {
        let mut chain = PromptChain::new(chains, prior, page_size as usize, tokens);
        let held = if setup.tiers_in(replicas, &members) {
            let mut recording = Recording::new(&mut chain);
            let held = walk(holders, &mut recording, &members, &mut setup.walkers);
            setup.walk_tiers(replicas, page_size, &held, &mut recording);
            held
        } else {
            walk(holders, &mut chain, &members, &mut setup.walkers)
        };
        chain.finish();
        setup.answer(page_size, held);
    }
    setup.finish()
}

/// `match_prefix` for a prompt given as the block hashes of its pages of `page_size` tokens
/// (chained as docs/design.md §4 says; a namespace is in the hashes already): the same walk,
/// with no hashing. Sources of another page size are left out (their blocks are other pages).
pub fn match_hashes(
    replicas: &[Replica],
    holders: &HolderIndex,
    page_size: u32,
    hashes: &[i64],
) -> Vec<(u32, Answer)> {
    match_given(replicas, holders, page_size, hashes, false).0
}

/// `match_hashes` with the lower tiers (as `match_prefix_tiers`).
pub fn match_hashes_tiers(
    replicas: &[Replica],
    holders: &HolderIndex,
    page_size: u32,
    hashes: &[i64],
) -> (Vec<(u32, Answer)>, TierHits) {
    match_given(replicas, holders, page_size, hashes, true)
}

fn match_given(
    replicas: &[Replica],
    holders: &HolderIndex,
    page_size: u32,
    hashes: &[i64],
    with_tiers: bool,
) -> (Vec<(u32, Answer)>, TierHits) {
    let mut setup = Setup::new(replicas, with_tiers);
    let groups = std::mem::take(&mut setup.groups);
    if let Some((_, members)) = groups.iter().find(|(size, _)| *size == page_size) {
        let mut given = GivenHashes(hashes);
        let held = if setup.tiers_in(replicas, members) {
            let mut recording = Recording::new(&mut given);
            let held = walk(holders, &mut recording, members, &mut setup.walkers);
            setup.walk_tiers(replicas, page_size, &held, &mut recording);
            held
        } else {
            walk(holders, &mut given, members, &mut setup.walkers)
        };
        setup.answer(page_size, held);
    }
    setup.finish()
}

/// Calls `each(id)` for every source id whose bit is set in `mask` (word `word` of a mask).
#[inline]
fn for_each_bit(word: usize, mut mask: u64, mut each: impl FnMut(u32)) {
    while mask != 0 {
        each((word * 64) as u32 + mask.trailing_zeros());
        mask &= mask - 1;
    }
}

/// The walk of one page-size group: (id, held pages) of every member.
fn walk<H: PageHashes>(
    holders: &HolderIndex,
    hashes: &mut H,
    members: &[u32],
    walkers: &mut [Option<Walker>],
) -> Vec<(u32, u64)> {
    let words = holders.words();
    let mut alive = vec![0u64; words];
    for &id in members {
        alive[id as usize / 64] |= 1 << (id % 64);
    }
    let mut held = Vec::with_capacity(members.len());
    let mut remaining = members.len();
    let mut pages = 0u64;
    let total = hashes.pages();
    // hashes of the pages from `pages` on, asked for (and their buckets prefetched) ahead
    let mut ahead = [0i64; LOOKAHEAD_MAX];
    for (index, slot) in ahead.iter_mut().enumerate().take(H::AHEAD.min(total)) {
        *slot = hashes.hash(index);
        holders.prefetch(*slot);
    }
    for page in 0..total {
        let hash = ahead[page % LOOKAHEAD_MAX];
        if page + H::AHEAD < total {
            let next = hashes.hash(page + H::AHEAD);
            ahead[(page + H::AHEAD) % LOOKAHEAD_MAX] = next;
            holders.prefetch(next);
        }
        let Some((present, tombstones)) = holders.holders(hash) else {
            break;
        };
        for (word, alive_word) in alive.iter_mut().enumerate() {
            if *alive_word == 0 {
                continue;
            }
            let kept = *alive_word & present[word];
            for_each_bit(word, *alive_word & !kept, |id| held.push((id, pages)));
            for_each_bit(word, kept & tombstones[word], |id| {
                if let Some(walker) = &mut walkers[id as usize] {
                    walker.swa.tombstone(pages, pages + 1);
                }
            });
            remaining -= (*alive_word & !kept).count_ones() as usize;
            *alive_word = kept;
        }
        pages += 1;
        if remaining == 0 {
            return held;
        }
    }
    for (word, &alive_word) in alive.iter().enumerate() {
        for_each_bit(word, alive_word, |id| held.push((id, pages)));
    }
    held
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{Event, Stored};
    use crate::hashing::{block_hash, chain_page_digests};
    use crate::replica::source::SourceMeta;
    use crate::replica::store::ReplicaStore;
    use crate::replica::swa_rule::usable_prefix;

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
            hashes: hashes(&[], tokens, page_size as usize).into(),
            parent: None,
            tokens: tokens[..pages * page_size as usize].into(),
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
        let answers = store.match_prefix(&[], &prompt);
        let held = |tokens| Answer::Held {
            tokens,
            usable: Some(tokens),
        };
        assert_eq!(answers, vec![(0, held(10)), (1, held(8)), (2, held(3))]);
        assert_eq!(store.match_prefix(&[], &[99, 1]), vec![]);
    }

    #[test]
    fn given_hashes_answer_as_the_token_walk_does() {
        let mut store = ReplicaStore::new();
        let prompt: Vec<u32> = (0..12).collect();
        hold(&mut store, "small", &prompt, 1, 3);
        hold(&mut store, "short", &prompt[..5], 1, 3);
        hold(&mut store, "large", &prompt, 4, 4);
        let chain = hashes(&[], &prompt, 1);
        let tombstone = Event::SwaEvicted {
            hashes: vec![chain[4]].into(),
        };
        store.apply_events("small", &[tombstone]).unwrap();
        store.replica_mut("gone").mark_diverged("gap");
        for length in [0, 1, 4, 5, 6, 9, 12] {
            let by_tokens = store.match_prefix(&[], &prompt[..length]);
            let small: Vec<_> = by_tokens
                .iter()
                .filter(|(id, _)| *id != 2)
                .copied()
                .collect();
            assert_eq!(
                store.match_hashes(1, &chain[..length]),
                small,
                "{length} tokens"
            );
            let large_chain = hashes(&[], &prompt[..length], 4);
            let large: Vec<_> = by_tokens
                .iter()
                .filter(|(id, answer)| *id == 2 || *answer == Answer::Unknown)
                .copied()
                .collect();
            assert_eq!(
                store.match_hashes(4, &large_chain),
                large,
                "{length} tokens"
            );
        }
        assert_eq!(store.match_hashes(1, &[7, 8]), vec![(3, Answer::Unknown)]);
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
                    hashes: vec![chain[3]].into(),
                }],
            )
            .unwrap();
        let answers = store.match_prefix(&[], &prompt[..6]);
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
        let answers = store.match_prefix(&[], &prompt[..6]);
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
        assert_eq!(store.match_prefix(&[], &prompt), vec![(0, Answer::Unknown)]);
    }

    fn tier_store(store: &mut ReplicaStore, source: &str, medium: &str, hashes: &[i64]) {
        let event = Event::Stored(Stored {
            hashes: hashes.into(),
            parent: None,
            tokens: hashes.iter().map(|&h| h as u32).collect(),
            block_size: 1,
            lora_id: None,
            medium: Some(crate::events::Medium::from(medium)),
        });
        store.apply_events(source, &[event]).unwrap();
    }

    #[test]
    fn lower_tiers_continue_after_the_gpu_hit() {
        let mut store = ReplicaStore::new();
        let prompt: Vec<u32> = (0..10).collect();
        let chain = hashes(&[], &prompt, 1);
        // gpu: 4 pages, CPU 0..8 (continues 4 past the GPU), DISK 2..3 (nothing past the GPU)
        hold(&mut store, "both", &prompt[..4], 1, 4);
        tier_store(&mut store, "both", "CPU", &chain[..8]);
        tier_store(&mut store, "both", "DISK", &chain[2..3]);
        // CPU only, with a gap at page 3
        hold(&mut store, "cpu", &prompt[9..], 1, 4);
        tier_store(&mut store, "cpu", "CPU", &chain[..3]);
        tier_store(&mut store, "cpu", "CPU", &chain[4..]);
        // GPU only
        hold(&mut store, "gpu", &prompt[..2], 1, 4);
        // a tier holding other pages only: absent
        hold(&mut store, "other", &prompt[9..], 1, 4);
        tier_store(&mut store, "other", "CPU", &chain[5..]);
        let held = |tokens| Answer::Held {
            tokens,
            usable: Some(tokens),
        };
        let expected_answers = vec![(0, held(4)), (1, held(0)), (2, held(2))];
        let expected_hits: TierHits = vec![(0, [4, 0].into()), (1, [3][..].into())];
        let (answers, hits) = store.match_prefix_tiers(&[], &prompt);
        assert_eq!(answers, expected_answers);
        assert_eq!(hits, expected_hits);
        assert_eq!(store.match_hashes_tiers(1, &chain), (answers, hits));
        // without tiers the answers are the GPU's alone
        assert_eq!(
            store.match_prefix(&[], &prompt),
            vec![(0, held(4)), (2, held(2))]
        );
        // a prompt the CPU holds only as far as the GPU: CPU 0
        let (_, hits) = store.match_prefix_tiers(&[], &prompt[..4]);
        assert_eq!(hits, vec![(0, [0, 0].into()), (1, [3][..].into())]);
        // a diverged source answers unknown, with no tier walk
        store.replica_mut("cpu").mark_diverged("gap");
        let (answers, hits) = store.match_prefix_tiers(&[], &prompt);
        assert_eq!(answers[1], (1, Answer::Unknown));
        assert_eq!(hits, vec![(0, [4, 0].into())]);
    }

    /// The walk the holder index replaces: every source looked up page by page on its own.
    fn per_source_walk(store: &ReplicaStore, prior: &[u8], tokens: &[u32]) -> Vec<(u32, Answer)> {
        let mut answers = Vec::new();
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
            let size = u64::from(meta.page_size);
            let segments: Vec<(u64, bool)> = hashes(prior, tokens, meta.page_size as usize)
                .into_iter()
                .map_while(|block_hash| replica.blocks.residency(block_hash))
                .map(|resident| (size, resident))
                .collect();
            let (walked, usable) = usable_prefix(&segments, u64::from(meta.sliding_window_size));
            if walked > 0 {
                let usable = meta.swa_events.then(|| usable as u64 * size);
                let tokens = walked as u64 * size;
                answers.push((id, Answer::Held { tokens, usable }));
            }
        }
        answers
    }

    fn rng(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::digest::mix64(*seed)
    }

    #[test]
    fn the_holder_walk_equals_a_walk_per_source_on_random_stores() {
        let mut seed = 11;
        for round in 0..40 {
            let mut store = ReplicaStore::new();
            if round % 2 == 0 {
                store.enable_holders(); // kept in step from the start, or built at the first match
            }
            // a few prompts that sources hold parts of, with tombstones and removals
            let prompts: Vec<Vec<u32>> = (0..4)
                .map(|_| (0..24).map(|_| (rng(&mut seed) % 5) as u32).collect())
                .collect();
            let sources = 2 + (rng(&mut seed) % 70) as usize; // past one mask word
            for source in 0..sources {
                let name = format!("s{source}");
                let page_size = [1u32, 2, 4][(rng(&mut seed) % 3) as usize];
                let window = 1 + (rng(&mut seed) % 6) as u32;
                store.replica_mut(&name).meta = Some(SourceMeta {
                    page_size,
                    sliding_window_size: window,
                    swa_events: rng(&mut seed) % 5 != 0,
                    json: "{}".to_owned(),
                });
                let prompt = &prompts[(rng(&mut seed) % 4) as usize];
                let pages = (rng(&mut seed) % 7) as usize;
                let chain = hashes(&[], prompt, page_size as usize);
                let pages = pages.min(chain.len());
                if pages == 0 {
                    continue;
                }
                let stored = Event::Stored(Stored {
                    hashes: chain[..pages].into(),
                    parent: None,
                    tokens: prompt[..pages * page_size as usize].into(),
                    block_size: page_size,
                    lora_id: None,
                    medium: None,
                });
                store.apply_events(&name, &[stored]).unwrap();
                let tombstoned: Vec<i64> = chain[..pages]
                    .iter()
                    .copied()
                    .filter(|_| rng(&mut seed) % 3 == 0)
                    .collect();
                if !tombstoned.is_empty() {
                    let event = Event::SwaEvicted {
                        hashes: tombstoned.into(),
                    };
                    store.apply_events(&name, &[event]).unwrap();
                }
                match rng(&mut seed) % 8 {
                    0 => store.replica_mut(&name).mark_diverged("gap"),
                    1 => store.clear(&name),
                    2 => {
                        let last = vec![chain[pages - 1]];
                        let event = Event::Removed {
                            hashes: last.into(),
                            medium: None,
                            reason: None,
                        };
                        store.apply_events(&name, &[event]).unwrap();
                    }
                    3 => store.replica_mut(&name).meta = None,
                    _ => {}
                }
            }
            for prompt in &prompts {
                for length in [0, 3, 8, 24] {
                    let expected = per_source_walk(&store, &[], &prompt[..length]);
                    assert_eq!(store.match_prefix(&[], &prompt[..length]), expected);
                }
            }
            // the index kept in step equals one built from scratch
            let kept: std::collections::BTreeMap<i64, (Vec<u64>, Vec<u64>)> = store
                .holders()
                .unwrap()
                .entries()
                .map(|(h, (p, t))| (h, (p.to_vec(), t.to_vec())))
                .collect();
            let built = HolderIndex::build(store.replicas());
            let rebuilt: std::collections::BTreeMap<i64, (Vec<u64>, Vec<u64>)> = built
                .entries()
                .map(|(h, (p, t))| (h, (p.to_vec(), t.to_vec())))
                .collect();
            assert_eq!(kept, rebuilt);
        }
    }
}
