"""CDI's qualified device names (vendor/class=name), judged as the CDI specification says, in linear time."""

from __future__ import annotations

from imagekit.core import cdi


def test_a_long_hostile_cdi_text_is_judged_in_linear_time() -> None:
    # the vendor's look-ahead and labels, and the class's bound, never backtrack far
    for text in ("a" * 100_000, "a." * 50_000, "a/" + "b" * 100_000, "a/b=" + "c-" * 50_000 + "-"):
        assert not cdi.is_qualified_name(text)
        assert cdi.qualified_names(text) is None


def test_qualified_name_grammar() -> None:
    assert cdi.is_qualified_name("nvidia.com/gpu=0:1") and cdi.is_qualified_name("a/b=c")
    assert not cdi.is_qualified_name("0") and not cdi.is_qualified_name("nvidia.com/gpu")
    assert cdi.device_of("nvidia.com/gpu=0:1") == "0:1"
