"""The command line's shared helpers: repeatable KEY=VALUE options, the one line of an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from imagekit.cli.app import parse_mapping, say
from imagekit.core.errors import InputError
from imagekit.core.text import LINE_CHARS
from tests.conftest import run_cli

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


def test_a_mirror_flag_is_an_image_prefix() -> None:
    result = run_cli("build", "--mirror", "nvidia/cuda=evil.example:99999/x", "--matrix", "/nonexistent.yaml")
    assert result.exit_code == 2
    assert result.stderr == (
        "imagekit: error: --mirror 'nvidia/cuda=evil.example:99999/x': 'evil.example:99999': port 99999"
        " is past 65535\n"
    )


@pytest.mark.parametrize(
    ("label", "problem"),
    [
        ("team=ml\u202eplatform", "holds U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("team=$(id)", "holds '$('"),
        ("te am=x", "expected SRC=DST"),
        ("<b>=x", "is not a label key"),
    ],
)
def test_a_label_flag_is_checked_before_anything_is_built(label: str, problem: str) -> None:
    result = run_cli("build", "--label", label, "--matrix", "/nonexistent.yaml")
    assert result.exit_code == 2 and problem in result.stderr and result.stderr.count("\n") == 1, (
        result.stderr
    )


def test_path_flags_complete_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from imagekit.cli.app import complete_path

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


# -- say -----------------------------------------------------------------------------------------------


def test_a_line_said_is_bounded_with_its_prefix(capsys: pytest.CaptureFixture[str]) -> None:
    """A cell's error of the bound's length, with "imagekit: failed: <cell>: " and its log's path
    around it, was printed past the bound."""
    say("failed", "cell-a: " + InputError("step 3: " + "x" * 100_000 + " (fix)").message + " (log: l)")
    (line,) = capsys.readouterr().err.splitlines()
    assert len(line) == LINE_CHARS
    assert line.startswith("imagekit: failed: cell-a: step 3: xxx") and line.endswith("(fix) (log: l)")
