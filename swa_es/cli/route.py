"""``swa-es route``: rebuild the views from a log and answer one prefix query.

It prints one JSON object with the routing API's field names (docs/routing.md): per source the
longest cached prefix of the tokens (``cached_tokens``), the longest one usable under the SWA
rule (``usable_tokens``; both ``null`` for a source whose state is unknown) and its ``state``
(``exact``, ``offline`` for a source that marked itself offline, as a stopped ``serve`` does,
``unknown``), and ``best``, the source with the longest usable prefix.

It only reads: with ``--snapshots`` it restores from the newest snapshot there and replays the
tail, writing into the store (and pinning the log) only with ``--write-snapshots``.
"""

from __future__ import annotations

import sys
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import orjson

from consumers import Follower, PrefixMatch
from swa_es.cli import settings
from swa_es.cli.exit_codes import EXIT_OK
from swa_es.cli.progress import terminal_progress
from swa_es.cli.service_report import check_snapshot_directory
from swa_es.cli.settings import Command
from swa_es.cli.shared_options import SNAPSHOTS, WRITE_SNAPSHOTS, LogAccess
from swa_es.client.answers import EXACT, UNKNOWN
from swa_es.options import field_of, nested, option
from swa_es.options import values as v
from swa_es.options.values import SettingError
from swa_es.service.log_access import open_reader, open_snapshots
from swa_es.service.routing import FollowerRouting
from swa_es.service.views import StandardViews


@dataclass(frozen=True, slots=True, kw_only=True)
class RouteConfig:
    """``swa-es route`` (each field an option or a group of them)."""

    log: LogAccess = nested(LogAccess)
    snapshots: str | None = field_of(SNAPSHOTS)
    write_snapshots: bool = field_of(WRITE_SNAPSHOTS)
    tokens: tuple[int, ...] = option(
        "tokens", v.token_list, "token ids: '1,2,3', '1 2 3' or '0..512'", metavar="IDS"
    )
    extra_key: str | None = option(
        "extra-key",
        v.text_value,
        "namespace (LoRA adapter / cache salt)",
        default=None,
        metavar="KEY",
        shown_default="none",
    )


COMMAND = Command("route", RouteConfig, positional=("log",))


def add_parser(subparsers: Any) -> None:
    """Add ``route`` to the ``swa-es`` parser."""
    settings.add_command(
        subparsers,
        COMMAND,
        help="answer a prefix query from the log's views",
        description="Restore views from the log (and a snapshot store, which it only reads "
        "unless --write-snapshots), then print per source the cached and SWA-usable prefix "
        "length of --tokens and its state.",
        run=run,
    )


def run(config: RouteConfig) -> int:
    """Run ``route``, printing to stdout; the exit status."""
    return anyio.run(route, config, sys.stdout, backend="asyncio")


def best_source(matches: dict[str, PrefixMatch]) -> str | None:
    """The known source with the longest SWA-usable prefix (ties: the longer full prefix, then
    the name); ``None`` when no source can reuse anything."""
    ranked = sorted(
        (
            (m.swa_tokens or 0, m.full_tokens or 0, source)
            for source, m in matches.items()
            if m.known
        ),
        key=lambda item: (-item[0], -item[1], item[2]),
    )
    if not ranked or ranked[0][0] == 0:
        return None
    return ranked[0][2]


def answer(
    tokens: tuple[int, ...], matches: dict[str, PrefixMatch], states: dict[str, str]
) -> dict[str, Any]:
    """The JSON document of one query (``states``: each source's state, as the routing API
    names it)."""
    return {
        "tokens": len(tokens),
        "best": best_source(matches),
        "sources": {
            source: {
                "cached_tokens": m.full_tokens,
                "usable_tokens": m.swa_tokens,
                "state": states.get(source, EXACT if m.known else UNKNOWN),
            }
            for source, m in sorted(matches.items())
        },
    }


async def route(config: RouteConfig, out: TextIO) -> int:
    """Restore views (snapshot + tail, or the whole log), query, print; the exit status."""
    if config.write_snapshots and config.snapshots is None:
        raise SettingError("--write-snapshots", "writes into --snapshots, which is not given")
    if config.write_snapshots:
        check_snapshot_directory(config.snapshots)
    views = StandardViews.create()
    async with AsyncExitStack() as stack:
        store = None
        if config.snapshots is not None:
            store = await open_snapshots(config.snapshots, config.log.open_timeout_s)
            stack.push_async_callback(store.close)
        log = await open_reader(config.log.url, config.log.open_timeout_s)
        await stack.enter_async_context(log)
        follower = Follower(
            log,
            views.all,
            snapshots=store,
            progress=terminal_progress(),
            write_snapshots=config.write_snapshots,
        )
        await follower.restore()
    matches = views.prefix.match(config.tokens, extra_key=config.extra_key)
    states = FollowerRouting(follower, views).source_states()
    out.write(orjson.dumps(answer(config.tokens, matches, states)).decode() + "\n")
    return EXIT_OK
