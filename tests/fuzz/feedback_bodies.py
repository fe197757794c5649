"""Valid ``POST /v1/feedback`` bodies for the fuzz tests, in all three encodings: report
strategies, and an encoder of the binary ``SWFB`` layout written here from its text
(``feedback_body.BINARY_LAYOUT``), not taken from the client."""

from __future__ import annotations

import struct
from typing import Any

import msgpack
import orjson
from hypothesis import strategies as st

JSON_TYPE = "application/json"
MSGPACK_TYPE = "application/msgpack"
BINARY_TYPE = "application/octet-stream"
NULL_U32 = 0xFFFFFFFF
NO_EXTRA_KEY = 0xFFFF

NAMES = st.text(min_size=1, max_size=8)
U32 = st.integers(0, 2**32 - 2)  # 2**32 - 1 is the binary layout's null


@st.composite
def reports(draw: st.DrawFn) -> dict[str, Any]:
    """One valid report (a dict, as the JSON form carries it)."""
    source = draw(NAMES)
    form = draw(st.sampled_from(["token_ids", "block_hashes", "predicted"]))
    if form == "token_ids":
        ids = draw(st.lists(st.integers(0, 2**32 - 1), max_size=12))
        report: dict[str, Any] = {"token_ids": ids, "extra_key": draw(st.none() | NAMES)}
        length = len(ids)
    elif form == "block_hashes":
        page_size = draw(st.integers(1, 64))
        hashes = draw(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=6))
        report = {"block_hashes": hashes, "page_size": page_size}
        length = len(hashes) * page_size
    else:
        length = draw(st.integers(0, 10_000))
        entry = st.fixed_dictionaries(
            {"cached_tokens": st.none() | U32, "usable_tokens": st.none() | U32}
        )
        report = {
            "predicted": draw(st.dictionaries(NAMES, entry, max_size=3)),
            "prompt_tokens": length,
        }
    return {"source": source, "reused_tokens": draw(st.integers(0, length)), **report}


REPORT_LISTS = st.lists(reports(), min_size=1, max_size=4)


def encode_json(reports: list[dict[str, Any]]) -> bytes:
    """The JSON body of ``reports``."""
    return orjson.dumps({"reports": reports})


def encode_msgpack(reports: list[dict[str, Any]]) -> bytes:
    """The msgpack body of ``reports``."""
    packed: bytes = msgpack.packb({"reports": reports}, use_bin_type=True)
    return packed


def encode_binary(reports: list[dict[str, Any]]) -> bytes:
    """The ``SWFB`` body of ``reports``."""
    names: dict[str, int] = {}

    def index(name: str) -> int:
        return names.setdefault(name, len(names))

    body = b""
    for report in reports:
        chosen = index(report["source"])
        reused = report["reused_tokens"]
        if "token_ids" in report:
            key = report["extra_key"]
            key_bytes = b"" if key is None else key.encode("utf-8", "surrogatepass")
            ids = report["token_ids"]
            body += struct.pack("<HBBI", chosen, 0, 0, reused)
            body += struct.pack("<HI", NO_EXTRA_KEY if key is None else len(key_bytes), len(ids))
            body += key_bytes + struct.pack(f"<{len(ids)}I", *ids)
        elif "block_hashes" in report:
            hashes = report["block_hashes"]
            body += struct.pack("<HBBI", chosen, 1, 0, reused)
            body += struct.pack("<II", report["page_size"], len(hashes))
            body += struct.pack(f"<{len(hashes)}q", *hashes)
        else:
            predicted = report["predicted"]
            body += struct.pack("<HBBI", chosen, 2, 0, reused)
            body += struct.pack("<IH", report["prompt_tokens"], len(predicted))
            for other, entry in predicted.items():
                cached, usable = entry["cached_tokens"], entry["usable_tokens"]
                body += struct.pack(
                    "<HII",
                    index(other),
                    NULL_U32 if cached is None else cached,
                    NULL_U32 if usable is None else usable,
                )
    head = struct.pack("<4sBBHI", b"SWFB", 1, 0, len(names), len(reports))
    for name in names:
        encoded = name.encode("utf-8", "surrogatepass")
        head += struct.pack("<H", len(encoded)) + encoded
    return head + body


ENCODERS = {JSON_TYPE: encode_json, MSGPACK_TYPE: encode_msgpack, BINARY_TYPE: encode_binary}

MUTATIONS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("overwrite"), st.integers(0, 10**6), st.binary(min_size=1, max_size=8)),
    st.tuples(st.just("append"), st.binary(min_size=1, max_size=16)),
)
"""One bytes-level mutation of a body (``mutate``)."""


def mutate(body: bytes, mutation: tuple[Any, ...]) -> bytes:
    """``body`` with one byte-level ``mutation`` (positions wrap around its length)."""
    kind: str = mutation[0]
    if kind == "append":
        tail: bytes = mutation[1]
        return body + tail
    at = int(mutation[1]) % (len(body) + 1)
    if kind == "truncate":
        return body[:at]
    if kind == "insert":
        inserted: bytes = mutation[2]
        return body[:at] + inserted + body[at:]
    if not body:
        return body
    at = min(at, len(body) - 1)
    if kind == "flip":
        return body[:at] + bytes([body[at] ^ (1 << int(mutation[2]))]) + body[at + 1 :]
    written: bytes = mutation[2]
    return body[:at] + written + body[at + len(written) :]
