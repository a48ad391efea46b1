"""MIG profile names in NVIDIA's spellings: the device plugin's resource ('+' as '.') turned into
the DRA driver's (go-nvlib's String()), the attributes go-nvlib writes and no other, and the
plugin's pattern as the resource and product patterns embed it."""

from __future__ import annotations

import re

import pytest

from imagekit.k8s.mig import DRIVER_PROFILE, EXAMPLES, PLUGIN_PROFILE, PLUGIN_PROFILE_PATTERN, driver_profile

# the device plugin's spelling beside the driver's, for every attribute go-nvlib writes
SPELLINGS = {
    "1g.10gb": "1g.10gb",
    "1g.10gb.me": "1g.10gb+me",
    "1g.23gb.me.all": "1g.23gb+me.all",
    "1g.23gb-me": "1g.23gb-me",  # a NO_ME profile keeps its '-'
    "1g.23gb.gfx": "1g.23gb+gfx",
    "1c.2g.20gb": "1c.2g.20gb",
    "8g.1440gb": "8g.1440gb",  # Blackwell's 8-slice profiles, 4 digits of memory
}


@pytest.mark.parametrize(("plugin", "driver"), SPELLINGS.items())
def test_the_plugins_spelling_becomes_the_drivers(plugin: str, driver: str) -> None:
    assert driver_profile(plugin) == driver
    assert DRIVER_PROFILE.fullmatch(driver) and PLUGIN_PROFILE.fullmatch(plugin)
    assert re.fullmatch(PLUGIN_PROFILE_PATTERN, plugin)


@pytest.mark.parametrize(
    "plugin",
    [
        "1g.10gb+me",  # the driver's spelling is no resource name
        "1g.10gb.mee",
        "1g.10gb.me.al",
        "1g.10gb-gfx",  # go-nvlib negates media extensions only
        "1g.10gb.me,gfx",  # several attributes: no resource name holds ','
        "9g.10gb",  # at most 8 slices
        "0g.10gb",
        "1g.12345gb",
        "1g.10gb\n",
        "",
    ],
)
def test_a_profile_go_nvlib_does_not_write_is_none(plugin: str) -> None:
    assert driver_profile(plugin) is None
    assert not re.fullmatch(PLUGIN_PROFILE_PATTERN, plugin)


def test_every_example_a_message_gives_is_a_driver_profile() -> None:
    examples = EXAMPLES.split(", ")
    assert len(examples) == 6 and all(DRIVER_PROFILE.fullmatch(e) for e in examples)
