"""imagekit.refresh.compat, run offline on the registry metadata recorded in tests/fixtures/compat/.

The recording (see its NOTES.md) holds pip's dry-run reports for torch 2.9.0 ... 2.15.0 and the
torchvision / torchaudio releases of that time, PyPI's file lists, and compat.yaml as it stood
before the refresh (compat-before.yaml). PyTorch's own index was not reachable when it was made.
"""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.refresh import compat as tool

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "compat"
TODAY = "2026-11-30"


def arguments(compat: Path, args: tuple[str, ...], reports: Path) -> list[str]:
    return ["--from-reports", str(reports), "--compat", str(compat), "--today", TODAY, *args]


def run(compat: Path, *args: str, reports: Path = FIXTURES) -> subprocess.CompletedProcess[str]:
    """The tool's main() in this process (a process each costs ~1 s of imports, ~40 times over);
    test_the_module_runs_as_a_program runs it as the program a user starts."""
    argv = arguments(compat, args, reports)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = tool.main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_program(compat: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "imagekit.refresh.compat", *arguments(compat, args, FIXTURES)]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture
def compat(tmp_path: Path) -> Path:
    path = tmp_path / "compat.yaml"
    shutil.copy(FIXTURES / "compat-before.yaml", path)
    return path


def torch_section(path: Path) -> dict[str, Any]:
    section: dict[str, Any] = yaml.safe_load(path.read_text())["torch"]
    return section


def test_the_module_runs_as_a_program(compat: Path) -> None:
    """What a user starts: the same answer, streams and exit status as main() in this process."""
    program = run_program(compat, "--since", "2.9", "--check")
    assert program.returncode == 1, program.stderr  # the recorded table is stale
    in_process = run(compat, "--since", "2.9", "--check")
    assert (program.returncode, program.stdout, program.stderr) == (
        in_process.returncode,
        in_process.stdout,
        in_process.stderr,
    )


def test_the_refresh_prints_a_diff_and_leaves_the_file_alone(compat: Path) -> None:
    before = compat.read_text()
    result = run(compat, "--since", "2.9")
    assert result.returncode == 0, result.stderr
    assert compat.read_text() == before
    diff = result.stdout
    assert diff.startswith("--- a/compat.yaml\n+++ b/compat.yaml\n")
    for line in (
        '+  checked_on: "2026-11-30"  # date of the last refresh',
        '+    "2.15":',
        "+      pypi_default: cu132",
        '+        cu132: {cudnn: "9.26.0.51", nccl: "2.30.7", cudart: "13.2.86"}',
        # stable-ABI companions uploaded with it whose own requirement admits it (torchvision
        # 0.29.2: torch>=2.14.0; torchaudio 2.11.1: torch>=2.11): paired by requirement
        '+        "2.15.0": ["0.29.2", "2.11.1"]',
        '+        "2.12.0": ["0.27.0", null]',
    ):
        assert line in diff.splitlines(), line
    # What the registries cannot say is kept, and said so.
    assert "kept: 2.9: variants cu126, cu128, cu130" in result.stderr
    assert "kept: 2.15: variants unknown, only PyPI's cu132 listed" in result.stderr
    assert "kept: 2.15: aarch64 variants unknown, only PyPI's cu132 listed" in result.stderr
    # one line per release, before `checked`, in the order imagekit.facts.compat's records declare
    assert "+      aarch64: {pypi: cu130, variants: [cu130], checked: false}\n+      checked: false\n" in diff


def test_write_produces_the_new_entries(compat: Path) -> None:
    before = yaml.safe_load(compat.read_text())
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 0, result.stderr
    after = yaml.safe_load(compat.read_text())
    releases = after["torch"]["releases"]
    assert after["torch"]["checked_on"] == TODAY
    assert list(releases) == [f"2.{minor}" for minor in range(16)]

    assert releases["2.10"] == {
        "variants": ["cu128"],
        "pypi_default": "cu128",
        "cudnn_major": 9,
        "python": ["3.10", "3.14"],
        "libraries": {"cu128": {"cudnn": "9.10.2.21", "nccl": "2.27.5", "cudart": "12.8.90"}},
        "patches": {"2.10.0": ["0.25.0", "2.10.0"]},
        "checked": False,  # the variant list needs PyTorch's index
        # every nvidia-* and triton requirement of the aarch64 wheel is gated to x86_64
        "aarch64": {"pypi": "cpu", "variants": ["cpu"], "checked": False},
    }
    # torch 2.11 moved PyPI to CUDA 13 (cuda-toolkit 13.0.2); torchaudio 2.11.0 pins no torch.
    assert releases["2.11"]["pypi_default"] == "cu130"
    assert releases["2.11"]["libraries"]["cu130"] == {
        "cudnn": "9.19.0.56",
        "nccl": "2.28.9",
        "cudart": "13.0.96",
    }
    assert releases["2.11"]["patches"] == {"2.11.0": ["0.26.0", "2.11.0"]}
    # No torchaudio release went out with 2.12 ... 2.14.
    assert releases["2.12"]["patches"] == {"2.12.0": ["0.27.0", None], "2.12.1": ["0.27.1", None]}
    assert releases["2.14"]["patches"] == {"2.14.0": ["0.29.0", None], "2.14.1": ["0.29.1", None]}
    # aarch64: PyPI's wheel is a CUDA 13 build from 2.11 on (cuda-toolkit 13.0.2, 13.0.3, 13.2.2)
    assert releases["2.9"]["aarch64"]["pypi"] == "cpu"
    assert {m: releases[m]["aarch64"]["pypi"] for m in ("2.11", "2.12", "2.13", "2.14", "2.15")} == {
        "2.11": "cu130",
        "2.12": "cu130",
        "2.13": "cu130",
        "2.14": "cu130",
        "2.15": "cu132",
    }
    # PyTorch's index was not read: only PyPI's build is listed, and said to be unchecked
    assert releases["2.15"]["aarch64"] == {"pypi": "cu132", "variants": ["cu132"], "checked": False}
    # torch 2.15: CUDA 13.2 on PyPI, Python 3.11 ... 3.15.
    assert releases["2.15"]["pypi_default"] == "cu132"
    assert releases["2.15"]["python"] == ["3.11", "3.15"]
    assert releases["2.15"]["cudnn_major"] == 9

    # 2.9 was re-read: the registries agree with the table and add what it lacked.
    old_29 = before["torch"]["releases"]["2.9"]
    assert {k: releases["2.9"][k] for k in old_29} == old_29
    assert releases["2.9"]["libraries"] == {
        "cu128": {"cudnn": "9.10.2.21", "nccl": "2.27.5", "cudart": "12.8.90"}
    }
    assert releases["2.9"]["checked"] is True
    # Older releases keep their values; only the shape grows.
    for minor in (f"2.{n}" for n in range(9)):
        assert releases[minor] == {**before["torch"]["releases"][minor], "checked": True}
    # The rest of the file is untouched, but for each CUDA row's newest cuda-toolkit on PyPI.
    assert {k: v for k, v in after.items() if k not in ("torch", "cuda")} == {
        k: v for k, v in before.items() if k not in ("torch", "cuda")
    }
    rows = after["cuda"]["releases"]
    assert {m: {k: v for k, v in r.items() if k != "toolkit"} for m, r in rows.items()} == before["cuda"][
        "releases"
    ]
    assert {m: r.get("toolkit") for m, r in rows.items()} == {
        "11.7": None,  # PyPI has no cuda-toolkit 11.7
        "11.8": "11.8.0",
        "12.1": "12.1.1",
        "12.2": "12.2.2",
        "12.4": "12.4.1",
        "12.6": "12.6.3",
        "12.8": "12.8.2",  # the file is cuda_toolkit-12.8.2.0: pip matches it as 12.8.2
        "12.9": "12.9.2",
        "13.0": "13.0.3",
    }
    text, old_text = compat.read_text(), (FIXTURES / "compat-before.yaml").read_text()
    assert text.split("\ntorch:\n")[0] == old_text.split("\ntorch:\n")[0]
    assert text.split("\nnvidia_cuda_image:\n")[1] == old_text.split("\nnvidia_cuda_image:\n")[1]
    # one line per row, in the table's own form, `toolkit` before `checked`
    assert (
        '"13.0": { image: "13.0.1", driver: "580.82.07", minor_floor: "580.65.06",'
        ' toolkit: "13.0.3", checked: false }' in text
    )
    assert (
        '"11.8": { image: "11.8.0", driver: "520.61.05", minor_floor: "450.80.02", toolkit: "11.8.0" }'
        in text
    )


def test_a_second_run_on_its_own_output_changes_nothing(compat: Path) -> None:
    assert run(compat, "--since", "2.9", "--write").returncode == 0
    written = compat.read_text()
    again = run(compat, "--since", "2.9", "--check")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout == ""
    assert "no change" in again.stderr
    assert compat.read_text() == written


def test_check_fails_while_the_table_is_stale(compat: Path) -> None:
    result = run(compat, "--since", "2.9", "--check")
    assert result.returncode == 1
    assert result.stdout.startswith("--- a/compat.yaml")


def test_since_defaults_to_the_newest_release_in_the_table(compat: Path, tmp_path: Path) -> None:
    explicit = tmp_path / "explicit.yaml"
    shutil.copy(compat, explicit)
    assert run(compat, "--write").returncode == 0
    assert run(explicit, "--since", "2.9", "--write").returncode == 0
    assert compat.read_text() == explicit.read_text()


def test_facts_the_registries_cannot_give_are_kept(compat: Path) -> None:
    assert run(compat, "--since", "2.9", "--write").returncode == 0
    data = yaml.safe_load(compat.read_text())
    entry = data["torch"]["releases"]["2.12"]
    entry["variants"] = ["cu126", "cu130", "cu132"]
    entry["checked"] = True
    entry["libraries"]["cu126"] = {"cudnn": "9.10.2.21", "nccl": "2.29.3"}
    del data["torch"]["releases"]["2.12"]["python"]  # a fact the registries do give: it comes back
    text = compat.read_text()
    compat.write_text(
        text.split("\ntorch:\n")[0]
        + "\n"
        + yaml.safe_dump({"torch": data["torch"]}, sort_keys=False)
        + "\ncuda:\n"
        + text.split("\ncuda:\n")[1]
    )
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 0, result.stderr
    entry = torch_section(compat)["releases"]["2.12"]
    assert entry["variants"] == ["cu126", "cu130", "cu132"]
    assert entry["checked"] is True
    assert entry["python"] == ["3.10", "3.14"]
    assert entry["libraries"] == {
        "cu126": {"cudnn": "9.10.2.21", "nccl": "2.29.3"},
        "cu130": {"cudnn": "9.20.0.48", "nccl": "2.29.7", "cudart": "13.0.96"},
    }
    assert "kept: 2.12: variants cu126, cu130, cu132 (PyTorch's index not read)" in result.stderr
    assert "kept: 2.12: libraries of cu126 (not read from PyTorch's index)" in result.stderr
    assert "kept: 2.12: libraries of cu132" not in result.stderr  # none were recorded: nothing to keep


@pytest.mark.parametrize(
    "recording", ["torch-2.13.0.json", "torch-2.13.0-aarch64.json", "files-cuda-toolkit.json"]
)
def test_a_missing_recording_is_an_error_not_a_guess(compat: Path, tmp_path: Path, recording: str) -> None:
    partial = tmp_path / "partial"
    shutil.copytree(FIXTURES, partial)
    (partial / recording).unlink()
    before = compat.read_text()
    result = run(compat, "--since", "2.9", "--write", reports=partial)
    assert result.returncode == 2
    assert f"{recording} is not recorded" in result.stderr
    assert compat.read_text() == before


def test_a_table_imagekit_would_refuse_is_not_written(compat: Path) -> None:
    """The refreshed releases are read with imagekit's own record types before anything is written:
    a fact kept from the table that imagekit refuses (a variant that is none) stops the refresh."""
    text = compat.read_text()
    compat.write_text(text.replace('"2.9":\n      variants: [cu126,', '"2.9":\n      variants: [gpu,'))
    before = compat.read_text()
    assert "variants: [gpu," in before
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 2
    assert "unexpected shape (ValidationError" in result.stderr and "Traceback" not in result.stderr
    assert compat.read_text() == before


def test_the_recording_is_pips_own_output() -> None:
    reports = sorted(FIXTURES.glob("torch-2.*.json"))
    assert len(reports) == 20  # ten patches, each on x86_64 and on aarch64
    for path in reports:
        report = yaml.safe_load(path.read_text())  # JSON is YAML
        assert report["version"] == "1" and report["pip_version"]
        (torch,) = [i for i in report["install"] if i["metadata"]["name"] == "torch"]
        url = torch["download_info"]["url"]
        assert url.startswith("https://files.pythonhosted.org/packages/")
        assert url.endswith("_aarch64.whl" if path.stem.endswith("-aarch64") else "_x86_64.whl")
        assert torch["requested"] is True


MALFORMED = {
    "not JSON": "{",
    "a JSON list": "[]",
    "an empty object": "{}",
    "wrong types": '{"files": 7, "install": "x", "environment": []}',
    "bad UTF-8": b"\xff\xfe{}",
    "deep nesting": "[" * 100_000 + "]" * 100_000,
}


RECORDINGS = [
    "files-torch.json",
    "torch-2.13.0.json",
    "torch-2.13.0-aarch64.json",
    "torchvision-0.29.2.json",
    "files-cuda-toolkit.json",
]


@pytest.mark.parametrize("content", MALFORMED.values(), ids=MALFORMED.keys())
@pytest.mark.parametrize("recording", RECORDINGS)
def test_a_malformed_recording_is_one_line_exit_2_and_the_file_is_kept(
    compat: Path, tmp_path: Path, recording: str, content: str | bytes
) -> None:
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES, broken)
    target = broken / recording
    target.write_bytes(content if isinstance(content, bytes) else content.encode())
    before = compat.read_text()
    result = run(compat, "--since", "2.9", "--write", reports=broken)
    assert result.returncode == 2, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("refresh-compat: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert compat.read_text() == before


@pytest.mark.parametrize("content", ["{", "[]", "torch: 7\n", "torch: {releases: 3}\n"])
def test_a_malformed_compat_file_is_one_line_exit_2(compat: Path, content: str) -> None:
    compat.write_text(content)
    result = run(compat, "--since", "2.9")
    assert result.returncode == 2, result.stderr[-2000:]
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert compat.read_text() == content


@pytest.mark.parametrize("length", [300, 5_000])
def test_a_listing_with_an_absurdly_long_version_is_one_line_exit_2(
    compat: Path, tmp_path: Path, length: int
) -> None:
    """A release whose version is longer than a file name: "File name too long" was a traceback."""
    broken = tmp_path / "broken"
    shutil.copytree(FIXTURES, broken)
    listing = json.loads((broken / "files-torch.json").read_text())
    version = "2.13." + "9" * length
    for machine in ("x86_64", "aarch64"):
        listing["files"].append(
            {
                "filename": f"torch-{version}-cp312-cp312-manylinux_2_28_{machine}.whl",
                "requires-python": ">=3.10",
                "upload-time": "2026-11-12T15:23:52.109307Z",
                "yanked": False,
            }
        )
    (broken / "files-torch.json").write_text(json.dumps(listing))
    before = compat.read_text()
    result = run(compat, "--since", "2.9", "--write", reports=broken)
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("refresh-compat: ") and "Traceback" not in result.stderr
    assert len(line) < 400
    assert compat.read_text() == before


def test_a_login_in_a_flag_is_masked_in_a_usage_error(compat: Path) -> None:
    """argparse repeats what it cannot parse: a mistyped --index-url with a login printed it."""
    result = run(compat, "--index-urll", "https://mirror-user:s3cret@mirror.example/simple")
    assert result.returncode == 2
    assert "s3cret" not in result.stdout + result.stderr
    assert "https://***@mirror.example/simple" in result.stderr


# -- the CUDA rows' `toolkit`: PyPI's cuda-toolkit releases ------------------------------------------


def test_cuda_minors_past_the_table_are_notes_not_rows(compat: Path) -> None:
    """compat-before.yaml ends at CUDA 13.0: 13.1 ... 13.5 need a row whose facts PyPI does not give."""
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if "the table has no row for it" in line]
    assert [line.split(":")[1].strip() for line in notes] == [
        "CUDA 13.1",
        "CUDA 13.2",
        "CUDA 13.3",
        "CUDA 13.4",
        "CUDA 13.5",
    ]
    assert "note: CUDA 13.5: cuda-toolkit 13.5.0 is on the index" in result.stderr
    assert "CUDA 12.3" not in result.stderr  # older minors the table leaves out are not news
    assert "13.5" not in yaml.safe_load(compat.read_text())["cuda"]["releases"]


def test_a_table_without_a_cuda_section_is_one_line_exit_2(compat: Path) -> None:
    text = compat.read_text()
    compat.write_text(text.split("\ncuda:\n")[0] + "\n")
    before = compat.read_text()
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 2
    assert result.stderr.strip() == "refresh-compat: the compat file has no top-level `cuda:` key"
    assert compat.read_text() == before


def test_write_replaces_no_link(compat: Path, tmp_path: Path) -> None:
    """--write goes through imagekit's atomic write: a link where the table is (planted, or a
    checkout's) is refused in one line, never replaced by a file nor written through."""
    target = tmp_path / "elsewhere.yaml"
    compat.rename(target)
    compat.symlink_to(target)
    before = target.read_text()
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 2, result.stderr[-2000:]
    (line,) = [line for line in result.stderr.splitlines() if "symbolic link" in line]
    assert line.startswith("refresh-compat: ") and str(compat) in line
    assert compat.is_symlink() and target.read_text() == before
