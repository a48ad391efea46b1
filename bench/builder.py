"""Builder benchmarks: imagekit build against the docker CLI, no-change rebuilds, --jobs.

    python bench/builder.py [--rounds N] [--out bench/results/builder.json]

1. one cell, ``imagekit build`` vs ``docker build`` (classic builder, DOCKER_BUILDKIT=0) on the
   same rendered Dockerfile and context tar, cold (a fresh build arg busts the layer cache) and
   warm (all layers cached; imagekit with --force so it really builds), alternated per round;
2. a no-change rebuild of a 12-cell matrix vs 12 ``docker build`` runs with a full layer cache;
3. ``--jobs 2`` vs ``--jobs 1`` on four I/O-bound cells (each waits 2 s in a RUN step).

Both tools are timed end to end as a user runs them (process start included). Ratios are
medians over rounds. Needs the engine and imagekit-test/busybox:latest (scripts/base-images.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import uuid
from pathlib import Path

import docker

from imagekit.matrix import load_plan
from imagekit.render import Renderer

LABEL = "imagekit-bench.run"
WHEELHOUSE = Path(__file__).resolve().parent.parent / "examples" / "offline" / "wheelhouse"
RUN = uuid.uuid4().hex[:10]
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"

TEMPLATE = """\
FROM {{ cell.base_image }}
{% for name, _ in cell.build_args %}
ARG {{ name }}
{% endfor %}
{% for name, value in cell.env %}
ENV {{ name }}={{ value }}
{% endfor %}
RUN echo "{{ cell.id }} nonce $NONCE" \\
 && dd if=/dev/urandom of=/payload bs=1M count="${MB:-0}" 2>/dev/null && sha256sum /payload
RUN if [ -n "$SLEEP" ]; then sleep "$SLEEP"; fi; echo done
LABEL {% for name, value in recipe.labels %}{{ name }}="{{ value }}"{{ " " if not loop.last }}{% endfor %}

"""


def write_project(
    root: Path, torches: list[str], env: dict[str, str], nonce: str, wheelhouse: Path | None = None
) -> Path:
    (root / "templates").mkdir(parents=True, exist_ok=True)
    sources = ""
    if wheelhouse is not None:  # the context a wheelhouse matrix sends with every build
        shutil.copytree(wheelhouse, root / "wheelhouse")
        sources = "sources: {pip: {no_index: true, find_links: [wheelhouse]}}"
    (root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    env_text = ", ".join(f'{k}: "{v}"' for k, v in env.items())
    (root / "matrix.yaml").write_text(
        textwrap.dedent(f"""\
        version: 1
        templates: templates
        allow_unknown: true
        axes:
          torch: {json.dumps(torches)}
        defaults:
          env: {{{env_text}}}
          build_args: {{NONCE: "{nonce}"}}
        bases:
          busybox: {{image: "imagekit-test/busybox:latest", os: debian12, python: "3.11", cuda: false}}
        publish:
          repository: imagekit-bench/{RUN}
          tags: {{readable: "{{torch}}"}}
        """)
        + sources
        + "\n"
    )
    return root / "matrix.yaml"


def imagekit(root: Path, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "imagekit",
            "build",
            "--matrix",
            "matrix.yaml",
            "--label",
            f"{LABEL}={RUN}",
            *args,
        ],
        cwd=root,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start


def docker_cli(context_tar: bytes, build_args: dict[str, str], labels: dict[str, str]) -> float:
    command = [DOCKER, "build", "-q", "--rm", "--force-rm"]
    for name, value in build_args.items():
        command += ["--build-arg", f"{name}={value}"]
    for name, value in {**labels, LABEL: RUN}.items():
        command += ["--label", f"{name}={value}"]
    start = time.perf_counter()
    subprocess.run(
        [*command, "-"],
        input=context_tar,
        check=True,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    return time.perf_counter() - start


def cli_inputs(matrix: Path) -> list[tuple[bytes, dict[str, str], dict[str, str]]]:
    """Per cell: the context tar imagekit builds, its build args, and its build-time labels."""
    plan = load_plan(matrix)
    renderer = Renderer(plan)
    out = []
    for cell in plan.cells:
        rendered = renderer.render(cell)
        with rendered.context_tar() as tar:
            out.append((tar.read(), dict(rendered.build_args), rendered.build_labels()))
    return out


def one_cell(rounds: int, work: Path) -> dict[str, object]:
    times: dict[str, list[float]] = {
        "imagekit_cold": [],
        "docker_cold": [],
        "imagekit_warm": [],
        "docker_warm": [],
    }
    for index in range(rounds):
        for tool in ("imagekit", "docker") if index % 2 == 0 else ("docker", "imagekit"):
            nonce = uuid.uuid4().hex
            root = work / f"one-{index}-{tool}"
            matrix = write_project(root, ["2.1"], {"MB": "200"}, nonce)
            if tool == "imagekit":
                times["imagekit_cold"].append(imagekit(root))
                times["imagekit_warm"].append(imagekit(root, "--force"))
            else:
                tar, args, labels = cli_inputs(matrix)[0]
                times["docker_cold"].append(docker_cli(tar, args, labels))
                times["docker_warm"].append(docker_cli(tar, args, labels))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {
        "rounds": rounds,
        "median_s": med,
        "samples_s": times,
        "ratio_cold": med["imagekit_cold"] / med["docker_cold"],
        "ratio_warm": med["imagekit_warm"] / med["docker_warm"],
    }


def no_change(rounds: int, work: Path, wheelhouse: Path | None) -> dict[str, object]:
    torches = ["2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11"]
    root = work / f"twelve-{'wheelhouse' if wheelhouse else 'small'}"
    matrix = write_project(root, torches, {"MB": "5"}, uuid.uuid4().hex, wheelhouse)
    imagekit(root, "--jobs", "2")  # fill the engine and the layer cache
    inputs = cli_inputs(matrix)
    for tar, args, labels in inputs:
        docker_cli(tar, args, labels)
    ik, cli = [], []
    for _ in range(rounds):
        ik.append(imagekit(root))
        cli.append(sum(docker_cli(tar, args, labels) for tar, args, labels in inputs))
    return {
        "cells": len(torches),
        "rounds": rounds,
        "context_bytes": len(inputs[0][0]),
        "median_s": {"imagekit_no_change": statistics.median(ik), "docker_12_cached": statistics.median(cli)},
        "speedup": statistics.median(cli) / statistics.median(ik),
    }


def jobs(rounds: int, work: Path) -> dict[str, object]:
    one, two = [], []
    for index in range(rounds):
        for n in (1, 2) if index % 2 == 0 else (2, 1):
            root = work / f"jobs-{index}-{n}"
            write_project(root, ["2.1", "2.2", "2.3", "2.4"], {"SLEEP": "2"}, uuid.uuid4().hex)
            (one if n == 1 else two).append(imagekit(root, "--jobs", str(n)))
    return {
        "cells": 4,
        "rounds": rounds,
        "median_s": {"jobs1": statistics.median(one), "jobs2": statistics.median(two)},
        "ratio": statistics.median(two) / statistics.median(one),
    }


def cleanup() -> None:
    api = docker.APIClient(version="auto")
    for _ in range(3):
        for image in api.images(filters={"label": f"{LABEL}={RUN}"}):
            with contextlib.suppress(docker.errors.APIError):
                api.remove_image(image["Id"], force=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/builder.json"))
    options = parser.parse_args()
    results: dict[str, object] = {
        "engine": docker.APIClient(version="auto").version()["Version"],
        "cpus": os.cpu_count(),
    }
    try:
        with tempfile.TemporaryDirectory(prefix="imagekit-bench-") as tmp:
            work = Path(tmp)
            results["one_cell"] = one_cell(options.rounds, work)
            results["no_change_12"] = no_change(options.rounds, work, None)
            if WHEELHOUSE.is_dir() and any(WHEELHOUSE.iterdir()):
                results["no_change_12_wheelhouse"] = no_change(options.rounds, work, WHEELHOUSE.resolve())
            results["jobs"] = jobs(options.rounds, work)
    finally:
        cleanup()
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=2) + "\n")
    one, twelve, par = results["one_cell"], results["no_change_12"], results["jobs"]
    print(f"one cell cold: imagekit/docker = {one['ratio_cold']:.3f} (target <= 1.05)")  # type: ignore[index]
    print(f"one cell warm: imagekit/docker = {one['ratio_warm']:.3f} (target <= 1.5)")  # type: ignore[index]
    speedup = twelve["speedup"]  # type: ignore[index]
    print(f"12-cell no-change rebuild: {speedup:.1f}x faster than 12 cached docker builds (target >= 10)")
    if "no_change_12_wheelhouse" in results:
        wh = results["no_change_12_wheelhouse"]
        print(f"12-cell no-change rebuild, offline wheelhouse context: {wh['speedup']:.1f}x faster")  # type: ignore[index]
    print(f"--jobs 2 / --jobs 1 wall time: {par['ratio']:.3f} (target <= 0.65)")  # type: ignore[index]
    print(json.dumps({k: v["median_s"] for k, v in results.items() if isinstance(v, dict)}, indent=2))


if __name__ == "__main__":
    main()
