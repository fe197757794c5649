"""Arbitrary JSON values for the fuzz targets that put them where a field is expected."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


def json_values(
    *,
    integer_bound: int,
    text_size: int = 6,
    key_size: int = 6,
    children: int = 3,
    leaves: int = 8,
    infinities: bool = False,
) -> st.SearchStrategy[Any]:
    """Nested JSON values: null, booleans, ints in ``[-integer_bound, integer_bound]`` (past 64
    bits when asked), finite floats (infinite too with ``infinities``), short strings, and lists
    and objects of up to ``children`` items, ``leaves`` scalars in all."""
    scalars = (
        st.none()
        | st.booleans()
        | st.integers(-integer_bound, integer_bound)
        | st.floats(allow_nan=False, allow_infinity=infinities)
        | st.text(max_size=text_size)
    )
    return st.recursive(
        scalars,
        lambda inner: (
            st.lists(inner, max_size=children)
            | st.dictionaries(st.text(max_size=key_size), inner, max_size=children)
        ),
        max_leaves=leaves,
    )
