"""The closed sets a build is chosen by (imagekit.core.build_kinds): one Literal each, shared by the
matrix schema, the flags and the engine, and every message about them derived from it."""

from __future__ import annotations

from typing import Literal, get_args

import pytest

from imagekit.core import build_kinds
from imagekit.core.build_kinds import BuilderKind, Compression, chosen, listed
from imagekit.core.errors import ExitCode, InputError
from imagekit.engine import buildx
from imagekit.plan import schema


def test_the_schema_and_the_engine_use_these_very_sets() -> None:
    assert schema.BuilderKind is BuilderKind and schema.Compression is Compression
    assert buildx.Compression is Compression
    for compression in get_args(Compression):
        assert f"compression={compression}" in buildx.compression_options(compression)


def test_a_set_is_listed_as_a_sentence_says_it() -> None:
    assert listed(BuilderKind) == "classic and buildkit"
    assert listed(Literal["a", "b", "c"], "or") == "a, b or c"
    assert listed(Literal["only"]) == "only"


def test_a_value_of_the_set_is_chosen_and_any_other_refused_naming_the_flag() -> None:
    assert chosen(Compression, "zstd", "--compression", "compression") == "zstd"
    with pytest.raises(InputError) as refused:
        chosen(BuilderKind, "kaniko\n", "--builder", "builder")
    assert refused.value.message == "--builder 'kaniko': the builders are classic and buildkit"
    assert refused.value.exit_code == ExitCode.INVALID_INPUT


@pytest.mark.parametrize("kind", [BuilderKind, Compression])
def test_a_value_added_to_a_set_is_one_the_message_names(
    kind: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    grown = Literal[(*get_args(kind), "new")]  # type: ignore[valid-type]
    assert chosen(grown, "new", "--x", "x") == "new"
    with pytest.raises(InputError, match=r", [a-z]+ and new$"):
        chosen(grown, "other", "--x", "x")
    assert build_kinds.listed(grown).endswith(" and new")
