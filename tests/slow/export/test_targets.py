"""tests/unit/export/test_targets.py's slow tests: it renders the shipped matrix twice and materialises every
cell's build context, and runs `imagekit matrix` once per cell."""

from __future__ import annotations

import json
from pathlib import Path

from imagekit.export.targets import bake_target_name
from imagekit.plan.matrix import load_plan
from imagekit.plan.source import source_state
from imagekit.render.dockerfile import Renderer
from tests.conftest import REPO, run_cli
from tests.unit.export.test_targets import BAKE_NAME


def test_bake_file_targets_point_at_materialised_contexts(tmp_path: Path) -> None:
    context_dir = tmp_path / "bake"
    result = run_cli(
        "matrix", "-m", str(REPO / "matrix.yaml"), "-f", "bake", "--context-dir", str(context_dir)
    )
    assert result.exit_code == 0, result.stderr
    bake = json.loads(result.stdout)
    plan = load_plan(REPO / "matrix.yaml")
    rendered = {bake_target_name(r.cell.id): r for r in Renderer(plan).render_all()}
    checkout = source_state(plan.root)  # the checkout's created, revision and source, as build gives them
    assert bake["group"]["default"]["targets"] == [bake_target_name(c.id) for c in plan.cells]
    assert set(bake["target"]) == set(rendered)
    for name, target in bake["target"].items():
        assert BAKE_NAME.match(name)
        item = rendered[name]
        context = Path(target["context"])
        assert context == context_dir / item.cell.id
        assert (context / target["dockerfile"]).read_text() == item.dockerfile
        for file_name, source in item.context_files:
            assert (context / file_name).read_bytes() == source.read_bytes()
        assert target["labels"] == item.build_labels(checkout)
        # only a staging tag: `bake --push` must never write the final (moving) tags
        final = json.loads(
            run_cli("matrix", "-m", str(REPO / "matrix.yaml"), "-f", "json", "--only", item.cell.id).stdout
        )["cells"][0]["tags"]
        repository = final[0].rsplit(":", 1)[0]
        assert target["tags"] == [f"{repository}:staging-{item.input_digest[:12]}"]
        assert not set(target["tags"]) & set(final)
        assert target["args"] == dict(item.build_args)
