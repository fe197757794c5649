"""Run the benchmarks and write ``bench/RESULTS.md`` from their JSON: one current table per
benchmark, each with the command that produced it, its baseline from the same run, and the
machine row (load and steal share while it ran).

    .venv/bin/python bench/report.py run [--out bench/results] [--kafka HOST:PORT]
        [--sglang-python PATH] [--dynamo-python PATH] [--only NAME ...]
    .venv/bin/python bench/report.py render bench/results/*.json [--output bench/RESULTS.md]

``run`` runs each benchmark of ``BENCHMARKS`` in turn, with the modest sizes written there, and
saves ``OUT/NAME.json``: ``{"benchmark", "command", "machine", "result"}``, where ``result`` is
the benchmark script's own JSON. ``render`` reads such files (or a script's bare JSON, named
after its benchmark, e.g. ``replica.json``) and writes the tables. A benchmark whose JSON it does
not know, or whose shape changed, is still rendered: every figure it holds becomes a row.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from machine_load import CpuTicks, machine_row

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS_MD = BENCH / "RESULTS.md"
X = "\N{MULTIPLICATION SIGN}"
"""How a ratio is written (``1.23`` and this sign)."""


@dataclass(frozen=True)
class Benchmark:
    """How to run one benchmark script: its arguments (``{out}`` is a JSON file it writes,
    ``{kafka}`` a broker, ``{sglang}`` sglang's, ``{dynamo}`` Dynamo's interpreter); without
    ``{out}`` the script prints
    its JSON on stdout."""

    name: str
    title: str
    args: tuple[str, ...]
    needs_kafka: bool = False


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "cache",
        "Cache: ours vs sglang 0.5.16, and what publishing costs the serving loop",
        (
            "bench/cache_bench.py",
            "--requests",
            "600",
            "--repeat",
            "3",
            "--neighbour",
            "--sglang-python",
            "{sglang}",
            "--json",
        ),
    ),
    Benchmark(
        "codec",
        "Codec: decoding and encoding log records",
        ("bench/codec_bench.py", "--requests", "300", "--repeat", "3", "--json", "{out}"),
    ),
    Benchmark(
        "replica",
        "Followers and replicas: replay, apply, restore, memory, prefix match, lag",
        (
            "bench/replica_bench.py",
            "--blocks",
            "200000",
            "--replay-events",
            "100000",
            "--apply-blocks",
            "200000",
            "--memory-blocks",
            "200000",
            "--wire-blocks",
            "50000",
            "--lag-s",
            "3",
            "--json",
            "{out}",
        ),
    ),
    Benchmark(
        "log",
        "FileLog appends against raw writes",
        ("bench/log_bench.py", "--records", "5000", "--repeats", "2", "--json", "{out}"),
    ),
    Benchmark(
        "log_kafka",
        "KafkaLog appends against Kafka's own ProducerPerformance",
        (
            "bench/log_bench_kafka.py",
            "--bootstrap",
            "{kafka}",
            "--count",
            "50000",
            "--repeats",
            "2",
        ),
        needs_kafka=True,
    ),
    Benchmark(
        "http",
        "The routing API over HTTP against the in-process match",
        (
            "bench/http_bench.py",
            "--sources",
            "64",
            "--requests",
            "3000",
            "--rounds",
            "3",
            "--connections",
            "8",
            "--json-out",
            "{out}",
        ),
    ),
    Benchmark(
        "restore",
        "Restoring a snapshot against replaying a log of exactly the same blocks",
        ("bench/restore_bench.py", "--blocks", "1000000", "--runs", "3", "--json", "{out}"),
    ),
    Benchmark(
        "snapshot",
        "A fresh follower bootstrapping from the Kafka snapshot topic against a full replay",
        (
            "bench/snapshot_bench.py",
            "--kafka",
            "{kafka}",
            "--blocks",
            "1000000",
            "--runs",
            "2",
            "--churn-batches",
            "0,50000",
            "--json",
            "{out}",
        ),
        needs_kafka=True,
    ),
    Benchmark(
        "dynamo",
        "The follower's index beside NVIDIA Dynamo's KV-router index, on the same blocks",
        ("bench/dynamo_bench.py", "--dynamo-python", "{dynamo}", "--json", "{out}"),
    ),
    Benchmark(
        "dynamo_busy",
        "The same ingest on a busy machine: as many processes spinning on the CPU as it has cores",
        (
            "bench/dynamo_bench.py",
            "--dynamo-python",
            "{dynamo}",
            "--busy",
            "2",
            "--json",
            "{out}",
        ),
    ),
    Benchmark(
        "scale",
        "One follower's native store at scale, beside the same store at 1M blocks",
        ("bench/scale_bench.py", "--blocks", "1000000,16000000", "--json", "{out}"),
    ),
)
BY_NAME = {b.name: b for b in BENCHMARKS}
PEER_PLACEHOLDERS = {"{sglang}": "SGLANG_PYTHON", "{dynamo}": "DYNAMO_PYTHON"}
"""A peer's interpreter in a benchmark's arguments, and how the command shows it."""


# ---------------------------------------------------------------------------------------- run


def command_line(args: Sequence[str]) -> str:
    """The command as a reader would type it (the interpreter as ``.venv/bin/python``)."""
    return " ".join([".venv/bin/python", *args])


def parse_stdout_json(text: str) -> Any:
    """The JSON a script printed: the whole output, or the last top-level object in it."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        start = text.rfind("\n{")
        return json.loads(text[start + 1 :] if start >= 0 else text[text.index("{") :])


def run_one(bench: Benchmark, out_dir: Path, kafka: str | None, peers: Mapping[str, str]) -> Path:
    """Run ``bench`` and write ``out_dir/NAME.json``; the file. ``peers``: each peer's
    interpreter by its placeholder's name (``sglang``, ``dynamo``)."""
    with tempfile.TemporaryDirectory() as scratch:
        raw = Path(scratch) / "result.json"
        args = [
            a.format(out=raw, kafka=kafka or "", **peers) if "{" in a else a for a in bench.args
        ]
        shown_as = {"{out}": "OUT.json", "{kafka}": "HOST:PORT", **PEER_PLACEHOLDERS}
        shown = [shown_as.get(a, a) for a in bench.args]
        started = CpuTicks.now()
        done = subprocess.run(
            [sys.executable, *args], cwd=REPO, capture_output=True, text=True, check=False
        )
        machine = machine_row(started)
        if done.returncode != 0:
            raise RuntimeError(f"{bench.name}: exit {done.returncode}\n{done.stderr[-3000:]}")
        result = json.loads(raw.read_text()) if "{out}" in bench.args else None
        if result is None:
            result = parse_stdout_json(done.stdout)
    machine |= cpu_model()
    path = out_dir / f"{bench.name}.json"
    record = {
        "benchmark": bench.name,
        "command": command_line(shown),
        "machine": machine,
        "result": result,
    }
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path


def cpu_model() -> dict[str, str]:
    """The CPU's model name where Linux tells it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return {"cpu": line.split(":", 1)[1].strip()}
    except OSError:
        pass
    return {}


# ------------------------------------------------------------------------------------- render


def fmt(value: Any) -> str:
    """A figure as a table shows it: three significant digits, thousands separated."""
    if isinstance(value, bool) or value is None:
        return {True: "yes", False: "no", None: "n/a"}[value]
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 100:
            return f"{value:.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}" if abs(value) >= 0.1 else f"{value:.3g}"
    if isinstance(value, list):
        return ", ".join(fmt(v) for v in value)
    return str(value)


def ratio(value: float | None) -> str:
    """A ratio as ``1.23`` followed by a multiplication sign."""
    if value is None:
        return "n/a"
    return f"{value:,.0f}{X}" if value >= 100 else f"{value:.2f}{X}"


def per_s(value: float | None, unit: str) -> str:
    """A rate with its unit, in millions past a million."""
    if value is None:
        return "n/a"
    if value >= 1e6:
        return f"{value / 1e6:.2f}M {unit}/s"
    return f"{value:,.0f} {unit}/s"


def get(data: Mapping[str, Any], path: str) -> Any:
    """``data["a"]["b"]`` for ``path="a.b"``; None where any part is missing."""
    node: Any = data
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


Row = tuple[str, str, str, str, str]
"""measure, result, baseline (same run), ratio, target."""

HEADER = "| measure | result | baseline (same run) | ratio | target |\n|---|---|---|---|---|\n"


def table(rows: Sequence[Row]) -> str:
    """The markdown table of ``rows``."""
    return HEADER + "".join("| " + " | ".join(r) + " |\n" for r in rows)


def target_text(entry: Mapping[str, Any]) -> str:
    """``≤ 1.3x: met`` from a benchmark's ``{"target", "at_least", "met"}``."""
    target = entry.get("target")
    if target is None:
        return ""
    sign = "≥" if entry.get("at_least") else "≤"
    met, median_met = entry.get("met"), entry.get("median_met", entry.get("met"))
    if met is None:
        verdict = "n/a"
    elif met and median_met:
        verdict = "met"
    elif met or median_met:
        verdict = "met by the " + ("best runs" if met else "medians") + " only"
    else:
        verdict = "**missed**"
    return f"{sign} {target}{X}: {verdict}"


CACHE_RATIOS = {
    "publish.ratios.publish_on_off_p1_cpu": (
        "serving-loop CPU, events on + Publisher, page 1",
        "events off",
    ),
    "publish.ratios.publish_on_off_p16_cpu": ("the same, page 16", "events off"),
    "publish.ratios.neighbour_off_p1_cpu": (
        "control: events off beside a busy thread, page 1",
        "events off alone",
    ),
    "publish.ratios.neighbour_off_p16_cpu": ("the same, page 16", "events off alone"),
    "ratios.ours_on_vs_sglang_on_p1": ("requests/CPU-s, events on, page 1", "sglang, events on"),
    "ratios.ours_on_vs_sglang_on_p16": ("the same, page 16", "sglang, events on"),
    "ratios.ours_off_vs_sglang_off_p1": (
        "requests/CPU-s, events off, page 1",
        "sglang, events off",
    ),
    "ratios.ours_off_vs_sglang_off_p16": ("the same, page 16", "sglang, events off"),
    "ratios.ours_on_off_overhead_p1": (
        "take_events() on the serving thread vs events off, page 1",
        "events off",
    ),
    "ratios.ours_on_off_overhead_p16": ("the same, page 16", "events off"),
}


def at_least_text(target: float | None, got: float | None) -> str:
    """``≥ 5x: met`` for a ratio ``got`` whose goal is at least ``target`` (empty without one)."""
    if target is None:
        return ""
    met = None if got is None else got >= target
    return target_text({"target": f"{target:g}", "at_least": True, "met": met})


def render_cache(result: Mapping[str, Any]) -> list[Row]:
    """Ratios of medians (best runs beside them) of ``cache_bench.py --json``."""
    rows: list[Row] = []
    medians = result.get("medians_req_per_s", {})
    for path, (measure, baseline) in CACHE_RATIOS.items():
        entry = get(result, path)
        if not isinstance(entry, Mapping):
            continue
        shown = f"median {ratio(entry.get('value'))}, best {ratio(entry.get('best'))}"
        if "_vs_sglang_" in path:  # the two sides' own medians, in requests per CPU-second
            page, events = path.rsplit("_", 1)[1], path.split("_")[1]
            ours = medians.get(f"ours/{page}/events_{events}")
            theirs = medians.get(f"sglang/{page}/events_{events}")
            shown = f"{fmt(ours)} (median); best runs {ratio(entry.get('best'))}"
            baseline = f"{baseline}: {fmt(theirs)}"
        rows.append((measure, shown, baseline, ratio(entry.get("value")), target_text(entry)))
    wire = get(result, "publish.wire")
    if isinstance(wire, Mapping) and "wire_bytes_per_block_p1_stored_only" in wire:
        rows.append(
            (
                "wire bytes per page-1 block stored (all records: "
                f"{fmt(wire.get('wire_bytes_per_block_p1_all_in'))})",
                fmt(wire["wire_bytes_per_block_p1_stored_only"]),
                "",
                "",
                f"≤ {wire.get('target')}: " + ("met" if wire.get("met") else "**missed**"),
            )
        )
    return rows


def render_codec(result: Mapping[str, Any]) -> list[Row]:
    """``codec_bench.py --json``: decoders against ``orjson.loads``, encoders against the
    reference encoder, bytes on the wire."""
    rows: list[Row] = []
    for section_name, base_name, ratio_key, base_label, target_of in (
        (
            "decode",
            "orjson_loads_v1",
            "ratio_to_orjson_loads_v1",
            "`orjson.loads` of v1 JSON",
            {"decode_wire_v2": f"≥ 1.0{X}"},
        ),
        ("encode", "reference_encode_v2", "ratio_to_reference", "pure-Python reference", {}),
    ):
        entries = result.get(section_name, {})
        base = get(entries, f"{base_name}.events_per_s")
        for name, entry in entries.items():
            if name != base_name:
                rows.append(
                    (
                        f"{section_name}: `{name}`",
                        per_s(entry.get("events_per_s"), "events"),
                        f"{base_label}: {per_s(base, 'events')}",
                        ratio(entry.get(ratio_key)),
                        target_of.get(name, ""),
                    )
                )
    wire = result.get("wire", {})
    if "v2_store_bytes_per_block" in wire:
        v2, v1 = wire["v2_store_bytes_per_block"], wire.get("v1_store_bytes_per_block")
        rows.append(
            (
                "wire bytes per page-1 block stored (v2)",
                fmt(v2),
                f"v1: {fmt(v1)}",
                ratio(v2 / v1) if v1 else "n/a",
                "≤ 32",
            )
        )
    return rows


def render_log(result: Mapping[str, Any]) -> list[Row]:
    """``log_bench.py --json``: FileLog appends/s against ``os.write`` + ``fdatasync``."""
    rows: list[Row] = []
    for entry in result.get("file", []):
        rows.append(
            (
                f"FileLog `{entry.get('case')}`",
                per_s(entry.get("filelog_appends_s"), "appends"),
                f"raw writes: {per_s(entry.get('raw_appends_s'), 'appends')}",
                ratio(entry.get("ratio")),
                f"≥ 0.8{X}" if str(entry.get("case", "")).startswith("batch") else "",
            )
        )
    kafka = result.get("kafka")
    if isinstance(kafka, Mapping):
        rows.extend(render_log_kafka(kafka))
    return rows


def render_log_kafka(result: Mapping[str, Any]) -> list[Row]:
    """``log_bench_kafka.py``: MB/s of KafkaLog against ProducerPerformance."""
    return [
        (
            f"KafkaLog appends, {fmt(result.get('count'))} {X} {fmt(result.get('record_bytes'))} B",
            f"{fmt(result.get('kafkalog_mb_s'))} MB/s",
            f"ProducerPerformance: {fmt(result.get('producer_performance_mb_s'))} MB/s",
            ratio(result.get("ratio")),
            f"≥ 0.5{X}",
        )
    ]


def render_replica(result: Mapping[str, Any]) -> list[Row]:
    """``replica_bench.py --json``: each section against its yardstick."""
    rows: list[Row] = []
    for key, measure in (
        ("replay", "replay FileLog → ReplicaSet, 16 events a batch"),
        ("replay_prefill_steps", "replay, prefill-sized steps"),
    ):
        entry = result.get(key)
        if isinstance(entry, Mapping):
            rows.append(
                (
                    measure,
                    per_s(entry.get("replay_events_per_s"), "events"),
                    "`orjson.loads` of the same batches as v1 JSON: "
                    + per_s(entry.get("v1_json_parse_events_per_s"), "events"),
                    ratio(entry.get("replay_vs_v1_json")),
                    f"≥ 1.0{X}",
                )
            )
    replay = result.get("replay")
    if isinstance(replay, Mapping) and "standard_views_vs_replicas" in replay:
        parts = replay.get("part_cpu_s")
        cpu = parts if isinstance(parts, Mapping) else {}
        rows.append(
            (
                "replay into the views every command builds (replicas, prefix index, stats)",
                f"{(cpu.get('replay_standard_views') or 0) * 1000:.0f} ms CPU",
                f"the same replay into a `ReplicaSet` alone: {(cpu.get('replay') or 0) * 1000:.0f}"
                " ms CPU",
                ratio(replay.get("standard_views_vs_replicas")),
                f"≤ 1.05{X}",
            )
        )
    apply = result.get("apply")
    if isinstance(apply, Mapping):
        rows.append(
            (
                "decode + apply v2 records, page-1 blocks",
                per_s(apply.get("apply_blocks_per_s"), "blocks"),
                "pure-Python reference replica: "
                + per_s(apply.get("reference_apply_blocks_per_s"), "blocks"),
                ratio(apply.get("apply_vs_reference")),
                "≥ 5M blocks/s",
            )
        )
    restore = result.get("restore")
    if isinstance(restore, Mapping):
        cpu = restore.get("restore_cpu_s")
        rows.append(
            (
                f"restore a {fmt(restore.get('snapshot_blocks'))}-block snapshot + tail",
                "n/a" if cpu is None else f"{cpu * 1000:.1f} ms CPU",
                "parse the whole log as v1 JSON: "
                + f"{(restore.get('v1_json_parse_cpu_s') or 0) * 1000:.0f} ms",
                ratio(restore.get("restore_speedup")),
                f"≥ 10{X}",
            )
        )
    memory = result.get("memory")
    if isinstance(memory, Mapping):
        page1 = memory.get("rss_bytes_per_block_page1")
        met = isinstance(page1, float) and page1 <= 26
        rows.append(
            (
                "RSS per replica block, page 1, no token ids kept",
                f"{fmt(page1)} B",
                f"page 16: {fmt(memory.get('rss_bytes_per_block_page16'))} B",
                "",
                "≤ 26 B: " + ("met" if met else "**missed**"),
            )
        )
        if "rss_bytes_per_block_page1_keeping_tokens" in memory:
            rows.append(
                (
                    "the same, token ids kept (the stream out's follower)",
                    f"{fmt(memory.get('rss_bytes_per_block_page1_keeping_tokens'))} B",
                    "page 16: "
                    + f"{fmt(memory.get('rss_bytes_per_block_page16_keeping_tokens'))} B",
                    "",
                    "",
                )
            )
    wire = result.get("wire")
    if isinstance(wire, Mapping):
        v2, v1 = wire.get("v2_bytes_per_block_64_pages"), wire.get("v1_bytes_per_block_64_pages")
        rows.append(
            (
                "wire bytes per page-1 block, 64-page stores",
                f"{fmt(v2)} B",
                f"v1: {fmt(v1)} B",
                ratio(v2 / v1) if v2 and v1 else "n/a",
                "≤ 32 B",
            )
        )
    prefix = result.get("prefix")
    if isinstance(prefix, Mapping):
        where = (
            f"{fmt(prefix.get('prompt_tokens'))}-token prompt, {fmt(prefix.get('sources'))} "
            f"sources, page {fmt(prefix.get('page_size'))}"
        )
        ref = prefix.get("reference_p50_us")
        for key, label in (("prefix_p50_us", "asked again"), ("prefix_cold_p50_us", "cold")):
            value = prefix.get(key)
            rows.append(
                (
                    f"PrefixIndex.match p50, {label}, {where}",
                    f"{fmt(value)} µs",
                    f"pure-Python reference: {fmt(ref)} µs",
                    ratio(ref / value) if ref and value else "n/a",
                    "≤ 50 µs" if label == "cold" else "",
                )
            )
    never = get(result, "lag_file_fsync_never.lag_p99_ms")
    for key, entry in result.items():
        if not key.startswith("lag_") or not isinstance(entry, Mapping):
            continue
        rate = entry.get("rate_events_per_s") or entry.get("applied_events_per_s")
        sync = entry.get("fdatasync_max_ms")
        rows.append(
            (
                f"publish → apply lag, `{key}`, {fmt(rate)} events/s",
                f"p50 {fmt(entry.get('lag_p50_ms'))} ms, p99 {fmt(entry.get('lag_p99_ms'))} ms",
                f"`fsync=never` p99 {fmt(never)} ms"
                + ("" if sync is None else f"; slowest fdatasync {fmt(sync)} ms"),
                "",
                "p99 ≤ 5 ms" if key == "lag_file" else "",
            )
        )
    return rows


def flatten(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every scalar (or list of scalars) in ``value`` with its dotted path."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from flatten(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list) and any(isinstance(v, Mapping | list) for v in value):
        for index, item in enumerate(value):
            label = item.get("case") or item.get("name") if isinstance(item, Mapping) else None
            yield from flatten(item, f"{path}[{label or index}]")
    else:
        yield path, value


def render_any(result: Mapping[str, Any]) -> list[Row]:
    """Any JSON: one row per top-level entry, its figures side by side (a section's own
    baseline, when it has one, is among them)."""
    rows: list[Row] = []
    for key, value in result.items():
        if key == "machine":
            continue
        figures = [(p, v) for p, v in flatten(value) if not isinstance(v, str) or len(v) < 80]
        if len(figures) == 1 and figures[0][0] == "":
            rows.append((f"`{key}`", fmt(figures[0][1]), "", "", ""))
        elif figures:
            shown = "; ".join(f"{p} {fmt(v)}" for p, v in figures[:16])
            rows.append((f"`{key}`", shown, "", "", ""))
    return rows


HTTP_FORMS = {
    "in_process": "in-process PrefixIndex.match",
    "json": "HTTP, JSON body",
    "binary": "HTTP, binary body (u32 ids), RoutingClient",
    "binary_httpx": "HTTP, binary body sent by httpx.Client",
    "hashes": "HTTP, block hashes",
    "batch16": "HTTP, a batch of 16 prompts (per prompt)",
}


def _served_as_deployed(row: Mapping[str, Any]) -> bool:
    """Whether an http_bench row's server ran as ``swa-es follow`` does (uvloop, hot route)."""
    return row.get("loop", "uvloop") == "uvloop" and row.get("route", "protocol") == "protocol"


def render_http(result: Mapping[str, Any]) -> list[Row]:
    """``http_bench.py --json-out``: each request form's p50/p99 against the in-process p50."""
    rows_in = [r for r in result.get("rows", []) if isinstance(r, Mapping)]
    base = next((r for r in rows_in if r.get("name") == "in_process"), None)
    base_p50 = base.get("p50_ms") if base else None
    baseline = f"in-process p50 {fmt(base_p50)} ms" if base_p50 is not None else ""
    per_request = {
        int(r.get("connections", 0)): r.get("ms_per_request")
        for r in rows_in
        if r.get("form") == "binary" and _served_as_deployed(r)
    }
    rows: list[Row] = []
    for r in rows_in:
        form = HTTP_FORMS.get(str(r.get("form")), str(r.get("form")))
        conns = int(r.get("connections", 0))
        loop = r.get("loop")
        name = form if conns == 0 else f"{form}, {conns} connection{'s' if conns > 1 else ''}"
        if loop and loop != "uvloop":
            name += f" ({loop})"
        if r.get("route") == "asgi":
            name += " (every request through ASGI)"
        with_token = r.get("route") == "protocol_token"
        if with_token:
            name += " (bearer token)"
        figures = (
            f"p50 {fmt(r.get('per_prompt_p50_ms', r.get('p50_ms')))} ms, "
            f"p99 {fmt(r.get('p99_ms'))} ms; "
            f"{fmt(r.get('requests_per_server_cpu_s'))} requests per server CPU-s"
        )
        target = ""
        if r.get("form") == "binary" and (_served_as_deployed(r) or with_token):
            p50, cpu = r.get("p50_ms"), r.get("requests_per_server_cpu_s")
            if conns == 1 and isinstance(p50, float) and isinstance(cpu, float):
                met = p50 <= 0.25 and cpu >= 3000
                target = "p50 ≤ 0.25 ms, ≥ 3,000/CPU-s: " + ("met" if met else "**missed**")
            elif conns > 1 and per_request.get(1) is not None:
                one, many = per_request[1], r.get("ms_per_request")
                met = isinstance(many, float) and many <= one
                target = "per request ≤ 1 connection's: " + ("met" if met else "**missed**")
        rows.append((name, figures, "" if conns == 0 else baseline, ratio(r.get("ratio")), target))
    return rows


def render_restore(result: Mapping[str, Any]) -> list[Row]:
    """``restore_bench.py --json``: a snapshot restored against a replay of the same blocks."""
    rows: list[Row] = []
    for case in result.values():
        if not (isinstance(case, Mapping) and "restore_wall_s" in case):
            continue
        got = case.get("replay_over_restore_wall")
        rows.append(
            (
                f"restore {fmt(case.get('blocks'))} page-{fmt(case.get('page_size'))} blocks "
                "into the views every command builds (snapshot + empty tail)",
                f"{fmt(case.get('restore_wall_s'))} s ({fmt(case.get('restore_cpu_s'))} s CPU); "
                f"{fmt(case.get('snapshot_bytes_per_block'))} B per block",
                f"replay of a log holding exactly those blocks: {fmt(case.get('replay_wall_s'))} s "
                f"({fmt(case.get('replay_cpu_s'))} s CPU)",
                f"replay ÷ restore {ratio(got)}",
                at_least_text(case.get("target_replay_over_restore"), got),
            )
        )
    return rows


def render_snapshot(result: Mapping[str, Any]) -> list[Row]:
    """``snapshot_bench.py --json``: bootstrap from the snapshot topic against a full replay."""
    rows: list[Row] = []
    for case in result.values():
        if not (isinstance(case, Mapping) and "bootstrap_wall_s" in case):
            continue
        churn = case.get("churn_batches") or 0
        got = case.get("replay_over_bootstrap_wall")
        history = f"{fmt(case.get('blocks'))} live blocks" + (
            f" after {fmt(churn)} churn batches" if churn else ", each stored once"
        )
        rows.append(
            (
                f"bootstrap from the snapshot topic, {history}",
                f"{fmt(case.get('bootstrap_wall_s'))} s "
                f"({fmt(case.get('bootstrap_cpu_s'))} s CPU); "
                f"{fmt(case.get('bytes_per_block'))} B per block on the topic",
                f"full replay: {fmt(case.get('replay_wall_s'))} s "
                f"({fmt(case.get('replay_cpu_s'))} s CPU)",
                f"replay ÷ bootstrap {ratio(got)}",
                at_least_text(case.get("target_replay_over_bootstrap"), got),
            )
        )
    return rows


def render_dynamo(result: Mapping[str, Any]) -> list[Row]:
    """``dynamo_bench.py --json``: each measure of ours against Dynamo's in the same run, ours
    keeping no token ids, and (ingest and memory) keeping them beside; with ``--busy``, the
    ingest rows only."""
    ours, theirs, ratios = (result.get(k) or {} for k in ("ours", "dynamo", "ratios"))
    keeping = result.get("ours_keeping_tokens") or {}
    keeping_ratios = result.get("ratios_keeping_tokens") or {}
    blocks = f"{fmt(result.get('held_blocks'))} held blocks of page {fmt(result.get('page_size'))}"
    workers = f"{fmt(result.get('workers'))} workers"
    spinning = result.get("busy_processes") or 0
    busy = f", {spinning} process{'es' if spinning > 1 else ''} spinning" if spinning else ""
    rows: list[Row] = []
    for measure, key, unit, ratio_key, bound in (
        (
            f"ingest, one event per call, {workers}{busy}, no token ids kept",
            "ingest_blocks_per_s",
            "blocks/s",
            "ingest",
            2.0,
        ),
        (
            f"match from token ids ({fmt(result.get('prompt_tokens'))} tokens), p50",
            "token_match_p50_us",
            "µs",
            "token_match_p50",
            0.5,
        ),
        ("match with the page hashes given, p50", "hash_match_p50_us", "µs", "hash_match_p50", 1.0),
        (
            f"resident memory per held block ({blocks}), no token ids kept",
            "rss_bytes_per_held_block",
            "B",
            "rss_per_held_block",
            0.5,
        ),
    ):
        if spinning and ratio_key != "ingest":
            continue
        mine, peer, value = ours.get(key), theirs.get(key), ratios.get(ratio_key)
        at_least = unit == "blocks/s"  # a rate: higher is better; the rest: lower is better
        met = value is not None and (value >= bound if at_least else value <= bound)
        shown = per_s if at_least else (lambda v, u: f"{fmt(v)} {u}")
        rows.append(
            (
                measure,
                shown(mine, unit if not at_least else "blocks"),
                "Dynamo `RadixTree`: " + shown(peer, unit if not at_least else "blocks"),
                ratio(value),
                f"{'≥' if at_least else '≤'} {bound}{X}: " + ("met" if met else "**missed**"),
            )
        )
        if keeping and ratio_key in ("ingest", "rss_per_held_block"):
            rows.append(
                (
                    "the same, token ids kept (the stream out's follower)",
                    shown(keeping.get(key), unit if not at_least else "blocks"),
                    "Dynamo `RadixTree`: " + shown(peer, unit if not at_least else "blocks"),
                    ratio(keeping_ratios.get(ratio_key)),
                    "",
                )
            )
    share = ours.get("decode_share_of_ingest")
    if isinstance(share, float):
        rows.append(
            ("of our ingest: decoding the records alone", f"{share:.0%} of the time", "", "", "")
        )
    kept_share = keeping.get("decode_share_of_ingest")
    if isinstance(kept_share, float):
        rows.append(
            (
                "the same, token ids kept",
                f"{kept_share:.0%} of the time",
                "",
                "",
                "",
            )
        )
    tokens_us, hashes_us = ours.get("token_match_p50_us"), ours.get("hash_match_p50_us")
    if spinning:
        return rows
    if isinstance(tokens_us, float) and isinstance(hashes_us, float) and tokens_us > 0:
        hashing = (tokens_us - hashes_us) / tokens_us
        rows.append(
            (
                "of our token-form match: hashing the prompt's pages",
                f"{hashing:.0%} of p50",
                "",
                "",
                "",
            )
        )
    return rows


SCALE_MEASURES: tuple[tuple[str, str, str, float | None], ...] = (
    ("resident memory per held block", "rss_bytes_per_block", "B", 1.1),
    ("ingest (decode + apply, one record a source)", "ingest_blocks_per_s", "blocks/s", None),
    ("snapshot write (`snapshot()`)", "snapshot_write_s", "s", None),
    ("snapshot restore (`load()`)", "snapshot_restore_s", "s", None),
    ("match from token ids, p50", "match_tokens_p50_us", "µs", None),
    ("match from token ids, p99", "match_tokens_p99_us", "µs", 2.0),
    ("match with the page hashes given, p50", "match_hashes_p50_us", "µs", None),
    ("match with the page hashes given, p99", "match_hashes_p99_us", "µs", 2.0),
)
"""scale_bench.py's figures: measure, key, unit, and the bound on the ratio to the smallest size."""


def render_scale(result: Mapping[str, Any]) -> list[Row]:
    """``scale_bench.py --json``: each larger size's figures beside the smallest size's."""
    sizes = result.get("sizes") or {}
    small = sizes.get(str(result.get("smallest"))) or {}
    rows: list[Row] = []
    for name, size in sizes.items():
        if name == str(result.get("smallest")) or not isinstance(size, Mapping):
            continue
        held = f"{fmt(size.get('held_blocks'))} blocks, {fmt(size.get('sources'))} sources"
        for measure, key, unit, bound in SCALE_MEASURES:
            mine, base = size.get(key), small.get(key)
            value = mine / base if isinstance(mine, float) and isinstance(base, float) else None
            shown = per_s if unit == "blocks/s" else (lambda v, u: f"{fmt(v)} {u}")
            if mine is None:
                shown = lambda v, u: "not measured" if v is None else f"{fmt(v)} {u}"  # noqa: E731
            target = ""
            if bound is not None:
                met = value is not None and value <= bound
                target = f"≤ {bound}{X}: " + ("met" if met else "**missed**")
            rows.append(
                (
                    f"{measure}, {held}",
                    shown(mine, "blocks" if unit == "blocks/s" else unit),
                    f"{fmt(small.get('held_blocks'))} blocks: "
                    + shown(base, "blocks" if unit == "blocks/s" else unit),
                    ratio(value),
                    target,
                )
            )
    return rows


RENDERERS: dict[str, Callable[[Mapping[str, Any]], list[Row]]] = {
    "cache": render_cache,
    "codec": render_codec,
    "log": render_log,
    "log_kafka": render_log_kafka,
    "replica": render_replica,
    "http": render_http,
    "restore": render_restore,
    "snapshot": render_snapshot,
    "dynamo": render_dynamo,
    "dynamo_busy": render_dynamo,
    "scale": render_scale,
}


def machine_text(machine: Mapping[str, Any] | None) -> str:
    """The machine row of one run."""
    if not machine:
        return "Machine: not recorded."
    parts = []
    if "cpu" in machine:
        parts.append(str(machine["cpu"]))
    if "cpus" in machine:
        parts.append(f"{machine['cpus']} CPUs")
    if "load_average_1m" in machine:
        parts.append(f"load average {machine['load_average_1m']:.2f} at the end")
    if "steal_share" in machine:
        parts.append(f"steal {machine['steal_share'] * 100:.1f}% of CPU time")
    return (
        "Machine: "
        + ", ".join(parts)
        + ". A shared VM with other jobs beside the run: compare the ratios of one run, not "
        "rates across runs."
    )


def load(path: Path) -> dict[str, Any]:
    """A ``run`` record, or a script's bare JSON wrapped as one (named after the file)."""
    data = json.loads(path.read_text())
    if isinstance(data, Mapping) and "benchmark" in data and "result" in data:
        return dict(data)
    name = path.stem
    machine = data.get("machine") if isinstance(data, Mapping) else None
    return {"benchmark": name, "command": None, "machine": machine, "result": data}


def section(record: Mapping[str, Any]) -> str:
    """One benchmark's heading, command, table and machine row."""
    name = str(record["benchmark"])
    bench = BY_NAME.get(name)
    result = record["result"]
    if not isinstance(result, Mapping):
        result = {"result": result}
    renderer = RENDERERS.get(name)
    rows = renderer(result) if renderer is not None else []
    if not rows:  # an unknown benchmark, or a known one whose JSON changed shape
        rows = render_any(result)
    machine = record.get("machine") or result.get("machine")
    command = record.get("command")
    lines = [f"## {bench.title if bench else name}", ""]
    lines.append(f"Command: `{command}`" if command else "Command: not recorded.")
    lines += ["", table(rows).rstrip("\n"), "", machine_text(machine), ""]
    return "\n".join(lines)


INTRO = """# Benchmark results

One table per benchmark, from one run of `bench/report.py run` on the machine named under each
table; `bench/report.py render` wrote this file from the runs' JSON. Every row compares a
measure with its baseline measured in the same run, so read the ratio column: two runs minutes
apart on a shared VM differ in rates by more than the ratios move. Sizes are modest (the
commands say which); each script's defaults are larger. A target is the project's own goal for
that row.

Regenerate: `.venv/bin/python bench/report.py run --kafka 127.0.0.1:19092` (writes
`bench/results/*.json`), then `.venv/bin/python bench/report.py render bench/results/*.json`.
"""


def render(paths: Sequence[Path]) -> str:
    """RESULTS.md for the records in ``paths``, in ``BENCHMARKS`` order, unknown ones last."""
    records = [load(p) for p in paths]
    order = {b.name: i for i, b in enumerate(BENCHMARKS)}
    records.sort(key=lambda r: (order.get(str(r["benchmark"]), len(order)), str(r["benchmark"])))
    return INTRO + "\n" + "\n".join(section(r) for r in records)


def main(argv: Sequence[str] | None = None) -> int:
    """``run`` or ``render``; the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    run = sub.add_parser("run", help="run the benchmarks and save their JSON")
    run.add_argument("--out", type=Path, default=BENCH / "results")
    run.add_argument("--kafka", help="HOST:PORT of a broker (without it, log_kafka is skipped)")
    run.add_argument(
        "--sglang-python",
        default=str(BENCH / ".venv-sglang" / "bin" / "python"),
        help="sglang's interpreter (bash bench/setup_sglang.sh)",
    )
    run.add_argument(
        "--dynamo-python",
        default=str(BENCH / ".venv-dynamo" / "bin" / "python"),
        help="NVIDIA Dynamo's interpreter (bash bench/setup_dynamo.sh)",
    )
    run.add_argument("--only", nargs="+", choices=list(BY_NAME), help="these benchmarks only")
    draw = sub.add_parser("render", help="write RESULTS.md from saved JSON")
    draw.add_argument("json", nargs="+", type=Path)
    draw.add_argument("--output", type=Path, default=RESULTS_MD)
    args = parser.parse_args(argv)
    if args.action == "run":
        args.out.mkdir(parents=True, exist_ok=True)
        for bench in BENCHMARKS:
            if args.only and bench.name not in args.only:
                continue
            if bench.needs_kafka and not args.kafka:
                print(f"{bench.name}: skipped (no --kafka)", file=sys.stderr)
                continue
            peers = {"sglang": args.sglang_python, "dynamo": args.dynamo_python}
            for name, python in peers.items():
                if any(f"{{{name}}}" in a for a in bench.args) and not os.path.exists(python):
                    sys.stderr.write(f"{bench.name}: no {python}: bash bench/setup_{name}.sh\n")
                    return 1
            print(f"{bench.name}: {run_one(bench, args.out, args.kafka, peers)}")
        return 0
    args.output.write_text(render(args.json))
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
