//! sglang-compatible chained block hashes.
//!
//! For each page, `digest = sha256(prior ‖ tokens as u32 little-endian)`, where `prior` is the
//! previous page's 32-byte digest (empty at the root of the default namespace, `sha256(key)` at
//! the root of a named one). A block's event id is the digest's first 8 bytes read big-endian as
//! a signed 64-bit integer. `sha2` uses the CPU's SHA extensions when it has them.
//!
//! A chain is hashed by `PageHasher`, which lays each page's padded message out once and runs
//! the compression function on it directly (twice as fast as a streaming hasher per page);
//! `page_digest`, the streaming form, hashes one page onto any prior.

use sha2::compress256;
use sha2::digest::generic_array::GenericArray;
use sha2::{Digest, Sha256};

/// A page digest: the full SHA-256 output that the next page chains onto.
pub type PageDigest = [u8; 32];

/// The prior of pages at the root of the namespace `extra_key` (`None`: empty).
pub fn namespace_prior(extra_key: Option<&str>) -> Vec<u8> {
    match extra_key {
        None => Vec::new(),
        Some(key) => Sha256::digest(key.as_bytes()).to_vec(),
    }
}

/// The digest of one page of `tokens` chained onto `prior`.
pub fn page_digest(prior: &[u8], tokens: &[u32]) -> PageDigest {
    // One `update` per 64 tokens rather than per token: each call has a fixed cost.
    const TOKENS_PER_UPDATE: usize = 64;
    let mut hasher = Sha256::new();
    hasher.update(prior);
    let mut bytes = [0u8; 4 * TOKENS_PER_UPDATE];
    for chunk in tokens.chunks(TOKENS_PER_UPDATE) {
        for (slot, token) in bytes.chunks_exact_mut(4).zip(chunk) {
            slot.copy_from_slice(&token.to_le_bytes());
        }
        hasher.update(&bytes[..4 * chunk.len()]);
    }
    hasher.finalize().into()
}

/// The signed 64-bit event id of a page digest.
pub fn block_hash(digest: &PageDigest) -> i64 {
    let mut head = [0u8; 8];
    head.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(head)
}

/// Digests of every whole page of `tokens`, chained from `prior`; a trailing partial page is
/// ignored, as the tree ignores it. `page_size` must be positive.
pub fn chain_page_digests(prior: &[u8], tokens: &[u32], page_size: usize) -> Vec<PageDigest> {
    assert!(page_size > 0, "page_size must be positive");
    let mut hasher = PageHasher::new(prior, page_size);
    tokens
        .chunks_exact(page_size)
        .map(|page| state_digest(&hasher.next(page)))
        .collect()
}

/// A SHA-256 state: the digest of a page, as eight big-endian words.
pub type State = [u32; 8];

/// SHA-256's initial state.
const SHA256_INIT: State = [
    0x6a09_e667,
    0xbb67_ae85,
    0x3c6e_f372,
    0xa54f_f53a,
    0x510e_527f,
    0x9b05_688c,
    0x1f83_d9ab,
    0x5be0_cd19,
];

/// The block hash of a page digest held as a state (`block_hash` of its bytes).
#[inline]
pub fn state_block_hash(state: &State) -> i64 {
    ((u64::from(state[0]) << 32) | u64::from(state[1])) as i64
}

/// The state of a page digest (`state_digest`'s inverse).
pub fn digest_state(digest: &PageDigest) -> State {
    let mut state = [0u32; 8];
    for (word, bytes) in state.iter_mut().zip(digest.chunks_exact(4)) {
        let mut be = [0u8; 4];
        be.copy_from_slice(bytes);
        *word = u32::from_be_bytes(be);
    }
    state
}

/// The digest bytes of a state.
pub fn state_digest(state: &State) -> PageDigest {
    let mut digest = [0u8; 32];
    for (slot, word) in digest.chunks_exact_mut(4).zip(state) {
        slot.copy_from_slice(&word.to_be_bytes());
    }
    digest
}

/// Hashes a prompt's pages one at a time, chaining each onto the last.
///
/// Every page after the first hashes a message of the same length (the previous 32-byte digest,
/// then the page's tokens), so its padded blocks are laid out once and each page only writes
/// its digest and tokens into them before running the compression function (with the CPU's SHA
/// instructions when it has them) on them directly.
pub struct PageHasher<'a> {
    prior: &'a [u8],
    /// The padded message of a chained page: digest | tokens | 0x80 | zeros | bit length.
    chained: Vec<u8>,
    first: bool,
}

impl<'a> PageHasher<'a> {
    /// A hasher of pages of `page_size` tokens, the first chained onto `prior`.
    pub fn new(prior: &'a [u8], page_size: usize) -> Self {
        Self {
            prior,
            chained: padded(32, page_size),
            first: true,
        }
    }

    /// Continue the chain after a page whose digest is `state`.
    pub fn resume(&mut self, state: &State) {
        self.first = false;
        self.write_digest(state);
    }

    /// The digest of the next page (`page` holds `page_size` tokens).
    pub fn next(&mut self, page: &[u32]) -> State {
        let state = if self.first {
            // the root page chains onto the namespace's prior (empty or 32 bytes)
            self.first = false;
            let prior = self.prior.len();
            let mut message = padded(prior, page.len());
            message[..prior].copy_from_slice(self.prior);
            write_tokens(&mut message[prior..], page);
            compress(&message)
        } else {
            write_tokens(&mut self.chained[32..], page);
            compress(&self.chained)
        };
        self.write_digest(&state);
        state
    }

    fn write_digest(&mut self, state: &State) {
        for (slot, word) in self.chained[..32].chunks_exact_mut(4).zip(state) {
            slot.copy_from_slice(&word.to_be_bytes());
        }
    }
}

/// Write `tokens` as u32 little-endian at the start of `out`.
fn write_tokens(out: &mut [u8], tokens: &[u32]) {
    for (slot, token) in out.chunks_exact_mut(4).zip(tokens) {
        slot.copy_from_slice(&token.to_le_bytes());
    }
}

/// The SHA-256 state after the padded `message` (whole 64-byte blocks).
fn compress(message: &[u8]) -> State {
    let mut state = SHA256_INIT;
    for block in message.chunks_exact(64) {
        compress256(
            &mut state,
            std::slice::from_ref(GenericArray::from_slice(block)),
        );
    }
    state
}

/// A zeroed message of `prefix` bytes plus `page_size` tokens, padded as SHA-256 pads it.
fn padded(prefix: usize, page_size: usize) -> Vec<u8> {
    let length = prefix + 4 * page_size;
    let total = (length + 1 + 8).div_ceil(64) * 64;
    let mut message = vec![0u8; total];
    message[length] = 0x80;
    message[total - 8..].copy_from_slice(&((length as u64) * 8).to_be_bytes());
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sglang_test_vectors() {
        let single = chain_page_digests(&[], &[1, 2], 1);
        let ids: Vec<i64> = single.iter().map(block_hash).collect();
        assert_eq!(ids, vec![7470307888890966271, -1634645291211865391]);
        let page = chain_page_digests(&[], &[1, 2, 3, 4], 4);
        assert_eq!(block_hash(&page[0]), -3488128144981237669);
    }

    #[test]
    fn chain_drops_the_partial_page_and_chains_each_page_on_the_previous() {
        let digests = chain_page_digests(&[], &[1, 2, 3, 4, 5], 2);
        assert_eq!(digests.len(), 2);
        assert_eq!(digests[0], page_digest(&[], &[1, 2]));
        assert_eq!(digests[1], page_digest(&digests[0], &[3, 4]));
    }

    #[test]
    fn a_long_page_hashes_as_its_bytes_in_one_piece() {
        let tokens: Vec<u32> = (0..200).map(|t| t * 7919).collect();
        let bytes: Vec<u8> = tokens.iter().flat_map(|t| t.to_le_bytes()).collect();
        let prior = [3u8; 32];
        let whole: PageDigest = Sha256::new()
            .chain_update(prior)
            .chain_update(&bytes)
            .finalize()
            .into();
        assert_eq!(page_digest(&prior, &tokens), whole);
    }

    #[test]
    fn block_hash_reads_the_first_eight_bytes_big_endian_signed() {
        let mut digest = [0u8; 32];
        digest[0] = 0x80;
        digest[7] = 0x01;
        assert_eq!(block_hash(&digest), i64::MIN + 1);
    }

    #[test]
    fn a_named_namespace_seeds_the_chain_with_the_key_digest() {
        let prior = namespace_prior(Some("lora-a"));
        assert_eq!(prior, Sha256::digest(b"lora-a").to_vec());
        assert_ne!(page_digest(&prior, &[7]), page_digest(&[], &[7]));
        assert!(namespace_prior(None).is_empty());
    }

    #[test]
    fn the_page_hasher_equals_the_chain_hash() {
        let tokens: Vec<u32> = (0..200u32).map(|t| t.wrapping_mul(2_654_435_761)).collect();
        for prior in [vec![], namespace_prior(Some("lora-7")), vec![9u8; 70]] {
            for page_size in [1usize, 3, 15, 16, 17, 64] {
                // the chain as `page_digest` gives it, one page at a time (the generic hasher)
                let mut one_by_one: Vec<PageDigest> = Vec::new();
                for page in tokens.chunks_exact(page_size) {
                    let digest = match one_by_one.last() {
                        None => page_digest(&prior, page),
                        Some(last) => page_digest(last, page),
                    };
                    one_by_one.push(digest);
                }
                assert_eq!(chain_page_digests(&prior, &tokens, page_size), one_by_one);
                let mut hasher = PageHasher::new(&prior, page_size);
                for (page, expected) in tokens.chunks_exact(page_size).zip(&one_by_one) {
                    let state = hasher.next(page);
                    assert_eq!(state_digest(&state), *expected);
                    assert_eq!(digest_state(expected), state);
                    assert_eq!(state_block_hash(&state), block_hash(expected));
                }
                // a hasher resumed after any page continues the chain
                let mut resumed = PageHasher::new(&[], page_size);
                resumed.resume(&digest_state(&one_by_one[0]));
                let rest: Vec<PageDigest> = tokens
                    .chunks_exact(page_size)
                    .skip(1)
                    .map(|page| state_digest(&resumed.next(page)))
                    .collect();
                assert_eq!(rest, one_by_one[1..]);
            }
        }
    }
}
