"""Fuzz the matrix loader: random YAML structures and random text, through the same entry
points the CLI uses. Whatever the input: an ImagekitError (one line) or a plan, never another
exception, never a hang, and nothing written outside the output directory."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from imagekit.core.errors import ImagekitError
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from imagekit.render.drift import expected_files, output_dir, write_rendered

KEYS = [
    "version", "axes", "bases", "include", "exclude", "publish", "templates", "output", "sources",
    "defaults", "mirrors", "allow_unknown", "torch", "cuda", "python", "flavour", "base", "image", "os",
    "env", "build_args", "pip_packages", "apt_packages", "tags", "readable", "immutable", "registry",
    "repository", "pip", "apt", "find_links", "index_url", "mirror", "build", "context", "args", "stack",
]  # fmt: skip
VALUES = [
    "1", "2.1", "2.1.2", "12.1", "11.8", "3.11", "devel", "runtime", "cpu", "cuda", "nvidia/cuda:{cuda_full}",
    "ubuntu22.04", "debian12", "../../etc", "/etc/passwd", "{torch}", "{torch.__class__}", "$(id)", "`id`",
    "a\nRUN id", "x" * 300, "", "~", "null", "true", "no",
]  # fmt: skip

scalars = st.one_of(
    st.sampled_from(VALUES),
    st.text(max_size=20),
    st.integers(min_value=-(10**12), max_value=10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
documents = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(keys, children, max_size=5)),
    max_leaves=30,
)
# Mostly-valid matrices with one part replaced: they get past the first checks and reach deep code.
VALID: dict[str, Any] = {
    "version": "1",
    "axes": {"torch": ["2.1.2"], "cuda": ["12.1"]},
    "bases": {
        "cuda": {"image": "nvidia/cuda:{cuda_full}-{cudnn_tag}{flavour}-ubuntu22.04", "os": "ubuntu22.04"}
    },
}
mutated = st.builds(lambda key, value: {**VALID, key: value}, st.sampled_from([*KEYS[:11], "zzz"]), documents)


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for directory, _, files in os.walk(root):
        for name in files:
            path = Path(directory, name)
            stat = path.lstat()
            out[str(path)] = (stat.st_size, stat.st_mtime_ns)
    return out


def load_and_render(text: str) -> None:
    """The CLI's `render` path on one matrix text; asserts the only writes are under out/."""
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "matrix.yaml").write_text(text, encoding="utf-8")
        before = snapshot(root)
        out = root / "out"
        try:
            plan = load_plan(root / "matrix.yaml")
            renderer = Renderer(plan)
            target = output_dir(plan, out)
            write_rendered(expected_files(plan, renderer, target), target)
        except ImagekitError as exc:
            assert "\n" not in exc.message, exc.message
        after = snapshot(root)
        written = {p for p in after if before.get(p) != after[p]}
        assert all(Path(p).is_relative_to(out) for p in written), written


FUZZ = settings(
    max_examples=300,
    deadline=2000,  # ms per example: a hang or an expansion bomb fails the test
    suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,  # the same examples in CI as here; a failure reproduces
)


@FUZZ
@given(documents)
def test_random_structures(document: Any) -> None:
    load_and_render(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(mutated)
def test_valid_matrix_with_one_part_replaced(document: Any) -> None:
    load_and_render(yaml.safe_dump(document, allow_unicode=True))


@FUZZ
@given(st.text(alphabet=st.sampled_from(list("ab:-[]{}&*!|>'\"#%@`,? \n\t0123456789.~")), max_size=120))
def test_random_yaml_text(text: str) -> None:
    load_and_render(text)
