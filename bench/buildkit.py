"""The BuildKit builder (issue 35) on the offline demo's real cell, side by side in one run.

    python -m bench.buildkit [--out bench/results/buildkit.json] [--only builders|runners]

The cell is the offline demo's amd64 cell (torch 2.13.0+cpu and NumPy installed into a venv from
the local wheelhouse, no index; every BuildKit step `RUN --network=none`) on the demo's base image
imagekit-local/debian-python:bookworm-amd64 (loaded into each engine, never pulled). Engines are
private dockerd 26 engines (`scripts/engine.sh second NAME`: containerd image store, empty
BuildKit cache), so `buildx prune -af` there touches nobody else's cache; the registry is a
docker-registry of this run's own on 127.0.0.1 with its access log on, so the bytes an empty
runner fetches are counted on the registry's side (the body bytes of every GET it answered).

1. On engine 1: `docker buildx build --load` of the very context imagekit sends (exported with
   `imagekit matrix --format bake`), against `imagekit build --builder buildkit`: cold (after
   `buildx prune -af` and the image removed), warm (every step cached: buildx run again, imagekit
   `--force`) and no-change (buildx run again; imagekit run again: the full run that leaves the
   no-change record, then the run answered from it). Both without the registry
   (`--no-cache-from`), as the buildx command has none.
2. On engine 1, cold: `imagekit build --builder classic` (docker-py) against the BuildKit cold run.
3. Both paths staged from engine 1 (`--push`; BuildKit `--force --push`, which also writes the
   registry cache), then the cell with only its last step changed (one more `pip_packages` entry
   from the wheelhouse: the build stage's last RUN, and the venv copied from it) built on an empty
   runner each: classic on engine 2 with the staging run's state directory (its report names the
   staged image, which `--cache-from` pulls; an overlay2 engine, as dockerd 26's classic builder
   cannot restore a cache-from image on the containerd store), BuildKit on engine 3 (containerd
   store) from the registry cache. BuildKit's staging and runner go first, then classic's.

Each figure is one end-to-end command (process start included), measured once: a cold torch
install takes minutes on the shared 2-CPU machine. Needs root, the engine of record's CLI with
buildx, /usr/bin/docker-registry, and `ARM64_BASE=0 bash examples/offline/setup.sh`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from bench.cache_from import imagekit, timed
from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import read_regular_text
from testbed.registry_server import LocalRegistry

REPO = Path(__file__).resolve().parent.parent
WHEELHOUSE = REPO / "examples" / "offline" / "wheelhouse"
ENGINE_SH = REPO / "scripts" / "engine.sh"
BASE = "imagekit-local/debian-python:bookworm-amd64"
DOCKER = "docker"
RUN = uuid.uuid4().hex[:8]
CELL = "deb-torch2.13.0-cpu-py3.11-runtime"
# the last step changed: one more wheel from the wheelhouse, no dependency of its own
EXTRA_PACKAGE = "six"

MATRIX = """\
version: 1
axes: {{torch: ["2.13.0"], cuda: [cpu], base: [deb], flavour: [runtime]}}
allow_unknown: true
defaults: {{torchvision: none, torchaudio: none, pip_packages: {packages}}}
bases:
  deb: {{image: "{base}", os: debian12, python: "3.11", cuda: false}}
sources:
  pip: {{no_index: true, find_links: [wheelhouse], torch_index_url: null}}
build: {{builder: buildkit}}
publish:
  registry: "{registry}"
  repository: bench/pytorch
  staging: {{repository: bench/pytorch-staging}}
"""
ACCESS = re.compile(r'"(GET|HEAD|PUT|POST|PATCH) (\S+) HTTP/[\d.]+" (\d{3}) (\d+)')


class Engine:
    """A private dockerd 26 beside the engine of record, holding only ``base`` (none: empty)."""

    def __init__(
        self,
        name: str,
        store: str = "containerd",
        base: str | None = BASE,
        setup: str = "ARM64_BASE=0 examples/offline/setup.sh",  # what makes ``base``
    ) -> None:
        self.name = name
        self.store = store  # containerd | overlay2 (IMAGEKIT_IMAGE_STORE of scripts/engine.sh)
        self.base, self.setup = base, setup
        self.host = f"unix:///run/imagekit-engine-{name}/docker.sock"

    def __enter__(self) -> Engine:
        subprocess.run(
            ["bash", str(ENGINE_SH), "second", self.name],
            env={**os.environ, "IMAGEKIT_IMAGE_STORE": self.store},
            check=True,
            capture_output=True,
        )
        if self.base is not None:
            saved = subprocess.Popen([DOCKER, "save", self.base], stdout=subprocess.PIPE)
            subprocess.run([DOCKER, "-H", self.host, "load", "-q"], stdin=saved.stdout, check=True)
            if saved.wait() != 0:
                raise SystemExit(f"docker save {self.base} failed: run {self.setup}")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run(["bash", str(ENGINE_SH), "stop-second", self.name], check=False, capture_output=True)

    def docker(self, *args: str) -> None:
        subprocess.run([DOCKER, "-H", self.host, *args], check=True, capture_output=True)

    def env(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.host}


def fetched(log: Path, start: int) -> dict[str, int]:
    """What the registry sent from byte ``start`` of its log on: GET body bytes, by kind."""
    got = {"get_bytes": 0, "blob_bytes": 0, "gets": 0, "blob_gets": 0, "heads": 0}
    for line in log.read_bytes()[start:].decode(errors="replace").splitlines():
        match = ACCESS.search(line)
        if match is None:
            continue
        method, path, _, size = match.groups()
        if method == "HEAD":
            got["heads"] += 1
        elif method == "GET":
            got["gets"] += 1
            got["get_bytes"] += int(size)
            if "/blobs/" in path:
                got["blob_gets"] += 1
                got["blob_bytes"] += int(size)
    return got


def cell(state: Path) -> dict[str, object]:
    cells: list[dict[str, object]] = json.loads(
        read_regular_text(state / "report.json", STATE_BYTES, "the report.json imagekit writes")
    )["cells"]
    return cells[0]


class Bench:
    def __init__(self, project: Path, registry: LocalRegistry, out: Path) -> None:
        self.project = project
        self.registry = registry
        self.out = out
        self.result: dict[str, object] = {
            "cell": CELL,
            "run": RUN,
            "load_1min_start": round(os.getloadavg()[0], 2),
        }

    def save(self) -> None:
        """Written after every phase: a later failure keeps what was measured."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.result, indent=2) + "\n")

    def matrix(self, packages: list[str]) -> None:
        (self.project / "matrix.yaml").write_text(
            MATRIX.format(packages=json.dumps(packages), base=BASE, registry=self.registry.host)
        )

    def ik(self, engine: Engine, *args: str) -> float:
        return timed(imagekit("build", "--matrix", "matrix.yaml", *args), self.project, engine.env())

    def buildx(self, engine: Engine, context: Path) -> float:
        argv = ["buildx", "build", "--load", "--provenance=false", "--sbom=false", "--progress", "quiet"]
        tag = f"bench/buildx:{RUN}"
        return timed([DOCKER, "-H", engine.host, *argv, "-t", tag, str(context)], self.project, {})

    def cold(self, engine: Engine) -> None:
        """Empty BuildKit cache (cache mounts too), no image of the cell in the engine."""
        engine.docker("buildx", "prune", "-af")
        listed = subprocess.run(
            [DOCKER, "-H", engine.host, "images", "-q", "--filter", "reference=bench/*"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        if listed:
            engine.docker("rmi", "-f", *sorted(set(listed)))

    def builders(self, engine: Engine) -> None:
        self.matrix(["numpy"])
        export = ("matrix", "--matrix", "matrix.yaml", "--format", "bake", "--context-dir", "ctx")
        timed(imagekit(*export), self.project, {})
        context = self.project / "ctx" / CELL
        local = ("--no-cache-from",)
        self.cold(engine)
        bx_cold = self.buildx(engine, context)
        self.cold(engine)
        bk_cold = self.ik(engine, *local, "--state-dir", "s-bk")
        bx_warm = self.buildx(engine, context)
        bk_warm = self.ik(engine, *local, "--force", "--state-dir", "s-bk")
        bx_same = self.buildx(engine, context)
        (self.project / "s-bk" / "unchanged.json").unlink(missing_ok=True)
        bk_same_full = self.ik(engine, *local, "--state-dir", "s-bk")
        bk_same = self.ik(engine, *local, "--state-dir", "s-bk")
        self.result.update(
            buildx_cold_s=round(bx_cold, 1),
            buildkit_cold_s=round(bk_cold, 1),
            cold_ratio=round(bk_cold / bx_cold, 3),
            buildx_warm_s=round(bx_warm, 2),
            buildkit_warm_force_s=round(bk_warm, 2),
            warm_ratio=round(bk_warm / bx_warm, 2),
            buildx_no_change_s=round(bx_same, 2),
            buildkit_no_change_full_s=round(bk_same_full, 3),
            buildkit_no_change_answered_s=round(bk_same, 3),
            buildkit_no_change_status=cell(self.project / "s-bk")["status"],
            no_change_x_faster=round(bx_same / bk_same, 1),
            no_change_full_x_faster=round(bx_same / bk_same_full, 1),
        )
        self.save()
        self.cold(engine)
        classic_cold = self.ik(engine, *local, "--builder", "classic", "--state-dir", "s-classic")
        self.result.update(
            classic_cold_s=round(classic_cold, 1),
            buildkit_vs_classic_cold=round(bk_cold / classic_cold, 3),
            image_size_bytes={
                "buildkit": cell(self.project / "s-bk")["size"],
                "classic": cell(self.project / "s-classic")["size"],
            },
        )
        self.save()

    def empty_runners(self, staging: Engine) -> None:
        """BuildKit's runner first, then the classic one: each half is saved when it is measured."""
        r = self.result
        log = self.registry.dir / "registry.log"
        self.matrix(["numpy"])
        r["stage_buildkit_force_push_s"] = round(
            self.ik(staging, "--force", "--push", "--state-dir", "s-bk"), 1
        )
        self.save()
        self.matrix(["numpy", EXTRA_PACKAGE])
        with Engine(f"bkb{RUN[:6]}k") as runner:
            start = log.stat().st_size
            seconds = self.ik(runner, "--state-dir", "s-bk-runner")
            time.sleep(1)  # the access log line is written after the response
            log_path = self.project / str(cell(self.project / "s-bk-runner")["log"])
            lines = read_regular_text(log_path, STATE_BYTES, "the build log imagekit writes").splitlines()
            steps = [line for line in lines if re.match(r"#\[", line)]
            r["buildkit_empty_runner"] = {
                "seconds": round(seconds, 1),
                "fetched": fetched(log, start),
                "steps_cached": sum(line.endswith(": CACHED") for line in steps),
                "steps_run": sorted({line[:90] for line in steps if not line.endswith(": CACHED")}),
            }
        self.save()
        self.matrix(["numpy"])
        classic_push = self.ik(staging, "--builder", "classic", "--push", "--state-dir", "s-classic")
        r["stage_classic_push_s"] = round(classic_push, 1)
        self.save()
        self.matrix(["numpy", EXTRA_PACKAGE])
        # The classic runner on the overlay2 store: dockerd 26's classic builder fails to restore a
        # --cache-from image on the containerd store ("failed to read diff archive"), so a classic
        # user's empty runner that reuses layers is an overlay2 one.
        with Engine(f"bkb{RUN[:6]}c", store="overlay2") as runner:
            r["classic_empty_runner_store"] = runner.store
            # the staging run's state directory, as a CI cache restores it: its report names the
            # staged image that --cache-from pulls
            shutil.copytree(self.project / "s-classic", self.project / "s-classic-runner")
            start = log.stat().st_size
            try:
                seconds = self.ik(runner, "--builder", "classic", "--state-dir", "s-classic-runner")
            except SystemExit as failed:  # recorded, as measured
                r["classic_empty_runner"] = {"failed": str(failed).strip().splitlines()[-1][:500]}
            else:
                time.sleep(1)
                log_path = self.project / str(cell(self.project / "s-classic-runner")["log"])
                text = read_regular_text(log_path, STATE_BYTES, "the build log imagekit writes")
                r["classic_empty_runner"] = {
                    "seconds": round(seconds, 1),
                    "fetched": fetched(log, start),
                    "cache_pulled": "cache: pulled" in text,
                    "steps": text.count("Step "),
                    "steps_from_cache": text.count("Using cache"),
                }
        classic = r["classic_empty_runner"].get("fetched", {}).get("get_bytes")  # type: ignore[attr-defined]
        buildkit = r["buildkit_empty_runner"]["fetched"]["get_bytes"]  # type: ignore[index]
        r["empty_runner_bytes_buildkit_over_classic"] = round(buildkit / classic, 3) if classic else None
        r["load_1min_end"] = round(os.getloadavg()[0], 2)
        self.save()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "buildkit.json")
    parser.add_argument(
        "--only",
        choices=("builders", "runners"),
        help="one part: builders (1 and 2 above) or runners (3; it stages the cell itself)",
    )
    args = parser.parse_args()
    if not any(WHEELHOUSE.glob("torch-2.13.0*.whl")):
        raise SystemExit("no wheelhouse: run ARM64_BASE=0 examples/offline/setup.sh first")
    registry = LocalRegistry(access_log=True).start()
    project = Path(tempfile.mkdtemp(prefix="imagekit-bench-bk-"))
    try:
        shutil.copytree(WHEELHOUSE, project / "wheelhouse", copy_function=os.link)
        bench = Bench(project, registry, args.out.resolve())
        with Engine(f"bkb{RUN[:6]}") as engine:
            if args.only != "runners":
                bench.builders(engine)
            if args.only != "builders":
                bench.empty_runners(engine)
    finally:
        shutil.rmtree(project, ignore_errors=True)
        registry.remove()
    print(json.dumps(bench.result, indent=2))


if __name__ == "__main__":
    main()
