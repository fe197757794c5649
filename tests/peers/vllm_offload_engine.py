"""vLLM 0.33.0's scheduler with its CPU ``OffloadingConnector``, as a KV-event publisher (run in
bench/.venv-vllm).

vLLM's own ``Scheduler`` (``v1/core/sched/scheduler.py``) with its ``KVCacheManager`` and the
scheduler half of the ``OffloadingConnector`` with its ``CPUOffloadingManager`` (LRU, default
settings; configuration in ``tests/peers/vllm_offload_config.py``), both pools small so both
evict, serves a seeded chat workload: up to ``max_num_seqs`` requests at once, one new request
added per step while fewer are unfinished. Each step is ``schedule()`` then
``update_from_output`` with a ``ModelRunnerOutput`` built here: the workload's next reply token
for every request whose prompt is computed, nothing for a prefill chunk. No model runs; the one
stand-in is the worker's GPU<->CPU copy: every load and store job of the step's
``OffloadingConnectorMetadata`` completes at once, reported the way ``OffloadingConnectorWorker``
reports it (``KVConnectorOutput.kv_connector_worker_meta`` = ``OffloadingWorkerMetadata`` with
``completed_jobs``, and ``finished_recving`` for an asynchronous load's request). The scheduler
itself publishes each step's ``KVEventBatch`` (the manager's events, then the connector's)
through the ``ZmqEventPublisher`` vLLM builds from its ``KVEventsConfig``.

After every step, for a few sampled prompts (each unfinished request's tokens, the last finished
conversation, an older one, an older one cut at a block and continued with new tokens, and the
prompt part of the last finished one), vLLM's own answers the way its scheduler asks them for a
new request: ``gpu`` = the tokens of ``kv_cache_manager.get_computed_blocks(request)``, ``cpu`` =
``connector.get_num_new_matched_tokens(request, gpu)`` (what the connector would load after the
GPU hit), and ``cpu_from_zero`` = the same asked with no GPU hit (what the CPU tier holds from
the first block; to tell "held on both" from "GPU only"). Every sampled prompt is cut to
``k * block_size + 1`` tokens: vLLM never counts a prompt's last token as a hit, so its answers
cover exactly the prompt's ``k`` whole blocks. Copies complete within their step, so no chunk is
in flight when asked (``None`` is reported as such, never expected).

Asking changes nothing the engine later does: ``get_computed_blocks`` only reads the block pool
(no touch; the peer runs without stats), ``CPUOffloadingManager.lookup`` only reads its policy's
map (the LRU order changes on store, load, touch and request end, never on lookup), the probe's
per-request state (its ``ReqContext``) is dropped with it, and the one shared write,
``OffloadingEventsTracker.record_lookup`` when self-describing events are on, re-registers a
primary residency the stored chunk's entry already has (a chunk here is one block, so even a
rebuilt entry would publish the same single hash). ``get_num_new_matched_tokens`` opens the
connector's per-step manager region (closed by ``build_connector_meta`` in a real step): the
probe closes it after asking, so the next ``on_new_request`` finds it closed as vLLM expects.

Protocol (JSON lines, ``tests/peers/command_loop.py``): ``{"cmd": "configure", "endpoint": ...,
"replay_endpoint": ..., "num_gpu_blocks": N, "num_cpu_blocks": M, "self_describing": bool,
"seed": S, "drop_tier_events": bool}`` replaces the engine and its publisher by a fresh run
(the process imports vLLM once; ``drop_tier_events`` publishes only the GPU events, for the
differential's self-test); ``{"cmd": "step", "probe": bool}`` -> ``{"seq": the seq of the
batch the step published or null, "probes": [[tokens, gpu, cpu, cpu_from_zero], ...]}`` (no
probes when ``probe`` is false); ``{"cmd": "stats"}`` -> the events
vLLM made so far, by type and medium (``{"GPU stored": n, "CPU removed": m, ...}``), the load
and store jobs completed (and the stores flushed because their GPU block was being reused), the
requests finished, a fingerprint of every event in order and the
block sizes its CPU ``BlockStored`` events carried; ``{"cmd": "events", "last": K}`` -> the last
K batches' events, each summarized; ``{"cmd": "exit"}``.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

from vllm.distributed.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVCacheEvent,
    KVEventBatch,
)
from vllm.distributed.kv_transfer.kv_connector.v1.offloading.common import (
    OffloadingConnectorMetadata,
    OffloadingWorkerMetadata,
)
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import get_hash_fn_by_name
from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.outputs import KVConnectorOutput, ModelRunnerOutput
from vllm.v1.request import Request
from vllm.v1.structured_output import StructuredOutputManager

from swa_es.engine.workload import ChatWorkload
from tests.peers.command_loop import serve_commands, wait_sent
from tests.peers.vllm_offload_config import OffloadSetup, build


def describe(event: KVCacheEvent) -> dict[str, Any]:
    """One event, summarized: type, medium, hash count, token count, block size, parent."""
    if isinstance(event, BlockStored):
        return {
            "type": "BlockStored",
            "medium": event.medium,
            "hashes": len(event.block_hashes),
            "tokens": len(event.token_ids),
            "block_size": event.block_size,
            "parent": event.parent_block_hash is not None,
            "group_idx": event.group_idx,
        }
    if isinstance(event, BlockRemoved):
        return {"type": "BlockRemoved", "medium": event.medium, "hashes": len(event.block_hashes)}
    return {"type": type(event).__name__, "medium": getattr(event, "medium", None)}


def event_kind(event: KVCacheEvent) -> str:
    """``"<medium> stored"`` / ``"<medium> removed"`` / ``"cleared"`` (medium GPU when None)."""
    if isinstance(event, AllBlocksCleared):
        return "cleared"
    medium = getattr(event, "medium", None) or "GPU"
    return f"{medium} {'stored' if isinstance(event, BlockStored) else 'removed'}"


class ImmediateCopies:
    """The worker's GPU<->CPU copy, completing every job of a step at once."""

    def __init__(self) -> None:
        self.loads = 0
        self.stores = 0
        self.flushed = 0

    def output(self, scheduled: SchedulerOutput) -> KVConnectorOutput:
        """What ``OffloadingConnectorWorker`` reports once the step's jobs are done."""
        meta = scheduled.kv_connector_metadata
        if not isinstance(meta, OffloadingConnectorMetadata):
            raise TypeError(f"connector metadata: expected offloading, got {type(meta)}")
        # Every job completes in the step that made it, so a flush can only name one of them.
        stale = set(meta.jobs_to_flush or ()) - meta.store_jobs.keys()
        if stale:
            raise RuntimeError(f"flush of jobs not made this step: {sorted(stale)}")
        self.loads += len(meta.load_jobs)
        self.stores += len(meta.store_jobs)
        self.flushed += len(meta.jobs_to_flush or ())
        done = {job_id: 1 for job_id in (*meta.load_jobs, *meta.store_jobs)}
        received = {job.req_id for job in meta.load_jobs.values() if not job.sync}
        return KVConnectorOutput(
            finished_recving=received or None,
            kv_connector_worker_meta=OffloadingWorkerMetadata(completed_jobs=done)
            if done
            else None,
        )


class OffloadEngine:
    """vLLM's scheduler with the CPU offloading connector serving a chat workload."""

    def __init__(self, setup: OffloadSetup, seed: int, drop_tiers: bool = False) -> None:
        config, kv_cache = build(setup)
        self.drop_tiers = drop_tiers
        self.published = 0
        self.block_size = setup.block_size
        self.scheduler = Scheduler(
            vllm_config=config,
            kv_cache_config=kv_cache,
            structured_output_manager=StructuredOutputManager(config),
            block_size=setup.block_size,
        )
        if self.scheduler.connector is None:
            raise RuntimeError("the scheduler built no KV connector")
        self.connector = self.scheduler.connector
        # EngineCore's request block hasher: the prefix-caching hash named in the cache config.
        hash_fn = get_hash_fn_by_name(config.cache_config.prefix_caching_hash_algo)
        init_none_hash(hash_fn)
        self.hasher = get_request_block_hasher(setup.block_size, hash_fn)
        self.publisher = self.scheduler.kv_event_publisher
        self.batches: list[list[KVCacheEvent]] = []
        self.kinds: Counter[str] = Counter()
        self.fingerprint = hashlib.sha256()
        self.cpu_store_sizes: set[int] = set()
        self._count_batches(self.publisher.publish)
        self.copies = ImmediateCopies()
        self.workload = ChatWorkload(
            seed=seed,
            system_prompts=6,
            system_prompt_tokens=70,
            user_turn_tokens=30,
            assistant_turn_tokens=20,
            max_conversation_tokens=400,
            max_open_conversations=8,
            vocab_size=1000,
        )
        self.rng = random.Random(seed)
        self.max_num_seqs = setup.max_num_seqs
        self.requests = 0
        self.asked = 0
        self.replies: dict[str, list[int]] = {}
        self.serving: dict[str, Request] = {}
        self.finished: list[Request] = []

    def _count_batches(self, publish: Callable[[EventBatch], None]) -> None:
        """Keep each batch the scheduler publishes (it still goes out through ``publish``)."""

        def counted(batch: EventBatch) -> None:
            events = list(batch.events)
            self.batches.append(events)
            self.kinds.update(event_kind(event) for event in events)
            self.fingerprint.update(repr(events).encode())
            self.cpu_store_sizes.update(
                event.block_size
                for event in events
                if isinstance(event, BlockStored) and event.medium == "CPU"
            )
            if self.drop_tiers:
                kept = [event for event in events if event_kind(event).startswith("GPU ")]
                if not kept:
                    return
                batch = KVEventBatch(
                    ts=batch.ts, events=kept, data_parallel_rank=batch.data_parallel_rank
                )
            self.published += 1
            publish(batch)

        self.publisher.publish = counted

    def _request(self, tokens: list[int], max_tokens: int, request_id: str) -> Request:
        return Request(
            request_id=request_id,
            prompt_token_ids=tokens,
            sampling_params=SamplingParams(max_tokens=max_tokens),
            pooling_params=None,
            block_hasher=self.hasher,
        )

    def _admit(self) -> None:
        if self.scheduler.get_num_unfinished_requests() >= self.max_num_seqs:
            return
        item = self.workload.next_request()
        reply = list(item.output_ids) or [1]
        self.requests += 1
        request = self._request(list(item.prompt_ids), len(reply), f"r{self.requests}")
        self.replies[request.request_id] = reply
        self.serving[request.request_id] = request
        self.scheduler.add_request(request)

    def _run_model(self, scheduled: SchedulerOutput) -> ModelRunnerOutput:
        """The sampled tokens a model runner returns for the step (plus the copies' report)."""
        req_ids = list(scheduled.num_scheduled_tokens)
        sampled: list[list[int]] = []
        for req_id in req_ids:
            request = self.scheduler.requests[req_id]
            # schedule() already advanced num_computed_tokens by this step's tokens
            if request.num_computed_tokens < request.num_tokens:
                sampled.append([])  # a prefill chunk: its sample is discarded
                continue
            reply = self.replies[req_id]
            sampled.append([reply[min(len(request.output_token_ids), len(reply) - 1)]])
        return ModelRunnerOutput(
            req_ids=req_ids,
            req_id_to_index={req_id: index for index, req_id in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=self.copies.output(scheduled),
        )

    def step(self) -> int | None:
        """One engine step; the seq of the batch it published, None if it published none."""
        self._admit()
        before = self.published
        scheduled = self.scheduler.schedule()
        self.scheduler.update_from_output(scheduled, self._run_model(scheduled))
        for req_id, request in list(self.serving.items()):
            if request.is_finished():
                del self.serving[req_id]
                self.finished.append(request)
        wait_sent(self.publisher._event_queue)
        return self.published - 1 if self.published > before else None

    def probe(self, tokens: list[int]) -> list[Any]:
        """[tokens, gpu hit, cpu hit after it, cpu hit from the first block]."""
        # its own id space: the served requests' ids (and so set orders) stay as without probes
        self.asked += 1
        request = self._request(tokens, 1, f"probe{self.asked}")
        _, gpu, _ = self.scheduler.kv_cache_manager.get_computed_blocks(request)
        self.connector.on_new_request(request)
        scheduler_half = self.connector.scheduler
        try:
            cpu, _ = self.connector.get_num_new_matched_tokens(request, gpu)
            cpu_from_zero, _ = self.connector.get_num_new_matched_tokens(request, 0)
        finally:
            # a scheduling step would close the region and keep the request; a probe is neither
            scheduler_half._release_step()
            scheduler_half._req_status.pop(request.request_id, None)
        return [tokens, gpu, cpu, cpu_from_zero]

    def _whole_blocks_plus_one(self, tokens: list[int]) -> list[int]:
        return tokens[: (len(tokens) - 1) // self.block_size * self.block_size + 1]

    def probes(self) -> list[list[Any]]:
        """vLLM's answers for this step's sampled prompts."""
        prompts = [list(request.all_token_ids) for request in self.serving.values()]
        if self.finished:
            last = self.finished[-1]
            prompts.append(list(last.all_token_ids))
            prompts.append(list(last.prompt_token_ids or []))
            older = list(self.rng.choice(self.finished).all_token_ids)
            prompts.append(older)
            cut = self.rng.randrange(len(older) // self.block_size + 1) * self.block_size
            fresh = [self.rng.randrange(1000, 2000) for _ in range(self.block_size * 2)]
            prompts.append(older[:cut] + fresh)
        cut_prompts = (self._whole_blocks_plus_one(prompt) for prompt in prompts)
        return [self.probe(prompt) for prompt in cut_prompts if len(prompt) > self.block_size]

    def stats(self) -> dict[str, Any]:
        """Events published so far by kind, copies completed, requests finished."""
        return {
            "events": dict(self.kinds),
            "loads": self.copies.loads,
            "stores": self.copies.stores,
            "flushed": self.copies.flushed,
            "finished": len(self.finished),
            "fingerprint": self.fingerprint.hexdigest(),
            "cpu_store_block_sizes": sorted(self.cpu_store_sizes),
        }

    def shutdown(self) -> None:
        """Shut the scheduler (its connector and publisher) down."""
        self.scheduler.shutdown()


def start(request: dict[str, Any]) -> OffloadEngine:
    """An engine run of the request's configuration, publishing on its endpoints."""
    setup = OffloadSetup(
        endpoint=request["endpoint"],
        replay_endpoint=request["replay_endpoint"],
        num_gpu_blocks=int(request.get("num_gpu_blocks", 64)),
        num_cpu_blocks=int(request.get("num_cpu_blocks", 96)),
        self_describing=bool(request.get("self_describing", False)),
    )
    drop_tiers = bool(request.get("drop_tier_events", False))
    return OffloadEngine(setup, seed=int(request.get("seed", 0)), drop_tiers=drop_tiers)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--endpoint", required=True)
    parser.add_argument("--replay-endpoint", required=True)
    args = parser.parse_args()
    current = [start({"endpoint": args.endpoint, "replay_endpoint": args.replay_endpoint})]

    def configure(request: dict[str, Any]) -> dict[str, Any]:
        current[0].shutdown()
        current[0] = start(request)
        return {"configured": True}

    def step(request: dict[str, Any]) -> dict[str, Any]:
        engine = current[0]
        seq = engine.step()
        return {"seq": seq, "probes": engine.probes() if request.get("probe", True) else []}

    def events(request: dict[str, Any]) -> dict[str, Any]:
        last = current[0].batches[-int(request.get("last", 5)) :]
        return {"batches": [[describe(event) for event in batch] for batch in last]}

    handlers = {
        "configure": configure,
        "step": step,
        "stats": lambda request: current[0].stats(),
        "events": events,
    }
    return serve_commands(handlers, lambda: current[0].shutdown())


if __name__ == "__main__":
    sys.exit(main())
