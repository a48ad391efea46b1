"""Builder benchmarks: imagekit build against the docker CLI, no-change rebuilds, --jobs,
start-up, plan + render.

    python -m bench.builder [--rounds N] [--out bench/results/builder.json] [--base IMAGE]
        [--wheelhouse DIR] [--only VARIANT ...]

1. one cell, ``imagekit build`` vs ``docker build`` (classic builder, DOCKER_BUILDKIT=0) on the
   same rendered Dockerfile and context tar, cold (a fresh build arg busts the layer cache) and
   warm (all layers cached: imagekit as a user runs it again, answered from the record of its
   no-change run, and with --force so it really builds), alternated per round;
2. a no-change rebuild of a 12-cell matrix vs 12 ``docker build`` runs with a full layer cache
   (imagekit twice a round: the full run, which leaves the record, then the run answered from it),
   with a tiny context and with a real one (each cell carries the offline wheelhouse's torch
   closure, ~220 MB: ``examples/offline/setup.sh`` fills it);
3. ``--jobs 2`` vs ``--jobs 1`` on four I/O-bound cells (each waits 2 s in a RUN step);
4. start-up: ``imagekit --help`` and ``imagekit plan`` of the shipped matrix, wall clock;
5. plan + render (input digests included) of a generated 10,000-cell matrix (bench/plan_render.py).

Both tools are timed end to end as a user runs them (process start included). Ratios are
medians over rounds. Every variant prints its figure, or one line saying why it could not be
measured; the others still run. Needs the engine and a busybox base image (``--base``, default
imagekit-test/busybox:latest: ``scripts/base-images.sh busybox``).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer

LABEL = "imagekit-bench.run"
REPO = Path(__file__).resolve().parent.parent
WHEELHOUSE = REPO / "examples" / "offline" / "wheelhouse"
RUN = uuid.uuid4().hex[:10]
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
BASE = "imagekit-test/busybox:latest"  # --base replaces it
TWELVE = 12


class NotMeasured(Exception):
    """A variant could not be measured; the message is the one line that says why."""


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
    """A matrix of busybox cells, one per torch version; with ``wheelhouse``, twelve cells of the
    wheelhouse's torch (one per base name, every base the same busybox image), each carrying its
    wheel closure (torch, NumPy and their dependencies) in its context as a real cell does."""
    (root / "templates").mkdir(parents=True, exist_ok=True)
    (root / "templates" / "Dockerfile.j2").write_text(TEMPLATE)
    env_text = ", ".join(f'{k}: "{v}"' for k, v in env.items())
    base = f'{{image: "{BASE}", os: debian12, python: "3.11", cuda: false}}'
    if wheelhouse is None:
        axes = f"torch: {json.dumps(torches)}"
        bases = f"busybox: {base}"
        extra = ""
        readable = "{torch}"
    else:  # the context a wheelhouse matrix sends with every build
        shutil.copytree(wheelhouse, root / "wheelhouse")
        names = [f"bb{i:02d}" for i in range(TWELVE)]
        axes = "\n  ".join(
            (
                f'torch: ["{wheelhouse_torch(wheelhouse)}"]',
                "cuda: [cpu]",
                "flavour: [runtime]",  # devel adds ninja, which the offline wheelhouse lacks
                f"base: [{', '.join(names)}]",
            )
        )
        bases = "\n  ".join(f"{name}: {base}" for name in names)
        extra = textwrap.dedent("""\
            sources: {pip: {no_index: true, find_links: [wheelhouse], torch_index_url: null}}
            """)
        readable = "{torch}-{base}"
    defaults = f'env: {{{env_text}}}\n  build_args: {{NONCE: "{nonce}"}}'
    if wheelhouse is not None:
        defaults += "\n  torchvision: none\n  torchaudio: none\n  pip_packages: [numpy]"
    (root / "matrix.yaml").write_text(
        "version: 1\ntemplates: templates\nallow_unknown: true\n"
        f"axes:\n  {axes}\n"
        f"defaults:\n  {defaults}\n"
        f"bases:\n  {bases}\n"
        f'publish:\n  repository: imagekit-bench/{RUN}\n  tags: {{readable: "{readable}"}}\n' + extra
    )
    return root / "matrix.yaml"


def wheelhouse_torch(wheelhouse: Path) -> str:
    """The torch release the wheelhouse holds (``torch-2.13.0+cpu-...whl`` -> ``2.13.0``)."""
    found = sorted(p.name for p in wheelhouse.glob("torch-*.whl"))
    if not found:
        raise NotMeasured(f"{wheelhouse} holds no torch wheel; run examples/offline/setup.sh")
    return found[-1].split("-")[1].split("+")[0]


def last_line(text: bytes) -> str:
    lines = [line for line in text.decode(errors="replace").splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def imagekit(root: Path, *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
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
        check=False,
        capture_output=True,
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise NotMeasured(f"imagekit build exited {done.returncode}: {last_line(done.stderr)}")
    return elapsed


def docker_cli(context_tar: bytes, build_args: dict[str, str], labels: dict[str, str]) -> float:
    command = [DOCKER, "build", "-q", "--rm", "--force-rm"]
    for name, value in build_args.items():
        command += ["--build-arg", f"{name}={value}"]
    for name, value in {**labels, LABEL: RUN}.items():
        command += ["--label", f"{name}={value}"]
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "-"],
        input=context_tar,
        check=False,
        capture_output=True,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise NotMeasured(f"docker build exited {done.returncode}: {last_line(done.stderr)}")
    return elapsed


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
        "imagekit_warm_unchanged": [],
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
                imagekit(root)  # the full no-change run, which leaves the record
                times["imagekit_warm_unchanged"].append(imagekit(root))  # answered from it
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
        "ratio_warm_unchanged": med["imagekit_warm_unchanged"] / med["docker_warm"],
    }


def no_change(rounds: int, work: Path, wheelhouse: Path | None) -> dict[str, object]:
    torches = ["2.0", "2.1", "2.2", "2.3", "2.4", "2.5", "2.6", "2.7", "2.8", "2.9", "2.10", "2.11"]
    root = work / f"twelve-{'wheelhouse' if wheelhouse else 'small'}"
    matrix = write_project(root, torches, {"MB": "5"}, uuid.uuid4().hex, wheelhouse)
    imagekit(root, "--jobs", "2")  # fill the engine and the layer cache
    inputs = cli_inputs(matrix)
    for tar, args, labels in inputs:
        docker_cli(tar, args, labels)
    record = root / ".imagekit" / "unchanged.json"
    full, answered, cli = [], [], []
    for index in range(rounds):  # alternated: each side goes first in every other round
        for tool in ("imagekit", "docker") if index % 2 == 0 else ("docker", "imagekit"):
            if tool == "imagekit":
                record.unlink(missing_ok=True)
                full.append(imagekit(root))  # plans, renders and asks the engine; leaves the record
                if not record.exists():
                    raise NotMeasured("the no-change run left no record (imagekit.builds.no_change)")
                answered.append(imagekit(root))  # the next nightly: answered from the record
            else:
                cli.append(sum(docker_cli(tar, args, labels) for tar, args, labels in inputs))
    med = {
        "imagekit_no_change": statistics.median(answered),
        "imagekit_no_change_full": statistics.median(full),
        "docker_12_cached": statistics.median(cli),
    }
    return {
        "cells": len(inputs),
        "rounds": rounds,
        "context_bytes": len(inputs[0][0]),
        "median_s": med,
        "samples_s": {
            "imagekit_no_change": answered,
            "imagekit_no_change_full": full,
            "docker_12_cached": cli,
        },
        "speedup": med["docker_12_cached"] / med["imagekit_no_change"],
        "speedup_full": med["docker_12_cached"] / med["imagekit_no_change_full"],
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


def wall(command: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, check=False, capture_output=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise NotMeasured(f"{' '.join(command[2:])} exited {done.returncode}: {last_line(done.stderr)}")
    return elapsed


def startup(rounds: int, work: Path) -> dict[str, object]:
    """Wall clock of `imagekit --help` and `imagekit plan` of the shipped matrix (process start
    included), against `docker --help` (the Go CLI's start, for scale); 10 runs per round."""
    python = [sys.executable, "-m", "imagekit"]
    commands = {
        "imagekit_help": [*python, "--help"],
        "imagekit_plan": [*python, "plan", "--matrix", str(REPO / "matrix.yaml")],
        "docker_help": [DOCKER, "--help"],
    }
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(rounds * 10):
        for name, command in commands.items():  # interleaved, so load changes hit all three
            times[name].append(wall(command, work))
    med = {k: statistics.median(v) for k, v in times.items()}
    return {"runs": rounds * 10, "median_s": med, "min_s": {k: min(v) for k, v in times.items()}}


def plan_render(rounds: int, work: Path) -> dict[str, object]:
    """bench/plan_render.py's measure at 10,000 cells and at 1,250 (the linearity check)."""
    from bench.plan_render import measure

    out: dict[str, Any] = {}
    for cells in (1_250, 10_000):
        runs = [measure(cells, False) for _ in range(rounds)]
        count = runs[0][0]
        plan_s = statistics.median(r[1] for r in runs)
        render_s = statistics.median(r[2] for r in runs)
        total = statistics.median(r[1] + r[2] for r in runs)
        out[str(count)] = {"plan_s": plan_s, "render_s": render_s, "plan_render_s": total}
    small, big = out["1240"], out["10000"]
    return {
        "rounds": rounds,
        "median_s": {"plan_render_10000": big["plan_render_s"], "plan_render_1240": small["plan_render_s"]},
        "sizes": out,
        "linearity": (big["plan_render_s"] / 10_000) / (small["plan_render_s"] / 1_240),
    }


def cleanup() -> None:
    api = docker.APIClient(version="auto")
    for _ in range(3):
        for image in api.images(filters={"label": f"{LABEL}={RUN}"}):
            with contextlib.suppress(docker.errors.APIError):
                api.remove_image(image["Id"], force=True)


def report_line(name: str, result: dict[str, Any]) -> str:
    """The one line a variant prints: its figure and target, or why it was not measured."""
    if "error" in result:
        return f"{name}: not measured: {result['error']}"
    if name == "one_cell":
        return (
            f"one cell cold: imagekit/docker = {result['ratio_cold']:.3f} (target <= 1.05)\n"
            f"one cell warm, nothing changed: imagekit/docker = {result['ratio_warm_unchanged']:.3f}"
            " (target <= 2)\n"
            f"one cell warm, imagekit --force (builds from the layer cache): imagekit/docker ="
            f" {result['ratio_warm']:.3f}"
        )
    if name == "no_change_12":
        return (
            f"12-cell no-change rebuild, tiny context: {result['speedup']:.1f}x faster than 12 cached"
            f" docker builds ({result['speedup_full']:.1f}x for the full run that leaves the record)"
        )
    if name == "no_change_12_wheelhouse":
        return (
            f"12-cell no-change rebuild, wheelhouse context ({result['context_bytes'] / 1e6:.0f} MB per"
            f" cell): {result['speedup']:.1f}x faster than 12 cached docker builds (target >= 50;"
            f" {result['speedup_full']:.1f}x for the full run that leaves the record)"
        )
    if name == "jobs":
        return f"--jobs 2 / --jobs 1 wall time: {result['ratio']:.3f} (target <= 0.65)"
    if name == "startup":
        med = result["median_s"]
        return (
            f"start-up: imagekit --help {med['imagekit_help'] * 1000:.0f} ms (target < 150),"
            f" imagekit plan {med['imagekit_plan'] * 1000:.0f} ms, docker --help"
            f" {med['docker_help'] * 1000:.0f} ms"
        )
    if name == "plan_render":
        return (
            f"plan + render of 10,000 cells: {result['median_s']['plan_render_10000']:.2f} s (target < 1),"
            f" linearity {result['linearity']:.2f}"
        )
    return f"{name}: {result['median_s']}"


def main() -> None:
    global BASE  # noqa: PLW0603 (the command line sets the one base every variant uses)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=Path("bench/results/builder.json"))
    parser.add_argument("--base", default=BASE, help="the busybox base image (default: %(default)s)")
    parser.add_argument("--wheelhouse", type=Path, default=WHEELHOUSE, help="default: %(default)s")
    variants = ("one_cell", "no_change_12", "no_change_12_wheelhouse", "jobs", "startup", "plan_render")
    parser.add_argument("--only", action="append", choices=variants, help="run only these (repeatable)")
    options = parser.parse_args()
    BASE = options.base
    results: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "base": BASE,
        "started": time.strftime("%Y-%m-%d %H:%M"),
    }
    try:
        results["engine"] = docker.APIClient(version="auto").version()["Version"]
    except Exception as exc:
        results["engine"] = None
        print(f"engine: not reachable ({type(exc).__name__}); the build variants will say so")
    wheelhouse: Path = options.wheelhouse

    def check_base() -> None:
        done = subprocess.run([DOCKER, "image", "inspect", BASE], check=False, capture_output=True)
        if done.returncode != 0:
            raise NotMeasured(f"base image {BASE} not on the engine; run scripts/base-images.sh busybox")

    def with_wheelhouse(rounds: int, work: Path) -> dict[str, object]:
        if not wheelhouse.is_dir() or not any(wheelhouse.glob("*.whl")):
            raise NotMeasured(
                f"no wheelhouse at {wheelhouse}; run examples/offline/setup.sh or pass --wheelhouse"
            )
        return no_change(rounds, work, wheelhouse.resolve())

    table: dict[str, tuple[bool, Callable[[int, Path], dict[str, object]]]] = {
        "one_cell": (True, one_cell),
        "no_change_12": (True, lambda rounds, work: no_change(rounds, work, None)),
        "no_change_12_wheelhouse": (True, with_wheelhouse),
        "jobs": (True, jobs),
        "startup": (False, startup),
        "plan_render": (False, plan_render),
    }
    try:
        with tempfile.TemporaryDirectory(prefix="imagekit-bench-") as tmp:
            work = Path(tmp)
            for name in options.only or variants:
                needs_engine, run = table[name]
                try:
                    if needs_engine:
                        check_base()
                    results[name] = run(options.rounds, work)
                except NotMeasured as exc:
                    results[name] = {"error": str(exc)}
                except Exception as exc:
                    results[name] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
                print(report_line(name, results[name]), flush=True)
    finally:
        with contextlib.suppress(Exception):
            cleanup()
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps({k: v.get("median_s") for k, v in results.items() if isinstance(v, dict)}, indent=2))


if __name__ == "__main__":
    main()
