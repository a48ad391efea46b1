"""A cell's recipe (its steps, labels and environment): the steps Recipes shares between cells are the
steps made for each cell alone."""

from __future__ import annotations

from pathlib import Path

from imagekit.plan.cells import FrontendCell
from imagekit.plan.matrix import load_plan
from imagekit.render.dockerfile import Renderer
from imagekit.render.recipe import Recipes
from testbed.sample_projects import variants_plan
from tests.conftest import REPO


def test_shared_recipe_steps_equal_steps_made_for_the_cell_alone(tmp_path: Path) -> None:
    """Recipes makes a cell's steps once per StepInputs: a recipe from a Recipes that has seen every
    other cell first is the recipe a fresh one makes for that cell alone (the key misses nothing)."""
    for plan in (load_plan(REPO / "matrix.yaml"), variants_plan(tmp_path)):
        renderer = Renderer(plan)
        cells = [c for c in plan.cells if not isinstance(c, FrontendCell)]
        shared = [renderer.image_recipe(c) for c in cells]
        alone = [Recipes(plan.matrix, renderer.matrix_name).image(c, renderer._os_archives(c)) for c in cells]
        assert cells and shared == alone
