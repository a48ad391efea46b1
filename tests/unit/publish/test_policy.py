"""The publish policy: which cells are published, alone or as a group of platforms under one index (every
platform, or the validated subset), and the group's identity and tags."""

from __future__ import annotations

import hashlib
from datetime import date
from pathlib import Path
from typing import Any

from imagekit.plan.cells import Plan
from imagekit.plan.matrix import load_plan
from imagekit.publish.policy import group_digest, select
from imagekit.report.store import BuildReport, CellResult
from imagekit.report.verification import GPU_CHECKS, CheckRecord, Verification

MATRIX = """
version: 1
axes:
  torch: ["2.11.0"]
  cuda: ["13.0"]
  base: [cuda]
  flavour: [runtime]
  platform: [linux/amd64, linux/arm64]
bases:
  cuda:
    image: "nvidia/cuda:{cuda_full}-{image_flavour}-ubuntu24.04"
    os: ubuntu24.04
publish:
  repository: acme/pytorch
  tags: {readable: "{torch}-{stack}", immutable: ["{readable}-{date}", "{readable}-{digest}"]}
"""


def test_a_group_digest_is_order_free_and_names_its_platforms() -> None:
    both = {"linux/amd64": "a" * 64, "linux/arm64": "b" * 64}
    lines = f"linux/amd64 {'a' * 64}\nlinux/arm64 {'b' * 64}\n"
    assert group_digest(both) == hashlib.sha256(lines.encode()).hexdigest()
    assert group_digest(dict(reversed(both.items()))) == group_digest(both)
    assert group_digest({"linux/amd64": "a" * 64}) != group_digest(both)  # a partial index is another
    assert group_digest({"linux/arm64": "a" * 64}) != group_digest({"linux/amd64": "a" * 64})


# -- the policy: every platform, or the validated subset ------------------------------------------


def plan_of(tmp_path: Path, extra: str = "") -> Plan:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX + extra)
    return load_plan(path)


def record(
    cell_id: str, verdict: str | None, status: str = "built", day: date = date(2026, 12, 1)
) -> CellResult:
    image_id = "sha256:" + hashlib.sha256(cell_id.encode()).hexdigest()
    input_digest = hashlib.sha256(f"in {cell_id}".encode()).hexdigest()
    verification = None
    if verdict is not None:
        # checks that support the verdict: it is derived again from them whenever a report is read
        names = GPU_CHECKS if verdict == "validated" else ("torch",)
        checks = tuple(CheckRecord(n, "pass" if verdict != "failed" else "fail", True) for n in names)
        gpu = verdict != "checked"
        verification = Verification(
            cell_id,
            image_id,
            "all",
            verdict,  # type: ignore[arg-type]
            gpu,
            gpu,
            checks,
            1.0,
            input_digest=input_digest,
        )
    return CellResult(
        id=cell_id,
        kind="cell",
        status=status,  # type: ignore[arg-type]
        base_image="b",
        image_id=image_id,
        input_digest=input_digest,
        verification=verification,
        built_on=day,
    )


def report_of(*records: CellResult) -> BuildReport:
    return BuildReport("matrix.yaml", "2026-12-01T00:00:00Z", 1.0, "e", records, ())


def test_an_index_is_published_only_when_every_platform_passes(tmp_path: Path) -> None:
    plan = plan_of(tmp_path)
    amd, arm = plan.cells
    # the arm64 image ran under emulation: checked, never validated; the policy wants validated
    chosen = select(plan, plan.cells, report_of(record(amd.id, "validated"), record(arm.id, "checked")))
    assert chosen.singles == () and chosen.groups == ()
    reasons = {r.cell: r.reason for r in chosen.refused}
    tag = amd.readable_tag
    assert reasons[arm.id].startswith(
        f"group {tag}, linux/arm64: publish policy gpu-validated needs validated"
    )
    assert reasons[arm.id].endswith("; no index published")
    assert reasons[amd.id].startswith(
        f"group {tag}, linux/amd64: not published: group {tag} is published only"
    )
    assert "linux/arm64 did not (publish.partial_index: true publishes the others)" in reasons[amd.id]


def test_partial_index_publishes_the_validated_platforms_and_lists_the_missing(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "  partial_index: true\n")
    amd, arm = plan.cells
    chosen = select(plan, plan.cells, report_of(record(amd.id, "validated"), record(arm.id, None, "failed")))
    (group,) = chosen.groups
    assert [m.cell for m in group.members] == [amd.id] and group.level == "validated"
    (missing,) = group.missing
    assert (missing.platform, missing.cell, missing.reason) == ("linux/arm64", arm.id, "its build failed")
    (refusal,) = chosen.refused  # still a refusal: exit 1 says a cell was not published
    assert refusal.cell == arm.id and refusal.reason.endswith("; left out of the group's index")
    # the {digest} of a partial index is its own: the platforms it holds, not the group's
    assert group.tags[2] == f"{amd.readable_tag}-{group_digest({'linux/amd64': amd_input(chosen)})[:12]}"
    # no platform passes: nothing, whatever partial_index says
    none = select(plan, plan.cells, report_of(record(amd.id, None, "failed"), record(arm.id, None, "failed")))
    assert none.groups == () and {r.cell for r in none.refused} == {amd.id, arm.id}
    assert all(r.reason.endswith("its build failed; no index published") for r in none.refused)


def amd_input(chosen: Any) -> str:
    return str(chosen.groups[0].members[0].input_digest)


def test_a_group_is_tagged_by_its_platforms_together(tmp_path: Path) -> None:
    plan = plan_of(tmp_path, "  policy: checked\n")
    amd, arm = plan.cells
    records = (record(amd.id, "validated", day=date(2026, 11, 30)), record(arm.id, "checked"))
    (group,) = select(plan, plan.cells, report_of(*records)).groups
    digest = group_digest({"linux/amd64": records[0].input_digest, "linux/arm64": records[1].input_digest})  # type: ignore[dict-item]
    tag = amd.readable_tag
    # as far as its least verified platform, dated as its last platform was built
    assert group.level == "checked"
    assert group.tags == (f"{tag}-checked", f"{tag}-20261201-checked", f"{tag}-{digest[:12]}-checked")
    assert [m.tags for m in group.members] == [(), ()]  # a platform has no tag of its own
    assert [m.platform for m in group.members] == ["linux/amd64", "linux/arm64"]
    # naming one platform's cell publishes its whole group: the readable tag names the index
    assert select(plan, [arm], report_of(*records)).groups == (group,)


def test_a_group_of_one_is_published_as_before(tmp_path: Path) -> None:
    path = tmp_path / "matrix.yaml"
    path.write_text(MATRIX.replace("  platform: [linux/amd64, linux/arm64]\n", ""))
    plan = load_plan(path)
    (cell,) = plan.cells
    chosen = select(plan, plan.cells, report_of(record(cell.id, "validated")))
    assert chosen.groups == () and [c.cell for c in chosen.singles] == [cell.id]
    assert chosen.singles[0].tags[0] == cell.readable_tag
