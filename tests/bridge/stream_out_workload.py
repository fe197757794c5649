"""A small chat-like workload for the stream-out peer tests: prompts sharing system prompts,
stored page by page with our own block hashes (so ``/v1/match`` finds them from token ids),
some leaves removed, some blocks tombstoned; and prompts sampled from what it holds.

``Workload.batches(n)`` returns the next ``n`` batches of one source (the first carries the
epoch's meta); ``Workload.samples(k)`` draws prompts: held chains cut at random pages, with
and without a tail of unknown tokens, plus a few prompts nobody holds. ``append``,
``start_follower`` and ``ours`` drive the log and the follower process around it;
``stream_out_follower`` sets both up for one test.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx

from cache.events import (
    AllBlocksCleared,
    BatchMeta,
    BlockRemoved,
    BlockStored,
    BlockSWAEvicted,
    Event,
    EventBatch,
    encode_batch,
)
from cache.events.hashing import chain_block_hashes, namespace_prior
from log import open_log
from tests.compose.services import Service, follow_service
from tests.peers.dynamo_indexer import free_port

PAGE = 16
WINDOW = 64


@dataclass
class Workload:
    """One source's cache, driven by seeded random requests."""

    source: str
    seed: int = 0
    page: int = PAGE
    epoch: str = "e1"
    held: dict[int, tuple[int | None, tuple[int, ...]]] = field(default_factory=dict)
    _seq: int = 0

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.systems = [
            [self.rng.randrange(1, 50_000) for _ in range(self.page * self.rng.randint(2, 4))]
            for _ in range(6)
        ]

    def _prompt(self) -> list[int]:
        system = self.rng.choice(self.systems)
        user = self.page * self.rng.randint(1, 3)
        return system + [self.rng.randrange(1, 50_000) for _ in range(user)]

    def _store(self, tokens: list[int]) -> list[Event]:
        hashes = chain_block_hashes(namespace_prior(None), tokens, self.page)
        events: list[Event] = []
        parent: int | None = None
        for index, block_hash in enumerate(hashes):
            if block_hash not in self.held:
                page = tuple(tokens[index * self.page : (index + 1) * self.page])
                self.held[block_hash] = (parent, page)
                events.append(BlockStored((block_hash,), parent, page, self.page))
            parent = block_hash
        return events

    def _leaves(self) -> list[int]:
        parents = {parent for parent, _ in self.held.values()}
        return sorted(h for h in self.held if h not in parents)

    def _events(self) -> list[Event]:
        events = self._store(self._prompt())
        roll = self.rng.random()
        if roll < 0.3 and len(self.held) > 20:
            leaves = self._leaves()
            gone = self.rng.sample(leaves, min(len(leaves), self.rng.randint(1, 3)))
            for block_hash in gone:
                del self.held[block_hash]
            events.append(BlockRemoved(tuple(gone)))
        elif roll < 0.4 and self.held:
            events.append(BlockSWAEvicted((self.rng.choice(sorted(self.held)),)))
        return events

    def batches(self, count: int) -> list[EventBatch]:
        """The next ``count`` batches (the first of the epoch clears and carries the meta)."""
        out: list[EventBatch] = []
        for _ in range(count):
            events: list[Event] = []
            meta = None
            if self._seq == 0:
                events.append(AllBlocksCleared())
                meta = BatchMeta(page_size=self.page, sliding_window_size=WINDOW)
            events.extend(self._events())
            out.append(
                EventBatch(
                    self.source, self.epoch, self._seq, 1.0 + self._seq, tuple(events), meta=meta
                )
            )
            self._seq += 1
        return out

    def chain(self, block_hash: int) -> list[int]:
        """The tokens from the root to the end of ``block_hash``'s page."""
        pages: list[tuple[int, ...]] = []
        at: int | None = block_hash
        while at is not None:
            parent, page = self.held[at]
            pages.append(page)
            at = parent
        return [token for page in reversed(pages) for token in page]

    def samples(self, count: int) -> list[list[int]]:
        """``count`` prompts: held chains (some with an unknown tail), and a few unknown."""
        held = sorted(self.held)
        out: list[list[int]] = []
        for index in range(count):
            if index % 10 == 9 or not held:
                out.append([self.rng.randrange(1, 50_000) for _ in range(3 * self.page)])
                continue
            prompt = self.chain(self.rng.choice(held))
            if index % 3 == 0:
                prompt += [self.rng.randrange(1, 50_000) for _ in range(self.page + 5)]
            out.append(prompt)
        return out


async def _append(log_url: str, batches: list[EventBatch]) -> int:
    async with await open_log(log_url) as log:
        await log.append_batch([(batch.source, encode_batch(batch)) for batch in batches])
        return (await log.end()).get(0)


def append(log_url: str, batches: list[EventBatch]) -> int:
    """Append ``batches`` to the log; the log's end offset after them."""
    return anyio.run(_append, log_url, batches)


def ours(base: str, source: str, prompts: list[list[int]]) -> list[int]:
    """``/v1/match``'s cached tokens of ``source`` for each prompt (0: it holds none)."""
    out: list[int] = []
    for prompt in prompts:
        reply = httpx.post(f"{base}/v1/match", json={"token_ids": prompt}, timeout=10).json()
        answer = reply["sources"].get(source)  # absent: it holds none of the prompt
        out.append(0 if answer is None else int(answer["cached_tokens"]))
    return out


def start_follower(follow: Service) -> str:
    """Start the follower; the base URL of its routing API once restored."""
    status: dict[str, Any] = follow.start().wait_for(
        "restore", lambda s: s["restored"] and s["http_port"], 120
    )
    return f"http://127.0.0.1:{status['http_port']}"


@dataclass(frozen=True)
class StreamOutSetUp:
    """A FileLog holding a workload's first batches and a follower (not started) publishing it:
    ``endpoints`` are its ``--zmq-publish`` one and the second socket's."""

    log_url: str
    workload: Workload
    end: int
    endpoints: tuple[str, str]
    follow: Service


def stream_out_follower(
    tmp_path: Path, source: str, seed: int, wire_format: str, second_socket: str, *more: str
) -> StreamOutSetUp:
    """150 batches of a fresh workload of ``source`` in a FileLog, and a follower with the
    routing API that republishes the log in ``wire_format`` with ``second_socket``
    (``--zmq-replay`` or ``--zmq-snapshot``) on a free loopback port; ``more`` are further
    ``swa-es follow`` arguments."""
    log_url = f"file://{tmp_path}/log"
    workload = Workload(source, seed=seed)
    end = append(log_url, workload.batches(150))  # history from before the follower's run
    pub, other = f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}"
    follow = follow_service(
        tmp_path,
        log_url,
        "router",
        *("--http-port", "0", "--zmq-publish", pub, second_socket, other),
        *("--zmq-format", wire_format),
        *more,
    )
    return StreamOutSetUp(log_url, workload, end, (pub, other), follow)
