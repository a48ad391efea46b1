"""README's Kubernetes examples are what the generator writes: each ```yaml block that opens with
the command it shows (``# imagekit k8s ...``) is compared with that command's output, run here on
the shipped matrix. A block may leave fields out (``# …`` says so) and cut a value short with
``…``; every field it shows is the generator's, and a claim's ``spec`` is shown whole, so a
selector that changes in the code and not in README fails here."""

from __future__ import annotations

import fnmatch
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.report.lockfile import merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.k8s.test_dra import entries_of

ELIDED = "…"
_BLOCK = re.compile(r"^```yaml\n# imagekit (k8s [^\n]*)\n(.*?)^```$", re.MULTILINE | re.DOTALL)


def readme_examples() -> list[tuple[str, str]]:
    """(the command, the block's YAML) of every README example that names its command."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    return [(found.group(1), found.group(2)) for found in _BLOCK.finditer(text)]


def shown_in(shown: Any, written: Any, where: str = "") -> None:
    """Every field of ``shown`` is ``written``'s: mappings by key, lists item by item, a string
    cut short with … by its beginning."""
    if isinstance(shown, dict):
        assert isinstance(written, dict), where
        for key, value in shown.items():
            assert key in written, f"{where}.{key}: README shows a field the generator does not write"
            shown_in(value, written[key], f"{where}.{key}")
    elif isinstance(shown, list):
        assert isinstance(written, list) and len(shown) == len(written), where
        for i, (a, b) in enumerate(zip(shown, written, strict=True)):
            shown_in(a, b, f"{where}[{i}]")
    elif isinstance(shown, str) and shown.endswith(ELIDED):
        assert isinstance(written, str) and written.startswith(shown.removesuffix(ELIDED)), where
    else:
        assert shown == written, f"{where}: README shows {shown!r}, the generator writes {written!r}"


def generated(command: str, tmp_path: Path) -> list[dict[str, Any]]:
    """The documents ``imagekit <command>`` writes for the shipped matrix's cells."""
    args = shlex.split(command)
    only = args[args.index("--only") + 1]
    entries = {c: e for c, e in entries_of("matrix.yaml").items() if fnmatch.fnmatch(c, only)}
    lock, out = tmp_path / "images.lock.json", tmp_path / "out"
    merge_lock(lock, entries)
    done = run_cli(*args, "-m", str(REPO / "matrix.yaml"), "--lock", str(lock), "--out", str(out))
    assert done.exit_code == 0, done.stderr
    (written,) = [p for p in out.iterdir() if p.suffix == ".yaml"]
    return list(yaml.safe_load_all(written.read_text(encoding="utf-8")))


EXAMPLES = readme_examples()


def test_readme_has_the_dra_example() -> None:
    assert any("--gpu-request dra" in command for command, _ in EXAMPLES)


@pytest.mark.parametrize(("command", "block"), EXAMPLES, ids=[c[:80] for c, _ in EXAMPLES])
def test_a_readme_example_is_the_generators_output(command: str, block: str, tmp_path: Path) -> None:
    shown = list(yaml.safe_load_all(block))
    written = generated(command, tmp_path)
    by_kind = {d["kind"]: d for d in written}
    assert [d["kind"] for d in shown] == [d["kind"] for d in written]
    for document in shown:
        shown_in(document, by_kind[document["kind"]], document["kind"])
        if document["kind"] == "ResourceClaimTemplate":  # the request whole: its selectors are the point
            assert document["spec"] == by_kind["ResourceClaimTemplate"]["spec"]
