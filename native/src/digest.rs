//! The order-independent state digest shared by the primary tree and its replicas.
//!
//! The digest of a set of blocks is the sum, mod 2^64, of one term per block; a term mixes
//! `(block_hash, parent_block_hash, swa_resident)`. Adding, removing or flipping one block
//! updates the digest in O(1), and two holders of the same blocks agree whatever order they got
//! them in. The block hash is already a SHA-256 prefix, so a term needs no cryptographic hash:
//! two rounds of the splitmix64 finalizer spread every input bit over the whole term.
//!
//! A block held on a lower tier (a medium other than the GPU: `"CPU"`, `"DISK"`, ...) adds a term
//! of its own, `tier_term(block_hash, medium)`: salted apart from every GPU term and keyed by the
//! medium's name, so the same block on two tiers, or on the GPU and a tier, counts once per place.
//!
//! `ALGORITHM` names this function in each epoch's `meta` (`"digest_alg"`); a follower that meets
//! another name reports that source's digests as unverifiable.

/// The name of this digest function on the wire.
pub const ALGORITHM: &str = "mix64-v1";

const HAS_PARENT: u64 = 1;
const SWA_RESIDENT: u64 = 2;
/// One odd constant per flag combination, so the flags change every bit of the term.
const FLAG_SALTS: [u64; 4] = [
    0x243f_6a88_85a3_08d3,
    0x1319_8a2e_0370_7345,
    0xa409_3822_299f_31d1,
    0x082e_fa98_ec4e_6c89,
];

/// The salt of a lower-tier term (apart from the four GPU flag salts).
const TIER_SALT: u64 = 0x4528_21e6_38d0_1377;
/// FNV-1a (64-bit) offset basis and prime, which key a medium's name.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The splitmix64 finalizer: a bijection of u64 with full avalanche.
pub fn mix64(value: u64) -> u64 {
    let mut z = value;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The digest contribution of one block.
pub fn block_term(block_hash: i64, parent_block_hash: Option<i64>, swa_resident: bool) -> u64 {
    let flags = if parent_block_hash.is_some() {
        HAS_PARENT
    } else {
        0
    } | if swa_resident { SWA_RESIDENT } else { 0 };
    let first = mix64(block_hash as u64 ^ FLAG_SALTS[flags as usize]);
    mix64(first ^ parent_block_hash.unwrap_or(0) as u64)
}

/// The key of a medium's name in a tier term: FNV-1a over its UTF-8 bytes.
pub fn medium_key(medium: &str) -> u64 {
    medium.bytes().fold(FNV_OFFSET, |key, byte| {
        (key ^ u64::from(byte)).wrapping_mul(FNV_PRIME)
    })
}

/// The digest contribution of a block held on the lower tier `medium` (never `"GPU"`: a GPU
/// block's term is `block_term`).
pub fn tier_term(block_hash: i64, medium: &str) -> u64 {
    tier_term_keyed(block_hash, medium_key(medium))
}

/// `tier_term` with the medium's key computed once (`medium_key`).
#[inline]
pub fn tier_term_keyed(block_hash: i64, medium_key: u64) -> u64 {
    mix64(mix64(block_hash as u64 ^ TIER_SALT) ^ medium_key)
}

/// The printable form of a digest accumulator: 16 lowercase hex digits.
pub fn format_digest(value: u64) -> String {
    format!("{value:016x}")
}

/// An incremental digest accumulator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateDigest {
    /// The sum of every held block's term, mod 2^64.
    pub value: u64,
}

impl StateDigest {
    /// Account for a block that entered the state.
    pub fn add(&mut self, block_hash: i64, parent: Option<i64>, swa_resident: bool) {
        self.value = self
            .value
            .wrapping_add(block_term(block_hash, parent, swa_resident));
    }

    /// Account for a block that left the state.
    pub fn remove(&mut self, block_hash: i64, parent: Option<i64>, swa_resident: bool) {
        self.value = self
            .value
            .wrapping_sub(block_term(block_hash, parent, swa_resident));
    }

    /// Account for a block whose SWA residency flipped to `swa_resident`.
    pub fn set_residency(&mut self, block_hash: i64, parent: Option<i64>, swa_resident: bool) {
        self.remove(block_hash, parent, !swa_resident);
        self.add(block_hash, parent, swa_resident);
    }

    /// Account for a block that entered the lower tier whose `medium_key` is given.
    pub fn add_tier(&mut self, block_hash: i64, medium_key: u64) {
        self.value = self
            .value
            .wrapping_add(tier_term_keyed(block_hash, medium_key));
    }

    /// Account for a block that left the lower tier whose `medium_key` is given.
    pub fn remove_tier(&mut self, block_hash: i64, medium_key: u64) {
        self.value = self
            .value
            .wrapping_sub(tier_term_keyed(block_hash, medium_key));
    }

    /// The sum of two accumulators (a source's GPU blocks and its lower tiers).
    pub fn combined(self, other: StateDigest) -> StateDigest {
        StateDigest {
            value: self.value.wrapping_add(other.value),
        }
    }

    /// The digest as 16 lowercase hex digits.
    pub fn hexdigest(&self) -> String {
        format_digest(self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_of_adds_does_not_matter_and_remove_undoes_add() {
        let mut a = StateDigest::default();
        a.add(1, None, true);
        a.add(2, Some(1), true);
        let mut b = StateDigest::default();
        b.add(2, Some(1), true);
        b.add(1, None, true);
        assert_eq!(a, b);
        b.remove(2, Some(1), true);
        b.remove(1, None, true);
        assert_eq!(b.value, 0);
    }

    #[test]
    fn every_field_changes_the_term() {
        let base = block_term(5, Some(7), true);
        assert_ne!(base, block_term(6, Some(7), true));
        assert_ne!(base, block_term(5, Some(8), true));
        assert_ne!(base, block_term(5, Some(7), false));
        assert_ne!(block_term(5, None, true), block_term(5, Some(0), true));
    }

    #[test]
    fn flipping_residency_twice_returns_to_the_start() {
        let mut digest = StateDigest::default();
        digest.add(9, Some(3), true);
        let start = digest;
        digest.set_residency(9, Some(3), false);
        assert_ne!(digest, start);
        digest.set_residency(9, Some(3), true);
        assert_eq!(digest, start);
    }

    #[test]
    fn tier_terms_differ_from_gpu_terms_and_by_medium() {
        for block_hash in [0, 1, 5, -7, i64::MAX] {
            let cpu = tier_term(block_hash, "CPU");
            assert_ne!(cpu, tier_term(block_hash, "DISK"));
            assert_ne!(cpu, tier_term(block_hash.wrapping_add(1), "CPU"));
            for parent in [None, Some(0), Some(1)] {
                for resident in [false, true] {
                    assert_ne!(cpu, block_term(block_hash, parent, resident));
                }
            }
        }
        let mut digest = StateDigest::default();
        digest.add_tier(3, medium_key("CPU"));
        assert_eq!(digest.value, tier_term(3, "CPU"));
        digest.remove_tier(3, medium_key("CPU"));
        assert_eq!(digest.value, 0);
        // pinned like the block term (the Python reference pins the same values)
        assert_eq!(medium_key(""), FNV_OFFSET);
        assert_eq!(format_digest(medium_key("CPU")), "0b453a19aa0f85a9");
        assert_eq!(format_digest(tier_term(1, "CPU")), "123641f9de6d8aa7");
    }

    #[test]
    fn known_value_pins_the_algorithm() {
        // Pinned so a change of the function (which would need a new ALGORITHM name) is caught;
        // the Python reference pins the same value.
        assert_eq!(format_digest(block_term(1, None, true)), "55bd85356cfb3a2a");
        assert_eq!(
            format_digest(block_term(7470307888890966271, None, true)),
            "808cc83dd9c9adce"
        );
        assert_eq!(
            format_digest(block_term(
                -1634645291211865391,
                Some(7470307888890966271),
                false
            )),
            "f194774adc4c0d2b"
        );
    }
}
