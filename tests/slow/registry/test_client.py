"""tests/unit/registry/test_client.py's slow tests: they render the variants matrix (pip runs) or wait out
real deadlines on a drip-fed server."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.registry.client import Backoff
from tests.unit.registry.test_client import (
    BOUNDED,
    MiB,
    Scripted,
    Stub,
    hostile,
    one_line_naming,
    outcome,
)


def test_a_build_asks_the_registry_about_a_cells_staging_tag_once(
    stub: Stub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reuse (staged elsewhere?) and the cache source both look up the staging tag of the cell's
    input digest: one request answers both. Nothing is staged here, so no engine is asked."""
    from imagekit.builds.registry_use import BuildRegistry
    from imagekit.core.naming import staging_tag
    from imagekit.render.dockerfile import Renderer
    from testbed.sample_projects import variants_plan

    monkeypatch.setenv("IMAGEKIT_REGISTRY_USER", "u")
    monkeypatch.setenv("IMAGEKIT_REGISTRY_PASSWORD", "p")
    plan = variants_plan(tmp_path)
    rendered = Renderer(plan).render_all()[0]
    remote = BuildRegistry(object(), stub.host, plan.matrix.publish, Backoff(1, 0.1, 1), None)  # type: ignore[arg-type]
    said: list[str] = []
    assert remote.staged_elsewhere(rendered, said.append) is None
    assert remote.cache_source(rendered, said.append) == ()
    remote.close()
    tag = staging_tag(rendered.input_digest)
    asked = [  # answered ones: the first, unauthenticated, only draws the auth challenge
        path for method, path, auth in stub.requests if method == "HEAD" and auth and path.endswith(tag)
    ]
    assert len(asked) == 1, stub.requests
    assert said[-1] == "cache: no staged or published image of this cell; building without one"


@pytest.mark.parametrize("case", list(BOUNDED))
def test_every_registry_answer_is_bounded_in_size_and_time(case: str) -> None:
    """Class 1: an endless or drip-fed answer (manifest, error, token, blob) ends in one line, long
    before the server is done writing: no MemoryError, no hang, no unbounded temporary file."""
    respond, operation, expected = BOUNDED[case]
    server = Scripted(lambda h: respond(server, h))
    registry = hostile(server.host, deadline_s=1.0)
    try:
        # a 1 s deadline: 15 s is "ended", while every hostile server here would go on far longer
        caught = one_line_naming(outcome(lambda: operation(registry), seconds=15), server.host)
        assert expected in caught.message
        assert server.written < 32 * MiB  # it stopped reading; the server never got to write it all
    finally:
        registry.close()
        server.close()
