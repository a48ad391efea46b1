"""scripts/refresh-compat.py, run offline on the registry metadata recorded in tests/fixtures/compat/.

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

from tests.unit.projects import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "refresh-compat.py"
FIXTURES = REPO / "tests" / "fixtures" / "compat"
TODAY = "2026-11-30"


tool = load_script(SCRIPT)


def arguments(compat: Path, args: tuple[str, ...], reports: Path) -> list[str]:
    return ["--from-reports", str(reports), "--compat", str(compat), "--today", TODAY, *args]


def run(compat: Path, *args: str, reports: Path = FIXTURES) -> subprocess.CompletedProcess[str]:
    """The tool's main() in this process (a process each costs ~1 s of imports, ~40 times over);
    test_the_script_runs_as_a_program runs it as the program a user starts."""
    argv = arguments(compat, args, reports)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = tool.main(argv)
        except SystemExit as exc:  # argparse's usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


def run_program(compat: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, str(SCRIPT), *arguments(compat, args, FIXTURES)]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


@pytest.fixture
def compat(tmp_path: Path) -> Path:
    path = tmp_path / "compat.yaml"
    shutil.copy(FIXTURES / "compat-before.yaml", path)
    return path


def torch_section(path: Path) -> dict[str, Any]:
    section: dict[str, Any] = yaml.safe_load(path.read_text())["torch"]
    return section


def test_the_script_runs_as_a_program(compat: Path) -> None:
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


def test_pairing_rules() -> None:
    patch = tool.Patch("2.15.0", tool.parse_time("2026-10-28T15:17:10Z"))
    near = tool.parse_time("2026-10-28T15:21:45Z")
    long_before = tool.parse_time("2026-03-23T18:13:23Z")
    companions = [
        tool.Companion("2.11.0", long_before, None),  # pins no torch, but went out with 2.11.0
        tool.Companion("2.11.1", near, ">=2.11"),
    ]
    # uploaded with 2.15.0 and admitting it, but built for torch 2.11: no pair
    assert tool.pair(patch, companions, "torchaudio") is None
    same_line = [tool.Companion("2.15.1", near, ">=2.15")]
    assert tool.pair(patch, same_line, "torchaudio") == "2.15.1"
    assert (
        tool.pair(tool.Patch("2.12.0", tool.parse_time("2026-05-13T16:00:00Z")), companions, "torchaudio")
        is None
    )
    exact = [tool.Companion("0.29.0", long_before, "==2.14.0"), tool.Companion("0.29.1", near, ">=2.14.0")]
    assert tool.pair(tool.Patch("2.14.0", near), exact, "torchvision") == "0.29.0"  # an exact pin wins
    assert tool.pair(tool.Patch("2.14.1", near), exact, "torchvision") == "0.29.1"  # 0.29 is 2.14's line
    assert tool.pair(tool.Patch("2.15.0", near), exact, "torchvision") is None


def test_requirements_and_specifiers() -> None:
    assert tool.parse_requirement("torch (==2.9.1)").specifier == "==2.9.1"
    assert tool.parse_requirement("torch (>=2.14.0)").specifier == ">=2.14.0"
    assert tool.torch_requirement(["numpy", "scipy ; extra == 'scipy'"]) is None
    assert tool.torch_requirement(["torch>=2.11"]) == ">=2.11"
    assert tool.admits(">=2.14.0", "2.15.0") and not tool.admits(">=2.14.0", "2.13.0")
    assert tool.admits(">=3.10,!=3.14.1", "3.14.2") and not tool.admits(">=3.10,!=3.14.1", "3.14.1")
    assert tool.admits("==2.1.*", "2.1.2") and tool.admits("~=2.1", "2.9") and not tool.admits("~=2.1", "3.0")
    assert tool.exact_pin("==2.10.0") == "2.10.0" and tool.exact_pin(">=2.10") is None
    assert tool.variant_of("13.0.96") == "cu130" and tool.variant_of("11.7.99") == "cu117"


ARM_2_10 = [  # torch 2.10.0's aarch64 wheel (recorded): every CUDA requirement gated to x86_64
    'nvidia-cuda-runtime-cu12==12.8.90; platform_system == "Linux" and platform_machine == "x86_64"',
    'nvidia-cudnn-cu12==9.10.2.21; platform_system == "Linux" and platform_machine == "x86_64"',
    'triton==3.6.0; platform_system == "Linux" and platform_machine == "x86_64"',
    "optree>=0.13.0; extra == 'optree'",
]
ARM_2_15 = [  # torch 2.15.0's: CUDA 13 through the cuda-toolkit metapackage, on every Linux
    'cuda-toolkit[cublas,cudart]==13.2.2; platform_system == "Linux"',
    'cuda-bindings<14,>=13.0.3; platform_system == "Linux" and python_version < "3.15"',
    'nvidia-cudnn-cu13==9.26.0.51; platform_system == "Linux"',
]


def test_the_build_a_wheel_is_in_effect_comes_from_its_markers() -> None:
    assert tool.cuda_build(ARM_2_10, "3.12", "aarch64") == "cpu"
    assert tool.cuda_build(ARM_2_10, "3.12", "x86_64") == "cu128"  # the same metadata on x86_64
    assert tool.cuda_build(ARM_2_15, "3.12", "aarch64") == "cu132"
    old_pythons_only = ["nvidia-cuda-runtime-cu12==12.8.90; python_version < '3.13'"]
    assert tool.cuda_build(old_pythons_only, "3.12", "aarch64") == "cu128"
    assert tool.cuda_build(old_pythons_only, "3.13", "aarch64") == "cpu"  # the Python is evaluated too
    assert tool.cuda_build(["filelock", "numpy; extra == 'numpy'"], "3.12", "aarch64") == "cpu"
    with pytest.raises(tool.RefreshError, match="pins no CUDA toolkit or runtime version"):
        tool.cuda_build(ARM_2_15[2:], "3.12", "aarch64")  # cuDNN for CUDA 13, but which 13.x?


def test_wheel_names() -> None:
    wheel = tool.parse_wheel("torch-2.10.0-3-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert (wheel.version, wheel.python, wheel.machines) == ("2.10.0", (3, 12), {"x86_64"})
    assert tool.parse_wheel("torch-2.15.0-cp314-cp314t-manylinux_2_28_x86_64.whl").python is None
    assert tool.parse_wheel("torch-2.15.0-cp312-cp312-manylinux_2_28_aarch64.whl").machines == {"aarch64"}
    old_arm = tool.parse_wheel("torch-2.5.1-cp312-cp312-manylinux_2_17_aarch64.manylinux2014_aarch64.whl")
    assert old_arm.machines == {"aarch64"}
    assert not tool.parse_wheel("torch-2.5.1-cp312-none-macosx_11_0_arm64.whl").machines
    local = tool.parse_wheel("torch-2.12.1+cu132-cp312-cp312-manylinux_2_28_x86_64.whl")
    assert local.version == "2.12.1+cu132"


def test_an_html_index_page_is_read() -> None:
    # The shape of a PEP 503 page such as download.pytorch.org/whl/torch/ (made up for the test).
    page = (
        b"<html><body>\n"
        b'<a href="/whl/cu130/torch-2.12.1%2Bcu130-cp312-cp312-manylinux_2_28_x86_64.whl#sha256=00" '
        b'data-requires-python="&gt;=3.10">torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl</a><br/>\n'
        b'<a href="/whl/cu126/torch-2.12.1%2Bcu126-cp312-cp312-manylinux_2_28_x86_64.whl" data-yanked="">'
        b"torch-2.12.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl</a>\n</body></html>"
    )
    files = tool.parse_listing(page, "text/html")
    assert files[0] == {
        "filename": "torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_x86_64.whl",
        "requires-python": ">=3.10",
        "yanked": False,
    }
    assert files[1]["yanked"] is True
    names = [f["filename"] for f in files]
    assert tool.index_variants(names, "torch", {"2.12.1"}) == {"cu126", "cu130"}
    assert tool.by_cuda({"cu130", "cu126", "cu132"}) == ["cu126", "cu130", "cu132"]
    arm = [
        "torch-2.12.1+cpu-cp312-cp312-manylinux_2_28_aarch64.whl",
        "torch-2.12.1+cu130-cp312-cp312-manylinux_2_28_aarch64.whl",
        "torch-2.12.1-cp312-cp312-manylinux_2_28_aarch64.whl",  # PyPI's wheel, mirrored: no variant
        "torch-2.12.1+cpu-cp312-cp312-manylinux_2_28_x86_64.whl",
        "torch-2.12.1+cu126-cp312-cp312-manylinux_2_28_x86_64.whl",
    ]
    assert tool.index_variants(arm, "torch", {"2.12.1"}, "aarch64") == {"cpu", "cu130"}
    assert tool.index_variants(arm, "torch", {"2.12.1"}) == {"cu126"}  # x86_64: CUDA variants only
    assert tool.by_cuda({"cu130", "cpu", "cu128"}) == ["cpu", "cu128", "cu130"]


def test_splice_replaces_only_the_torch_section() -> None:
    text = "# head\n\ntorch:\n  old: 1\n  # owned comment\n\n# about cuda\ncuda:\n  x: 1\n"
    assert (
        tool.splice(text, "torch:\n  new: 2\n")
        == "# head\n\ntorch:\n  new: 2\n\n# about cuda\ncuda:\n  x: 1\n"
    )
    with pytest.raises(tool.RefreshError):
        tool.splice("cuda: {}\n", "torch:\n")


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

# What the recorded file list of cuda-toolkit (PyPI, 2026-12-07) holds: the newest final release of
# each CUDA minor. 13.4.0rc1 is a pre-release; the files 12.8.2.0, 12.9.2.0, 13.0.3.0, 13.1.2.0 and
# 13.4.1.0 are the releases 12.8.2 ... 13.4.1 to pip (PEP 440 pads with zeros).
RECORDED_TOOLKITS = {
    "11.8": "11.8.0",
    "12.0": "12.0.1",
    "12.1": "12.1.1",
    "12.2": "12.2.2",
    "12.3": "12.3.2",
    "12.4": "12.4.1",
    "12.5": "12.5.1",
    "12.6": "12.6.3",
    "12.8": "12.8.2",
    "12.9": "12.9.2",
    "13.0": "13.0.3",
    "13.1": "13.1.2",
    "13.2": "13.2.2",
    "13.3": "13.3.1",
    "13.4": "13.4.3",
    "13.5": "13.5.0",
}


def toolkit_listing() -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = json.loads((FIXTURES / "files-cuda-toolkit.json").read_text())["files"]
    return files


def test_the_recorded_toolkit_listing_gives_each_cuda_minors_newest_release() -> None:
    files = toolkit_listing()
    assert "cuda_toolkit-13.4.0rc1-py2.py3-none-any.whl" in [f["filename"] for f in files]
    assert tool.toolkit_releases(files) == RECORDED_TOOLKITS
    # a yanked release is no release: 13.5 falls back to nothing, 13.4 to its previous patch
    yanked = [
        {**f, "yanked": "broken metadata"}
        if f["filename"].startswith(("cuda_toolkit-13.5.", "cuda_toolkit-13.4.3"))
        else f
        for f in files
    ]
    found = tool.toolkit_releases(yanked)
    assert "13.5" not in found and found["13.4"] == "13.4.2"


def test_the_shipped_table_carries_the_recorded_toolkits() -> None:
    """imagekit/data/compat.yaml was refreshed from this recording: every row's toolkit is PyPI's."""
    rows = yaml.safe_load((REPO / "imagekit" / "data" / "compat.yaml").read_text())["cuda"]["releases"]
    assert {m: r.get("toolkit") for m, r in rows.items()} == {m: RECORDED_TOOLKITS.get(m) for m in rows}


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


def test_a_row_keeps_its_form_when_its_toolkit_is_written() -> None:
    assert tool.with_toolkit(' image: "12.1.1", minor_floor: "525.60.13" ', "12.1.1") == (
        ' image: "12.1.1", minor_floor: "525.60.13", toolkit: "12.1.1" '
    )
    assert tool.with_toolkit(' image: "13.4.2", checked: false ', "13.4.3") == (
        ' image: "13.4.2", toolkit: "13.4.3", checked: false '
    )
    assert tool.with_toolkit(' image: null, toolkit: "13.5.0", checked: false ', "13.5.1") == (
        ' image: null, toolkit: "13.5.1", checked: false '
    )


def test_a_table_without_a_cuda_section_is_one_line_exit_2(compat: Path) -> None:
    text = compat.read_text()
    compat.write_text(text.split("\ncuda:\n")[0] + "\n")
    before = compat.read_text()
    result = run(compat, "--since", "2.9", "--write")
    assert result.returncode == 2
    assert result.stderr.strip() == "refresh-compat: the compat file has no top-level `cuda:` key"
    assert compat.read_text() == before
