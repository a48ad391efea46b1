"""imagekit.refresh.compat_releases: which torchvision / torchaudio release goes with a torch patch."""

from __future__ import annotations

from imagekit.refresh.compat_metadata import parse_time
from imagekit.refresh.compat_releases import Companion, Patch, pair


def test_pairing_rules() -> None:
    patch = Patch("2.15.0", parse_time("2026-10-28T15:17:10Z"))
    near = parse_time("2026-10-28T15:21:45Z")
    long_before = parse_time("2026-03-23T18:13:23Z")
    companions = [
        Companion("2.11.0", long_before, None),  # pins no torch, but went out with 2.11.0
        Companion("2.11.1", near, ">=2.11"),
    ]
    # uploaded with 2.15.0 and admitting it, but built for torch 2.11: no pair
    assert pair(patch, companions, "torchaudio") is None
    same_line = [Companion("2.15.1", near, ">=2.15")]
    assert pair(patch, same_line, "torchaudio") == "2.15.1"
    assert pair(Patch("2.12.0", parse_time("2026-05-13T16:00:00Z")), companions, "torchaudio") is None
    exact = [
        Companion("0.29.0", long_before, "==2.14.0"),
        Companion("0.29.1", near, ">=2.14.0"),
    ]
    assert pair(Patch("2.14.0", near), exact, "torchvision") == "0.29.0"  # an exact pin wins
    assert pair(Patch("2.14.1", near), exact, "torchvision") == "0.29.1"  # 0.29 is 2.14's line
    assert pair(Patch("2.15.0", near), exact, "torchvision") is None
