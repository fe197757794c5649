"""sglang 0.5.16's own ``SWARadixCache`` with ``swa_es.integrations.sglang`` installed, publishing
through sglang's own ``ZmqEventPublisher``: the engine side of the bridged SWA differential
(``tests/differential/test_sglang_swa_bridge.py``). Runs in ``bench/.venv-sglang``.

Each ``step`` runs one seeded operation of a serving loop on sglang's cache, under pressure on
both pools: a request (``match_prefix`` -> ``inc_lock_ref`` -> allocate, evicting when a pool is
short -> ``insert`` -> ``dec_lock_ref``), sometimes after a long decode freed the SWA KV of its
own tokens below the window (``insert(swa_evicted_seqlen=...)``, as the scheduler's
``_evict_swa`` does); a running request that keeps its lock, releases its SWA lock early
(``dec_swa_lock_only``) and finishes later (``dec_lock_ref(skip_swa=True)``); a direct
``evict``; rarely a ``reset``. Then sglang's ``SchedulerKvEventsPublisher.publish_kv_events``
hands the step's events to the publisher, as the scheduler does once per loop.

After each step it answers with sampled prompts (the request just served, a partly cached one,
one whose window was freed, one fully evicted) and, for each, sglang's own answer:
``usable`` is ``len(match_prefix(prompt).device_indices)``; ``cached`` is the page-aligned
length of the prompt whose full KV the tree holds (tombstones included), read from its nodes.

Protocol (tests/peers/command_loop.py): ``{"cmd": "start", ...case}`` (``Session.start``: a
fresh cache publishing on the case's endpoints; one process serves every case, sglang's import
being the slow part) -> ``{"published": n}``; ``{"cmd": "step"}`` -> ``{"published": batches so
far, "op": name, "samples": [{"kind", "tokens", "cached", "usable"}, ...], "tombstones": n}``.
"""

from __future__ import annotations

# The integration goes in before sglang builds any cache (as launch_server does).
from swa_es.integrations.sglang import install

install()

import argparse  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import sys  # noqa: E402
from array import array  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from types import SimpleNamespace  # noqa: E402
from typing import Any  # noqa: E402

import torch  # noqa: E402
from sglang.srt.managers.scheduler_components.kv_events_publisher import (  # noqa: E402
    SchedulerKvEventsPublisher,
)
from sglang.srt.mem_cache.base_prefix_cache import (  # noqa: E402
    DecLockRefParams,
    EvictParams,
    InsertParams,
    MatchPrefixParams,
)
from sglang.srt.mem_cache.radix_cache import RadixKey  # noqa: E402

from bench.sglang_adapter import RunConfig, build_cache  # noqa: E402
from swa_es.engine.workload import ChatWorkload  # noqa: E402
from swa_es.integrations.sglang.publishing import split_runs  # noqa: E402
from tests.peers.command_loop import serve_commands, wait_sent  # noqa: E402

RECENT = 64
"""How many served prompts the samples are drawn from."""


@dataclass
class Running:
    """A request that keeps its tree lock across steps."""

    node: Any
    uuid: int | None
    swa_released: bool = False


class SwaEngine:
    """sglang's cache, its allocator and a seeded serving loop (see the module docstring)."""

    def __init__(self, args: argparse.Namespace) -> None:
        """``args``: ``page_size``, ``window``, ``full_size``, ``swa_size``, ``max_tokens``,
        ``seed``."""
        self.page = args.page_size
        self.window = args.window
        config = RunConfig(
            page_size=self.page,
            events=True,
            requests=0,
            full_size=args.full_size,
            swa_size=args.swa_size,
            window=self.window,
        )
        self.cache, self.allocator = build_cache(config)
        self.rng = random.Random(args.seed)
        self.workload = ChatWorkload(
            seed=args.seed,
            system_prompts=6,
            system_prompt_tokens=4 * self.window,
            user_turn_tokens=2 * self.page + 6,
            assistant_turn_tokens=self.window + 3,
            new_conversation_prob=0.3,
            max_conversation_tokens=args.max_tokens,
            max_open_conversations=8,
            vocab_size=50,
        )
        self.recent: list[list[int]] = []
        self.running: list[Running] = []
        self.last: list[int] = []

    # --- sglang's tree API ------------------------------------------------------------------

    def _key(self, tokens: list[int]) -> Any:
        return RadixKey(array("q", tokens))

    def match(self, tokens: list[int]) -> tuple[Any, Any]:
        result = self.cache.match_prefix(MatchPrefixParams(key=self._key(tokens)))
        return result.device_indices, result.last_device_node

    def _try_alloc(self, needed: int) -> torch.Tensor | None:
        allocator = self.allocator
        if self.page == 1:
            fresh: torch.Tensor | None = allocator.alloc(needed)
            return fresh
        if needed > allocator.full_available_size() or needed > allocator.swa_available_size():
            return None
        full: torch.Tensor = allocator.full_attn_allocator.alloc(needed)
        allocator.set_full_to_swa_mapping(full, allocator.swa_attn_allocator.alloc(needed))
        return full

    def _alloc(self, needed: int) -> torch.Tensor:
        while True:
            fresh = self._try_alloc(needed)
            if fresh is not None:
                return fresh
            allocator = self.allocator
            full_short = max(0, needed - allocator.full_available_size())
            swa_short = max(0, needed - allocator.swa_available_size())
            result = self.cache.evict(EvictParams(num_tokens=full_short, swa_num_tokens=swa_short))
            if result.num_tokens_evicted == 0 and result.swa_num_tokens_evicted == 0:
                if not self.running:
                    raise RuntimeError(f"sglang's cache cannot free {needed} slots")
                self._finish(self.running[0])

    def serve(self, prompt: list[int], output: list[int], long_decode: bool, keep: bool) -> None:
        page, cache = self.page, self.cache
        tokens = prompt + output
        indices, node = self.match(prompt)
        matched = len(indices)
        lock = cache.inc_lock_ref(node)
        aligned = len(tokens) // page * page
        needed = -(-(len(tokens) - matched) // page) * page
        fresh = self._alloc(needed)
        owned = aligned - matched
        value = torch.cat((indices, fresh[:owned]))
        evicted = 0
        if long_decode:
            # The scheduler's _evict_swa: SWA of the request's own tokens below the window freed.
            evicted = max(0, (aligned - self.window - page) // page * page)
            if evicted > matched:
                self.allocator.free_swa(value[matched:evicted])
            else:
                evicted = 0
        cache.insert(
            InsertParams(
                key=self._key(tokens[:aligned]),
                value=value,
                prev_prefix_len=matched,
                swa_evicted_seqlen=evicted,
            )
        )
        if owned < needed:
            self.allocator.free(fresh[owned:])
        if keep:  # a running request: lock what it now holds (cache_unfinished_req's way)
            _, held = self.match(tokens[:aligned])
            result = cache.inc_lock_ref(held)
            self.running.append(Running(held, result.swa_uuid_for_lock))
        cache.dec_lock_ref(node, DecLockRefParams(swa_uuid_for_lock=lock.swa_uuid_for_lock))
        self.last = prompt
        self.recent = [*self.recent[-(RECENT - 1) :], prompt]

    def _finish(self, running: Running) -> None:
        self.running.remove(running)
        self.cache.dec_lock_ref(
            running.node,
            DecLockRefParams(swa_uuid_for_lock=running.uuid),
            skip_swa=running.swa_released,
        )

    def step(self) -> str:
        rng = self.rng
        roll = rng.random()
        if roll < 0.002:
            self.cache.reset()
            self.allocator.clear()
            self.running.clear()
            return "reset"
        if roll < 0.10 and self.running:
            running = rng.choice(self.running)
            if running.swa_released or rng.random() < 0.3:
                self._finish(running)
                return "finish"
            self.cache.dec_swa_lock_only(running.node, running.uuid)
            running.swa_released = True
            return "release_window"
        if roll < 0.15:
            amount = rng.randrange(1, 4 * self.window + 2)
            full = rng.random() < 0.3
            params = EvictParams(num_tokens=amount if full else 0, swa_num_tokens=amount)
            self.cache.evict(params)
            return "evict"
        request = self.workload.next_request()
        keep = roll < 0.25 and len(self.running) < 2
        long_decode = rng.random() < 0.25
        self.serve(request.prompt_ids, request.output_ids, long_decode, keep)
        return "serve_keep" if keep else ("serve_long" if long_decode else "serve")

    # --- reading the tree ---------------------------------------------------------------------

    def held(self, tokens: list[int]) -> tuple[int, int]:
        """(full-KV prefix, SWA-usable prefix) from the nodes, touching nothing."""
        page, window = self.page, self.window
        node, length, since, usable = self.cache.root_node, 0, float("inf"), 0
        key = self._key(tokens[: len(tokens) // page * page])
        while len(key) > 0:
            child = node.children.get(key.child_key(page))
            if child is None:
                break
            if child.swa_tombstone:
                if since >= window:
                    usable = length
                since = 0
            matched = child.key.match(key, page_size=page)
            length += matched
            if not child.swa_tombstone:
                since += matched
            if matched < len(child.key):
                break
            node, key = child, key[matched:]
        if since >= window:
            usable = length
        return length, usable

    def samples(self) -> list[dict[str, Any]]:
        rng = self.rng
        picks: list[tuple[str, list[int]]] = []
        if self.last:
            picks.append(("served", self.last))
        if self.recent:
            base = rng.choice(self.recent)
            cut = rng.randrange(0, len(base) + 1)
            picks.append(("partial", base[:cut] + [rng.randrange(50, 60) for _ in range(9)]))
        reads = [(prompt, self.held(prompt)) for prompt in self.recent]
        freed = [prompt for prompt, (full, usable) in reads if usable < full]
        gone = [prompt for prompt, (full, _) in reads if full == 0]
        if freed:
            picks.append(("window_freed", rng.choice(freed)))
        picks.append(("evicted", rng.choice(gone) if gone else [60 + rng.randrange(9)] * 12))
        out = []
        for kind, tokens in picks:
            indices, _ = self.match(tokens)
            cached, _ = self.held(tokens)
            out.append({"kind": kind, "tokens": tokens, "cached": cached, "usable": len(indices)})
        return out

    def tombstones(self) -> int:
        count, stack = 0, list(self.cache.root_node.children.values())
        while stack:
            node = stack.pop()
            count += bool(node.swa_tombstone)
            stack.extend(node.children.values())
        return count


class Session:
    """The engine of the current case and its publisher (one case at a time)."""

    def __init__(self) -> None:
        self.engine: SwaEngine | None = None
        self.publisher: Any = None
        self.published = 0

    def shutdown(self) -> None:
        if self.publisher is not None:
            self.publisher.kv_event_publisher.shutdown()
            self.publisher = None

    def start(self, request: dict[str, Any]) -> dict[str, Any]:
        """A fresh cache and publisher for one case: ``page_size``, ``window``, ``full_size``,
        ``swa_size``, ``max_tokens``, ``seed``, ``endpoint``, ``replay_endpoint``."""
        self.shutdown()
        engine = SwaEngine(argparse.Namespace(**request))
        kv_events_config = json.dumps(
            {
                "publisher": "zmq",
                "endpoint": request["endpoint"],
                "replay_endpoint": request["replay_endpoint"],
                "buffer_steps": 100_000,
            }
        )
        parallel = SimpleNamespace(
            pp_rank=0, attn_tp_rank=0, attn_cp_rank=0, attn_dp_size=1, attn_dp_rank=0, dp_rank=None
        )
        self.publisher = SchedulerKvEventsPublisher(
            kv_events_config=kv_events_config,
            ps=parallel,
            attn_tp_rank=0,
            attn_cp_rank=0,
            attn_dp_rank=0,
            dp_rank=None,
            tree_cache=engine.cache,
            send_metrics_from_scheduler=None,
            max_running_requests=1,
            max_total_num_tokens=request["full_size"],
            get_stats=lambda: None,
        )
        self.engine, self.published = engine, 0
        self.publish()  # the start-up reset's AllBlocksCleared and the window declaration
        return {"published": self.published}

    def publish(self) -> None:
        assert self.engine is not None
        self.published += len(split_runs(self.engine.cache.kv_event_queue))
        self.publisher.publish_kv_events()
        wait_sent(self.publisher.kv_event_publisher._event_queue, poll_s=0.0005)

    def step(self, request: dict[str, Any]) -> dict[str, Any]:
        engine = self.engine
        if engine is None:
            return {"error": "no case started"}
        op = engine.step()
        self.publish()
        return {
            "published": self.published,
            "op": op,
            "samples": engine.samples(),
            "tombstones": engine.tombstones(),
        }


def main() -> int:
    session = Session()
    return serve_commands({"start": session.start, "step": session.step}, session.shutdown)


if __name__ == "__main__":
    sys.exit(main())
