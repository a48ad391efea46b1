"""Matrix projects for tests and benchmarks: a matrix of stand-in cells on the busybox test base in a
temporary directory, the templates that steer their builds, and imagekit run on it.

Every image built through ``Project.build`` carries ``imagekit-test.run=<RUN_ID>`` (through
``imagekit build --label``): the integration tests' session removes exactly those at its end
(tests/integration/conftest.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.imagekit_process import imagekit
from testbed.waivers import critical_waivers

BUSYBOX = "imagekit-test/busybox:latest"
TEST_LABEL = "imagekit-test.run"
RUN_ID = uuid.uuid4().hex[:12]
REGISTRY = "127.0.0.1:5000"

# Renders a tiny Dockerfile per cell: the cell's env is set first (so RUN_ID makes every test's
# layers its own), SLEEP and FAIL steer the behaviour, and the static labels come from imagekit.
TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
RUN echo "building {{ cell.id }}" && if [ -n "$SLEEP" ]; then sleep "$SLEEP"; fi
RUN if [ "$FAIL" = 1 ]; then echo "boom: this step fails on purpose" >&2; exit 3; fi
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

"""

# A cell template whose image carries a stand-in for the in-image check script: it prints a passing
# check document; when the cell's env says HANG=1 it never finishes (a check that sleeps forever),
# and with CHECK_FAIL=1 it prints a failing one. What is under test is what runs the script and
# what is done with its verdict, not the script.
CHECK_TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
RUN echo '{"gpu_visible": false, "checks": [{"name": "stand-in", "status": "pass", "required": true}]}' \
    > /check.json \
 && echo '{"gpu_visible": false, "checks": [{"name": "stand-in", "status": "fail", "required": true}]}' \
    > /check-fail.json \
 && { echo '#!/bin/sh'; echo '[ "$HANG" = 1 ] && exec sleep 3600'; \
    echo '[ "$CHECK_FAIL" = 1 ] && exec cat /check-fail.json'; \
    echo 'cat /check.json'; } > /bin/python3 && chmod 755 /bin/python3
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

"""


# No RUN step: an arm64 image is built from an arm64 base without executing anything.
NO_RUN_TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

"""


# CHECK_TEMPLATE's stand-in check, BuildKit's way: the step says its network (bake cannot allow host).
BK_CHECK_TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
RUN --network=none echo '{"gpu_visible": false, "checks": [{"name": "stand-in", "status": "pass", \
"required": true}]}' > /check.json \
 && { echo '#!/bin/sh'; echo 'cat /check.json'; } > /bin/python3 && chmod 755 /bin/python3
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

"""


@dataclass(frozen=True)
class Project:
    """A matrix in a temporary directory, plus how to run imagekit on it."""

    root: Path
    repository: str

    def run(
        self, *args: str, env: dict[str, str] | None = None, timeout: float = 240
    ) -> subprocess.CompletedProcess[str]:
        return imagekit(*args, cwd=self.root, env=env, timeout=timeout)

    def build(self, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return self.run(
            "build", "--matrix", "matrix.yaml", "--label", f"{TEST_LABEL}={RUN_ID}", *args, env=env
        )

    def popen_build(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "imagekit",
                "build",
                "--matrix",
                "matrix.yaml",
                "--label",
                f"{TEST_LABEL}={RUN_ID}",
                *args,
            ],
            cwd=self.root,
            env={**os.environ, **(env or {})},
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def report(self) -> dict[str, dict[str, object]]:
        data = json.loads((self.root / ".imagekit" / "report.json").read_text())
        return {entry["id"]: entry for entry in data["cells"] + data["bases"]}


def busybox_base(
    name: str = "busybox", image: str = BUSYBOX, build: str | None = None
) -> dict[str, dict[str, object]]:
    """A `bases` entry on the busybox test image (or ``image``); ``build`` names a local context."""
    spec: dict[str, object] = {"image": image, "os": "debian12", "python": "3.11", "cuda": False}
    if build:
        spec["build"] = {"context": build}
    return {name: spec}


def write_cells(
    project: Project,
    torch: Sequence[str] = ("2.1",),
    *,
    steer: Mapping[str, Mapping[str, str]] | None = None,
    bases: Mapping[str, Mapping[str, object]] | None = None,
    base_axis: Sequence[str] | None = None,
    publish: Mapping[str, object] | None = None,
    extra: Mapping[str, object] | None = None,
    test_id: str | None = None,
) -> None:
    """A test matrix on the test template: the torch axis, and what steers each cell's build.

    ``steer`` maps a torch value (or "*" for every cell) to the environment the template reads:
    FAIL=1 fails a step, SLEEP=N sleeps in one, HANG=1 makes the image's check hang and
    CHECK_FAIL=1 fail (CHECK_TEMPLATE); any other variable just changes the cell's inputs.
    RUN_ID (every test's own layers) is always set.
    """
    run = test_id or uuid.uuid4().hex[:8]
    document: dict[str, object] = {
        "version": 1,
        "templates": "templates",
        "publish": {
            "repository": project.repository,
            "tags": {"readable": "{base}-{torch}"},
            **(publish or {}),
        },
        "defaults": {"env": {"RUN_ID": run}},
        "axes": {"torch": list(torch), **({"base": list(base_axis)} if base_axis else {})},
        "bases": dict(bases or busybox_base()),
        "advisories": critical_waivers(torch),
        **(extra or {}),
    }
    if steer:
        document["include"] = [
            {**({} if key == "*" else {"torch": key}), "env": {**env, "RUN_ID": run}}
            for key, env in steer.items()
        ]
    (project.root / "matrix.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
