"""imagekit.engine.buildx without an engine: progress parsing (on buildx 0.13.1's own output),
arguments, discovery against stand-in CLIs, the metadata file."""

from __future__ import annotations

import io
import json
import os
import stat
from pathlib import Path

import pytest

from imagekit.core.errors import EnvironmentProblem, ImagekitError, InputError
from imagekit.engine import buildx
from imagekit.engine.buildx import (
    Buildx,
    BuildxRequest,
    PlainText,
    StepCached,
    StepFailed,
    StepOutput,
    StepStarted,
    build_argv,
    read_metadata,
    read_progress,
)

DATA = Path(__file__).parent / "data"


class Dribble(io.RawIOBase):
    """A pipe that hands out a few bytes per read: objects arrive split anywhere."""

    def __init__(self, data: bytes, size: int) -> None:
        self.data, self.size = data, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray) -> int:  # type: ignore[override]
        chunk, self.data = self.data[: self.size], self.data[self.size :]
        buffer[: len(chunk)] = chunk
        return len(chunk)


def events(data: bytes, size: int = 1 << 16) -> list[object]:
    return list(read_progress(io.BufferedReader(Dribble(data, size))))


@pytest.mark.parametrize("size", [1, 7, 4096, 1 << 16])
def test_a_failed_build_names_its_step_and_the_missing_cache_is_only_an_event(size: int) -> None:
    found = events((DATA / "buildx-0.13.1-failed-step.rawjson").read_bytes(), size)
    failed = [e for e in found if isinstance(e, StepFailed)]
    assert [f.step.split(" ", 1)[0] for f in failed] == ["importing", "[2/2]"]
    assert failed[1].step == "[2/2] RUN --network=none echo step-out && exit 7"
    assert failed[1].error.endswith("did not complete successfully: exit code: 7")
    assert StepOutput(failed[1].step, "step-out") in found  # base64 logs, decoded, a line each
    texts = [e.text for e in found if isinstance(e, PlainText)]
    assert texts[-1].startswith("ERROR: failed to solve: process")


def test_a_built_image_reports_each_step_once() -> None:
    found = events((DATA / "buildx-0.13.1-built.rawjson").read_bytes(), 5)
    started = [e.step for e in found if isinstance(e, StepStarted)]
    assert len(started) == len(set(started)) and any("exporting to oci image format" in s for s in started)
    assert not [e for e in found if isinstance(e, StepFailed | PlainText)]


def test_cached_steps_and_hostile_text_are_read_bounded() -> None:
    cached = json.dumps({"vertexes": [{"digest": "sha256:1", "name": "[1/2] RUN x", "cached": True}]})
    data = cached.encode() + b"\n\x1b[31mred\x07 text\n" + b"{not json at all\n"
    found = events(data, 3)
    assert found[0] == StepCached("[1/2] RUN x")
    assert all("\x1b" not in e.text and "\x07" not in e.text for e in found if isinstance(e, PlainText))
    assert PlainText("{not json at all") in found


def test_a_runaway_object_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(buildx, "BUILDX_EVENT_BYTES", 1000)
    found = events(b'{"logs": "' + b"x" * 5000, 100)
    assert found and all(isinstance(e, PlainText) and len(e.text) <= 2000 for e in found)


def request(tmp_path: Path, **values: object) -> BuildxRequest:
    fields: dict[str, object] = {
        "dockerfile": "Dockerfile",
        "labels": (("a", "b c"),),
        "build_args": (("PY", "3.12"),),
        "platform": "linux/arm64",
        "output": tmp_path / "o.tar",
        "name": "r/x:1",
        "compression": "zstd",
    }
    fields.update(values)
    return BuildxRequest(**fields)  # type: ignore[arg-type]


def test_arguments_never_carry_a_secret_value_and_pick_the_builder(tmp_path: Path) -> None:
    secret = tmp_path / "netrc"
    argv = build_argv(
        Buildx("/bin/docker", "0.13.1", builder="fleet"),
        request(tmp_path, secrets=(("imagekit-pip-netrc", secret),), host_network=True, cache_to="r/c:1"),
        tmp_path / "m.json",
    )
    assert argv[:5] == ["/bin/docker", "buildx", "--builder", "fleet", "build"] and argv[-1] == "-"
    joined = " ".join(argv)
    assert f"--secret id=imagekit-pip-netrc,src={secret}" in joined
    assert "--allow network.host" in joined and "--provenance=false" in joined
    assert "compression=zstd,force-compression=true" in joined and "rewrite-timestamp=true" in joined
    gzip = " ".join(build_argv(Buildx("d", "0.13.1"), request(tmp_path, compression="gzip"), tmp_path / "m"))
    assert "compression=gzip," in gzip and "force-compression" not in gzip  # a base's layers kept
    assert "--cache-to type=registry,ref=r/c:1,mode=max,oci-mediatypes=true,ignore-error=true" in joined
    assert "--cache-from" not in joined
    context = build_argv(Buildx("/bin/docker", "0.13.1", context="second"), request(tmp_path), tmp_path / "m")
    assert context[:4] == ["/bin/docker", "--context", "second", "buildx"] and "--allow" not in context


def fake_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    cli = tmp_path / "docker"
    cli.write_text("#!/bin/sh\n" + script)
    cli.chmod(cli.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("IMAGEKIT_DOCKER_CLI", str(cli))


def test_find_says_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMAGEKIT_DOCKER_CLI", str(tmp_path / "nowhere"))
    with pytest.raises(EnvironmentProblem, match="no `docker` on PATH"):
        buildx.find(None)
    fake_cli(tmp_path, monkeypatch, "echo \"docker: 'buildx' is not a docker command.\" >&2; exit 1\n")
    with pytest.raises(EnvironmentProblem, match=r"'buildx' is not a docker command.*--builder classic"):
        buildx.find(None)
    fake_cli(tmp_path, monkeypatch, "echo 'github.com/docker/buildx 0.12.1 abc'\n")
    with pytest.raises(EnvironmentProblem, match=r"buildx 0\.12\.1 is older than 0\.13\.0"):
        buildx.find(None)


def test_find_tells_an_unknown_builder_from_a_dead_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    version = 'if [ "$2" = version ]; then echo "github.com/docker/buildx 0.13.1+ds1 x"; exit 0; fi\n'
    fake_cli(tmp_path, monkeypatch, version + 'echo "ERROR: no builder \\"$3\\" found" >&2; exit 1\n')
    with pytest.raises(InputError, match="--buildx-builder fleet: buildx knows no builder"):
        buildx.find("fleet")
    with pytest.raises(InputError, match="not a builder or Docker context name"):
        buildx.find("-rm")
    inspect = 'if [ "$1" = buildx ]; then printf "Name: s\\nDriver: docker\\n"; exit 0; fi\n'
    fake_cli(
        tmp_path, monkeypatch, version + inspect + 'echo "Cannot connect to the Docker daemon" >&2; exit 1\n'
    )
    with pytest.raises(EnvironmentProblem, match=r"its engine does not answer .Cannot connect"):
        buildx.find("s")
    fake_cli(tmp_path, monkeypatch, version + 'printf "Name: k\\nDriver: kubernetes\\nStatus: running\\n"\n')
    assert buildx.find("k") == Buildx(os.environ["IMAGEKIT_DOCKER_CLI"], "0.13.1", builder="k")


def test_metadata_needs_both_digests(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    digest = "sha256:" + "a" * 64
    path.write_text(json.dumps({"containerimage.digest": digest, "containerimage.config.digest": digest}))
    assert read_metadata(path).manifest_digest == digest
    path.write_text(json.dumps({"containerimage.digest": "sha256:../../x"}))
    with pytest.raises(ImagekitError, match=r"no containerimage\.digest digest"):
        read_metadata(path)
    with pytest.raises(ImagekitError, match="no readable metadata"):
        read_metadata(tmp_path / "absent.json")


def test_a_runaway_step_name_or_error_is_bounded() -> None:
    step = {"digest": "sha256:" + "1" * 64, "name": "RUN " + "n" * 100_000}
    data = json.dumps({"vertexes": [{**step, "error": "e" * 100_000 + " exit code: 2"}]}).encode()
    (failed,) = events(data)
    assert isinstance(failed, StepFailed)
    assert len(failed.step) <= 2_000 and len(failed.error) <= 2_000
    assert failed.step.startswith("RUN nnn") and failed.error.endswith("exit code: 2")


def test_a_push_goes_straight_to_the_registry_with_rewritten_timestamps(tmp_path: Path) -> None:
    """Issue 46: BuildKit pushes the image itself (store=false: the engine neither stores nor
    unpacks it, which is what lets rewrite-timestamp through), with no OCI tar."""
    pushed = request(tmp_path, output=None, name="reg:5000/r/x:staging-abc", push=True)
    argv = build_argv(Buildx("/bin/docker", "0.29.1"), pushed, tmp_path / "m.json")
    output = argv[argv.index("--output") + 1]
    assert output == (
        "type=image,name=reg:5000/r/x:staging-abc,push=true,store=false,"
        "compression=zstd,force-compression=true,oci-mediatypes=true,rewrite-timestamp=true"
    )
    assert "dest=" not in " ".join(argv) and "--load" not in argv and "--provenance=false" in argv
    assert argv[argv.index("--metadata-file") + 1] == str(tmp_path / "m.json")
    gzip = build_argv(
        Buildx("d", "0.29.1"), request(tmp_path, output=None, push=True, compression="gzip"), tmp_path
    )
    assert "push=true,store=false,compression=gzip,oci-mediatypes=true,rewrite-timestamp=true" in " ".join(
        gzip
    )
    local = build_argv(Buildx("d", "0.29.1"), request(tmp_path), tmp_path / "m")
    assert local[local.index("--output") + 1].startswith(f"type=oci,dest={tmp_path / 'o.tar'},name=r/x:1,")


@pytest.mark.parametrize(
    ("version", "pushes"), [("0.13.1", False), ("0.28.9", False), ("0.29.1", True), ("1.0.0", True)]
)
def test_only_a_buildx_measured_to_push_with_store_false_does(version: str, pushes: bool) -> None:
    refusal = buildx.push_refusal(Buildx("d", version))
    assert (refusal is None) is pushes
    if refusal is not None:
        assert refusal.startswith(f"buildx {version} is older than 0.29.0") and "\n" not in refusal
