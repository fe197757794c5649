"""Where our cache differs from sglang 0.5.16's ``SWARadixCache`` on purpose: the one list.

Each entry says what differs, why, and how the differential sequences stay clear of it. Nothing
here is excluded by loosening a comparison: every step's returns, pool sizes, ``total_size()``
and BlockStored / BlockRemoved / AllBlocksCleared events are compared exactly; a difference is
kept out only by how sequences are built. docs/fidelity.md shows this list as a table.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IntendedDifference:
    """One deliberate difference from sglang."""

    name: str
    ours: str
    sglang: str
    reason: str
    kept_out_by: str


INTENDED_DIFFERENCES: tuple[IntendedDifference, ...] = (
    IntendedDifference(
        name="window-capped SWA lock",
        ours=(
            "inc_lock_ref SWA-locks exactly the last ceil(window / page) * page tokens of the "
            "path, splitting the node the boundary falls in (the split keeps both halves' "
            "recency where the node was)"
        ),
        sglang=(
            "SWA-locks whole nodes from the locked node up until at least the window is "
            "covered, so one long node pins all its SWA KV"
        ),
        reason=(
            "a lock never pins more SWA memory than attention needs; sglang's own "
            "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT (off by default) targets the same waste, for "
            "fresh leaves only"
        ),
        kept_out_by=(
            "before locking, a request whose lock span would end inside a node first matches "
            "the prefix up to that point (splitting the node identically on both sides) and "
            "matches again; then both lock the same nodes"
        ),
    ),
    IntendedDifference(
        name="namespaces (extra_key)",
        ours=(
            "an extra_key seeds the block-hash chain with sha256(extra_key), so namespaces "
            "never share block hashes"
        ),
        sglang=(
            "extra_key separates tree nodes but not event hashes, so equal tokens under two "
            "salts publish equal hashes (sglang issue #24568)"
        ),
        reason="a router must not confuse two tenants' or two LoRA adapters' blocks",
        kept_out_by="sequences never pass an extra_key (hashes are then byte-identical)",
    ),
    IntendedDifference(
        name="SWA residency events",
        ours="BlockSWAEvicted when a node is tombstoned, BlockSWARestored when it gets SWA back",
        sglang="silent on both (its events describe full KV only)",
        reason=(
            "replicas and routers must know a prefix whose window is tombstoned will not be "
            "reused (sglang issue #26577)"
        ),
        kept_out_by="these two event types are left out of our side's events",
    ),
    IntendedDifference(
        name="reset() returns the tree's slots",
        ours="reset() frees every slot the tree holds and records AllBlocksCleared",
        sglang=(
            "reset() only drops the tree and records AllBlocksCleared; the scheduler's "
            "flush_cache then clears the allocator"
        ),
        reason="a cache that owns slots gives them back; no caller has to know to clear",
        kept_out_by=(
            "the sglang side's reset step is reset() then allocator.clear(), as flush_cache "
            "does, taken when the driver holds no slots (held requests are released first)"
        ),
    ),
    IntendedDifference(
        name="stale or invalid lock handles, invalid input",
        ours=(
            "dec_lock_ref with a handle from before a reset, a double unlock, locking a span "
            "over a tombstone, a bad prev_prefix_len, token ids outside uint32 or a value of "
            "the wrong shape or dtype raise LockError / ValueError naming the problem"
        ),
        sglang="asserts, or corrupts the tree (a handle from before a reset walks a dead tree)",
        reason="bad input gets a clear, typed error and never corrupts what is cached",
        kept_out_by=(
            "sequences are valid: locks are released before a reset, only match results are "
            "locked, prev_prefix_len is the locked match's length"
        ),
    ),
    IntendedDifference(
        name="prev_prefix_len inside a node",
        ours=("insert splits the node at prev_prefix_len and frees only incoming slots past it"),
        sglang=(
            "frees the incoming slots of the whole node, the tree's own ones below "
            "prev_prefix_len included"
        ),
        reason="value[:prev_prefix_len] are the tree's own slots; freeing them corrupts the pools",
        kept_out_by=(
            "prev_prefix_len is always the locked match's length, a node boundary on both sides"
        ),
    ),
    IntendedDifference(
        name="which slot numbers",
        ours=(
            "a restored tombstone keeps its full slots and adopts the incoming SWA slots (the "
            "incoming full slots are freed); freed pages queue behind the free list"
        ),
        sglang=(
            "an unlocked tombstone takes the incoming slots and frees its old full slots; "
            "freed pages go to the front (paged) or back (page 1) of the free list"
        ),
        reason=(
            "the same counts either way; keeping the node's full slots is one move and is what "
            "sglang itself does for a locked tombstone"
        ),
        kept_out_by="no comparison reads slot numbers, only pool sizes",
    ),
    IntendedDifference(
        name="not offered",
        ours=(
            "no EAGLE bigram keys (is_eagle), no swa_evicted_seqlen on insert, no "
            "dec_swa_lock_only / early SWA lock release, no cache_finished_req / "
            "cache_unfinished_req (scheduler glue), no alloc_extend / alloc_decode / "
            "alloc_extend_swa_tail / free groups, no chain compaction or split-leaf-on-insert"
        ),
        sglang="offers them (compaction and split-leaf-on-insert behind flags that are off)",
        reason="outside the cache contract of docs/design.md §3",
        kept_out_by=(
            "the sglang side runs with is_eagle=False, swa_evicted_seqlen=0 and both "
            "SGLANG_OPT_SWA_* flags off (the driver checks the flags)"
        ),
    ),
)
"""Every intended difference; docs/fidelity.md follows this list."""
