"""Cache benchmark: our ``SWARadixCache`` vs sglang 0.5.16's, on one chat workload, in one run.

Every request does match → lock → alloc (evicting full/SWA tokens when short) → insert → unlock
→ take_events, on a full pool of 32768 and an SWA pool of 8192 slots with a 256-token window, at
each page size asked for. Ours runs with events on and off; sglang's runs in its own venv
(``bench/setup_sglang.sh``) as a subprocess speaking JSON lines (``bench/sglang_adapter.py``),
on the CPU, fed the same request stream (same seed). Repetitions are interleaved (ours, sglang,
ours, sglang, ...), because the machine is shared and noisy; each ratio is given of each side's
best run (what the verdicts read: other load only ever slows a run) and of medians. Rates are
taken by two clocks: wall time, and the measuring process's CPU time, which other load on a
shared machine disturbs far less; ratios use CPU time on cpu (``--clock`` to choose).

The publish-overhead case (issue 10; ``--no-publish`` skips it) serves the same requests in an
async loop, each one ``serve`` + ``pub.step()`` + a checkpoint, with a ``swa_es.Publisher`` to a
``memory://`` log and a ``flush()`` at the end, against the same loop with events off (a
checkpoint per request, no publisher). Its clocks: wall time (flush included), and the serving
thread's CPU time (what the serving loop itself pays; the publisher's worker thread hashes and
encodes beside it). The process's CPU time, all threads, is shown too. It also reports the wire
bytes per page-1 block: every record byte over the blocks stored, and the ``BlockStored`` events'
bytes alone. ``--neighbour`` adds a control: the events-off loop with a busy thread beside it
that never holds the GIL (SHA-256 of 16 MiB buffers), which shows what any work on the other
core costs the serving loop on this machine (on a VM whose two vCPUs share a physical core it is
not free). A round's publish runs go back to back (events on, off, the control), in the reverse
order every other round; beside the ratios of bests and of medians, the paired median is the
median of each round's own on/off ratio. Each publish run also counts, per request, what the
serving thread met besides its own work (minor page faults, voluntary and involuntary context
switches: ``getrusage(RUSAGE_THREAD)``) and the encoder thread's CPU time (its
``/proc/self/task/<tid>/schedstat``), which say where a ratio's spread comes from.

    .venv/bin/python bench/cache_bench.py --requests 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.lowlevel
from machine_load import CpuTicks, machine_row

from cache import SWAKVAllocator, SWARadixCache
from cache.events import BlockStored, EventBatch, decode_batch, encode_batch
from log import open_log
from swa_es import Publisher
from swa_es.engine.worker import CacheWorker
from swa_es.engine.workload import ChatRequest, ChatWorkload

FULL_SIZE = 32768
SWA_SIZE = 8192
WINDOW = 256
SGLANG_PYTHON = Path(__file__).resolve().parent / ".venv-sglang" / "bin" / "python"
ADAPTER = Path(__file__).resolve().parent / "sglang_adapter.py"
SGLANG_START_TIMEOUT_S = 600.0

# Targets: events on vs sglang events on (issue 10), events on/off with take_events (issue 2),
# events on + Publisher vs events off (issue 10), wire bytes per page-1 block (issues 9 and 10).
TARGET_VS_SGLANG = {1: 3.0, 16: 2.0}
TARGET_EVENT_OVERHEAD = 1.3
TARGET_PUBLISH_OVERHEAD = {1: 1.5, 16: 1.3}
TARGET_WIRE_BYTES_PER_BLOCK = 32.0


@dataclass(frozen=True, slots=True)
class Sample:
    """One timed run of one implementation at one page size with events on or off."""

    impl: str
    page_size: int
    events: bool
    requests_per_s: float
    elapsed_s: float
    cpu_s: float
    events_taken: int
    matched_tokens: int
    prompt_tokens: int
    requests: int

    @property
    def requests_per_cpu_s(self) -> float:
        """Requests per second of the measuring process's CPU time (all its threads)."""
        return self.requests / self.cpu_s if self.cpu_s > 0 else math.inf


def _freeze_heap() -> None:
    """Collect, then move every live object out of the collector's sight for the timed loop.

    Both sides do this (sglang's scheduler offers the same ``freeze_gc``): otherwise full
    collections keep re-scanning whatever the interpreter imported, which for sglang is
    millions of objects, and that would be measured instead of the cache.
    """
    gc.collect()
    gc.freeze()


def measure_ours(requests: list[ChatRequest], page_size: int, events: bool, device: str) -> Sample:
    """Time the requests on a fresh cache of ours."""
    allocator = SWAKVAllocator(FULL_SIZE, SWA_SIZE, page_size=page_size, device=device)
    cache = SWARadixCache(
        allocator, sliding_window_size=WINDOW, page_size=page_size, enable_events=events
    )
    cache.take_events()
    worker = CacheWorker(cache)
    taken = matched = 0
    _freeze_heap()
    start, start_cpu = time.perf_counter(), time.process_time()
    for request in requests:
        matched += worker.serve(request).matched_tokens
        taken += len(cache.take_events())
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()
    elapsed, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    gc.unfreeze()
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)  # untimed: the run was valid
    return Sample(
        impl="ours",
        page_size=page_size,
        events=events,
        requests_per_s=len(requests) / elapsed if elapsed > 0 else math.inf,
        elapsed_s=elapsed,
        cpu_s=cpu,
        events_taken=taken,
        matched_tokens=matched,
        prompt_tokens=sum(len(r.prompt_ids) for r in requests),
        requests=len(requests),
    )


@dataclass(frozen=True, slots=True)
class PublishSample:
    """One timed run of the publish-overhead case: the async serving loop with events off, or
    on with a Publisher to a memory:// log (flushed before the clocks stop)."""

    page_size: int
    events: bool
    neighbour: bool
    rep: int
    elapsed_s: float
    loop_cpu_s: float
    process_cpu_s: float
    requests: int
    record_bytes: int
    stored_bytes: int
    stored_blocks: int
    records: int
    loop_minor_faults: int = 0
    loop_voluntary_switches: int = 0
    loop_involuntary_switches: int = 0
    encoder_cpu_s: float = 0.0

    def seconds(self, clock: str) -> float:
        """Wall time (``wall``) or the serving thread's CPU time (``cpu``)."""
        return self.elapsed_s if clock == "wall" else self.loop_cpu_s


def _stored_only_bytes(batch: EventBatch) -> int:
    """Bytes the batch's BlockStored events take on the wire (envelope taken off)."""
    stored = tuple(e for e in batch.events if isinstance(e, BlockStored))
    empty = EventBatch(batch.source, batch.epoch, batch.seq, batch.ts, (), batch.digest, None)
    with_stored = EventBatch(batch.source, batch.epoch, batch.seq, batch.ts, stored, batch.digest)
    return len(encode_batch(with_stored)) - len(encode_batch(empty))


def _thread_counters() -> tuple[int, int, int]:
    """The calling thread's minor faults, voluntary and involuntary context switches so far."""
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_minflt, usage.ru_nvcsw, usage.ru_nivcsw


ENCODER_THREAD = "swa-es-encoder"  # the recorder's encoder thread (native/src/recorder/worker.rs)


def _encoder_tids() -> list[int]:
    """The ids of this process's encoder threads (by their name)."""
    tids = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as comm:
                if comm.read().strip() == ENCODER_THREAD:
                    tids.append(int(tid))
        except FileNotFoundError:
            continue  # the thread ended meanwhile
    return tids


def _threads_cpu_s(tids: list[int]) -> float:
    """The CPU time the threads ``tids`` have run so far (the scheduler's own count, in ns)."""
    total_ns = 0
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as stat:
                total_ns += int(stat.read().split()[0])
        except FileNotFoundError:
            continue
    return total_ns / 1e9


def _busy_neighbour(stop: threading.Event) -> None:
    """Hash 16 MiB buffers until told to stop: hashlib drops the GIL for each buffer."""
    buffer = bytes(16 * 1024 * 1024)
    while not stop.is_set():
        hashlib.sha256(buffer).digest()


async def _publish_run(
    requests: list[ChatRequest],
    page_size: int,
    events: bool,
    neighbour: bool,
    device: str,
    rep: int,
) -> PublishSample:
    allocator = SWAKVAllocator(FULL_SIZE, SWA_SIZE, page_size=page_size, device=device)
    cache = SWARadixCache(
        allocator, sliding_window_size=WINDOW, page_size=page_size, enable_events=events
    )
    worker = CacheWorker(cache)
    checkpoint = anyio.lowlevel.checkpoint
    stop = threading.Event()
    busy = threading.Thread(target=_busy_neighbour, args=(stop,), daemon=True)
    if neighbour:
        busy.start()
    async with await open_log("memory://bench") as log:
        async with Publisher(cache, log, "bench") if events else _no_publisher() as pub:
            _freeze_heap()
            encoders = _encoder_tids()
            counters, encoder_cpu = _thread_counters(), _threads_cpu_s(encoders)
            start = time.perf_counter(), time.thread_time(), time.process_time()
            for request in requests:
                worker.serve(request)
                if pub is not None:
                    pub.step()
                await checkpoint()
            if pub is not None:
                await pub.flush()
            if device.startswith("cuda"):
                import torch

                torch.cuda.synchronize()
            end = time.perf_counter(), time.thread_time(), time.process_time()
            counters_end, encoder_cpu_end = _thread_counters(), _threads_cpu_s(encoders)
            gc.unfreeze()
        records = [record.payload async for record in log.read()]
    stop.set()
    if neighbour:
        busy.join()
    cache.sanity_check(caller_held_full=0, caller_held_swa=0)  # untimed: the run was valid
    batches = [decode_batch(payload) for payload in records]
    return PublishSample(
        page_size=page_size,
        events=events,
        neighbour=neighbour,
        rep=rep,
        elapsed_s=end[0] - start[0],
        loop_cpu_s=end[1] - start[1],
        process_cpu_s=end[2] - start[2],
        requests=len(requests),
        record_bytes=sum(map(len, records)),
        stored_bytes=sum(map(_stored_only_bytes, batches)),
        stored_blocks=sum(isinstance(e, BlockStored) for b in batches for e in b.events),
        records=len(records),
        loop_minor_faults=counters_end[0] - counters[0],
        loop_voluntary_switches=counters_end[1] - counters[1],
        loop_involuntary_switches=counters_end[2] - counters[2],
        encoder_cpu_s=encoder_cpu_end - encoder_cpu,
    )


class _no_publisher:  # noqa: N801 -- reads as the context manager it stands in for
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


def measure_publish(
    requests: list[ChatRequest],
    page_size: int,
    events: bool,
    device: str,
    *,
    neighbour: bool,
    rep: int = 0,
) -> PublishSample:
    """Time the publish-overhead case on a fresh cache of ours (``neighbour``: the control) in
    round ``rep``."""
    return anyio.run(_publish_run, requests, page_size, events, neighbour, device, rep)


class SglangProcess:
    """The adapter in sglang's venv, kept running so repetitions interleave without re-imports."""

    def __init__(self, python: Path) -> None:
        self._proc = subprocess.Popen(
            [str(python), str(ADAPTER), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        hello = self._reply(SGLANG_START_TIMEOUT_S)
        if not hello.get("ready"):
            raise RuntimeError(f"sglang adapter did not start: {hello}")
        self.version = str(hello.get("sglang"))

    def measure(self, seed: int, requests: int, page_size: int, events: bool) -> Sample:
        """One timed run in the adapter."""
        ask = {"seed": seed, "requests": requests, "page_size": page_size, "events": events}
        ask |= {"full_size": FULL_SIZE, "swa_size": SWA_SIZE, "window": WINDOW}
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(ask) + "\n")
        self._proc.stdin.flush()
        reply = self._reply(None)
        if "error" in reply:
            raise RuntimeError(f"sglang adapter failed at page {page_size}: {reply['error']}")
        return Sample(
            impl="sglang",
            page_size=page_size,
            events=events,
            requests_per_s=float(reply["requests_per_s"]),
            elapsed_s=float(reply["elapsed_s"]),
            cpu_s=float(reply["cpu_s"]),
            events_taken=int(reply["events"]),
            matched_tokens=int(reply["matched_tokens"]),
            prompt_tokens=int(reply["prompt_tokens"]),
            requests=requests,
        )

    def close(self) -> None:
        """Close its stdin and wait for it to exit."""
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        self._proc.wait(timeout=60)

    def _reply(self, timeout_s: float | None) -> dict[str, Any]:
        line = _read_line(self._proc.stdout, timeout_s)
        if not line:
            raise RuntimeError(f"sglang adapter exited (code {self._proc.poll()})")
        reply: dict[str, Any] = json.loads(line)
        return reply


def _read_line(stream: IO[str] | None, timeout_s: float | None) -> str:
    assert stream is not None
    if timeout_s is None:
        return stream.readline()
    import selectors

    with selectors.DefaultSelector() as selector:
        selector.register(stream, selectors.EVENT_READ)
        if not selector.select(timeout_s):
            raise TimeoutError(f"sglang adapter gave no answer in {timeout_s:.0f} s")
    return stream.readline()


def start_sglang(python: Path) -> SglangProcess | None:
    """The sglang adapter process, or None (with the reason on stderr) when it cannot run."""
    if not python.exists():
        print(f"sglang: {python} missing; run bench/setup_sglang.sh", file=sys.stderr)
        return None
    try:
        return SglangProcess(python)
    except (RuntimeError, TimeoutError, OSError, ValueError) as exc:
        print(f"sglang: not importable, skipped ({exc})", file=sys.stderr)
        return None


def run_all(
    args: argparse.Namespace,
) -> tuple[list[Sample], list[PublishSample], str | None]:
    """Interleaved repetitions of every configuration; returns samples, publish-case samples
    and sglang's version."""
    requests = ChatWorkload(seed=args.seed).take(args.requests)
    sglang = None if args.no_sglang else start_sglang(Path(args.sglang_python))
    samples: list[Sample] = []
    published: list[PublishSample] = []
    try:
        for rep in range(args.repeat):
            for page in args.page_sizes:
                for events in (True, False):
                    samples.append(measure_ours(requests, page, events, args.device))
                    _progress(samples[-1], rep)
                    if sglang is not None:
                        samples.append(sglang.measure(args.seed, args.requests, page, events))
                        _progress(samples[-1], rep)
                if args.no_publish:
                    continue
                # The publish case's runs of one round back to back (the same moments of the
                # machine), their order reversed every other round so that a drift in the
                # machine's speed favours neither side.
                order = [(True, False), (False, False)]
                if args.neighbour:
                    order.append((False, True))
                for events, neighbour in order if rep % 2 == 0 else reversed(order):
                    published.append(
                        measure_publish(
                            requests, page, events, args.device, neighbour=neighbour, rep=rep
                        )
                    )
                    _progress_publish(published[-1], rep)
    finally:
        if sglang is not None:
            sglang.close()
    return samples, published, None if sglang is None else sglang.version


def _progress(sample: Sample, rep: int) -> None:
    state = "on" if sample.events else "off"
    print(
        f"  rep {rep}: {sample.impl:6} page {sample.page_size:2} events {state:3} "
        f"{sample.requests_per_s:9.1f} req/s wall {sample.requests_per_cpu_s:9.1f} req/CPU-s",
        file=sys.stderr,
        flush=True,
    )


def _progress_publish(sample: PublishSample, rep: int) -> None:
    state = "on" if sample.events else ("off+n" if sample.neighbour else "off")
    print(
        f"  rep {rep}: publish page {sample.page_size:2} events {state:3} "
        f"{sample.elapsed_s * 1e3:9.1f} ms wall {sample.loop_cpu_s * 1e3:9.1f} ms loop CPU "
        f"{sample.process_cpu_s * 1e3:9.1f} ms process CPU "
        f"{sample.encoder_cpu_s * 1e3:7.1f} ms encoder CPU | loop per request: "
        f"{sample.loop_minor_faults / sample.requests:5.2f} faults "
        f"{sample.loop_voluntary_switches / sample.requests:5.3f} vol "
        f"{sample.loop_involuntary_switches / sample.requests:5.3f} invol switches",
        file=sys.stderr,
        flush=True,
    )


def summarize_publish(
    published: list[PublishSample], page_sizes: list[int], clock: str
) -> dict[str, Any]:
    """Median and best times of the publish case per configuration, its ratios (of medians
    and of bests), and the wire size."""
    groups: dict[tuple[int, bool], list[PublishSample]] = {}
    neighbours: dict[int, list[PublishSample]] = {}
    for s in published:
        if s.neighbour:
            neighbours.setdefault(s.page_size, []).append(s)
        else:
            groups.setdefault((s.page_size, s.events), []).append(s)
    named = {(page, "on" if on else "off"): runs for (page, on), runs in groups.items()}
    named |= {(page, "off_busy_neighbour"): runs for page, runs in neighbours.items()}
    medians = {
        f"publish/p{page}/events_{state}": {
            "wall_s": statistics.median(s.elapsed_s for s in runs),
            "loop_cpu_s": statistics.median(s.loop_cpu_s for s in runs),
            "process_cpu_s": statistics.median(s.process_cpu_s for s in runs),
            "best_loop_cpu_s": min(s.loop_cpu_s for s in runs),
            "best_wall_s": min(s.elapsed_s for s in runs),
            "encoder_cpu_s": statistics.median(s.encoder_cpu_s for s in runs),
            "loop_faults_per_request": statistics.median(
                s.loop_minor_faults / s.requests for s in runs
            ),
            "loop_switches_per_request": statistics.median(
                (s.loop_voluntary_switches + s.loop_involuntary_switches) / s.requests for s in runs
            ),
        }
        for (page, state), runs in named.items()
    }
    ratios: dict[str, dict[str, Any]] = {}
    for page in page_sizes:
        on, off = groups.get((page, True)), groups.get((page, False))
        if not on or not off:
            continue
        target = TARGET_PUBLISH_OVERHEAD.get(page)
        for name, pick in (
            (clock, lambda s: s.seconds(clock)),
            ("process_cpu", lambda s: s.process_cpu_s),
        ):
            value = statistics.median(map(pick, on)) / statistics.median(map(pick, off))
            best = min(map(pick, on)) / min(map(pick, off))
            ratios[f"publish_on_off_p{page}_{name}"] = _ratio_of(
                value, best, target if name == clock else None, at_least=False
            ) | {"paired": _paired_median(on, off, pick)}
        busy = neighbours.get(page)
        if busy:
            value = statistics.median(s.seconds(clock) for s in busy) / statistics.median(
                s.seconds(clock) for s in off
            )
            best = min(s.seconds(clock) for s in busy) / min(s.seconds(clock) for s in off)
            ratios[f"neighbour_off_p{page}_{clock}"] = _ratio_of(value, best, None, at_least=False)
    wire: dict[str, Any] = {}
    page1 = groups.get((1, True))
    if page1:
        blocks = sum(s.stored_blocks for s in page1)
        all_in = sum(s.record_bytes for s in page1) / blocks
        stored = sum(s.stored_bytes for s in page1) / blocks
        # The target (issues 9 and 10) is what a stored block costs: its BlockStored bytes.
        # All-in also counts every removal, tombstone and batch envelope, per block stored.
        wire = {
            "wire_bytes_per_block_p1_stored_only": stored,
            "wire_bytes_per_block_p1_all_in": all_in,
            "target": TARGET_WIRE_BYTES_PER_BLOCK,
            "met": stored <= TARGET_WIRE_BYTES_PER_BLOCK,
        }
    return {"clock": clock, "medians": medians, "ratios": ratios, "wire": wire}


def _paired_median(
    on: list[PublishSample], off: list[PublishSample], pick: Callable[[PublishSample], float]
) -> float | None:
    """The median over rounds of each round's on/off ratio (the two runs of a round ran back
    to back), or None when no round has both."""
    off_by_rep = {s.rep: pick(s) for s in off}
    ratios = [pick(s) / off_by_rep[s.rep] for s in on if off_by_rep.get(s.rep, 0) > 0]
    return statistics.median(ratios) if ratios else None


def print_publish(summary: dict[str, Any]) -> None:
    """The publish case's medians, ratios and wire size."""
    print(
        "publish case: serve + pub.step() + checkpoint per request, Publisher to memory://, "
        f"flush included; ratios by {'wall time' if summary['clock'] == 'wall' else 'loop CPU'}"
    )
    print(
        f"{'config (medians; best)':38}{'wall ms':>10}{'loop CPU ms':>13}{'process CPU ms':>16}"
        f"{'best wall':>11}{'best loop':>11}{'encoder CPU ms':>16}{'loop faults/req':>17}"
        f"{'loop switches/req':>19}"
    )
    for name, m in summary["medians"].items():
        print(
            f"{name:38}{m['wall_s'] * 1e3:>10.1f}{m['loop_cpu_s'] * 1e3:>13.1f}"
            f"{m['process_cpu_s'] * 1e3:>16.1f}{m['best_wall_s'] * 1e3:>11.1f}"
            f"{m['best_loop_cpu_s'] * 1e3:>11.1f}{m['encoder_cpu_s'] * 1e3:>16.1f}"
            f"{m['loop_faults_per_request']:>17.2f}{m['loop_switches_per_request']:>19.3f}"
        )
    for name, r in summary["ratios"].items():
        print(_ratio_line(name, r))
    wire = summary["wire"]
    if wire:
        verdict = "  ok" if wire["met"] else "  MISSED"
        print(
            "wire bytes per page-1 block: "
            f"{wire['wire_bytes_per_block_p1_stored_only']:.1f} as BlockStored "
            f"(target <= {wire['target']:.0f}){verdict}; "
            f"{wire['wire_bytes_per_block_p1_all_in']:.1f} all-in (every record byte per block "
            "stored: removals, tombstones and envelopes included)"
        )


def _rate(sample: Sample, clock: str) -> float:
    return sample.requests_per_s if clock == "wall" else sample.requests_per_cpu_s


def _groups(samples: list[Sample]) -> dict[tuple[str, int, bool], list[Sample]]:
    groups: dict[tuple[str, int, bool], list[Sample]] = {}
    for s in samples:
        groups.setdefault((s.impl, s.page_size, s.events), []).append(s)
    return groups


def summarize(samples: list[Sample], page_sizes: list[int], clock: str) -> dict[str, Any]:
    """Medians and bests per configuration (rates by ``clock``: wall or process CPU time) and
    the target ratios of both."""
    groups = _groups(samples)
    medians = {
        _key(*ident): statistics.median(_rate(s, clock) for s in runs)
        for ident, runs in groups.items()
    }
    bests = {_key(*ident): max(_rate(s, clock) for s in runs) for ident, runs in groups.items()}

    def ratio(num: str, den: str, target: float | None, at_least: bool) -> dict[str, Any]:
        return _ratio_of(
            _divide(medians[num], medians[den]),
            _divide(bests[num], bests[den]),
            target,
            at_least=at_least,
        )

    ratios: dict[str, dict[str, Any]] = {}
    for page in page_sizes:
        on, off = _key("ours", page, True), _key("ours", page, False)
        ratios[f"ours_on_off_overhead_p{page}"] = ratio(off, on, TARGET_EVENT_OVERHEAD, False)
        sg_on, sg_off = _key("sglang", page, True), _key("sglang", page, False)
        if sg_on in medians and sg_off in medians:
            target = TARGET_VS_SGLANG.get(page, 1.0)
            ratios[f"ours_on_vs_sglang_on_p{page}"] = ratio(on, sg_on, target, True)
            ratios[f"ours_off_vs_sglang_off_p{page}"] = ratio(off, sg_off, None, True)
            ratios[f"sglang_on_off_overhead_p{page}"] = ratio(sg_off, sg_on, None, False)
    return {
        "clock": clock,
        "medians_req_per_s": medians,
        "best_req_per_s": bests,
        "ratios": ratios,
    }


def _key(impl: str, page: int, events: bool) -> str:
    return f"{impl}/p{page}/events_{'on' if events else 'off'}"


def _divide(num: float, den: float) -> float:
    return num / den if den > 0 else math.inf


def _ratio_of(value: float, best: float, target: float | None, *, at_least: bool) -> dict[str, Any]:
    """A ratio of medians (``value``) and of bests (``best``: each side's best run, the least
    disturbed by other load); the verdict reads the best, as the issues' figures do."""

    def meets(x: float, bound: float | None) -> bool | None:
        if bound is None:
            return None
        return x >= bound if at_least else x <= bound

    return {
        "value": value,
        "best": best,
        "target": target,
        "at_least": at_least,
        "met": meets(best, target),
        "median_met": meets(value, target),
    }


def _ratio_line(name: str, r: dict[str, Any]) -> str:
    verdict = "" if r["met"] is None else ("  ok" if r["met"] else "  MISSED")
    bound = ""
    if r["target"] is not None:
        bound = f" (target {'>=' if r['at_least'] else '<='} {r['target']}x)"
    paired = "" if r.get("paired") is None else f", {r['paired']:5.2f}x paired median"
    return f"{name:34}{r['best']:7.2f}x best, {r['value']:5.2f}x median{paired}{bound}{verdict}"


def print_table(samples: list[Sample], summary: dict[str, Any], args: argparse.Namespace) -> None:
    """The human-readable table (medians by both clocks, min..max by the chosen one) and ratios."""
    clock = summary["clock"]
    print(
        f"chat workload: {args.requests} requests, seed {args.seed}, full {FULL_SIZE} / "
        f"SWA {SWA_SIZE} slots, window {WINDOW}, ours on {args.device}, sglang on cpu, "
        f"median of {args.repeat} (min, max: by {clock} clock); ratios by {clock} clock, of each "
        "side's best run and of medians"
    )
    print(
        f"{'impl':8}{'page':>5}{'events':>8}{'req/s wall':>12}{'req/CPU-s':>11}"
        f"{'min':>9}{'max':>9}{'events/req':>12}{'hit %':>7}"
    )
    for (impl, page, events), runs in _groups(samples).items():
        rates = [_rate(s, clock) for s in runs]
        first = runs[0]
        hit = 100.0 * first.matched_tokens / first.prompt_tokens if first.prompt_tokens else 0.0
        print(
            f"{impl:8}{page:>5}{'on' if events else 'off':>8}"
            f"{statistics.median(s.requests_per_s for s in runs):>12.1f}"
            f"{statistics.median(s.requests_per_cpu_s for s in runs):>11.1f}"
            f"{min(rates):>9.1f}{max(rates):>9.1f}"
            f"{first.events_taken / args.requests:>12.1f}{hit:>7.1f}"
        )
    for name, r in summary["ratios"].items():
        print(_ratio_line(name, r))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description="SWA radix cache benchmark, ours vs sglang.")
    parser.add_argument("--requests", type=int, default=2000, help="requests per run")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved runs per config")
    parser.add_argument("--device", default="cpu", help="device of our cache (cpu | cuda)")
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    parser.add_argument(
        "--page-sizes",
        default="1,16",
        type=lambda text: [int(p) for p in text.split(",") if p],
        help="comma-separated page sizes",
    )
    parser.add_argument("--no-sglang", action="store_true", help="measure only ours")
    parser.add_argument("--no-publish", action="store_true", help="skip the publish-overhead case")
    parser.add_argument(
        "--neighbour",
        action="store_true",
        help="publish case control: events off with a busy GIL-free thread beside the loop",
    )
    parser.add_argument(
        "--clock",
        choices=("cpu", "wall"),
        default=None,
        help="rates for medians and ratios: process CPU time (default on cpu: least disturbed "
        "by other load on a shared machine) or wall time (default on cuda)",
    )
    parser.add_argument("--seed", type=int, default=0, help="workload seed (both sides)")
    parser.add_argument("--sglang-python", default=str(SGLANG_PYTHON), help="sglang venv python")
    args = parser.parse_args(argv)
    if args.requests < 1 or args.repeat < 1 or not args.page_sizes:
        parser.error("--requests and --repeat must be >= 1 and --page-sizes non-empty")
    return args


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print the table (or JSON)."""
    args = parse_args(argv)
    started = CpuTicks.now()
    samples, published, sglang_version = run_all(args)
    machine = machine_row(started)
    clock = args.clock or ("wall" if args.device.startswith("cuda") else "cpu")
    summary = summarize(samples, args.page_sizes, clock)
    publish_summary = summarize_publish(published, args.page_sizes, clock)
    if args.json:
        out = {
            "config": {
                "requests": args.requests,
                "repeat": args.repeat,
                "seed": args.seed,
                "device": args.device,
                "page_sizes": args.page_sizes,
                "full_size": FULL_SIZE,
                "swa_size": SWA_SIZE,
                "window": WINDOW,
                "sglang": sglang_version,
            },
            "machine": machine,
            "samples": [asdict(s) | {"requests_per_cpu_s": s.requests_per_cpu_s} for s in samples],
            **summary,
            "publish": {"samples": [asdict(s) for s in published], **publish_summary},
        }
        print(json.dumps(out, indent=2))
    else:
        print_table(samples, summary, args)
        if published:
            print_publish(publish_summary)
        print(f"machine: {machine}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
