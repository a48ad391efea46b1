"""BuildKit's SLSA provenance (mode=max) against `--provenance=false` (issue 46, item 3).

    python -m bench.provenance [--out bench/results/provenance.json]

One small BuildKit cell (busybox, the stand-in check script of tests/integration/test_bake.py),
exported with `imagekit matrix --format bake` and built with `docker buildx build` from that target:
`--no-cache`, SOURCE_DATE_EPOCH, `--output <the target's push output>,store=false,rewrite-timestamp=true`
(what `imagekit build --builder buildkit --push` passes), twice with `--provenance=mode=max` and
twice with `--provenance=false`, to a registry of this run's own on 127.0.0.1. For each: the
digest pushed (an index with provenance), the platform manifest's digest, the bytes provenance adds
(the index, the attestation manifest, its config and its layers). Then, after the second build of
each, what imagekit does with it: `bake-import` (the metadata file, as bake writes one),
`rebuild-check REF@DIGEST`, `verify --pull --gpus none`, `publish` (policy `checked`), each in a
project directory of its own, the pushed digest pulled into the engine first. The images pulled
(`bench/provenance-RUN-*`) are removed at the end. Needs the engine of record with buildx and
/usr/bin/docker-registry.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import uuid
from pathlib import Path

from imagekit.core.clock import REPRODUCIBLE_EPOCH
from testbed.matrix_projects import BK_CHECK_TEMPLATE, Project, write_cells
from testbed.registry_server import LocalRegistry

REPO = Path(__file__).resolve().parent.parent
ACCEPT = "application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json"
ATTESTATION = "attestation-manifest"


def imagekit(root: Path, *args: str) -> tuple[int, str]:
    """Exit status, and the line that says the outcome (a refusal or a failure first)."""
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", *args], cwd=root, capture_output=True, text=True, check=False
    )
    lines = [line for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    said = [line for line in lines if "refused:" in line or "failed" in line or line.startswith("matches")]
    return done.returncode, (said or lines[-1:] or [""])[0][:500]


def manifest(registry: LocalRegistry, repository: str, reference: str) -> bytes:
    request = urllib.request.Request(
        f"http://{registry.host}/v2/{repository}/manifests/{reference}", headers={"Accept": ACCEPT}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return bytes(answer.read())


def project(root: Path, registry: LocalRegistry, run: str, repository: str) -> Project:
    (root / "templates").mkdir(parents=True)
    (root / "templates" / "Dockerfile.j2").write_text(BK_CHECK_TEMPLATE)
    made = Project(root, repository)
    publish = {"registry": registry.host, "policy": "checked"}
    build = {"build": {"builder": "buildkit", "compression": "zstd"}}
    write_cells(made, ["2.1"], publish=publish, extra=build, test_id=run)
    return made


def build(made: Project, provenance: str, metadata: Path) -> None:
    """The cell's bake target built with `docker buildx build`, as imagekit's --push would."""
    exported = subprocess.run(
        [sys.executable, "-m", "imagekit", "matrix", "--matrix", "matrix.yaml", "--format", "bake"],
        cwd=made.root,
        capture_output=True,
        text=True,
        check=True,
    )
    ((name, target),) = json.loads(exported.stdout)["target"].items()
    argv = ["docker", "buildx", "build", "--progress", "quiet", "--no-cache", "--network", "none"]
    argv += ["--metadata-file", str(metadata), "--sbom=false", f"--provenance={provenance}"]
    argv += ["--file", f"{target['context']}/{target['dockerfile']}", "--platform", target["platforms"][0]]
    argv += ["--output", target["output"][0] + ",store=false,rewrite-timestamp=true"]
    for key, value in target["labels"].items():
        argv += ["--label", f"{key}={value}"]
    for key, value in (target.get("args") or {}).items():
        argv += ["--build-arg", f"{key}={value}"]
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(REPRODUCIBLE_EPOCH)}
    subprocess.run([*argv, target["context"]], cwd=made.root, env=env, check=True, capture_output=True)
    # as bake writes it: one entry per target
    metadata.write_text(json.dumps({name: json.loads(metadata.read_text())}))


def measure(made: Project, registry: LocalRegistry, provenance: str) -> dict[str, object]:
    builds: list[dict[str, object]] = []
    staging = made.repository  # write_cells stages in the publish repository
    for number in (1, 2):
        metadata = made.root / f"metadata-{number}.json"
        build(made, provenance, metadata)
        ((said,),) = [tuple(json.loads(metadata.read_text()).values())]
        pushed = str(said["containerimage.digest"])
        body = manifest(registry, staging, pushed)
        document = json.loads(body)
        entry: dict[str, object] = {"pushed": pushed, "media_type": document["mediaType"]}
        if "manifests" in document:
            kinds = {
                child["digest"]: (child.get("annotations") or {}).get("vnd.docker.reference.type")
                for child in document["manifests"]
            }
            (platform,) = [digest for digest, kind in kinds.items() if kind != ATTESTATION]
            (attestation,) = [digest for digest, kind in kinds.items() if kind == ATTESTATION]
            attached = manifest(registry, staging, attestation)
            parts = json.loads(attached)
            layers = sum(int(layer["size"]) for layer in parts["layers"])
            entry.update(
                platform_manifest=platform,
                bytes_added=len(body) + len(attached) + int(parts["config"]["size"]) + layers,
                provenance_bytes=layers,
                predicate=[
                    layer.get("annotations", {}).get("in-toto.io/predicate-type") for layer in parts["layers"]
                ],
            )
        else:
            entry["platform_manifest"] = pushed
        builds.append(entry)
    reference = f"{registry.host}/{staging}@{builds[-1]['pushed']}"
    # pulled first, as `bake --push` without store=false leaves it in the engine: bake-import then
    # records the digest pushed as the engine's image id (it falls back to the config digest)
    subprocess.run(["docker", "pull", "-q", reference], check=True, capture_output=True)
    return {
        "builds": builds,
        "platform_manifest_same": builds[0]["platform_manifest"] == builds[1]["platform_manifest"],
        "pushed_digest_same": builds[0]["pushed"] == builds[1]["pushed"],
        "bake_import": imagekit(
            made.root, "bake-import", "--metadata-file", "metadata-2.json", "--matrix", "matrix.yaml"
        ),
        "rebuild_check": imagekit(made.root, "rebuild-check", reference, "--matrix", "matrix.yaml"),
        "verify": imagekit(made.root, "verify", "--matrix", "matrix.yaml", "--pull", "--gpus", "none"),
        "publish": imagekit(made.root, "publish", "--matrix", "matrix.yaml"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "provenance.json")
    args = parser.parse_args()
    registry = LocalRegistry().start()
    work = Path(tempfile.mkdtemp(prefix="imagekit-bench-provenance-"))
    run = uuid.uuid4().hex[:8]
    result: dict[str, object] = {"run": run, "load_1min_start": round(os.getloadavg()[0], 2)}
    try:
        for provenance in ("mode=max", "false"):
            # a cell of its own per mode (its RUN_ID): the engine's pulls of one never answer the other
            mode = provenance.replace("=", "-")
            made = project(work / mode, registry, f"{run}-{mode}", f"bench/provenance-{run}-{mode}")
            result[provenance] = measure(made, registry, provenance)
        result["load_1min_end"] = round(os.getloadavg()[0], 2)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        pulled = subprocess.run(
            ["docker", "images", "-q", "--filter", f"reference={registry.host}/bench/provenance-{run}-*"],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        if pulled:
            subprocess.run(["docker", "rmi", "-f", *sorted(set(pulled))], check=False, capture_output=True)
        registry.remove()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
