//! A software prefetch hint: start loading a cache line that a later step will read.
//!
//! The replica's indexes are hash tables far larger than the CPU caches, so each lookup of a new
//! block hash misses the cache. Looking a few lookups ahead and prefetching their buckets lets
//! those misses overlap instead of queueing one after the other.

/// Hint that `value` will be read soon. Never reads or writes it; a no-op off x86-64.
#[inline(always)]
pub fn prefetch<T>(value: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: `_mm_prefetch` is `unsafe` only because it is a `#[target_feature(enable =
        // "sse")]` function; SSE is part of the x86-64 baseline, so the instruction exists on
        // every CPU this code runs on. PREFETCHT0 is a hint that never faults and never
        // dereferences in the language's sense, and the pointer comes from a live reference.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((value as *const T).cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
