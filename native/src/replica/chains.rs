//! The page chain of a prompt, as the prefix walk reads it: block hashes computed page by page
//! (`PageHasher`), with the pages that a recently walked prompt shares taken from `ChainCache`
//! instead of hashed again.
//!
//! Hashing is the floor of a prefix match: each page chains onto the previous page's digest, so
//! a prompt's pages are hashed one after the other (two SHA-256 blocks per page of 16 tokens,
//! about 80 ns each with the CPU's SHA instructions; nothing runs them side by side). Prompts
//! that reach a router share long prefixes: a system prompt, the earlier turns of a
//! conversation, the same request retried. The cache keeps the page digests of the last few
//! prompts walked, per namespace and page size, and a new prompt reuses the digests of the
//! whole pages it has in common with the closest one. A digest is a pure function of its prior
//! and its tokens, so a reused one is the digest hashing would give: answers never change.

use crate::hashing::{state_block_hash, PageHasher, State};

/// Prompts kept (the least recently used one makes room).
const CHAINS: usize = 8;
/// At most this many pages of a prompt are kept (a page's digest is 32 bytes)...
const MAX_PAGES: usize = 8192;
/// ...and at most this many tokens (4 bytes each): a kept prompt costs at most 512 KiB, the
/// cache at most 4 MiB.
const MAX_TOKENS: usize = 1 << 16;

/// The leading pages of one walked prompt: their tokens and digests.
#[derive(Clone, Debug)]
struct Chain {
    prior: Vec<u8>,
    page_size: usize,
    tokens: Vec<u32>,
    states: Vec<State>,
    used: u64,
}

/// The page digests of the last few prompts walked (see the module docs).
#[derive(Clone, Debug, Default)]
pub struct ChainCache {
    chains: Vec<Chain>,
    clock: u64,
}

impl ChainCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The kept chain sharing the most whole pages with `tokens` under `prior`, and how many.
    fn closest(&self, prior: &[u8], page_size: usize, tokens: &[u32]) -> Option<(usize, usize)> {
        let mut best: Option<(usize, usize)> = None;
        for (at, chain) in self.chains.iter().enumerate() {
            if chain.page_size != page_size || chain.prior != prior {
                continue;
            }
            let shared = chain
                .tokens
                .chunks_exact(page_size)
                .zip(tokens.chunks_exact(page_size))
                .take_while(|(kept, page)| kept == page)
                .count();
            if shared > 0 && best.map_or(true, |(_, most)| shared > most) {
                best = Some((at, shared));
            }
        }
        best
    }

    /// Bytes the kept chains hold.
    pub fn heap_bytes(&self) -> usize {
        self.chains
            .iter()
            .map(|c| {
                c.prior.capacity()
                    + 4 * c.tokens.capacity()
                    + std::mem::size_of::<State>() * c.states.capacity()
            })
            .sum()
    }
}

/// The block hashes of one prompt's pages under one namespace and page size, page by page:
/// the pages shared with the closest kept chain are read from it, the rest hashed (and kept
/// when the walk ends: `finish`).
pub struct PromptChain<'a> {
    cache: &'a mut ChainCache,
    /// The kept chain read from, and how many of its pages are reused.
    source: Option<(usize, usize)>,
    hasher: PageHasher<'a>,
    prior: &'a [u8],
    page_size: usize,
    tokens: &'a [u32],
    /// Digests of the pages hashed by this walk, after the reused ones.
    fresh: Vec<State>,
}

impl<'a> PromptChain<'a> {
    /// The chain of `tokens` (pages of `page_size`) under the namespace `prior`.
    pub fn new(
        cache: &'a mut ChainCache,
        prior: &'a [u8],
        page_size: usize,
        tokens: &'a [u32],
    ) -> Self {
        let source = cache.closest(prior, page_size, tokens);
        let mut hasher = PageHasher::new(prior, page_size);
        if let Some((at, shared)) = source {
            hasher.resume(&cache.chains[at].states[shared - 1]);
        }
        Self {
            cache,
            source,
            hasher,
            prior,
            page_size,
            tokens,
            fresh: Vec::with_capacity(tokens.len() / page_size),
        }
    }

    /// How many whole pages the prompt has.
    pub fn page_count(&self) -> usize {
        self.tokens.len() / self.page_size
    }

    /// The block hash of page `index`; pages are asked for in order, from 0.
    #[inline]
    pub fn hash(&mut self, index: usize) -> i64 {
        if let Some((at, shared)) = self.source {
            if index < shared {
                return state_block_hash(&self.cache.chains[at].states[index]);
            }
        }
        let start = index * self.page_size;
        let state = self
            .hasher
            .next(&self.tokens[start..start + self.page_size]);
        self.fresh.push(state);
        state_block_hash(&state)
    }

    /// Keep what this walk hashed: the reused pages and the fresh ones, as the most recently
    /// used chain (extending the chain read from when the prompt continues it, else in the
    /// place of the least recently used one).
    pub fn finish(self) {
        let Self {
            cache,
            source,
            prior,
            page_size,
            tokens,
            fresh,
            ..
        } = self;
        cache.clock += 1;
        let used = cache.clock;
        let shared = source.map_or(0, |(_, shared)| shared);
        let pages = (shared + fresh.len())
            .min(MAX_PAGES)
            .min(MAX_TOKENS / page_size);
        if pages == 0 {
            return;
        }
        if let Some((at, shared)) = source {
            let chain = &mut cache.chains[at];
            if shared == chain.states.len() || fresh.is_empty() {
                // the prompt continues the kept chain (or adds nothing to it)
                chain.used = used;
                if pages > shared {
                    chain.states.extend_from_slice(&fresh[..pages - shared]);
                    chain
                        .tokens
                        .extend_from_slice(&tokens[shared * page_size..pages * page_size]);
                }
                return;
            }
        }
        let states = match source {
            None => {
                let mut states = fresh;
                states.truncate(pages);
                states
            }
            Some((at, shared)) => {
                let mut states = Vec::with_capacity(pages);
                states.extend_from_slice(&cache.chains[at].states[..shared.min(pages)]);
                states.extend_from_slice(&fresh[..pages - states.len()]);
                states
            }
        };
        if cache.chains.len() < CHAINS {
            cache.chains.push(Chain {
                prior: prior.to_vec(),
                page_size,
                tokens: tokens[..pages * page_size].to_vec(),
                states,
                used,
            });
        } else if let Some(oldest) = cache.chains.iter_mut().min_by_key(|c| c.used) {
            // the oldest chain's buffers are reused
            oldest.prior.clear();
            oldest.prior.extend_from_slice(prior);
            oldest.page_size = page_size;
            oldest.tokens.clear();
            oldest
                .tokens
                .extend_from_slice(&tokens[..pages * page_size]);
            oldest.states = states;
            oldest.used = used;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hashing::{block_hash as digest_hash, chain_page_digests, namespace_prior};

    fn hashes(prior: &[u8], tokens: &[u32], page_size: usize) -> Vec<i64> {
        chain_page_digests(prior, tokens, page_size)
            .iter()
            .map(digest_hash)
            .collect()
    }

    fn walked(
        cache: &mut ChainCache,
        prior: &[u8],
        tokens: &[u32],
        page_size: usize,
        pages: usize,
    ) -> Vec<i64> {
        let mut chain = PromptChain::new(cache, prior, page_size, tokens);
        let out = (0..pages).map(|index| chain.hash(index)).collect();
        chain.finish();
        out
    }

    fn rng(seed: &mut u64) -> u64 {
        *seed = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
        crate::digest::mix64(*seed)
    }

    #[test]
    fn chains_read_from_the_cache_equal_the_chain_hash() {
        // prompts that share prefixes (few distinct tokens), walked to random depths, in
        // namespaces and page sizes that must never share a chain
        let mut seed = 3;
        let mut cache = ChainCache::new();
        let priors = [
            vec![],
            namespace_prior(Some("a")),
            namespace_prior(Some("b")),
        ];
        let bases: Vec<Vec<u32>> = (0..3)
            .map(|_| (0..64).map(|_| (rng(&mut seed) % 3) as u32).collect())
            .collect();
        for _ in 0..2000 {
            let base = &bases[(rng(&mut seed) % 3) as usize];
            let mut prompt = base[..(rng(&mut seed) % 65) as usize].to_vec();
            if rng(&mut seed) % 2 == 0 {
                prompt.extend((0..rng(&mut seed) % 9).map(|_| (rng(&mut seed) % 3) as u32));
            }
            let prior = &priors[(rng(&mut seed) % 3) as usize];
            let page_size = [1usize, 2, 4][(rng(&mut seed) % 3) as usize];
            let expected = hashes(prior, &prompt, page_size);
            let depth = (rng(&mut seed) as usize) % (expected.len() + 1);
            let got = walked(&mut cache, prior, &prompt, page_size, depth);
            assert_eq!(got, expected[..depth]);
            assert!(cache.chains.len() <= CHAINS);
        }
        assert!(cache.heap_bytes() > 0);
    }

    #[test]
    fn a_repeated_prompt_is_read_from_the_cache_and_a_long_one_is_kept_in_part() {
        let mut cache = ChainCache::new();
        let prompt: Vec<u32> = (0..40).collect();
        walked(&mut cache, &[], &prompt, 4, 10);
        let chain = PromptChain::new(&mut cache, &[], 4, &prompt);
        assert_eq!(chain.source, Some((0, 10)));
        chain.finish();
        // a prompt diverging at page 3 reuses 3 pages and is kept beside the first
        let mut other = prompt.clone();
        other[13] = 99;
        assert_eq!(
            walked(&mut cache, &[], &other, 4, 10),
            hashes(&[], &other, 4)
        );
        assert_eq!(cache.chains.len(), 2);
        assert_eq!(cache.chains[1].states.len(), 10);
        // a prompt past the limit keeps only the limit's pages
        let long: Vec<u32> = (0..(MAX_TOKENS as u32 + 8)).collect();
        walked(&mut cache, &[], &long, 1, MAX_PAGES + 5);
        assert_eq!(cache.chains[2].states.len(), MAX_PAGES);
        assert_eq!(cache.chains[2].tokens.len(), MAX_PAGES);
    }
}
