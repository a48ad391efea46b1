"""MIG profile names, in the three spellings NVIDIA's components write them.

go-nvlib (NVIDIA/go-nvlib pkg/nvlib/device/mig_profile.go, ``MigProfileInfo.String``) names a
profile ``[<C>c.]<G>g.<GB>gb`` and its attributes after a sign: ``+me`` (media extensions, the
REV1 profiles), ``+me.all`` (all of them, the ALL_ME profiles), ``+gfx`` (graphics, the GFX
profiles) and ``-me`` (none, the NO_ME profiles). That string is:

- the DRA driver's ``profile`` attribute as it is (NVIDIA/k8s-dra-driver-gpu
  cmd/gpu-kubelet-plugin/mig.go): ``1g.10gb+me.all``, ``1g.10gb-me``;
- the device plugin's resource with each ``+`` as ``.`` (NVIDIA/k8s-device-plugin
  internal/rm/rm.go: ``strings.ReplaceAll("mig-"+p.String(), "+", ".")``), since a resource
  name holds no ``+``: ``nvidia.com/mig-1g.10gb.me.all``, ``nvidia.com/mig-1g.10gb-me``;
- in feature discovery's product label under the single strategy, the plugin's spelling after
  ``-MIG-`` (internal/lm/resource.go): ``NVIDIA-A100-SXM4-40GB-MIG-1g.5gb.me``.

The attributes are the ones go-nvlib writes, by name: an unknown one is a typo to refuse, not a
profile to pass on. A device-plugin resource holds one attribute at most (go-nvlib joins several
with ``,``, which no resource name holds).
"""

from __future__ import annotations

import re

# go-nvlib's attributes: AttributeMediaExtensions, AttributeMediaExtensionsAll, AttributeGraphics
# after '+'; AttributeMediaExtensions after '-' (the NO_ME profiles).
ATTRIBUTES = ("me.all", "me", "gfx")
NEGATED_ATTRIBUTES = ("me",)
# Slices: go-nvlib's 1..8 (the 8-slice profiles are Blackwell's); memory in GB up to 4 digits.
_BASE = r"(?:[1-8]c\.)?[1-8]g\.[0-9]{1,4}gb"
_PLUS = "|".join(re.escape(a) for a in ATTRIBUTES)
_MINUS = "|".join(re.escape(a) for a in NEGATED_ATTRIBUTES)
# the driver's spelling (go-nvlib's String()), and the device plugin's ('+' as '.')
DRIVER_PROFILE = re.compile(rf"(?P<base>{_BASE})(?:\+(?P<plus>{_PLUS})|-(?P<minus>{_MINUS}))?")
PLUGIN_PROFILE = re.compile(rf"(?P<base>{_BASE})(?:\.(?P<plus>{_PLUS})|-(?P<minus>{_MINUS}))?")
# the same as a pattern text, for the resource and product patterns that embed it
PLUGIN_PROFILE_PATTERN = rf"{_BASE}(?:\.(?:{_PLUS})|-(?:{_MINUS}))?"
EXAMPLES = "1g.10gb, 1g.10gb+me, 1g.10gb+me.all, 1g.10gb-me, 1g.10gb+gfx, 1c.2g.20gb"


def driver_profile(plugin_profile: str) -> str | None:
    """The DRA driver's profile for the device plugin's (``1g.10gb.me.all`` -> ``1g.10gb+me.all``,
    ``1g.10gb-me`` as it is); None when ``plugin_profile`` is none."""
    found = PLUGIN_PROFILE.fullmatch(plugin_profile)
    if found is None:
        return None
    if found["plus"]:
        return f"{found['base']}+{found['plus']}"
    return plugin_profile
