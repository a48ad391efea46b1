from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from imagekit.core import yamlsource
from imagekit.core.errors import InputError
from imagekit.core.yamlsource import MAX_BYTES, MAX_DEPTH, MAX_NODES, Position, parse_yaml, read_yaml_file


def test_numbers_stay_as_written() -> None:
    # 12.10 as a float would be 12.1, and torch 2.10 would become 2.1.
    doc = parse_yaml("cuda: [11.8, 12.10]\ntorch: 2.10\ncount: 3\n", "m.yaml")
    assert doc.value == {"cuda": ["11.8", "12.10"], "torch": "2.10", "count": "3"}


def test_yaml12_booleans_and_nulls() -> None:
    doc = parse_yaml("a: true\nb: False\nc: yes\nd: on\ne: null\nf: ~\ng:\n", "m.yaml")
    assert doc.value == {"a": True, "b": False, "c": "yes", "d": "on", "e": None, "f": None, "g": None}


def test_positions_of_keys_and_items() -> None:
    doc = parse_yaml("axes:\n  torch:\n    - 2.1.2\n    - 2.2.2\n", "m.yaml")
    assert doc.positions[("axes", "torch")] == Position(2, 3)
    assert doc.positions[("axes", "torch", 1)] == Position(4, 7)
    # An unknown deeper path falls back to its nearest known ancestor.
    assert doc.where(("axes", "torch", 1, "nope")) == "m.yaml:4:7"


def test_merge_keys_and_aliases() -> None:
    doc = parse_yaml("a: &x {p: 1, q: 2}\nb:\n  <<: *x\n  q: 3\n", "m.yaml")
    assert doc.value["b"] == {"p": "1", "q": "3"}


def test_repeated_key_is_an_error() -> None:
    with pytest.raises(InputError, match=r"m.yaml:2:1: a: key 'a' is repeated"):
        parse_yaml("a: 1\na: 2\n", "m.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "a: !!python/object/apply:os.system ['touch /tmp/imagekit-pwned']\n",
        "a: !!python/name:os.system\n",
        "a: !custom 3\n",
        "a: !!binary aGVsbG8=\n",
        "a: !!set {x, y}\n",
    ],
)
def test_tags_are_refused_never_constructed(text: str, tmp_path: object) -> None:
    with pytest.raises(InputError, match="is not allowed: imagekit reads plain YAML only"):
        parse_yaml(text, "m.yaml")


def test_alias_bomb_fails_fast() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 9):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    with pytest.raises(InputError, match=f"more than {MAX_NODES} values"):
        parse_yaml("\n".join(lines) + "\n", "bomb.yaml")


def test_an_alias_bomb_is_refused_before_any_value_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted on the node graph, each node once: nine levels of nine aliases cost nine nodes."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, 30):  # 9**30 values once expanded
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    built: list[object] = []
    monkeypatch.setattr(yamlsource._Builder, "build", lambda *args: built.append(args))
    # named at a5 (line 6), the first alias to expand past the bound: 9**6 values
    with pytest.raises(InputError, match=r"^bomb.yaml:6:5: the document expands to more than"):
        parse_yaml("\n".join(lines) + "\n", "bomb.yaml")
    assert built == []


@pytest.mark.parametrize(
    "text",
    [
        "a: 1\nb: [1, 2, {c: 3}]\n",
        "base: &b {x: 1, y: [1, 2]}\none: {<<: *b, z: 3}\ntwo: {<<: [*b, {w: 4}], x: 5}\n",
        "l: &l [1, 2, 3]\nm: [*l, *l, {k: *l}]\n",
    ],
)
def test_the_size_counted_first_is_the_size_built(text: str) -> None:
    builder = yamlsource._Builder("m.yaml")
    node = yaml.compose(text, Loader=yaml.SafeLoader)
    counted = builder.check_size(node)
    builder.build(node, (), 0)
    assert counted == builder.nodes


def test_recursive_alias_is_bounded() -> None:
    with pytest.raises(InputError, match="nesting deeper than"):
        parse_yaml("a: &a [*a]\n", "m.yaml")


def test_syntax_error_has_line_and_column() -> None:
    with pytest.raises(InputError, match=r"^m.yaml:3:1: YAML syntax error"):
        parse_yaml("a:\n  b: [1\n", "m.yaml")


def test_oversized_document() -> None:
    with pytest.raises(InputError, match="larger than"):
        parse_yaml("a: " + "x" * 1_100_000 + "\n", "m.yaml")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 20_000,
        "{a: " * 20_000,
        "- " * 5_000 + "x\n",
        "a:\n" + "".join("  " * i + "b:\n" for i in range(1, 200)),
    ],
    ids=["flow sequences", "flow mappings", "block sequences", "block mappings"],
)
def test_deep_nesting_is_refused_before_python_recurses(text: str) -> None:
    with pytest.raises(InputError, match=rf"^m\.yaml:\d+:\d+: nesting deeper than {MAX_DEPTH} levels"):
        parse_yaml(text, "m.yaml")


def test_nesting_up_to_the_limit_is_read() -> None:
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    value = parse_yaml(text, "m.yaml").value
    for _ in range(MAX_DEPTH - 1):
        value = value[0]
    assert value == []


def test_only_a_regular_file_is_read(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"is a directory, not a regular file; pass the matrix YAML file"):
        read_yaml_file(tmp_path)
    with pytest.raises(InputError, match=r"^/dev/zero: is a device, not a regular file"):
        read_yaml_file(Path("/dev/zero"))
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (MAX_BYTES + 1))
    with pytest.raises(InputError, match=rf"larger than {MAX_BYTES} bytes"):
        read_yaml_file(big)


@pytest.mark.parametrize("text", ['"\\ud800": 1\n', 'a: "x\\udfffy"\n', 'a: ["\\ud83d"]\n'])
def test_lone_surrogate_escapes_are_refused_with_their_place(text: str) -> None:
    # Half a UTF-16 pair cannot be encoded as UTF-8: it would fail later, far from the matrix.
    with pytest.raises(InputError, match=r"^m\.yaml:1:\d+: a string holds a lone surrogate"):
        parse_yaml(text, "m.yaml")


def test_a_whole_escaped_character_is_kept() -> None:
    assert parse_yaml('a: "\\U0001F600"\n', "m.yaml").value == {"a": "\U0001f600"}
