"""The harness's decisions without a Docker engine: the probe's document found in its output, the
script archive it injects, an engine gone mid-run, Ctrl-C, and the inputs a verification records."""

from __future__ import annotations

import json

import pytest

from imagekit.verify.gpus import GpuRequest


def test_first_json_object_skips_banners_and_trailing_text() -> None:
    from imagekit.verify.harness import _first_json_object

    document = {"checks": [{"name": "torch", "status": "pass"}], "gpu_visible": False}

    text = 'banner {not json} and {"other": 1}\n' + json.dumps(document, indent=2) + "\nbye {\n"
    assert _first_json_object(text) == document
    assert _first_json_object('{"checks": []} trailing') == {"checks": []}
    assert _first_json_object('{"no": "checks"}') is None
    assert _first_json_object("no json at all") is None


def test_the_injected_script_archive_creates_its_directory() -> None:
    import io
    import tarfile

    from imagekit.verify.harness import INJECTED_SCRIPT_DIR, _script_archive

    with tarfile.open(fileobj=io.BytesIO(_script_archive())) as tar:
        members = {m.name: m for m in tar.getmembers()}
    directory = INJECTED_SCRIPT_DIR.strip("/")
    assert members[directory].isdir() and members["opt"].isdir()
    script = members[f"{directory}/check.py"]
    assert script.isfile() and script.mode & 0o111


def test_an_engine_gone_while_inspecting_the_image_is_an_environment_problem() -> None:
    import requests

    from imagekit.core.errors import EnvironmentProblem
    from imagekit.verify.harness import Harness, Target

    class GoneApi:
        def inspect_image(self, ref: str) -> None:
            raise requests.ConnectionError("connection refused")

    harness = Harness(GoneApi(), GpuRequest.parse("none"))  # type: ignore[arg-type]
    with pytest.raises(EnvironmentProblem, match="cannot reach the Docker engine"):
        harness.verify(Target("t", "img"))


def test_ctrl_c_during_the_create_call_still_removes_the_container() -> None:
    """The engine made the container but Ctrl-C cut the create response short: its id never reached
    the harness, so only this run's label can find it (a CI run left such a container behind)."""
    from imagekit.verify.harness import Harness, Target
    from imagekit.verify.schedule import verify_all

    class InterruptedApi:
        def __init__(self) -> None:
            self.containers_made: dict[str, dict[str, str]] = {}

        def inspect_image(self, ref: str) -> dict[str, object]:
            return {"Id": "sha256:" + "1" * 64, "Config": {"Labels": {}}}

        def info(self) -> dict[str, str]:
            return {"Architecture": "x86_64"}

        def create_host_config(self, **options: object) -> dict[str, object]:
            return dict(options)

        def create_container(self, image: str, labels: dict[str, str], **options: object) -> None:
            self.containers_made["c0ffee"] = labels
            raise KeyboardInterrupt  # the response never arrives

        def containers(self, all: bool, quiet: bool, filters: dict[str, str]) -> list[dict[str, str]]:
            key, _, value = filters["label"].partition("=")
            return [{"Id": cid} for cid, labels in self.containers_made.items() if labels.get(key) == value]

        def remove_container(self, container: str, force: bool, v: bool) -> None:
            del self.containers_made[container]

    api = InterruptedApi()
    harness = Harness(api, GpuRequest.parse("none"))  # type: ignore[arg-type]
    with pytest.raises(KeyboardInterrupt):
        verify_all(harness, [Target("t", "img")])
    assert api.containers_made == {}


def test_a_verification_records_the_inputs_its_image_names() -> None:
    """What publish compares with the cell's record: the image's input-digest label, when it is
    one; an image without it, or with a label that is no input digest, records none."""
    from imagekit.core import naming
    from imagekit.verify.harness import _built_from

    assert _built_from({naming.INPUT_DIGEST_LABEL: "f" * 64}) == "f" * 64
    assert _built_from({}) is None
    assert _built_from({naming.INPUT_DIGEST_LABEL: "$(reboot)"}) is None
