"""What a fresh node fetches to run two CUDA-wheel cells, old layout against new (issue 36), in one run.

    python -m bench.pull_cost [--out bench/fixtures/pull-cost.json] [--old-commit b30061e]
    python -m bench.pull_cost --releases 2.1.2,2.2.2,2.3.1 --wheelhouse WH --skip old --skip zstd \
        --skip repro --out bench/fixtures/pull-cost-three.json


Cells: the cuda-wheels example (torch 2.1.2, CUDA 12.1 from PyPI's nvidia-*-cu12 wheels, on
imagekit-local/debian-python:bookworm) and torch 2.1.1, which pins the same eleven nvidia wheels
and triton 2.1.0 (Requires-Dist). The bench makes its own project: the example's matrix with both
releases, builder buildkit, no index, and a wheelhouse of hard links (the example's wheels, filled
by `examples/cuda-wheels/setup.sh`, and torch 2.1.1 from ~/.cache/imagekit/pull-cost/).
`--releases` names other torch releases (PyPI's CUDA 12.1 builds) and `--wheelhouse` a directory
holding all their closures, hard-linked into the project (issue 49: 2.1.2, 2.2.2 and 2.3.1 share
ten CUDA wheels and cuDNN, only NCCL differs). Whatever the releases, the pull phase records each
cell's closure layers (a CUDA wheel each, the other dependencies) from the manifests and configs:
which have one digest in every cell, and what one layer per cell (the old layout) would weigh.

Layouts: "old" is the tree before issue 36 (commit b30061e, one pip RUN for the whole closure), run
from a detached git worktree with this venv's Python (PYTHONPATH); "new" is this tree (the closure in
three layers: CUDA wheels, other dependencies, torch). Engines are private dockerd 26 engines
(`scripts/engine.sh second NAME`, containerd image store); the registry is this run's own
docker-registry with its access log on, so fetched bytes are the body bytes of every GET it answered.

1. Pull cost. Per layout, both cells built cold on a fresh engine holding only the base image and
   pushed: `docker buildx bake` of the targets `imagekit matrix --format bake` exports (imagekit's
   contexts, build arguments and gzip OCI push output; its registry cache left out). Not
   `imagekit build --push`: that writes the OCI tar, loads it and writes the registry cache too,
   24 GB for one cell before its load and push (measured), more than this disk holds beside the
   pulls. Then both pulled by digest (`docker pull`) on an empty engine: fetched bytes (access
   log) against the manifests' distinct layer + config bytes and imagekit's own pull cost
   (`imagekit.report.pullcost`).
2. Zstd (`--skip zstd` leaves it out). The new layout's 2.1.2 cell exported again with zstd layers
   on the same engine (every step cached), pushed; the gzip and the zstd image each pulled on an
   empty engine, timed (whether unpigz is on the engine's PATH is recorded: containerd uses it).
3. Reproducibility (`--skip repro`). The new layout's 2.1.2 cell built once more on another empty
   engine: its manifest digest and layer digests against the first build's; any layer that differs
   is named with the files whose tar entries differ. Without imagekit's rewrite-timestamp (dockerd
   26's pushing image exporter refuses it, moby#51493) file times differ: this measures bake.

`--skip old` leaves the old layout out (no old worktree). Each engine is stopped (its data
removed) as soon as its phase is measured: a CUDA image is ~6 GB unpacked; the least free space on
/ while the bench ran is recorded. Needs root, /usr/bin/docker-registry and the engine of record's
CLI with buildx.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import requests

from bench.buildkit import Engine as SecondEngine
from bench.buildkit import fetched
from bench.cache_from import imagekit, timed
from imagekit.core.limits import DOCKERFILE_BYTES, STATE_BYTES
from imagekit.core.paths import read_regular_text
from testbed.image_counts import (
    closure_layers,
    distinct_bytes,
    entry_differences,
    layer_diff,
    layer_sharing,
    one_layer_per_cell_bytes,
    ratio,
)
from testbed.registry_server import LocalRegistry

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "cuda-wheels" / "wheelhouse"
TORCH_211 = (
    Path.home() / ".cache" / "imagekit" / "pull-cost" / "torch-2.1.1-cp311-cp311-manylinux1_x86_64.whl"
)
OLD_COMMIT = "b30061e"
BASE = "imagekit-local/debian-python:bookworm"
DOCKER = "docker"
RUN = uuid.uuid4().hex[:6]
RELEASES = ("2.1.2", "2.1.1")
STAGING = "bench/pytorch-staging"
MATRIX = """\
version: 1
axes: {{torch: {releases}, cuda: ["12.1"], base: [debian-local], flavour: [runtime]}}
defaults: {{torchvision: none, torchaudio: none}}
advisories:
  waive:  # every CUDA 12.1 torch on PyPI predates the fixes; the bench measures layers only
    - {{id: CVE-2025-32434, reason: "the pull-cost bench loads no checkpoint"}}
    - {{id: CVE-2024-48063, reason: "the pull-cost bench runs no torch.distributed.rpc"}}
bases:
  debian-local: {{image: "{base}", os: debian12, python: "3.11", cuda: false}}
sources:
  pip: {{no_index: true, find_links: [wheelhouse], torch_index_url: null}}
build: {{builder: buildkit}}
publish:
  registry: "{registry}"
  repository: bench/pytorch
  staging: {{repository: {staging}}}
"""
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)


def cell_names(releases: Iterable[str]) -> list[str]:
    """The matrix's cell names, one per torch release, in the order they are built and pulled."""
    return [f"debian-local-torch{release}-cuda12.1-py3.11-runtime" for release in releases]


CELLS = tuple(cell_names(RELEASES))  # the default run's cells (bench/reproducible.py builds the first)


def parse_releases(text: str) -> list[str]:
    """`--releases 2.1.2,2.2.2`: two or more distinct X.Y.Z releases (one cell is no sharing)."""
    releases = [r.strip() for r in text.split(",") if r.strip()]
    if len(releases) < 2 or len(set(releases)) != len(releases):
        raise argparse.ArgumentTypeError(f"{text!r}: name two or more distinct releases, e.g. 2.1.2,2.2.2")
    for release in releases:
        if not re.fullmatch(r"\d+\.\d+\.\d+", release):
            raise argparse.ArgumentTypeError(f"{release!r}: a torch release is X.Y.Z, e.g. 2.2.2")
    return releases


class LeastFree:
    """The least free space on / while the bench runs, sampled: its peak disk use beside the start."""

    def __init__(self) -> None:
        self.least = shutil.disk_usage("/").free
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while not self.done.wait(5.0):
            self.least = min(self.least, shutil.disk_usage("/").free)

    def __enter__(self) -> LeastFree:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()


class Engine(SecondEngine):
    """A private dockerd 26 (containerd store); ``base`` loads the cell's base image into it."""

    def __init__(self, name: str, base: bool) -> None:
        super().__init__(f"pc{RUN}{name}", base=BASE if base else None, setup="examples/cuda-wheels/setup.sh")

    def empty(self) -> None:
        """Every image but the base, and the whole build cache (this engine is the bench's own)."""
        names = subprocess.run(
            [DOCKER, "-H", self.host, "images", "--format", "{{.Repository}}:{{.Tag}}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
        built = [name for name in names if name != BASE and "<none>" not in name]
        if built:
            subprocess.run([DOCKER, "-H", self.host, "rmi", "-f", *built], check=True, capture_output=True)
        subprocess.run([DOCKER, "-H", self.host, "buildx", "prune", "-af"], check=True, capture_output=True)

    def pull(self, reference: str) -> float:
        return timed([DOCKER, "-H", self.host, "pull", "-q", reference], REPO, {})


class Bench:
    def __init__(
        self,
        project: Path,
        registry: LocalRegistry,
        old_tree: Path,
        out: Path,
        skip: list[str],
        cells: list[str],
        cold_each: bool = False,
    ) -> None:
        self.project = project
        self.cold_each = cold_each
        self.skip = skip
        self.cells = cells
        self.layouts = [layout for layout in ("old", "new") if layout not in skip]
        self.registry = registry
        self.old_tree = old_tree
        self.out = out
        self.log = registry.dir / "registry.log"
        self.result: dict[str, Any] = {
            "run": RUN,
            "cells": cells,
            "old_layout": "skipped" if "old" in skip else f"commit {OLD_COMMIT} (one pip RUN)",
            "new_layout": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip(),
            "load_1min_start": round(os.getloadavg()[0], 2),
            "df_root_free_gb_start": round(shutil.disk_usage("/").free / 1e9, 1),
        }

    def save(self) -> None:
        """Written after every phase: a later failure keeps what was measured."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.result, indent=2) + "\n")

    def env(self, layout: str) -> dict[str, str]:
        """The old layout runs the old tree's package, with this venv's Python."""
        return {"PYTHONPATH": str(self.old_tree)} if layout == "old" else {"PYTHONPATH": str(REPO)}

    def check_layouts(self) -> None:
        """Each tree imports its own package and renders its own pip steps."""
        for layout in self.layouts:
            env = {**os.environ, **self.env(layout)}
            where = subprocess.run(
                [sys.executable, "-c", "import imagekit; print(imagekit.__file__)"],
                env=env,
                cwd=self.project,  # not this tree: `python -c` puts the working directory first
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            tree = self.old_tree if layout == "old" else REPO
            if not where.startswith(str(tree)):
                raise SystemExit(f"the {layout} layout imports imagekit from {where}, not {tree}")
            ctx = f"ctx-{layout}"
            bake = subprocess.run(
                imagekit("matrix", "--matrix", "matrix.yaml", "--format", "bake", "--context-dir", ctx),
                cwd=self.project,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            targets = json.loads(bake)
            for target in targets["target"].values():
                # no registry cache: its blobs would take the disk that the pulls need
                target.pop("cache-from", None)
                target.pop("cache-to", None)
            (self.project / f"bake-{layout}.json").write_text(json.dumps(targets, indent=2))
            dockerfile = read_regular_text(
                self.project / ctx / self.cells[0] / "Dockerfile",
                DOCKERFILE_BYTES,
                "the Dockerfile bake export wrote",
            )
            self.result.setdefault("pip_install_steps", {})[layout] = len(
                re.findall(r"pip install --", dockerfile)
            )

    def bake(self, layout: str, engine: Engine, cell: str, *overrides: str) -> tuple[float, str]:
        """The cell's bake target as imagekit exports it, pushed by BuildKit: (seconds, manifest digest)."""
        meta = self.project / f"meta-{layout}-{cell}.json"
        target = cell.replace(".", "_")
        argv = [
            DOCKER,
            "-H",
            engine.host,
            "buildx",
            "bake",
            "--progress",
            "plain",
            "--metadata-file",
            str(meta),
        ]
        argv += [
            "-f",
            f"bake-{layout}.json",
            *(x for o in overrides for x in ("--set", f"{target}.{o}")),
            target,
        ]
        seconds = timed(argv, self.project, {})
        metadata = json.loads(
            read_regular_text(meta, STATE_BYTES, "the file `docker buildx bake --metadata-file` wrote")
        )
        return seconds, metadata[target]["containerimage.digest"]

    def manifest(self, digest: str) -> dict[str, Any]:
        """The amd64 image manifest of a staged digest (an index is followed to its child)."""
        url = f"http://{self.registry.host}/v2/{STAGING}/manifests/"
        data: dict[str, Any] = requests.get(url + digest, headers={"Accept": ACCEPT}, timeout=60).json()
        for child in data.get("manifests", []):
            if child.get("platform", {}).get("architecture") == "amd64":
                data = requests.get(url + child["digest"], headers={"Accept": ACCEPT}, timeout=60).json()
                break
        return data

    def imagekit_pull_cost(self, digests: dict[str, str]) -> dict[str, Any]:
        """imagekit's own figure, from the registry's manifests (what the new report's pull line says)."""
        from imagekit.core.platforms import get
        from imagekit.registry.client import open_registry
        from imagekit.report.pullcost import matrix_pull, measure, with_shared

        reader = open_registry(self.registry.host)
        costs = {cell: measure(reader, STAGING, d, get("linux/amd64"), cell) for cell, d in digests.items()}
        pulled = matrix_pull(with_shared(costs).values())
        assert pulled is not None
        return {
            "distinct": pulled.distinct,
            "summed": pulled.summed,
            # each exact-pin pip step once per Python and machine, base layers by digest
            # (imagekit.report.pullcost.matrix_pull), and the snapshots a node unpacks
            "floor": pulled.floor,
            "chains": pulled.chains,
            "chain_bytes": pulled.chain_bytes,
            "cells": {
                cell: {"total": cost.total, "largest": cost.largest.size if cost.largest else 0}
                for cell, cost in costs.items()
            },
            "largest_step": {cell: cost.largest_step[:120] for cell, cost in costs.items()},
            # each layer's step as imagekit keys it for the floor (clipped at STEP_CHARS)
            "steps": {cell: list(cost.steps) for cell, cost in costs.items()},
        }

    # ---------------------------------------------------------------- phases

    def build(self, layout: str) -> None:
        """Both cells cold on a fresh engine, pushed; new: then 2.1.2 again with zstd layers.

        ``docker buildx bake`` of the targets imagekit exports (`imagekit matrix --format bake`: its
        contexts, build arguments and push output), not ``imagekit build --push``: that one also
        writes the OCI tar, loads it into the engine and writes the registry cache, about four
        copies of a 3 GB image, which this machine's disk does not hold twice."""
        r = self.result.setdefault("build", {})
        if self.cold_each:
            self.build_each(layout)
            return
        with Engine(layout[0], base=True) as engine:
            seconds, staged = {}, {}
            for cell in self.cells:
                took, staged[cell] = self.bake(layout, engine, cell)
                seconds[cell] = round(took, 1)
                if layout == "old":  # the old layout shares no install layer: keep the disk free
                    engine.empty()
            r[layout] = {"seconds": seconds, "staged": staged}
            self.save()
            if layout == "new" and "zstd" not in self.skip:
                name = f"{self.registry.host}/{STAGING}:zstd"
                output = f"output=type=image,name={name},push=true,compression=zstd,force-compression=true"
                output += ",oci-mediatypes=true"
                took, digest = self.bake(layout, engine, self.cells[0], output)
                self.result["zstd"] = {"export_push_seconds": round(took, 1), "staged": digest}
                self.save()

    def build_each(self, layout: str) -> None:
        """Each cell cold on an engine of its own, holding only the base (`--cold-each`): a layer two
        cells share is then the same digest only if its step writes the same bytes, not because the
        second cell found it in the first one's cache. The push output gets store=false and
        rewrite-timestamp=true, as imagekit's own push does (imagekit.engine.buildx): without it a
        file's time is when pip wrote it, and no layer of two builds matches."""
        targets = json.loads((self.project / f"bake-{layout}.json").read_text())["target"]
        seconds, staged = {}, {}
        for i, cell in enumerate(self.cells):
            output = targets[cell.replace(".", "_")]["output"][0] + ",store=false,rewrite-timestamp=true"
            with Engine(f"{layout[0]}{i}", base=True) as engine:
                took, staged[cell] = self.bake(layout, engine, cell, f"output={output}")
            seconds[cell] = round(took, 1)
            self.result["build"][layout] = {"seconds": seconds, "staged": staged, "engine_per_cell": True}
            self.save()

    def pull(self, layout: str) -> None:
        """Both cells by digest on an empty engine: what the registry sent, against the manifests."""
        digests = self.result["build"][layout]["staged"]
        manifests = {cell: self.manifest(d) for cell, d in digests.items()}
        record: dict[str, Any] = {
            "manifest_distinct_bytes": distinct_bytes(manifests.values()),
            "manifest_summed_bytes": sum(distinct_bytes([m]) for m in manifests.values()),
            "layers": {cell: [layer["size"] for layer in m["layers"]] for cell, m in manifests.items()},
            "imagekit": self.imagekit_pull_cost(digests),
        }
        with Engine(f"p{layout[0]}", base=False) as engine:
            start = self.log.stat().st_size
            seconds = {
                c: round(engine.pull(f"{self.registry.host}/{STAGING}@{digests[c]}"), 1) for c in self.cells
            }
            time.sleep(1)  # the access log line is written after the response
            record.update(pull_seconds=seconds, fetched=fetched(self.log, start))
        record["fetched_over_distinct"] = round(
            record["fetched"]["blob_bytes"] / record["manifest_distinct_bytes"], 4
        )
        # the floor from the wheels themselves: every distinct wheel file of the project's wheelhouse
        # once (both cells' closures; a wheel is deflate-compressed about as a gzip layer of its
        # files is) beside imagekit's floor from the manifests
        wheels = sum(w.stat().st_size for w in (self.project / "wheelhouse").glob("*.whl"))
        record["wheelhouse_bytes"] = wheels
        record["fetched_over_floor"] = ratio(record["fetched"]["blob_bytes"], record["imagekit"]["floor"])
        self.result.setdefault("pull", {})[layout] = record
        self.save()  # what was measured stays, whatever reading the closure layers below finds
        record.update(
            self.closure(manifests, record["manifest_distinct_bytes"], record["fetched"]["blob_bytes"])
        )
        if "old" in self.result["pull"] and "new" in self.result["pull"]:
            old, new = (self.result["pull"][k]["fetched"]["blob_bytes"] for k in ("old", "new"))
            self.result["new_over_old_fetched"] = round(new / old, 4)
        self.save()

    def closure(self, manifests: dict[str, dict[str, Any]], distinct: int, got: int) -> dict[str, Any]:
        """Each cell's closure layers (a CUDA wheel each, the other dependencies), which have one
        digest in every cell, and the bytes one closure layer per cell (the old layout) would take."""
        cells = {cell: closure_layers(m, self.config(m)) for cell, m in manifests.items()}
        old = one_layer_per_cell_bytes(distinct, cells)
        return {
            "closure_layers": cells,
            "closure_sharing": layer_sharing(cells),
            "one_layer_per_cell_bytes": old,
            "fetched_over_one_layer_per_cell": ratio(got, old),
        }

    def config(self, manifest: dict[str, Any]) -> dict[str, Any]:
        url = f"http://{self.registry.host}/v2/{STAGING}/blobs/{manifest['config']['digest']}"
        answer = requests.get(url, timeout=60)
        answer.raise_for_status()
        config: dict[str, Any] = answer.json()
        return config

    def zstd_pull(self) -> None:
        """The zstd 2.1.2 image alone on an empty engine (the gzip one was timed by pull("new"))."""
        z = self.result["zstd"]
        with Engine("pz", base=False) as engine:
            start = self.log.stat().st_size
            z["pull_seconds"] = round(engine.pull(f"{self.registry.host}/{STAGING}@{z['staged']}"), 1)
            time.sleep(1)
            z["fetched"] = fetched(self.log, start)
            z["unpigz_on_engine_path"] = any(
                Path(d, "unpigz").exists()
                for d in ("/opt/imagekit-engine/usr/bin", *os.environ["PATH"].split(":"))
            )
        z["gzip_pull_seconds"] = self.result["pull"]["new"]["pull_seconds"][self.cells[0]]
        z["gzip_bytes"] = distinct_bytes(
            [self.manifest(self.result["build"]["new"]["staged"][self.cells[0]])]
        )
        z["zstd_bytes"] = distinct_bytes([self.manifest(z["staged"])])
        z["zstd_over_gzip_seconds"] = round(z["pull_seconds"] / z["gzip_pull_seconds"], 3)
        self.save()
        self.drop_blobs(self.manifest(z["staged"]), keep=self.result["build"]["new"]["staged"].values())

    def drop_blobs(self, manifest: dict[str, Any], keep: Iterable[str]) -> None:
        """Remove the zstd image's own layer blobs from the registry's storage (disk: the old layout's
        pull needs the room); blobs another staged image holds are kept."""
        kept = {blob["digest"] for d in keep for blob in self.manifest(d)["layers"]}
        root = self.registry.dir / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256"
        for layer in manifest["layers"]:
            hexa = layer["digest"].removeprefix("sha256:")
            if layer["digest"] not in kept:
                shutil.rmtree(root / hexa[:2] / hexa, ignore_errors=True)

    def repro(self) -> None:
        """The new 2.1.2 cell again on another empty engine: the same manifest and layers?"""
        first = self.result["build"]["new"]["staged"][self.cells[0]]
        with Engine("r", base=True) as engine:
            seconds, second = self.bake("new", engine, self.cells[0])
        a, b = self.manifest(first), self.manifest(second)
        differ = layer_diff(a["layers"], b["layers"])
        record: dict[str, Any] = {
            "seconds": round(seconds, 1),
            "first": first,
            "second": second,
            "same_manifest_digest": first == second,
            "same_config": a["config"]["digest"] == b["config"]["digest"],
            "layers": len(a["layers"]),
            "differing_layers": differ,
        }
        self.result["repro"] = record
        self.save()
        for i in differ[:3]:
            if i < len(a["layers"]) and i < len(b["layers"]):
                listing = [self.tar_entries(m["layers"][i]["digest"]) for m in (a, b)]
                paths = entry_differences(*listing)
                record.setdefault("differing_files", {})[str(i)] = {"count": len(paths), "first": paths[:40]}
                self.save()

    def tar_entries(self, digest: str) -> dict[str, tuple[object, ...]]:
        """Each entry of a gzip layer blob, streamed from the registry: its header and content hash."""
        import hashlib

        url = f"http://{self.registry.host}/v2/{STAGING}/blobs/{digest}"
        entries: dict[str, tuple[object, ...]] = {}
        with requests.get(url, stream=True, timeout=600) as answer:
            answer.raw.decode_content = False
            with gzip.GzipFile(fileobj=answer.raw) as raw, tarfile.open(fileobj=raw, mode="r|") as tar:
                for member in tar:
                    content = ""
                    if member.isfile():
                        handle = tar.extractfile(member)
                        content = hashlib.sha256(handle.read() if handle else b"").hexdigest()[:16]
                    entries[member.name] = (
                        member.type,
                        member.size,
                        member.mode,
                        member.uid,
                        member.gid,
                        member.mtime,
                        member.linkname,
                        content,
                    )
        return entries


def link_wheels(wheelhouse: Path, wheels: Iterator[Path]) -> None:
    wheelhouse.mkdir(parents=True)
    for wheel in wheels:
        os.link(wheel, wheelhouse / wheel.name)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "fixtures" / "pull-cost.json")
    parser.add_argument("--old-commit", default=OLD_COMMIT)
    parser.add_argument(
        "--releases",
        type=parse_releases,
        default=list(RELEASES),
        help="torch releases, one cell each, comma-separated (default: 2.1.2,2.1.1)",
    )
    parser.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help="wheels of every release's closure (default: the cuda-wheels example's and torch 2.1.1)",
    )
    parser.add_argument(
        "--cold-each",
        action="store_true",
        help="build each cell cold on an engine of its own (store=false, rewrite-timestamp=true)",
    )
    parser.add_argument(
        "--skip", action="append", default=[], choices=("old", "zstd", "repro"), help="leave a phase out"
    )
    args = parser.parse_args()
    if args.wheelhouse is None:
        if not any(EXAMPLE.glob("torch-2.1.2-*.whl")) or not TORCH_211.is_file():
            raise SystemExit(
                f"no wheelhouse: run examples/cuda-wheels/setup.sh; "
                f"put {TORCH_211.name} in {TORCH_211.parent}"
            )
        wheels = [*sorted(EXAMPLE.glob("*.whl")), TORCH_211]
    else:
        wheels = sorted(args.wheelhouse.glob("*.whl"))
    missing = [r for r in args.releases if not any(w.name.startswith(f"torch-{r}-") for w in wheels)]
    if missing:
        raise SystemExit(f"no torch wheel for {', '.join(missing)} in the wheelhouse: add its closure")
    registry = LocalRegistry(access_log=True).start()
    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-pc-", dir="/var/tmp"))
    project, old_tree = work / "project", work / "old"
    if "old" not in args.skip:
        add = ["git", "worktree", "add", "--detach", str(old_tree), args.old_commit]
        subprocess.run(add, cwd=REPO, check=True, capture_output=True)
    try:
        with LeastFree() as disk:
            project.mkdir()
            link_wheels(project / "wheelhouse", iter(wheels))
            (project / "matrix.yaml").write_text(
                MATRIX.format(
                    releases=json.dumps(args.releases), base=BASE, registry=registry.host, staging=STAGING
                )
            )
            cells = cell_names(args.releases)
            bench = Bench(project, registry, old_tree, args.out.resolve(), args.skip, cells, args.cold_each)
            bench.check_layouts()
            bench.save()
            bench.build("new")
            bench.pull("new")
            if "zstd" not in args.skip:
                bench.zstd_pull()
            if "old" not in args.skip:
                bench.build("old")
                bench.pull("old")
            if "repro" not in args.skip:
                bench.repro()
            bench.result["load_1min_end"] = round(os.getloadavg()[0], 2)
            bench.result["df_root_free_gb_end"] = round(shutil.disk_usage("/").free / 1e9, 1)
            bench.result["df_root_free_gb_least"] = round(disk.least / 1e9, 1)
            bench.save()
    finally:
        if "old" not in args.skip:
            subprocess.run(["git", "worktree", "remove", "--force", str(old_tree)], cwd=REPO, check=False)
        shutil.rmtree(work, ignore_errors=True)
        registry.remove()
    print(json.dumps(bench.result, indent=2))


if __name__ == "__main__":
    main()
