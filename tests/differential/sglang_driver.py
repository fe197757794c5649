"""sglang 0.5.16's own ``SWARadixCache`` behind the differential step program, over JSON lines.

Runs only inside ``bench/.venv-sglang`` (``bash bench/setup_sglang.sh``), which also puts the
repository root on ``sys.path``: ``bench/.venv-sglang/bin/python -m
tests.differential.sglang_driver``. The cache is built as sglang's own unit tests build it on the
CPU (``bench.sglang_adapter.build_cache``): a minimal ``SWAKVPool``,
``SWATokenToKVPoolAllocator`` with ``need_sort=False``, and ``CacheInitParams`` with events on.

Protocol: one JSON object per line each way. First the driver prints ``{"ready": true,
"sglang": version, "flags": {...}}`` (the SWA optimisation flags, all expected off). Then each
request ``{"config": {...}, "steps": [...], "describe": bool}`` gets
``{"outcomes": [...], "describe": [...] | null}``: one outcome for the fresh cache, then one per
step. A request that cannot be read gets ``{"error": "..."}``.
"""

from __future__ import annotations

import enum
import json
import sys
from array import array
from collections.abc import Sequence
from typing import Any

import torch
from sglang.srt.environ import envs
from sglang.srt.mem_cache.base_prefix_cache import (
    DecLockRefParams,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey

from bench.sglang_adapter import RunConfig, build_cache
from tests.differential.program import Matched, Outcome, StepRunner
from tests.differential.steps import CacheConfig, config_from_json, step_from_json

SGLANG_VERSION = "0.5.16"


def _medium(value: object) -> object:
    return value.value if isinstance(value, enum.Enum) else value


class SglangCache:
    """Adapter over sglang's cache; untyped sglang objects stay ``Any`` here."""

    def __init__(self, config: CacheConfig) -> None:
        page = config.page_size
        run = RunConfig(
            page_size=page,
            events=True,
            requests=0,
            full_size=config.full_size,
            swa_size=config.swa_size,
            window=config.window,
        )
        self._cache, self._allocator = build_cache(run)
        self._page_size = page
        self._window = config.window

    @property
    def page_size(self) -> int:
        """Tokens per page."""
        return self._page_size

    @property
    def window(self) -> int:
        """The sliding window in tokens."""
        return self._window

    def _boundaries(self, node: Any) -> list[int]:
        lengths = []
        while node is not self._cache.root_node:
            lengths.append(len(node.value))
            node = node.parent
        ends, total = [], 0
        for length in reversed(lengths):
            total += length
            ends.append(total)
        return ends

    def match(self, tokens: Sequence[int]) -> Matched:
        """``match_prefix``."""
        result = self._cache.match_prefix(MatchPrefixParams(key=RadixKey(array("q", tokens))))
        node = result.last_device_node
        indices = result.device_indices
        return Matched(int(indices.numel()), indices, node, self._boundaries(node))

    def lock(self, node: object) -> object:
        """``inc_lock_ref``; the result carries the ``swa_uuid_for_lock``."""
        return self._cache.inc_lock_ref(node)

    def unlock(self, node: object, lock: object) -> None:
        """``dec_lock_ref`` with the lock's ``swa_uuid_for_lock``."""
        uuid = lock.swa_uuid_for_lock  # type: ignore[attr-defined]  # an IncLockRefResult
        self._cache.dec_lock_ref(node, DecLockRefParams(swa_uuid_for_lock=uuid))

    def alloc(self, n: int) -> torch.Tensor | None:
        """``alloc`` at page 1; at page > 1 both inner paged allocators plus the mapping.

        ``alloc_extend`` needs a Triton kernel, so this does what it does for a page-aligned
        prefix: whole pages from each pool, mapped page to page.
        """
        allocator = self._allocator
        if self._page_size == 1:
            fresh: torch.Tensor | None = allocator.alloc(n)
            return fresh
        if n > allocator.full_available_size() or n > allocator.swa_available_size():
            return None
        full: torch.Tensor = allocator.full_attn_allocator.alloc(n)
        swa = allocator.swa_attn_allocator.alloc(n)
        allocator.set_full_to_swa_mapping(full, swa)
        return full

    def free(self, slots: torch.Tensor) -> None:
        """``SWATokenToKVPoolAllocator.free``."""
        self._allocator.free(slots)

    def free_swa(self, slots: torch.Tensor) -> None:
        """``SWATokenToKVPoolAllocator.free_swa``."""
        self._allocator.free_swa(slots)

    def insert(self, tokens: Sequence[int], value: torch.Tensor, prev: int) -> int:
        """``insert`` (``swa_evicted_seqlen`` left at its default 0)."""
        params = InsertParams(key=RadixKey(array("q", tokens)), value=value, prev_prefix_len=prev)
        return int(self._cache.insert(params).prefix_len)

    def evict(self, full: int, swa: int) -> tuple[int, int]:
        """``evict``."""
        result = self._cache.evict(EvictParams(num_tokens=full, swa_num_tokens=swa))
        return int(result.num_tokens_evicted), int(result.swa_num_tokens_evicted)

    def reset(self) -> None:
        """``reset()`` then ``allocator.clear()``, as the scheduler's ``flush_cache`` does."""
        self._cache.reset()
        self._allocator.clear()

    def pools(self) -> tuple[int, int]:
        """Available (full, swa) slots."""
        allocator = self._allocator
        return int(allocator.full_available_size()), int(allocator.swa_available_size())

    def total_size(self) -> tuple[int, int]:
        """``total_size()``."""
        full, swa = self._cache.total_size()
        return int(full), int(swa)

    def take_events(self) -> list[list[Any]]:
        """The step's events as JSON lists."""
        out: list[list[Any]] = []
        for event in self._cache.take_events():
            name = type(event).__name__
            if name == "BlockStored":
                out.append(
                    [
                        name,
                        list(event.block_hashes),
                        event.parent_block_hash,
                        [int(t) for t in event.token_ids],
                        event.block_size,
                        event.lora_id,
                        _medium(event.medium),
                    ]
                )
            elif name == "BlockRemoved":
                out.append([name, list(event.block_hashes), _medium(event.medium)])
            else:
                out.append([name])
        return out

    def check(self, locks_held: bool) -> None:
        """sglang's ``sanity_check`` (it assumes no lock is held, so only then)."""
        if not locks_held:
            self._cache.sanity_check()

    def describe(self) -> list[str]:
        """Nodes (path, tombstone, locks) and both LRU lists, most recent first."""
        cache = self._cache
        root = cache.root_node

        def name(node: Any) -> str:
            parts = []
            while node is not root:
                parts.append(",".join(str(t) for t in node.key.token_ids))
                node = node.parent
            return "/".join(reversed(parts))

        def lru(lst: Any) -> str:
            names, node = [], getattr(lst.head, lst.nxt)
            while node is not lst.tail:
                names.append(name(node))
                node = getattr(node, lst.nxt)
            return " | ".join(names)

        lines = []
        stack = list(root.children.values())
        while stack:
            node = stack.pop()
            tomb = " tombstone" if node.swa_tombstone else ""
            lines.append(f"node {name(node)}{tomb} locks={node.full_lock_ref}/{node.swa_lock_ref}")
            stack.extend(node.children.values())
        return [
            *sorted(lines),
            "full LRU: " + lru(cache.full_lru_list),
            "swa LRU:  " + lru(cache.swa_lru_list),
        ]


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    """Build a fresh cache for ``request["config"]`` and run its steps."""
    runner = StepRunner(SglangCache(config_from_json(request["config"])))
    outcomes: list[Outcome] = [runner.start()]
    outcomes.extend(runner.run(step_from_json(step)) for step in request["steps"])
    described = runner.describe() if request.get("describe") else None
    return {"outcomes": outcomes, "describe": described}


def flags() -> dict[str, bool]:
    """sglang's SWA optimisation switches as this process sees them."""
    return {
        "SGLANG_OPT_SWA_RADIX_CACHE_COMPACT": bool(envs.SGLANG_OPT_SWA_RADIX_CACHE_COMPACT.get()),
        "SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT": bool(envs.SGLANG_OPT_SWA_SPLIT_LEAF_ON_INSERT.get()),
    }


def main() -> int:
    """Serve JSON-line requests on stdin until it closes."""
    print(json.dumps({"ready": True, "sglang": SGLANG_VERSION, "flags": flags()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = run_request(json.loads(line))
        except Exception as exc:  # a bad request: tell the parent, keep serving
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
