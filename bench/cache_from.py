"""Layer reuse on an empty runner: an unchanged cell built with and without its staged image as
the cache source, side by side in one run.

    python -m bench.cache_from [--out bench/results/cache_from.json]

Three private dockerd engines with their own data roots stand for three fresh runners, each
holding only the base image (imagekit-local/debian-python:bookworm, loaded), and one
docker-registry on 127.0.0.1:

* runner A builds the offline demo's real cell (torch 2.13.0+cpu and NumPy installed into a venv
  from a wheelhouse, no index) and stages it: `imagekit build --push`;
* runner B, empty, builds the same unchanged cell with no cache source
  (`imagekit build --no-cache-from`), then the docker CLI builds the same context there
  (`DOCKER_BUILDKIT=0 docker build --no-cache`, the classic builder, as a user without imagekit);
* runner C, empty, builds it with the cache source: `imagekit build` finds the staging tag of
  this input digest in the registry, pulls it by digest, checks its input-digest label, and
  builds nothing (the cell is `skipped`, the same image as A's);
* runner D, empty, `imagekit build --force`: the classic builder's --cache-from alone, with the
  same staged image pulled by digest as the cache source.

Each figure is one end-to-end command, process start and (for C) the pull included. Needs root,
dockerd, /usr/bin/docker-registry, the base image (scripts/base-images.sh debian-python) and the
offline wheelhouse (examples/offline/setup.sh).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import read_regular_text
from testbed.private_engine import PrivateEngine, private_engine
from testbed.registry_server import LocalRegistry

REPO = Path(__file__).resolve().parent.parent
OFFLINE = REPO / "examples" / "offline" / "wheelhouse"
BASE = "imagekit-local/debian-python:bookworm"
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
RUN = uuid.uuid4().hex[:8]

MATRIX = """\
version: 1
axes: {{torch: ["2.13.0"], cuda: [cpu], base: [deb], flavour: [runtime]}}
allow_unknown: true
defaults: {{torchvision: none, torchaudio: none, pip_packages: [numpy], env: {{BENCH_RUN: "{run}"}}}}
bases:
  deb: {{image: "{base}", os: debian12, python: "3.11", cuda: false}}
sources:
  pip: {{no_index: true, find_links: [wheelhouse], torch_index_url: null}}
publish:
  registry: "{registry}"
  repository: bench/pytorch
  staging: {{repository: bench/pytorch-staging}}
"""


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    print("running:", " ".join(command[2:] if command[0] == sys.executable else command), flush=True)
    started = time.monotonic()
    environment = {**os.environ, **env}
    done = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    print(f"    {seconds:.1f} s", flush=True)
    return seconds


def imagekit(*args: str) -> list[str]:
    return [sys.executable, "-m", "imagekit", *args]


def report(state: Path) -> dict[str, object]:
    cells: list[dict[str, object]] = json.loads(
        read_regular_text(state / "report.json", STATE_BYTES, "the report.json imagekit writes")
    )["cells"]
    return cells[0]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "cache_from.json")
    args = parser.parse_args()
    if not any(OFFLINE.glob("torch-*.whl")):
        raise SystemExit("no wheelhouse: run examples/offline/setup.sh first")
    registry = LocalRegistry().start()
    engines = Path(tempfile.mkdtemp(prefix="ikb-", dir="/tmp"))
    project = Path(tempfile.mkdtemp(prefix="imagekit-bench-cache-"))
    try:
        shutil.copytree(OFFLINE, project / "wheelhouse", copy_function=os.link)
        (project / "matrix.yaml").write_text(MATRIX.format(run=RUN, base=BASE, registry=registry.host))
        with (
            private_engine(engines / "a", (BASE,)) as a,
            private_engine(engines / "b", (BASE,)) as b,
            private_engine(engines / "c", (BASE,)) as c,
            private_engine(engines / "d", (BASE,)) as d,
        ):
            result = measure(project, a, b, c, d)
    finally:
        shutil.rmtree(engines, ignore_errors=True)
        shutil.rmtree(project, ignore_errors=True)
        registry.remove()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


def measure(
    project: Path, a: PrivateEngine, b: PrivateEngine, c: PrivateEngine, d: PrivateEngine
) -> dict[str, object]:
    build = ("build", "--matrix", "matrix.yaml")
    stage_s = timed(imagekit(*build, "--push", "--state-dir", "a"), project, {"DOCKER_HOST": a.host})
    staged = report(project / "a")
    without_s = timed(
        imagekit(*build, "--no-cache-from", "--state-dir", "b"), project, {"DOCKER_HOST": b.host}
    )
    # The same Dockerfile and context for the docker CLI, exported as imagekit sends it.
    timed(
        imagekit("matrix", "--matrix", "matrix.yaml", "--format", "bake", "--context-dir", "ctx"), project, {}
    )
    (context,) = [p for p in (project / "ctx").iterdir() if (p / "Dockerfile").exists()]
    cli_s = timed(
        [DOCKER, "-H", b.host, "build", "--no-cache", "-q", "-t", f"bench/cli:{RUN}", str(context)],
        project,
        {"DOCKER_BUILDKIT": "0"},
    )
    with_s = timed(imagekit(*build, "--state-dir", "c"), project, {"DOCKER_HOST": c.host})
    reused = report(project / "c")
    log = read_regular_text(project / str(reused["log"]), STATE_BYTES, "the build log imagekit writes")
    if "reuse: pulled" not in log:
        raise SystemExit(f"runner C did not reuse the staged image:\n{log[-2000:]}")
    forced_s = timed(imagekit(*build, "--force", "--state-dir", "d"), project, {"DOCKER_HOST": d.host})
    forced = report(project / "d")
    forced_log = read_regular_text(project / str(forced["log"]), STATE_BYTES, "the build log imagekit writes")
    if "cache: pulled" not in forced_log:
        raise SystemExit(f"runner D did not use the staged image as its cache source:\n{forced_log[-2000:]}")
    staged_info = staged["staged"]
    assert isinstance(staged_info, dict)
    return {
        "cell": staged["id"],
        "staged": f"{staged_info['registry']}/{staged_info['repository']}@{staged_info['digest']}",
        "image_size_bytes": staged["size"],
        "runner_a_build_and_stage_s": round(stage_s, 1),
        "runner_b_imagekit_no_cache_source_s": round(without_s, 1),
        "runner_b_docker_cli_no_cache_s": round(cli_s, 1),
        "runner_c_imagekit_with_cache_source_s": round(with_s, 1),
        "runner_c_status": reused["status"],
        "runner_c_same_image_as_a": reused["image_id"] == staged["image_id"],
        "with_vs_without": round(with_s / without_s, 3),
        "with_vs_docker_cli": round(with_s / cli_s, 3),
        "runner_d_imagekit_force_cache_from_only_s": round(forced_s, 1),
        "runner_d_steps_from_cache": forced_log.count("Using cache"),
        "runner_d_steps": forced_log.count("Step "),
        "runner_d_same_image_as_a": forced["image_id"] == staged["image_id"],
    }


if __name__ == "__main__":
    main()
