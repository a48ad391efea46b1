"""`imagekit k8s --validate-on`: one Job per cell and GPU product, pinned to that product and to the
cell's architecture, running the image's probe with the GPU required; and the plan that names them."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from imagekit.core.errors import InputError
from imagekit.k8s import validate_on
from imagekit.k8s.options import Claim, JobOptions
from imagekit.k8s.validate_on import (
    PLAN_NAME,
    Product,
    job_name,
    parse_plan,
    parse_products,
    render_validation,
)
from imagekit.plan.matrix import load_plan
from imagekit.report.lockfile import Lock, LockEntry, merge_lock
from tests.conftest import REPO, run_cli
from tests.unit.report_samples import lock_entry

H100 = "NVIDIA-H100-80GB-HBM3"
L40S = "NVIDIA-L40S"
GH200 = "NVIDIA-GH200-480GB"


def shipped_lock() -> Lock:
    """A lock entry for every cell of the shipped matrix, on its own platform."""
    plan = load_plan(REPO / "matrix.yaml")
    repository = f"{plan.matrix.publish.registry}/{plan.matrix.publish.repository}"
    return Lock(
        {
            c.id: replace(
                lock_entry(c.id, digest=f"sha256:{n:064x}"), repository=repository, platform=c.platform
            )
            for n, c in enumerate(plan.cells, start=1)
        }
    )


def jobs(files: dict[str, str]) -> list[dict[str, Any]]:
    return [yaml.safe_load(text) for name, text in sorted(files.items()) if name.endswith(".yaml")]


def test_the_plan_reads_back_and_an_edited_one_is_one_line() -> None:
    rendered = render_validation(shipped_lock(), JobOptions(gpus=2), parse_products([L40S]))
    text = rendered.files[PLAN_NAME]
    assert parse_plan(text.encode(), "p") == rendered.plan
    assert {j.gpus for j in rendered.plan.jobs} == {2}
    data = json.loads(text)
    data["jobs"][0]["digest"] = "sha256:$(id)"
    with pytest.raises(InputError, match=r"^p: jobs\[0\]\.digest: .*write the Jobs again"):
        parse_plan(json.dumps(data).encode(), "p")
    data = json.loads(text)
    data["jobs"][0]["host_machine"] = "riscv64"
    with pytest.raises(InputError, match="host_machine 'riscv64' is no machine"):
        parse_plan(json.dumps(data).encode(), "p")
    data = json.loads(text)
    data["jobs"].append(data["jobs"][0])
    with pytest.raises(InputError, match="a Job is named twice"):
        parse_plan(json.dumps(data).encode(), "p")


def test_a_jobs_name_is_distinct_per_cell_product_and_digest() -> None:
    cell = "cuda-ubuntu22.04-torch2.5.1-cuda12.1-py3.10-runtime" + "-x" * 20
    names = {
        job_name(cell, product, digest)
        for product in (H100, L40S)
        for digest in ("sha256:" + "a" * 64, "sha256:" + "b" * 64)
    }
    assert len(names) == 4 and all(len(n) <= 63 and n[0].isalnum() and n[-1].isalnum() for n in names)


def test_products_and_their_hosts() -> None:
    assert Product.parse(GH200) == Product(GH200, "aarch64")  # gpus.yaml: a Grace host
    assert Product.parse("NVIDIA-GH200-480GB-SHARED").machine == "aarch64"  # time-sliced
    assert Product.parse(H100) == Product(H100, "x86_64")
    assert Product.parse("NVIDIA-GB10:arm64") == Product("NVIDIA-GB10", "aarch64")  # one gpus.yaml lacks
    for text, message in (
        ("NVIDIA H100", "not a nvidia.com/gpu.product label value"),
        ("-x", "not a nvidia.com/gpu.product label value"),
        ("X" * 64, "not a nvidia.com/gpu.product label value"),
        (f"{H100}:riscv", "the part after ':' is amd64 or arm64"),
        (f"{GH200}:amd64", "NVIDIA-GH200-480GB's hosts are aarch64 (gpus.yaml)"),
    ):
        with pytest.raises(InputError, match=re.escape(message)):
            Product.parse(text)
    with pytest.raises(InputError, match="given twice"):
        parse_products([L40S, L40S])


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (JobOptions(gpus=0), "give --gpus 1 or more"),
        (JobOptions(command=("sleep", "1")), "leave --command out"),
        (JobOptions(claims=(Claim("data", "/data"),)), "leave --pvc out"),
        (JobOptions(node_selector=(("nvidia.com/gpu.product", "X"),)), "sets both from each product"),
        (JobOptions(namespace="Team"), "--namespace 'Team': not a DNS label"),
        (JobOptions(gpu_resource="nvidia.com/mig-1g.10gb", gpus=2), "a MIG slice takes --gpus 1"),
    ],
)
def test_options_a_validate_on_job_cannot_carry_are_refused(options: JobOptions, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        render_validation(shipped_lock(), options, parse_products([L40S]))


def test_no_cell_for_the_products_hosts_is_refused() -> None:
    amd64_only = {c: e for c, e in shipped_lock().images.items() if e.platform == "linux/amd64"}
    with pytest.raises(
        InputError, match=r"no selected cell runs on the hosts of NVIDIA-GH200-480GB \(aarch64\)"
    ):
        render_validation(Lock(amd64_only), JobOptions(), parse_products([GH200]))


def entry_for(cell: str) -> LockEntry:
    return replace(lock_entry(cell), repository="ghcr.io/imagekit/pytorch")


def test_the_command_writes_the_jobs_and_the_plan(tmp_path: Path) -> None:
    plan = load_plan(REPO / "matrix.yaml")
    cells = [
        c.id for c in plan.cells if c.id.startswith("cuda-ubuntu24.04-torch2.15.0-cuda13.2-py3.12-runtime")
    ]
    assert len(cells) == 2  # amd64 and arm64
    lock = tmp_path / "images.lock.json"
    merge_lock(lock, {c: replace(entry_for(c), platform=p.platform) for c, p in zip(cells, (
        next(x for x in plan.cells if x.id == c) for c in cells), strict=True)})  # fmt: skip
    out = tmp_path / "validate"
    done = run_cli(
        "k8s", "-m", str(REPO / "matrix.yaml"), "--only", "*torch2.15.0*runtime*", "--lock", str(lock),
        "--out", str(out), "--validate-on", L40S, "--validate-on", GH200,
    )  # fmt: skip
    assert done.exit_code == 0, done.stderr
    written = sorted(p.name for p in out.iterdir())
    assert PLAN_NAME in written and len(written) == 3  # amd64 on L40S, arm64 on GH200, the plan
    assert done.stderr.count("imagekit: note: no Job for ") == 2
    jobs_read = parse_plan((out / PLAN_NAME).read_bytes(), "plan").jobs
    assert {(j.cell.endswith("-arm64"), j.product) for j in jobs_read} == {(False, L40S), (True, GH200)}
    refused = run_cli(
        "k8s", "-m", str(REPO / "matrix.yaml"), "--only", "*torch2.15.0*runtime*", "--lock", str(lock),
        "--out", str(tmp_path / "again"), "--validate-on", "NVIDIA L40S",
    )  # fmt: skip
    assert refused.exit_code == 2 and not (tmp_path / "again").exists()
    assert "not a nvidia.com/gpu.product label value" in refused.stderr


@pytest.mark.parametrize(
    "label",
    [
        "NVIDIA-B200-MIG-1g.23gb",
        "NVIDIA-B200-MIG-1g.23gb.me",
        "NVIDIA-B200-MIG-1g.23gb.me.all",
        "NVIDIA-B200-MIG-1g.23gb-me",
        "NVIDIA-B200-MIG-1g.23gb.gfx-SHARED",
        "NVIDIA-B200-MIG-1c.2g.45gb",
        "NVIDIA-B200-SHARED",
    ],
)
def test_every_mig_profile_of_a_product_label_names_its_gpu(label: str) -> None:
    """Feature discovery writes the device plugin's spelling of go-nvlib's profile after -MIG-."""
    assert validate_on.product_base(label) == "NVIDIA-B200"
