"""Hypothesis strategies the state-file tests share."""

from __future__ import annotations

from hypothesis import strategies as st


def json_values(
    *, text_size: int = 40, key_size: int = 10, items: int = 4, leaves: int = 12
) -> st.SearchStrategy[object]:
    """Any JSON value (no NaN: JSON has none), nested, as an edited state file may hold."""
    return st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=text_size),
        lambda inner: (
            st.lists(inner, max_size=items)
            | st.dictionaries(st.text(max_size=key_size), inner, max_size=items)
        ),
        max_leaves=leaves,
    )
