"""imagekit.builds.backends.classic without an engine: the crash sweep, the cache it builds with, the
reuse of a staged image, and the rebuild when the cache answers for another platform."""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

from imagekit.builds.backends import classic
from imagekit.builds.backends.base import BuildCache, Setup
from imagekit.builds.jobs import JobFailed
from imagekit.engine.client import BuildRequest
from imagekit.report.store import BuildReport, CellResult

AMD64_IMAGE, ARM64_IMAGE = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def test_the_crash_sweep_reads_no_log_that_is_no_regular_file(tmp_path: Path) -> None:
    """A FIFO where a failed cell's log should be would block the next build forever."""
    failed = CellResult(
        id="c", kind="cell", status="failed", base_image="b", error="the Docker engine stopped answering"
    )
    report = BuildReport("m", "2024-05-17T00:00:00Z", 1.0, "e", (failed,), ())
    os.mkfifo(tmp_path / "c.log")
    assert classic.sweep_crashed_steps(object(), report, tmp_path) == []  # type: ignore[arg-type]


class Registry:
    """What the backend asks of ``BuildRegistry``, recorded."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def cache_source(self, rendered: object, write: Callable[[str], None]) -> tuple[str, ...]:
        self.asked.append("cache_source")
        return ("reg:5000/r/staging@sha256:" + "c" * 64,)

    def build_cache(self, rendered: object) -> str:
        self.asked.append("build_cache")
        return "reg:5000/r/staging:cache-x"

    def staged_elsewhere(self, rendered: object, write: Callable[[str], None]) -> dict[str, Any]:
        self.asked.append("staged_elsewhere")
        return {"Id": AMD64_IMAGE}


def backend(api: object = None) -> classic.ClassicBackend:
    setup = Setup(api, "gzip", None, None, Path(), lambda _line: None)  # type: ignore[arg-type]
    return classic.ClassicBackend(setup)


def test_its_cache_is_the_engines_fed_by_pulling_and_it_writes_no_registry_cache() -> None:
    source, target = Registry(), Registry()
    cache = backend().cache(object(), source, target, print)  # type: ignore[arg-type]
    assert cache == BuildCache(engine_images=("reg:5000/r/staging@sha256:" + "c" * 64,))
    assert (source.asked, target.asked) == (["cache_source"], [])
    assert backend().cache(object(), None, target, print) == BuildCache()  # type: ignore[arg-type]


def test_an_image_staged_elsewhere_is_reused_pulled_into_the_engine() -> None:
    registry = Registry()
    found = backend().registry_reuse(object(), registry, (), print)  # type: ignore[arg-type]
    assert found.staged is None and found.image == {"Id": AMD64_IMAGE}


def test_its_dockerfiles_are_the_classic_builders() -> None:
    assert backend().render.builder == "classic" and not backend().render.on_buildkit


class Engine:
    def __init__(self, arch: dict[str, str]) -> None:
        self.arch = arch

    def inspect_image(self, ref: str) -> dict[str, Any]:
        return {"Id": ref, "Architecture": self.arch[ref], "Os": "linux"}


@pytest.mark.parametrize("again", [ARM64_IMAGE, AMD64_IMAGE], ids=["rebuilt", "still-wrong"])
def test_an_image_of_another_platform_from_the_cache_is_built_again_without_it(
    monkeypatch: pytest.MonkeyPatch, again: str
) -> None:
    requests: list[BuildRequest] = []
    answers = iter((AMD64_IMAGE, again))

    def build_image(api: object, request: BuildRequest, context: IO[bytes], *rest: object) -> str:
        requests.append(request)
        return next(answers)

    monkeypatch.setattr(classic, "build_image", build_image)
    engine = Engine({AMD64_IMAGE: "amd64", ARM64_IMAGE: "arm64"})
    request = BuildRequest("Dockerfile", (), (), (), None, platform="linux/arm64")
    cache = BuildCache(engine_images=("r/x@sha256:" + "c" * 64,))
    lines: list[str] = []

    def build() -> str:
        built = backend(engine).build(request, io.BytesIO, "r/x:1", None, cache, lines.append, print)  # type: ignore[arg-type]
        return built.image_id

    if again == AMD64_IMAGE:
        with pytest.raises(JobFailed, match="the engine built no linux/arm64 image"):
            build()
    else:
        assert build() == ARM64_IMAGE
    assert [(r.cache_from, r.nocache) for r in requests] == [(cache.engine_images, False)] * 1 + [
        (cache.engine_images, True)
    ]
    assert lines == ["the cache gave another platform's image; building again for linux/arm64 without it"]
