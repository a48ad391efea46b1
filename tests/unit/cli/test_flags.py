"""The flags commands share: repeatable KEY=VALUE options, --registry, and every path flag's checks
(completion, bounds)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from imagekit.builds.command_line import DEFAULT_MATRIX
from imagekit.cli.commands import app
from imagekit.cli.flags import complete_path, parse_mapping
from imagekit.core.errors import InputError
from tests.conftest import REPO, run_cli
from tests.unit.cli.samples import V1_STATE, M

MIRROR_HINT = "expected SRC=DST (like nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda)"


# -- parse_mapping -----------------------------------------------------------------------------------


def test_parse_mapping_keeps_pairs_in_order() -> None:
    pairs = ["nvidia/cuda=127.0.0.1:5000/mirror/nvidia-cuda", "docker.io=mirror.local", "k=a=b"]
    assert parse_mapping(pairs, "--mirror") == (
        ("nvidia/cuda", "127.0.0.1:5000/mirror/nvidia-cuda"),
        ("docker.io", "mirror.local"),
        ("k", "a=b"),  # only the first '=' separates
    )
    assert parse_mapping([], "--label") == ()


@pytest.mark.parametrize(
    "pair", ["nvidia/cuda", "=mirror/cuda", "nvidia/cuda=", "=", "a = b", "a=b c", "a=\tb"]
)
def test_parse_mapping_rejects_malformed_pairs(pair: str) -> None:
    with pytest.raises(InputError) as caught:
        parse_mapping(["ok=fine", pair], "--mirror")
    assert caught.value.message == f"--mirror {pair!r}: {MIRROR_HINT}"


def test_parse_mapping_names_the_option() -> None:
    with pytest.raises(InputError, match=r"^--label 'team': expected SRC=DST"):
        parse_mapping(["team"], "--label")


def test_parse_mapping_is_bounded() -> None:
    with pytest.raises(InputError, match=r"^--label: 300,002 characters; at most 4,096$"):
        parse_mapping(["a=" + "b" * 300_000], "--label")


# -- --registry -------------------------------------------------------------------------------------

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


# -- path flags -------------------------------------------------------------------------------------


def test_path_flags_complete_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "matrix.yaml").write_text("")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "a.yaml").write_text("")
    monkeypatch.chdir(tmp_path)
    assert complete_path("") == ["matrix.yaml", "out/"]
    assert complete_path("ma") == ["matrix.yaml"]
    assert complete_path("out/") == ["out/a.yaml"]
    assert complete_path("./o") == ["./out/"]
    assert complete_path(f"{tmp_path}/m") == [f"{tmp_path}/matrix.yaml"]
    assert complete_path("/") and all(
        c.startswith("/") and not c.startswith("//") for c in complete_path("/")
    )
    assert complete_path("nothing/here") == []


LONG = "n" * 300


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


def test_every_commands_matrix_default_is_the_one_the_build_stage_reads() -> None:
    """One ``matrix.yaml`` default for every command and for the no-change answer, which reads
    ``imagekit build``'s line before typer does (cli/flags held a second ``Path("matrix.yaml")``)."""
    defaults = {
        command.callback.__name__: inspect.signature(command.callback).parameters["matrix"].default
        for command in app.registered_commands
        if command.callback is not None and "matrix" in inspect.signature(command.callback).parameters
    }
    assert len(defaults) >= 8, defaults
    assert all(d is DEFAULT_MATRIX or d is None for d in defaults.values()), defaults
