"""Read a YAML document safely, remembering where every value came from.

Why not ``yaml.safe_load``:
- errors must name a line and column for the *field* that is wrong, long after parsing, so
  the position of every key and value is kept, addressed by its path;
- numbers stay as written: ``cuda: [11.8, 12.10]`` must not become floats (``12.10 == 12.1``),
  and ``torch: 2.10`` must not turn into 2.1, so unquoted numbers are kept as their text and
  the schema converts the few fields that really are numbers;
- an alias bomb (a few lines that expand to billions of nodes) must fail fast: the expanded
  size is counted on the node graph first, each node once (aliases share their node), so the
  bomb is refused before a single value is built, in time linear in the document's text;
- deep nesting must fail at a bound, not in Python's recursion limit: the composer (recursive)
  counts its depth, before the value is built;
- only a regular file is read, never past its size limit (a FIFO or /dev/zero as --matrix);
- no tag is ever constructed beyond YAML's plain types: ``!!python/object`` and friends are
  refused with their position, never executed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from imagekit.core.errors import InputError
from imagekit.core.limits import MATRIX_BYTES, YAML_DEPTH, YAML_NODES
from imagekit.core.paths import read_regular_text

PathKey = tuple[str | int, ...]

MAX_BYTES = MATRIX_BYTES
MAX_NODES = YAML_NODES  # after alias expansion
MAX_DEPTH = YAML_DEPTH

_STR = "tag:yaml.org,2002:str"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"
_BOOL = "tag:yaml.org,2002:bool"
_NULL = "tag:yaml.org,2002:null"
_SEQ = "tag:yaml.org,2002:seq"
_MAP = "tag:yaml.org,2002:map"
_MERGE = "tag:yaml.org,2002:merge"

# YAML 1.2 core booleans and nulls only: `on`/`yes`/`no` stay strings (Norway problem).
_TRUE = {"true", "True", "TRUE"}
_FALSE = {"false", "False", "FALSE"}
_NULLS = {"", "~", "null", "Null", "NULL"}


@dataclass(frozen=True)
class Position:
    line: int  # 1-based
    column: int  # 1-based

    def __str__(self) -> str:
        return f"{self.line}:{self.column}"


@dataclass
class SourceDocument:
    """A parsed YAML document: the plain value and the position of each path in it."""

    name: str  # how to name the file in messages
    value: Any
    positions: dict[PathKey, Position] = field(default_factory=dict)

    def position(self, path: PathKey) -> Position | None:
        """The position of ``path``, or of its nearest ancestor that has one."""
        for end in range(len(path), -1, -1):
            found = self.positions.get(path[:end])
            if found is not None:
                return found
        return None

    def where(self, path: PathKey) -> str:
        position = self.position(path)
        return f"{self.name}:{position}" if position else self.name


def format_path(path: PathKey) -> str:
    """``("include", 2, "python") -> "include[2].python"``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(top level)"


def _position(mark: yaml.Mark | None) -> Position | None:
    if mark is None:
        return None
    return Position(mark.line + 1, mark.column + 1)


_SURROGATE = re.compile("[\ud800-\udfff]")


class _Builder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.nodes = 0
        self.positions: dict[PathKey, Position] = {}

    def fail(self, node: yaml.Node, message: str) -> InputError:
        return InputError(f"{self.name}:{_position(node.start_mark)}: {message}")

    def check_size(self, node: yaml.Node) -> int:
        """Refuse a document that expands to more than MAX_NODES values (an alias bomb) before
        building it: each node's expanded size is counted once, as build() would count it; the
        count."""
        sizes: dict[int, int] = {}
        open_nodes: set[int] = set()

        def size(node: yaml.Node) -> int:
            key = id(node)
            if key in sizes:
                return sizes[key]
            if key in open_nodes or len(open_nodes) > MAX_DEPTH:
                return 1  # a recursive alias: build() names it at its depth bound
            open_nodes.add(key)
            total = 1
            if isinstance(node, yaml.SequenceNode):
                total += sum(size(item) for item in node.value)
            elif isinstance(node, yaml.MappingNode):
                for key_node, value_node in node.value:
                    if key_node.tag != _MERGE:
                        total += size(value_node)
                    elif isinstance(value_node, yaml.MappingNode):
                        total += size(value_node) - 1  # a merged mapping's own node is not a value
                    elif isinstance(value_node, yaml.SequenceNode):
                        total += sum(size(source) - 1 for source in value_node.value)
            open_nodes.discard(key)
            if total > MAX_NODES:
                self._too_big(node)
            sizes[key] = total
            return total

        return size(node)

    def build(self, node: yaml.Node, path: PathKey, depth: int) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            return self._too_big(node)
        if depth > MAX_DEPTH:
            raise self.fail(node, f"nesting deeper than {MAX_DEPTH} levels (a recursive alias?)")
        position = _position(node.start_mark)
        if position is not None:
            self.positions.setdefault(path, position)
        if isinstance(node, yaml.ScalarNode):
            return self._scalar(node)
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                raise self._bad_tag(node)
            return [self.build(item, (*path, i), depth + 1) for i, item in enumerate(node.value)]
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path, depth)
        raise self.fail(node, f"unsupported YAML node {type(node).__name__}")

    def _too_big(self, node: yaml.Node) -> Any:
        raise self.fail(
            node,
            f"the document expands to more than {MAX_NODES} values (an alias bomb?);"
            " write the matrix without nested aliases",
        )

    def _bad_tag(self, node: yaml.Node) -> InputError:
        return self.fail(
            node,
            f"YAML tag {node.tag} is not allowed: imagekit reads plain YAML only"
            " (strings, numbers, booleans, lists, mappings)",
        )

    def _scalar(self, node: yaml.ScalarNode) -> Any:
        text = node.value
        if _SURROGATE.search(text):
            # A "\ud800" escape yields half a UTF-16 pair: no UTF-8 text, label or file name holds it.
            raise self.fail(
                node, "a string holds a lone surrogate escape (\\uD800-\\uDFFF); write the character itself"
            )
        if node.tag == _STR:
            return text
        if node.tag in (_INT, _FLOAT):
            return text  # kept as written; see the module docstring
        if node.tag == _BOOL:
            if text in _TRUE:
                return True
            if text in _FALSE:
                return False
            return text  # yes/no/on/off: YAML 1.1 booleans that 1.2 reads as strings
        if node.tag == _NULL:
            return None if text in _NULLS else text
        raise self._bad_tag(node)

    def _mapping(self, node: yaml.MappingNode, path: PathKey, depth: int) -> dict[str, Any]:
        if node.tag != _MAP:
            raise self._bad_tag(node)
        out: dict[str, Any] = {}
        merged: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                for source in self._merge_sources(value_node):
                    for key, value in self._mapping(source, path, depth + 1).items():
                        merged.setdefault(key, value)
                continue
            if not isinstance(key_node, yaml.ScalarNode):
                raise self.fail(key_node, "mapping keys must be plain strings")
            key = self._scalar(key_node)
            if not isinstance(key, str):
                raise self.fail(key_node, f"mapping key {key_node.value!r} must be a string")
            if key in out:
                raise self.fail(key_node, f"{format_path((*path, key))}: key {key!r} is repeated")
            key_position = _position(key_node.start_mark)
            if key_position is not None:
                self.positions[(*path, key)] = key_position
            out[key] = self.build(value_node, (*path, key), depth + 1)
        for key, value in merged.items():
            out.setdefault(key, value)
        return out

    def _merge_sources(self, node: yaml.Node) -> list[yaml.MappingNode]:
        if isinstance(node, yaml.MappingNode):
            return [node]
        if isinstance(node, yaml.SequenceNode) and all(
            isinstance(item, yaml.MappingNode) for item in node.value
        ):
            return list(node.value)
        raise self.fail(node, "a merge key (<<) takes a mapping or a list of mappings")


class _TooDeep(Exception):
    def __init__(self, mark: yaml.Mark | None) -> None:
        super().__init__("too deep")
        self.mark = mark


class _BoundedLoader(yaml.SafeLoader):
    """PyYAML's safe loader with its recursive composer kept to ``MAX_DEPTH`` levels: a document
    of 20,000 ``[`` would otherwise exhaust Python's stack inside ``compose`` (the scanner and
    parser keep explicit stacks and never recurse)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH + 1:  # the document's own node is level 1
                raise _TooDeep(self.peek_event().start_mark)  # type: ignore[no-untyped-call]
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


def _compose(text: str) -> yaml.Node | None:
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def parse_yaml(text: str, name: str) -> SourceDocument:
    """Parse one YAML document; every problem is an InputError naming ``name:line:col``."""
    if len(text.encode("utf-8", errors="replace")) > MAX_BYTES:
        raise InputError(f"{name}: larger than {MAX_BYTES} bytes; a matrix file is far smaller")
    try:
        node = _compose(text)
    except _TooDeep as exc:
        where = f"{name}:{_position(exc.mark)}" if exc.mark else name
        raise InputError(f"{where}: nesting deeper than {MAX_DEPTH} levels; a matrix nests four") from None
    except yaml.MarkedYAMLError as exc:
        position = _position(exc.problem_mark) or _position(exc.context_mark)
        where = f"{name}:{position}" if position else name
        problem = exc.problem or exc.context or "invalid YAML"
        raise InputError(f"{where}: YAML syntax error: {problem}") from None
    except yaml.YAMLError as exc:
        raise InputError(f"{name}: YAML error: {exc}") from None
    if node is None:
        return SourceDocument(name=name, value=None)
    builder = _Builder(name)
    try:
        builder.check_size(node)
        value = builder.build(node, (), 0)
    except RecursionError:
        raise InputError(f"{name}: nesting too deep to read") from None
    return SourceDocument(name=name, value=value, positions=builder.positions)


def read_yaml_file(path: Path) -> SourceDocument:
    try:
        text = read_regular_text(path, MAX_BYTES, "the matrix YAML file (a matrix file is a few kB)")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file; pass an existing matrix with --matrix") from None
    return parse_yaml(text, str(path))


def as_mapping(doc: SourceDocument) -> Mapping[str, Any]:
    if not isinstance(doc.value, dict):
        kind = "empty" if doc.value is None else f"a {type(doc.value).__name__}"
        raise InputError(
            f"{doc.where(())}: the top level is {kind}; a matrix is a mapping"
            " (axes:, bases:, ...): see `imagekit schema`"
        )
    return doc.value
