"""Lock references: a full lock on the whole path, an SWA lock on the window-sized tail of it."""

from __future__ import annotations

from cache.errors import LockError
from cache.tree.node import TreeNode
from cache.tree.results import LockHandle
from cache.tree.state import TreeState

__all__ = ["LockError", "dec_lock_ref", "inc_lock_ref"]


def _swa_region(state: TreeState, node: TreeNode) -> int:
    """Split the node where the SWA-locked tail starts; return the tail length in tokens.

    The tail is the last ``ceil(window / page) * page`` tokens of the path (all of it if
    shorter). Raises LockError, before changing anything, if a tombstone falls inside it.
    """
    remaining = state.swa_lock_cap
    x = node
    while remaining > 0 and x._parent is not None:
        if x._tombstone:
            raise LockError(
                f"cannot SWA-lock {x!r}: a tombstone lies within the last "
                f"{state.swa_lock_cap} tokens of the path; lock a match_prefix result"
            )
        length = len(x._token_ids)
        if length > remaining:
            state.split(x, length - remaining, to_mru=False)  # sglang has no such split
            return state.swa_lock_cap
        remaining -= length
        x = x._parent
    return state.swa_lock_cap - remaining


def inc_lock_ref(state: TreeState, node: TreeNode) -> LockHandle:
    """Lock the path root → ``node``: full everywhere, SWA on the window-sized tail."""
    swa_tokens = _swa_region(state, node)
    remaining = swa_tokens
    x = node
    while x._parent is not None:
        state.lock_full(x)
        if remaining > 0:
            state.lock_swa(x)
            remaining -= len(x._token_ids)
        x = x._parent
    if node._parent is not None:
        state.live_locks += 1
    return LockHandle(node, swa_tokens, state.generation)


def dec_lock_ref(state: TreeState, node: TreeNode, handle: LockHandle) -> None:
    """Release the lock ``handle`` took on ``node``."""
    if handle.node is not node:
        raise LockError(f"dec_lock_ref: the handle was taken on {handle.node!r}, not {node!r}")
    if handle.generation != state.generation:
        raise LockError("dec_lock_ref: the handle predates a reset(); its lock is already gone")
    remaining = handle.swa_locked_tokens
    x = node
    while x._parent is not None:
        if x.full_lock_ref <= 0 or (remaining > 0 and x.swa_lock_ref <= 0):
            raise LockError(f"dec_lock_ref: {x!r} holds no lock to release (double unlock?)")
        remaining -= len(x._token_ids)
        x = x._parent
    remaining = handle.swa_locked_tokens
    x = node
    while x._parent is not None:
        state.unlock_full(x)
        if remaining > 0:
            state.unlock_swa(x)
            remaining -= len(x._token_ids)
        x = x._parent
    if node._parent is not None:
        state.live_locks -= 1
