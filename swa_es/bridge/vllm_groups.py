"""vLLM's KV-cache groups as its events tell them: kinds, windows and copies per (hash, group).

vLLM 0.33.0 sends every ``BlockStored`` / ``BlockRemoved`` for one KV-cache group
(``group_idx``); a store also names the group's kind (``kv_cache_spec_kind``) and window
(``kv_cache_spec_sliding_window``). A hybrid model has full-attention group(s) and
sliding-window group(s) drawing from one block pool keyed by (hash, group), and one hash may sit
on several physical blocks: each caching sends a store, each eviction of one copy a removal.
So the ledger counts copies (stores minus removals) per (hash, group), never a set.

What a block is, from the counts: *held* when every full-attention group holds a copy (vLLM's
prefix lookup needs the hash in every group of a kind), *SWA-resident* when every sliding-window
group does. vLLM's hybrid hit (``SlidingWindowManager.find_longest_cache_hit``) needs the
``ceil((W - 1) / block)`` blocks before the hit end SWA-resident, where the SWA rule of
docs/design.md §3 needs ``ceil(S / block)``: a source's rule window ``S = max(1, W - 1)``
makes the two the same for every block size (``rule_window``; with ``W = 1`` vLLM needs no
block but then takes the last resident one, which is the rule with ``S = 1``).

A group's kind and window are fixed for an engine run: a store that changes them is an error,
as is an event for a group no store declared. Groups of other kinds (Mamba, chunked local,
cross attention, ...) or sliding-window groups of unequal windows make vLLM's hit something
the SWA rule does not express: the ledger then reports why (``residency``) instead of guessing.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass
from typing import Final

from swa_es.bridge.errors import MirrorError

FULL_ATTENTION_KINDS: Final = frozenset({"full_attention", "mla_attention", "sink_full_attention"})
"""vLLM spec kinds whose prefix hit needs every block from the first one."""
SLIDING_WINDOW_KINDS: Final = frozenset({"sliding_window", "sliding_window_mla"})
"""vLLM spec kinds whose hit needs only the blocks in the window before its end."""


class GroupRole(enum.Enum):
    """What a group's copies say about a block."""

    FULL = "full"
    SLIDING_WINDOW = "sliding_window"
    OTHER = "other"


def role_of(kind: str | None, first: bool = True) -> GroupRole:
    """The role of a vLLM spec kind. A group without a kind (older vLLM) is taken for a
    full-attention one when it is the engine's first group, else it is not modeled."""
    if kind is None:
        return GroupRole.FULL if first else GroupRole.OTHER
    if kind in FULL_ATTENTION_KINDS:
        return GroupRole.FULL
    if kind in SLIDING_WINDOW_KINDS:
        return GroupRole.SLIDING_WINDOW
    return GroupRole.OTHER


def rule_window(engine_window: int) -> int:
    """The window of docs/design.md §3's SWA rule that equals vLLM's hybrid hit rule for
    vLLM's ``sliding_window`` (see the module docstring)."""
    return max(1, engine_window - 1)


@dataclass(frozen=True, slots=True)
class Group:
    """One declared KV-cache group."""

    idx: int
    kind: str | None
    role: GroupRole
    window: int | None
    block_size: int


class GroupLedger:
    """Declared groups and copies per (engine hash, group); see the module docstring."""

    def __init__(self) -> None:
        self._groups: dict[int, Group] = {}
        self._copies: dict[int, Counter[object]] = {}

    @property
    def groups(self) -> tuple[Group, ...]:
        """The groups declared so far, by index."""
        return tuple(self._groups[idx] for idx in sorted(self._groups))

    def declare(self, idx: int, kind: str | None, window: int | None, block_size: int) -> Group:
        """The group a store names; a kind, window or block size other than the declared one
        is an error (``MirrorError`` naming the field)."""
        group = self._groups.get(idx)
        if group is None:
            role = role_of(kind, first=not self._groups)
            if role is GroupRole.SLIDING_WINDOW and (window is None or window <= 0):
                raise MirrorError(
                    "kv_cache_spec_sliding_window",
                    f"sliding-window group {idx} names no positive window ({window!r})",
                )
            group = self._groups[idx] = Group(idx, kind, role, window, block_size)
            self._copies[idx] = Counter()
            return group
        if kind != group.kind:
            raise MirrorError(
                "kv_cache_spec_kind", f"group {idx} was declared {group.kind!r}, now {kind!r}"
            )
        if window != group.window:
            raise MirrorError(
                "kv_cache_spec_sliding_window",
                f"group {idx}'s window changed from {group.window} to {window} within an epoch",
            )
        if block_size != group.block_size:
            raise MirrorError(
                "block_size", f"group {idx}'s block size changed from {group.block_size}"
            )
        return group

    def declared(self, idx: int) -> Group | None:
        """The group declared under ``idx``, None when none was."""
        return self._groups.get(idx)

    def group(self, idx: int) -> Group:
        """A declared group; ``MirrorError`` on ``group_idx`` for one never declared."""
        group = self._groups.get(idx)
        if group is None:
            declared = sorted(self._groups)
            raise MirrorError("group_idx", f"group {idx} was never declared (declared: {declared})")
        return group

    def add(self, group: Group, key: object) -> None:
        """One more copy of ``key`` in ``group``."""
        self._copies[group.idx][key] += 1

    def drop(self, group: Group, key: object, field: str) -> None:
        """One copy fewer; ``MirrorError`` on ``field`` when ``group`` holds none."""
        copies = self._copies[group.idx]
        count = copies.get(key, 0)
        if count == 0:
            raise MirrorError(field, f"BlockRemoved names {key!r}, not held in group {group.idx}")
        if count == 1:
            del copies[key]
        else:
            copies[key] = count - 1

    def copies(self, group: Group, key: object) -> int:
        """How many copies of ``key`` ``group`` holds."""
        return self._copies[group.idx].get(key, 0)

    def held_by_all(self, role: GroupRole, key: object) -> bool:
        """Whether every declared group of ``role`` holds ``key`` (False with none)."""
        groups = [g for g in self._groups.values() if g.role is role]
        return bool(groups) and all(self._copies[g.idx].get(key, 0) > 0 for g in groups)

    def held_by_any(self, role: GroupRole, key: object) -> bool:
        """Whether some declared group of ``role`` holds ``key``."""
        return any(
            self._copies[g.idx].get(key, 0) > 0 for g in self._groups.values() if g.role is role
        )

    def clear(self) -> None:
        """Drop every copy (``AllBlocksCleared``); the declarations stay."""
        for copies in self._copies.values():
            copies.clear()

    def residency(self) -> tuple[int | None, str]:
        """(the engine's window, ``"events"``) when the groups make vLLM's hit the SWA rule;
        else (None, ``"none: <reason>"``)."""
        groups = self.groups
        other = [g for g in groups if g.role is GroupRole.OTHER]
        if other:
            named = ", ".join(f"{g.idx} ({g.kind})" for g in other)
            return None, f"none: vLLM KV-cache group(s) {named} are of a kind not modeled"
        full = [g for g in groups if g.role is GroupRole.FULL]
        if not full:
            return None, "none: vLLM declared no full-attention KV-cache group"
        sizes = sorted({g.block_size for g in groups})
        if len(sizes) > 1:
            return None, f"none: vLLM's KV-cache groups have unequal block sizes {sizes}"
        windows = sorted({g.window or 0 for g in groups if g.role is GroupRole.SLIDING_WINDOW})
        if not windows:
            return None, "none: vLLM declared no sliding-window KV-cache group"
        if len(windows) > 1:
            return None, f"none: vLLM's sliding-window groups have unequal windows {windows}"
        return windows[0], "events"
