"""Publish benchmark: promoting 12 already-pushed images to their tags.

    python -m bench.publish [--rounds N] [--images 12] [--out bench/results/publish.json]

Both sides start from the same state: 12 small images, each already pushed to a staging tag of a
fresh docker-registry on 127.0.0.1. Each image then gets three final tags (a readable one and two
immutable ones, as `imagekit publish` writes):

* imagekit: the registry client's promotion (GET the staged manifest by digest, PUT the same
  bytes under each tag), in one process, as `imagekit publish` runs it after the staging push;
* docker: `docker tag` + `docker push` per tag (the CLI finds every layer present and uploads the
  manifest), as a CI script without imagekit would do it.

Rounds alternate which side goes first; figures are medians. Needs the engine,
/usr/bin/docker-registry and imagekit-test/busybox:latest (scripts/base-images.sh busybox).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import statistics
import subprocess
import tarfile
import time
import uuid
from pathlib import Path

import docker

from imagekit.registry.client import Registry
from testbed.registry_server import LocalRegistry

LABEL = "imagekit-bench.run"
RUN = uuid.uuid4().hex[:10]
DOCKER = "/usr/bin/docker" if Path("/usr/bin/docker").exists() else "docker"
BASE = "imagekit-test/busybox:latest"


def build(api: docker.APIClient, index: int) -> str:
    dockerfile = f"FROM {BASE}\nRUN echo {RUN}-{index} > /bench && head -c 200000 /dev/urandom > /payload\n"
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    image_id = None
    for line in api.build(fileobj=buffer, custom_context=True, decode=True, rm=True, labels={LABEL: RUN}):
        if "error" in line:
            raise RuntimeError(line["error"])
        aux = line.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            image_id = str(aux["ID"])
    assert image_id
    return image_id


def push(api: docker.APIClient, repository: str, tag: str) -> str:
    digest = None
    for line in api.push(repository, tag=tag, stream=True, decode=True):
        if line.get("error"):
            raise RuntimeError(line["error"])
        aux = line.get("aux")
        if isinstance(aux, dict) and aux.get("Digest"):
            digest = str(aux["Digest"])
    assert digest
    return digest


def imagekit_round(host: str, path: str, digests: list[str], round_no: int) -> float:
    started = time.perf_counter()
    registry = Registry(host)
    for index, digest in enumerate(digests):
        manifest = registry.get_manifest(path, digest)
        for kind in ("readable", "dated", "digest"):
            registry.put_manifest(path, f"ik-{index}-{kind}-r{round_no}", manifest)
    registry.close()
    return time.perf_counter() - started


def docker_round(repository: str, count: int, round_no: int) -> float:
    started = time.perf_counter()
    for index in range(count):
        for kind in ("readable", "dated", "digest"):
            target = f"{repository}:cli-{index}-{kind}-r{round_no}"
            subprocess.run([DOCKER, "tag", f"{repository}:staging-{index}", target], check=True)
            subprocess.run([DOCKER, "push", "--quiet", target], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--images", type=int, default=12)
    parser.add_argument("--out", type=Path, default=Path("bench/results/publish.json"))
    args = parser.parse_args()

    api = docker.APIClient(version="auto")
    server = LocalRegistry().start()
    path = f"bench-{RUN}/pytorch"
    repository = f"{server.host}/{path}"
    try:
        digests = []
        for index in range(args.images):
            image_id = build(api, index)
            api.tag(image_id, repository, f"staging-{index}")
            digests.append(push(api, repository, f"staging-{index}"))
        rows: dict[str, list[float]] = {"imagekit": [], "docker": []}
        for round_no in range(args.rounds):
            order = ["imagekit", "docker"] if round_no % 2 == 0 else ["docker", "imagekit"]
            for tool in order:
                if tool == "imagekit":
                    rows[tool].append(imagekit_round(server.host, path, digests, round_no))
                else:
                    rows[tool].append(docker_round(repository, args.images, round_no))
        # Both sides wrote the same digests under their tags.
        check = Registry(server.host)
        for index, digest in enumerate(digests):
            assert check.head_manifest(path, f"ik-{index}-readable-r0") == digest
            assert check.head_manifest(path, f"cli-{index}-readable-r0") == digest
        medians = {tool: statistics.median(values) for tool, values in rows.items()}
        result = {
            "images": args.images,
            "tags_per_image": 3,
            "rounds": rows,
            "median_s": medians,
            "speedup": medians["docker"] / medians["imagekit"],
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result, indent=2))
    finally:
        for image in api.images(filters={"label": f"{LABEL}={RUN}"}):
            with contextlib.suppress(docker.errors.APIError):
                api.remove_image(image["Id"], force=True)
        server.remove()


if __name__ == "__main__":
    main()
