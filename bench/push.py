"""BuildKit's own push (issue 46) and the default builder on this engine, in one run.

    python -m bench.push [--out bench/results/push.json] [--only push|builders]

The cell is bench/buildkit.py's: the offline demo's amd64 cell (torch 2.13.0+cpu and NumPy from the
local wheelhouse, every BuildKit step `RUN --network=none`) on imagekit-local/debian-python:
bookworm-amd64, loaded into each engine, never pulled. Engines are private ones of this run
(`scripts/engine.sh second NAME`: the engine of record's dockerd, containerd image store, empty
BuildKit cache), so `buildx prune -af` there touches nobody else's cache. Every push goes to a
registry of its own, started empty for that command (docker-registry on 127.0.0.1), so no push
finds a layer an earlier one uploaded.

1. push: one cell cold, `imagekit build --builder buildkit --push --compression zstd` against
   `docker buildx build` with the same outputs: `--output type=image,name=REF,push=true,
   store=false,compression=zstd,force-compression=true,oci-mediatypes=true,rewrite-timestamp=true`,
   `--provenance=false --sbom=false`, SOURCE_DATE_EPOCH, and the same registry cache export
   (`--cache-to ...,mode=max`, which imagekit's --push writes). "cold": after `buildx prune -af`
   and the cell's images removed, on this run's engine. buildx first, then imagekit; with
   `--rounds 2` the second round runs imagekit first.
2. builders: `imagekit build --builder classic` against `--builder buildkit`: cold (classic on a
   fresh engine; BuildKit after the prune), warm (every step cached, `--force`), no-change (the
   full run, then the run answered from its record), and cold `--push` (classic on a second fresh
   engine, to an empty registry; BuildKit's is part 1's figure).

Each figure is one end-to-end command (process start included). Needs root, the engine of
record's CLI with buildx, /usr/bin/docker-registry and `ARM64_BASE=0 bash examples/offline/setup.sh`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from bench.buildkit import CELL, DOCKER, MATRIX, RUN, WHEELHOUSE, Engine, cell
from bench.cache_from import imagekit, timed
from imagekit.core.clock import REPRODUCIBLE_EPOCH
from imagekit.engine.buildx import compression_options, registry_cache
from testbed.registry_server import LocalRegistry

REPO = Path(__file__).resolve().parent.parent
STAGING = "bench/pytorch-staging"


def versions() -> dict[str, str]:
    def out(*argv: str) -> str:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
        except OSError:
            return "?"
        return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else "?"

    return {
        "dockerd": out(DOCKER, "version", "--format", "{{.Server.Version}}"),
        "docker_cli": out(DOCKER, "version", "--format", "{{.Client.Version}}"),
        "buildx": out(DOCKER, "buildx", "version"),
        "containerd": out(
            DOCKER, "version", "--format", "{{range .Server.Components}}{{.Name}} {{.Version}}; {{end}}"
        ),
    }


class Bench:
    def __init__(self, project: Path, out: Path) -> None:
        self.project = project
        self.out = out
        self.result: dict[str, object] = {
            "cell": CELL,
            "run": RUN,
            "versions": versions(),
            "load_1min_start": round(os.getloadavg()[0], 2),
        }

    def save(self) -> None:
        """Written after every figure: a later failure keeps what was measured."""
        self.result["load_1min_now"] = round(os.getloadavg()[0], 2)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.write_text(json.dumps(self.result, indent=2) + "\n")

    def matrix(self, registry: str = "127.0.0.1:1") -> None:
        text = MATRIX.format(
            packages=json.dumps(["numpy"]),
            base="imagekit-local/debian-python:bookworm-amd64",
            registry=registry,
        )
        (self.project / "matrix.yaml").write_text(text)

    def ik(self, engine: Engine, *args: str) -> float:
        return timed(imagekit("build", "--matrix", "matrix.yaml", *args), self.project, engine.env())

    def context(self) -> Path:
        """The cell's context as imagekit sends it (`imagekit matrix --format bake`)."""
        self.matrix()
        export = ("matrix", "--matrix", "matrix.yaml", "--format", "bake", "--context-dir", "ctx")
        timed(imagekit(*export), self.project, {})
        return self.project / "ctx" / CELL

    @staticmethod
    def cold(engine: Engine) -> None:
        """Empty BuildKit cache (cache mounts too), no image of the cell (nor a classic build's
        untagged parent) in this run's own engine."""
        engine.docker("buildx", "prune", "-af")
        for selector in ("reference=bench/*", "dangling=true"):
            listed = subprocess.run(
                [DOCKER, "-H", engine.host, "images", "-q", "--filter", selector],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            if listed:
                subprocess.run([DOCKER, "-H", engine.host, "rmi", "-f", *sorted(set(listed))], check=False)

    def buildx_push(self, engine: Engine, context: Path, registry: LocalRegistry) -> float:
        name = f"{registry.host}/{STAGING}:buildx-{RUN}"
        pushed = ("type=image", f"name={name}", "push=true", "store=false")
        output = ",".join((*pushed, *compression_options("zstd"), "rewrite-timestamp=true"))
        cache_to = registry_cache(f"{registry.host}/{STAGING}/buildcache:{CELL}")[1]
        argv = [DOCKER, "-H", engine.host, "buildx", "build", "--progress", "quiet"]
        argv += ["--provenance=false", "--sbom=false", "--network", "none", "--output", output]
        argv += ["--cache-to", cache_to, str(context)]
        return timed(argv, self.project, {"SOURCE_DATE_EPOCH": str(REPRODUCIBLE_EPOCH)})

    def imagekit_push(self, engine: Engine, registry: LocalRegistry, state: str, *builder: str) -> float:
        self.matrix(registry.host)
        seconds = self.ik(engine, *builder, "--push", "--no-cache-from", "--state-dir", state)
        self.matrix()
        return seconds

    def push(self, engine: Engine, rounds: int) -> None:
        context = self.context()
        figures: dict[str, list[float]] = {"buildx": [], "imagekit": []}
        for number in range(rounds):
            order = ("buildx", "imagekit") if number % 2 == 0 else ("imagekit", "buildx")
            for which in order:
                self.cold(engine)
                registry = LocalRegistry().start()
                try:
                    if which == "buildx":
                        seconds = self.buildx_push(engine, context, registry)
                    else:
                        state = f"s-push-{number}"
                        build = ("--builder", "buildkit", "--compression", "zstd")
                        seconds = self.imagekit_push(engine, registry, state, *build)
                        log = Path(str(cell(self.project / state)["log"]))
                        self.result["imagekit_pushed_itself"] = (
                            "staged: BuildKit pushed" in (self.project / log).read_text()
                        )
                finally:
                    registry.remove()
                figures[which].append(round(seconds, 1))
                self.result["push_cold_s"] = figures
                self.save()
        pairs = list(zip(figures["imagekit"], figures["buildx"], strict=False))
        self.result["push_cold_ratio"] = [round(ik / bx, 3) for ik, bx in pairs]
        self.save()

    def builders(self, engine: Engine) -> None:
        """Classic first on the fresh engine (its layer cache is images: only a fresh engine is
        cold for it), then BuildKit after the prune."""
        r = self.result
        self.matrix()
        local = ("--no-cache-from",)
        for name, builder in (("classic", "classic"), ("buildkit", "buildkit")):
            state = f"s-{name}"
            if name == "buildkit":
                self.cold(engine)
            cold = self.ik(engine, "--builder", builder, *local, "--state-dir", state)
            warm = self.ik(engine, "--builder", builder, *local, "--force", "--state-dir", state)
            (self.project / state / "unchanged.json").unlink(missing_ok=True)
            full = self.ik(engine, "--builder", builder, *local, "--state-dir", state)
            answered = self.ik(engine, "--builder", builder, *local, "--state-dir", state)
            r[name] = {
                "cold_s": round(cold, 1),
                "warm_force_s": round(warm, 2),
                "no_change_full_s": round(full, 2),
                "no_change_answered_s": round(answered, 3),
                "status": cell(self.project / state)["status"],
                "size": cell(self.project / state).get("size"),
            }
            self.save()

    def classic_push(self) -> None:
        self.matrix()
        with Engine(f"bkp{RUN[:6]}c") as fresh:
            registry = LocalRegistry().start()
            try:
                seconds = self.imagekit_push(fresh, registry, "s-classic-push", "--builder", "classic")
            finally:
                registry.remove()
        self.result["classic_push_cold_s"] = round(seconds, 1)
        self.save()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "push.json")
    parser.add_argument("--only", choices=("push", "builders"), help="one part (1 or 2 above)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of part 1 (default: %(default)s)")
    args = parser.parse_args()
    if not any(WHEELHOUSE.glob("torch-2.13.0*.whl")):
        raise SystemExit("no wheelhouse: run ARM64_BASE=0 examples/offline/setup.sh first")
    project = Path(tempfile.mkdtemp(prefix="imagekit-bench-push-"))
    try:
        shutil.copytree(WHEELHOUSE, project / "wheelhouse", copy_function=os.link)
        bench = Bench(project, args.out.resolve())
        with Engine(f"bkp{RUN[:6]}") as engine:
            if args.only != "push":
                bench.builders(engine)
            if args.only != "builders":
                bench.push(engine, args.rounds)
        if args.only != "push":
            bench.classic_push()
        bench.result["load_1min_end"] = round(os.getloadavg()[0], 2)
        bench.save()
    finally:
        shutil.rmtree(project, ignore_errors=True)
    print(json.dumps(bench.result, indent=2))


if __name__ == "__main__":
    main()
