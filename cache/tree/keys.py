"""Turning caller keys into page-aligned token tuples, and measuring shared prefixes."""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import torch


def aligned_tokens(token_ids: Sequence[int] | torch.Tensor, page_size: int) -> tuple[int, ...]:
    """``token_ids`` as a tuple cut to a whole number of pages.

    Ids are not checked here; ``insert`` checks what it stores with ``check_token_ids``.
    """
    if isinstance(token_ids, torch.Tensor):
        token_ids = token_ids.tolist()
    whole = len(token_ids) - len(token_ids) % page_size
    if type(token_ids) is tuple and whole == len(token_ids):
        return token_ids
    return tuple(token_ids[:whole])


def check_token_ids(tokens: tuple[int, ...]) -> array[int]:
    """``tokens`` as unsigned 32-bit ids (one C-level pass, which is the check): ValueError
    unless every id is an int in ``[0, 2**32)``. A recording sink copies a new leaf's ids from
    it in one block rather than converting them one by one again."""
    try:
        return array("I", tokens)
    except (OverflowError, TypeError) as exc:
        raise ValueError(f"token ids must be ints in [0, 2**32): {exc}") from exc


def shared_length(
    node_tokens: tuple[int, ...], key: tuple[int, ...], pos: int, page_size: int
) -> int:
    """How many whole pages of ``node_tokens`` equal ``key[pos:]``, in tokens.

    The first page is known to match (it is the child key). Whole-node equality is one C-level
    comparison; otherwise a binary search over page counts keeps every comparison in C.
    """
    length = len(node_tokens)
    if key[pos : pos + length] == node_tokens:
        return length
    lo, hi = 1, min(length, len(key) - pos) // page_size  # pages: lo matches, hi may not
    if key[pos : pos + hi * page_size] == node_tokens[: hi * page_size]:
        return hi * page_size
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if key[pos : pos + mid * page_size] == node_tokens[: mid * page_size]:
            lo = mid
        else:
            hi = mid
    return lo * page_size
