"""imagekit.builds.backends.choose: one backend for every builder the schema spells, chosen in one place, and
a Builder that never asks which one it holds."""

from __future__ import annotations

import ast
import inspect
from typing import get_args

from imagekit.builds import builder
from imagekit.builds.backends import base
from imagekit.builds.backends.choose import BACKENDS
from imagekit.core.build_kinds import BuilderKind
from imagekit.plan.schema import BuildSettings


def test_every_builder_the_schema_spells_has_a_backend_and_no_other() -> None:
    assert sorted(BACKENDS) == sorted(get_args(BuilderKind))


def test_every_backend_provides_what_the_protocol_declares() -> None:
    declared = {
        name for name, member in inspect.getmembers(base.BuildBackend) if inspect.isfunction(member)
    } - set(dir(object))
    assert declared == {"session", "registry_reuse", "cache", "build"}
    for kind, opener in BACKENDS.items():
        assert isinstance(opener, type), kind
        missing = {name for name in declared if not callable(getattr(opener, name, None))}
        assert not missing, f"{kind} lacks {missing}"
        assert isinstance(getattr(opener, "pushes_past_the_engine", None), bool), kind
        signature = inspect.signature(opener)
        assert list(signature.parameters) == ["setup"], kind


def test_each_backend_renders_for_its_own_builder() -> None:
    assert not BuildSettings(builder="classic").on_buildkit
    assert all(BuildSettings(builder=kind).on_buildkit for kind in get_args(BuilderKind) if kind != "classic")


def test_the_builder_never_asks_which_backend_it_holds() -> None:
    """Before: ``self.buildkit is None`` in six branches, the builder a string compared by name."""
    tree = ast.parse(inspect.getsource(builder.Builder))
    names = set(get_args(BuilderKind))
    asked = [
        ast.unparse(node)
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and node.value in names)
        or (isinstance(node, ast.Attribute) and node.attr in names)
        or (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"isinstance", "type"}
            and "backend" in ast.unparse(node)
        )
        or (isinstance(node, ast.Compare) and "backend" in ast.unparse(node))
    ]
    assert asked == [], asked
