"""imagekit.refresh.cuda_wheels, offline on the pip reports recorded in tests/fixtures/cuda_wheels/."""

from __future__ import annotations

import contextlib
import io
import json
import os
import stat
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.facts.cuda_wheels import load_cuda_wheels, parse_cuda_wheels
from imagekit.refresh import cuda_wheels as tool

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "cuda_wheels"


def test_the_shipped_table_is_what_the_recorded_reports_give(tmp_path: Path) -> None:
    """Every entry PyPI's reports give is the shipped one; the entries entered by hand from other
    sources (cu118, 2.5.1 cu121: PyPI serves other builds), every source note and the bundled
    builds are kept by a rewrite."""
    shipped = (REPO / "imagekit" / "data" / "cuda_wheels.yaml").read_text(encoding="utf-8")
    out = tmp_path / "cuda_wheels.yaml"
    out.write_text(shipped, encoding="utf-8")
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert tool.main(["--from-reports", str(FIXTURES), "--data", str(out), "--today", "2026-12-03",
                          "--index-url", "https://pypi.org/simple", "--write"]) == 0  # fmt: skip
    assert out.read_text(encoding="utf-8") == shipped
    # from nothing, the reports give the same pins for every build they read, each with a note
    empty = tmp_path / "empty.yaml"
    empty.write_text('checked_on: ""\nwheels: {}\n', encoding="utf-8")
    with contextlib.redirect_stderr(io.StringIO()):
        assert tool.main(["--from-reports", str(FIXTURES), "--data", str(empty), "--today", "2026-12-03",
                          "--index-url", "https://pypi.org/simple", "--write"]) == 0  # fmt: skip
    fresh, table = parse_cuda_wheels(yaml.safe_load(empty.read_text())), load_cuda_wheels()
    assert fresh.pins and all(table.pins[build] == pins for build, pins in fresh.pins.items())
    assert fresh.sources[("2.1.2", "cu121", "x86_64")].startswith("pip --dry-run --report of torch==2.1.2")
    # PyPI's other builds are refused by name, never recorded under the cell's variant
    assert (
        "torch-2.5.1-cu121-x86_64: https://pypi.org/simple serves torch 2.5.1 as a cu124 build"
        in stderr.getvalue()
    )
    assert (
        "torch-2.14.1-cu126-aarch64: https://pypi.org/simple serves torch 2.14.1 as a cu130 build"
        in stderr.getvalue()
    )


# -- hostile input: every line masked, every input checked, one line and an exit code each ------------

SHIPPED = REPO / "imagekit" / "data" / "cuda_wheels.yaml"
BUILD = "torch-2.1.2-cu121-x86_64"  # a build the shipped table has an entry for


def run(*argv: str) -> tuple[int, str, str]:
    """The script's exit code, stdout and stderr; a usage error (SystemExit) is its exit code too."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = tool.main(list(argv))
        except SystemExit as exc:
            code = int(exc.code or 0)
    return code, out.getvalue(), err.getvalue()


def offline(reports: Path, data: Path, *more: str) -> tuple[int, str, str]:
    return run("--from-reports", str(reports), "--data", str(data), "--today", "2026-12-03",
               "--index-url", "https://pypi.org/simple", *more)  # fmt: skip


def recorded(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the recorded reports and of the shipped table, to be spoiled one at a time."""
    reports = tmp_path / "reports"
    reports.mkdir()
    for path in FIXTURES.glob("*.json"):
        (reports / path.name).write_bytes(path.read_bytes())
    data = tmp_path / "cuda_wheels.yaml"
    data.write_bytes(SHIPPED.read_bytes())
    return reports, data


def fixture(key: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((FIXTURES / f"{key}.json").read_text(encoding="utf-8"))
    return loaded


def one_error_line(err: str) -> str:
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("refresh-cuda-wheels: error: "), err
    return lines[0]


@contextlib.contextmanager
def released(fifo: Path) -> Iterator[None]:
    """A FIFO that a reader blocked on it would see end (a writer opens and closes it), so a test of
    a reader that opens it can fail, not hang; a reader that never opens it leaves no writer behind."""
    done = threading.Event()

    def release() -> None:
        while not done.wait(0.05):
            with contextlib.suppress(OSError):  # ENXIO: no reader has it open yet
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=release, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def test_a_login_in_the_index_url_is_masked_in_every_line(tmp_path: Path) -> None:
    reports, data = recorded(tmp_path)
    url = "https://mirror-user:s3cret@mirror.example/simple"
    code, out, err = run("--from-reports", str(reports), "--data", str(data), "--index-url", url)
    assert code == 0
    assert "not read: torch-2.5.1-cu121-x86_64: https://***@mirror.example/simple serves torch 2.5.1" in err
    assert "s3cret" not in out + err
    # argparse repeats what it cannot parse; a URL this script refuses is repeated masked
    for argv in (["--index-urll", url], ["--index-url", url.replace("/simple", ":99999/simple")]):
        code, out, err = run(*argv)
        assert code == 2 and "s3cret" not in out + err and "***@mirror.example" in err, err


def _spoiled(change: Callable[[dict[str, Any]], Any]) -> Callable[[], str]:
    def text() -> str:
        report = fixture(BUILD)
        change(report)
        return json.dumps(report)

    return text


def _metadata(report: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(i["metadata"] for i in report["install"] if i["metadata"]["name"] == name)
    return found


HOSTILE_REPORTS: dict[str, tuple[Callable[[], str], str]] = {
    "nested 100,000 deep": (lambda: "[" * 100_000 + "]" * 100_000, "nested deeper than 32 levels"),
    "a list at the top": (lambda: "[]", "the top level is a list, not an object"),
    "environment a list": (_spoiled(lambda r: r.update(environment=[])), "environment is a list"),
    "an environment value a number": (
        _spoiled(lambda r: r["environment"].update(platform_machine=64)),
        "environment.platform_machine is a number, not a string",
    ),
    "install an object": (_spoiled(lambda r: r.update(install={})), "install is an object, not a list"),
    "metadata null": (
        _spoiled(lambda r: r["install"][0].update(metadata=None)),
        "install[0].metadata is null",
    ),
    "a version a list": (
        _spoiled(lambda r: _metadata(r, "nvidia-cuda-runtime-cu12").update(version=["12.1.105"])),
        ".metadata.version is a list, not a string",
    ),
    "a version that is none": (
        _spoiled(lambda r: _metadata(r, "nvidia-cuda-runtime-cu12").update(version="twelve")),
        "'twelve' is no version",
    ),
    "a name that is none": (
        _spoiled(lambda r: _metadata(r, "torch").update(name="torch; rm -rf /")),
        "is no project name",
    ),
    "a requirement a number": (
        _spoiled(lambda r: _metadata(r, "torch")["requires_dist"].insert(0, 12)),
        "install[0].metadata.requires_dist[0] is a number, not a string",
    ),
    "requires_dist a string": (
        _spoiled(lambda r: _metadata(r, "torch").update(requires_dist="nvidia-cudnn-cu12==8.9.2.26")),
        "requires_dist is a string, not a list",
    ),
    "a requirement that is none": (
        _spoiled(lambda r: _metadata(r, "torch")["requires_dist"].insert(0, "nvidia-cudnn-cu12 ==; $(id)")),
        "torch requires 'nvidia-cudnn-cu12 ==; $(id)', which is no requirement (PEP 508)",
    ),
    "torch installed twice": (
        _spoiled(lambda r: r["install"].append(r["install"][0])),
        "it installs torch twice",
    ),
    "a runtime without a minor version": (
        _spoiled(lambda r: _metadata(r, "nvidia-cuda-runtime-cu12").update(version="12")),
        "names no CUDA minor version",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_REPORTS))
def test_a_hostile_report_is_one_line_naming_the_build_and_its_entry_is_kept(
    tmp_path: Path, case: str
) -> None:
    make, problem = HOSTILE_REPORTS[case]
    reports, data = recorded(tmp_path)
    (reports / f"{BUILD}.json").write_text(make(), encoding="utf-8")
    code, _, err = offline(reports, data, "--write")
    assert code == 0, err
    [line] = [line for line in err.splitlines() if BUILD in line]
    assert line.startswith(f"not read: {BUILD}: "), line
    assert problem in line and line.endswith("; the entry is kept"), line
    assert data.read_bytes() == SHIPPED.read_bytes()  # the entry as it was; the others read again


@pytest.mark.parametrize(
    ("key", "report", "change", "problem"),
    [
        # a recording of torch 2.4.1 (cu121 too) saved under 2.5.1's name
        ("torch-2.5.1-cu121-x86_64", "torch-2.4.1-cu121-x86_64", None,
         "the report resolves torch '2.4.1', not 2.5.1: another build's report"),
        # the aarch64 recording under the x86_64 name: the same wheels' names, another machine's
        ("torch-2.15.0-cu132-x86_64", "torch-2.15.0-cu132-aarch64", None,
         "the report was resolved for 'aarch64', not x86_64: another build's report"),
        # an index's cu118 build by its local version label
        (BUILD, BUILD, "2.1.2+cu118", "the report resolves torch '2.1.2+cu118', a cu118 build, not cu121"),
    ],
)  # fmt: skip
def test_a_report_of_another_build_is_refused_naming_both(
    tmp_path: Path, key: str, report: str, change: str | None, problem: str
) -> None:
    reports, data = recorded(tmp_path)
    data.write_text('checked_on: ""\nwheels: {}\n', encoding="utf-8")
    other = fixture(report)
    if change:
        _metadata(other, "torch")["version"] = change
    (reports / f"{key}.json").write_text(json.dumps(other), encoding="utf-8")
    code, _, err = offline(reports, data, "--write")
    assert code == 0
    assert f"not read: {key}: {problem}" in err, err
    torch, variant, machine = key.split("-")[1:]
    written = parse_cuda_wheels(yaml.safe_load(data.read_text(encoding="utf-8")))
    assert written.pinned(torch, variant, machine) is None  # never recorded as the build asked for


def test_each_not_read_line_names_the_build(tmp_path: Path) -> None:
    reports, data = recorded(tmp_path)
    (reports / f"{BUILD}.json").write_text("not json", encoding="utf-8")
    (reports / "torch-2.2.2-cu121-x86_64.json").unlink()
    code, _, err = offline(reports, data)
    assert code == 0
    lines = err.splitlines()
    assert all(line.startswith("not read: torch-") for line in lines), lines
    assert f"not read: {BUILD}: not a pip installation report: not JSON (Expecting value" in err
    assert "not read: torch-2.2.2-cu121-x86_64: no report torch-2.2.2-cu121-x86_64.json in" in err


def _link(data: Path) -> None:
    target = data.with_name("elsewhere.yaml")
    data.rename(target)
    data.symlink_to(target)


def _directory(data: Path) -> None:
    data.unlink()
    data.mkdir()


HOSTILE_TABLES: dict[str, tuple[Callable[[Path], Any], str]] = {
    "not YAML": (lambda p: p.write_text("wheels: [\n", encoding="utf-8"), "YAML syntax error"),
    "a list": (lambda p: p.write_text("- wheels\n", encoding="utf-8"), "wheels: expected a mapping"),
    "pins a number": (
        lambda p: p.write_text('wheels: {"2.1.2": {cu121: {x86_64: [[1]]}}}\n', encoding="utf-8"),
        "wheels.2.1.2.cu121.x86_64: a list is not project==version",
    ),
    "variants a list": (
        lambda p: p.write_text('wheels: {"2.1.2": [1]}\n', encoding="utf-8"),
        "wheels.'2.1.2'",
    ),
    "a pin of no CUDA wheel": (
        lambda p: p.write_text('wheels: {"2.1.2": {cu121: {x86_64: [torch==2.1.2]}}}\n', encoding="utf-8"),
        "'torch==2.1.2' is not one of CUDA's wheels",
    ),
    "nested 10,000 deep": (lambda p: p.write_text("[" * 10_000, encoding="utf-8"), "nesting deeper than 64"),
    "not UTF-8": (lambda p: p.write_bytes(b"wheels: {}\n\xff\xfe\n"), "not UTF-8 text (byte 11)"),
    "checked_on a list": (
        lambda p: p.write_text("checked_on: [1]\nwheels: {}\n", encoding="utf-8"),
        "checked_on: a list is not a date",
    ),
    "checked_on forging a line": (
        lambda p: p.write_text("checked_on: '2026-12-03\"'\nwheels: {}\n", encoding="utf-8"),
        "is not a date",
    ),
    "a symbolic link": (_link, "is a symbolic link"),
    "a directory": (_directory, "not a regular file"),
    "larger than 1 MB": (lambda p: os.truncate(p, 1_000_001), "larger than 1000000 bytes"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TABLES))
def test_a_table_that_is_no_table_is_one_line_exit_2_nothing_written(tmp_path: Path, case: str) -> None:
    spoil, problem = HOSTILE_TABLES[case]
    reports, data = recorded(tmp_path)
    spoil(data)
    before = sorted(
        (p.name, p.is_symlink(), p.read_bytes() if p.is_file() else b"") for p in tmp_path.iterdir()
    )
    code, out, err = offline(reports, data, "--write")
    assert code == 2 and not out
    assert problem in one_error_line(err)
    assert str(data) in err
    assert (
        sorted((p.name, p.is_symlink(), p.read_bytes() if p.is_file() else b"") for p in tmp_path.iterdir())
        == before
    )


def test_a_fifo_as_the_table_is_refused_before_it_is_read(tmp_path: Path) -> None:
    reports, data = recorded(tmp_path)
    data.unlink()
    os.mkfifo(data)
    with released(data):
        code, _, err = offline(reports, data, "--write")
    assert code == 2 and "not a regular file" in one_error_line(err)
    assert stat.S_ISFIFO(data.stat().st_mode)


def test_a_fifo_as_a_report_is_not_read_and_named(tmp_path: Path) -> None:
    reports, data = recorded(tmp_path)
    (reports / f"{BUILD}.json").unlink()
    os.mkfifo(reports / f"{BUILD}.json")
    with released(reports / f"{BUILD}.json"):
        code, _, err = offline(reports, data)
    assert code == 0
    assert f"not read: {BUILD}: " in err and "is a FIFO, not a regular file" in err, err


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["--today", "2026-02-30"], "--today: '2026-02-30' is not a date"),
        (["--today", '2026-12-03"\nwheels: {}'], "is not a date"),
        (["--index-url", "ftp://mirror.example/simple"], "is not an index's http(s) or file URL"),
        (["--index-url", "https://mirror.example/simple\nnot read: forged"], "not printable ASCII"),
        (["--index-url", "https://mirror.example/" + "x" * 3_000], "a URL has at most 2,048"),
        (["--data", "x" * 300], "--data: 'xxxxxxxx"),
    ],
)
def test_a_bad_flag_is_one_line_exit_2(tmp_path: Path, argv: list[str], problem: str) -> None:
    reports, data = recorded(tmp_path)
    code, out, err = run("--from-reports", str(reports), "--data", str(data), *argv, "--write")
    assert code == 2 and not out
    assert problem in one_error_line(err)
    assert data.read_bytes() == SHIPPED.read_bytes()


def test_reports_directories_that_cannot_be_used_are_one_line(tmp_path: Path) -> None:
    reports, data = recorded(tmp_path)
    code, _, err = run("--from-reports", str(data), "--data", str(data))
    assert code == 2 and "--from-reports" in one_error_line(err) and "not a directory" in err
    code, _, err = run("--from-reports", str(reports), "--data", str(data), "--save-reports", str(data))
    assert code == 2 and str(data) in one_error_line(err)


def test_saved_reports_are_trimmed_to_what_is_read_and_hold_no_login(tmp_path: Path) -> None:
    """pip's report names each wheel's URL (an index's login with it); what is saved is what the
    script reads, so the recordings read again give the same table."""
    reports, data = recorded(tmp_path)
    full = fixture(BUILD)
    full["install"][0]["download_info"] = {"url": "https://user:s3cret@mirror.example/torch.whl"}
    full["install"][0]["metadata"]["description"] = "a long description"
    (reports / f"{BUILD}.json").write_text(json.dumps(full), encoding="utf-8")
    saved = tmp_path / "saved"
    code, _, _ = offline(reports, data, "--save-reports", str(saved))
    assert code == 0
    for path in FIXTURES.glob("*.json"):  # the recordings are trimmed already: saved as they are
        assert (saved / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_build_whose_index_wheel_bundles_cuda_is_read_where_the_cell_installs_it(tmp_path: Path) -> None:
    """torch 2.1.2 cu121 installs from PyPI (PyTorch's index's wheel bundles CUDA): the refresh
    reads it there, pip's default index when the matrix names none; 2.2.2 from PyTorch's index."""
    from testbed.waivers import WAIVE_OLD_TORCH

    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(
        'version: 1\naxes: {torch: ["2.1.2", "2.2.2"], cuda: ["12.1"], base: [cuda], flavour: [runtime]}\n'
        'bases: {cuda: {image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu22.04", os: ubuntu22.04}}\n'
        'sources: {pip: {torch_index_url: "https://download.pytorch.org/whl/{variant}"}}\n' + WAIVE_OLD_TORCH,
        encoding="utf-8",
    )
    found = {build.torch: build.index_url for build in tool.builds_of(matrix, None)}
    assert found == {"2.1.2": "https://pypi.org/simple", "2.2.2": "https://download.pytorch.org/whl/cu121"}
