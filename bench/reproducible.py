"""A real CUDA cell staged by `imagekit build --push`, rebuilt on an empty engine by `imagekit
rebuild-check`, and pulled as gzip and as zstd (issue 36, parts 4 and 5), in one run.

    python -m bench.reproducible [--out bench/fixtures/reproducible.json]

The cell is bench/pull_cost.py's first: the cuda-wheels example (torch 2.1.2 with CUDA 12.1 from
PyPI's eleven nvidia-*-cu12 wheels, on imagekit-local/debian-python:bookworm, no index), builder
buildkit. Unlike pull_cost.py (which pushes with `docker buildx bake` to spare the disk), every image
here is imagekit's own: `imagekit build --push` writes the OCI archive with rewritten layer times,
loads it and pushes it with the registry cache. It needs ~30 GB free.

1. Engine "a" (a private dockerd 26, containerd store, holding only the base): the cell built cold
   and staged with gzip layers; then again with `build.compression: zstd` (`--force`: every step
   cached, only the export differs), staged beside it.
2. Engine "r" (empty but for the base; another BuildKit, another cache): `imagekit rebuild-check
   REGISTRY/STAGING@<gzip digest>`: the image digest it rebuilt, against the staged one, and the
   layer it names when they differ (exit 4).
3. Engines "g" and "z" (empty: no base): `docker pull` of the gzip and of the zstd image by digest,
   timed (fetch and unpack into the containerd store), with the bytes the registry sent.

Each engine is stopped (its data removed) once its phase is measured. Needs root,
/usr/bin/docker-registry, the engine of record's CLI with buildx, and
`bash examples/cuda-wheels/setup.sh`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.buildkit import Engine as SecondEngine
from bench.buildkit import fetched
from bench.cache_from import imagekit, timed
from bench.pull_cost import BASE, CELLS, EXAMPLE, RUN
from imagekit.core.limits import STATE_BYTES
from imagekit.core.paths import read_regular_text
from testbed.image_counts import distinct_bytes
from testbed.registry_server import LocalRegistry

REPO = Path(__file__).resolve().parent.parent
CELL = CELLS[0]
STAGING = "bench/pytorch-staging"
MATRIX = """\
version: 1
axes: {{torch: ["2.1.2"], cuda: ["12.1"], base: [debian-local], flavour: [runtime]}}
defaults: {{torchvision: none, torchaudio: none}}
bases:
  debian-local: {{image: "{base}", os: debian12, python: "3.11", cuda: false}}
sources:
  pip: {{no_index: true, find_links: [wheelhouse], torch_index_url: null}}
build: {{builder: buildkit, compression: {compression}}}
publish:
  registry: "{registry}"
  repository: bench/pytorch
  staging: {{repository: {staging}}}
"""
MANIFEST_TYPES = ", ".join(
    ("application/vnd.oci.image.manifest.v1+json", "application/vnd.oci.image.index.v1+json")
)


class Engine(SecondEngine):
    """A private dockerd 26 (containerd store); ``base`` loads the cell's base image into it."""

    def __init__(self, name: str, base: bool) -> None:
        super().__init__(f"rp{RUN}{name}", base=BASE if base else None, setup="examples/cuda-wheels/setup.sh")


class Bench:
    def __init__(self, project: Path, registry: LocalRegistry, out: Path) -> None:
        self.project, self.registry, self.out = project, registry, out
        self.log = registry.dir / "registry.log"
        self.result: dict[str, Any] = {
            "run": RUN,
            "cell": CELL,
            "commit": subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True, check=True
            ).stdout.strip(),
            "load_1min_start": round(os.getloadavg()[0], 2),
            "df_root_free_gb_start": round(shutil.disk_usage("/").free / 1e9, 1),
        }

    def save(self) -> None:
        """Written after every phase: a later failure keeps what was measured."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.result, indent=2) + "\n")

    def matrix(self, compression: str) -> None:
        text = MATRIX.format(base=BASE, registry=self.registry.host, staging=STAGING, compression=compression)
        (self.project / "matrix.yaml").write_text(text)

    def staged(self, state: str) -> str:
        cells = json.loads(
            read_regular_text(
                self.project / state / "report.json", STATE_BYTES, "the report.json imagekit writes"
            )
        )["cells"]
        digest: str = next(c for c in cells if c["id"] == CELL)["staged"]["digest"]
        return digest

    def manifest(self, digest: str) -> dict[str, Any]:
        import requests

        url = f"http://{self.registry.host}/v2/{STAGING}/manifests/{digest}"
        answer: dict[str, Any] = requests.get(url, headers={"Accept": MANIFEST_TYPES}, timeout=60).json()
        return answer

    def stage(self) -> None:
        """The cell cold with gzip layers, then (every step cached) with zstd layers: both pushed."""
        record: dict[str, Any] = {}
        with Engine("a", base=True) as engine:
            for compression, extra in (("gzip", ()), ("zstd", ("--force",))):
                self.matrix(compression)
                state = f"s-{compression}"
                argv = imagekit("build", "--matrix", "matrix.yaml", "--push", "--state-dir", state, *extra)
                seconds = timed(argv, self.project, engine.env())
                record[compression] = {"build_push_seconds": round(seconds, 1), "staged": self.staged(state)}
                self.result["stage"] = record
                self.save()
        for staged in record.values():
            manifest = self.manifest(staged["staged"])
            staged["bytes"] = distinct_bytes([manifest])
            staged["layer_media_types"] = sorted({layer["mediaType"] for layer in manifest["layers"]})
        self.save()

    def rebuild(self) -> None:
        """`imagekit rebuild-check` of the gzip image on an empty engine: same digest, or which layer."""
        self.matrix("gzip")
        staged = self.result["stage"]["gzip"]["staged"]
        reference = f"{self.registry.host}/{STAGING}@{staged}"
        with Engine("r", base=True) as engine:
            started = time.monotonic()
            done = subprocess.run(
                imagekit("rebuild-check", reference, "--matrix", "matrix.yaml", "--json"),
                cwd=self.project,
                env={**os.environ, **engine.env()},
                capture_output=True,
                text=True,
                check=False,
            )
            seconds = time.monotonic() - started
        if done.returncode not in (0, 4):
            raise SystemExit(f"rebuild-check failed ({done.returncode}):\n{done.stderr[-3000:]}")
        self.result["rebuild_check"] = {
            "exit_code": done.returncode,
            "seconds": round(seconds, 1),
            "answer": json.loads(done.stdout),
        }
        self.save()

    def pulls(self) -> None:
        """Each image by digest on an engine of its own that holds nothing: fetch and unpack, timed."""
        record = self.result["stage"]
        for compression in ("gzip", "zstd"):
            with Engine(compression[0], base=False) as engine:
                start = self.log.stat().st_size
                reference = f"{self.registry.host}/{STAGING}@{record[compression]['staged']}"
                seconds = timed(["docker", "-H", engine.host, "pull", "-q", reference], REPO, {})
                time.sleep(1)  # the access log line is written after the response
                record[compression].update(pull_seconds=round(seconds, 1), fetched=fetched(self.log, start))
            self.save()
        self.result["zstd_over_gzip_pull_seconds"] = round(
            record["zstd"]["pull_seconds"] / record["gzip"]["pull_seconds"], 3
        )
        self.result["zstd_over_gzip_bytes"] = round(record["zstd"]["bytes"] / record["gzip"]["bytes"], 4)
        paths = ("/opt/imagekit-engine/usr/bin", *os.environ["PATH"].split(":"))
        self.result["unpigz_on_engine_path"] = any(Path(d, "unpigz").exists() for d in paths)
        self.save()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "fixtures" / "reproducible.json")
    args = parser.parse_args()
    if not any(EXAMPLE.glob("torch-2.1.2-*.whl")):
        raise SystemExit("no wheelhouse: run examples/cuda-wheels/setup.sh")
    registry = LocalRegistry(access_log=True).start()
    project = Path(tempfile.mkdtemp(prefix="imagekit-bench-rp-", dir="/var/tmp"))
    try:
        shutil.copytree(EXAMPLE, project / "wheelhouse", copy_function=os.link)
        bench = Bench(project, registry, args.out.resolve())
        bench.stage()
        bench.rebuild()
        bench.pulls()
        bench.result["load_1min_end"] = round(os.getloadavg()[0], 2)
        bench.save()
    finally:
        shutil.rmtree(project, ignore_errors=True)
        registry.remove()
    print(json.dumps(bench.result, indent=2))


if __name__ == "__main__":
    main()
