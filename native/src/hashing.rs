//! sglang-compatible chained block hashes.
//!
//! For each page, `digest = sha256(prior ‖ tokens as u32 little-endian)`, where `prior` is the
//! previous page's 32-byte digest (empty at the root of the default namespace, `sha256(key)` at
//! the root of a named one). A block's event id is the digest's first 8 bytes read big-endian as
//! a signed 64-bit integer. `sha2` uses the CPU's SHA extensions when it has them.

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
    let mut digests = Vec::with_capacity(tokens.len() / page_size);
    let mut previous: Option<PageDigest> = None;
    for page in tokens.chunks_exact(page_size) {
        let digest = match &previous {
            None => page_digest(prior, page),
            Some(digest) => page_digest(digest, page),
        };
        digests.push(digest);
        previous = Some(digest);
    }
    digests
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
}
