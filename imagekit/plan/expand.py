"""Step 1 of planning: a matrix's axes, include and exclude become combinations.

GitHub Actions' matrix semantics on plain mappings (the schema typed every value already; a
combination is the axis values and settings one cell is asked with), bounded before anything is
made. ``imagekit.plan.resolve`` turns each combination into a cell or a refusal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

from imagekit.core.errors import InputError
from imagekit.core.limits import MAX_COMBINATIONS, MAX_EXPANSION_STEPS, WARNINGS_SHOWN

Combination = dict[str, Any]


@dataclass(frozen=True)
class Expansion:
    combinations: tuple[Combination, ...]
    origins: tuple[str, ...]  # where each combination came from: "axes" or "include[i]"
    unused_excludes: tuple[int, ...]


def check_size(
    axes: Mapping[str, Sequence[Any]], include: Sequence[object], exclude: Sequence[object], source: str
) -> int:
    """The number of combinations the matrix asks for, from its axis lengths alone; refused past
    ``MAX_COMBINATIONS`` before a single one is made (three axes of 200 would be 8 million)."""
    lengths = [len(values) for values in axes.values()]
    crossed = math.prod(lengths) if lengths else 0
    combinations = crossed + len(include)
    if combinations > MAX_COMBINATIONS:
        shape = " x ".join(str(n) for n in lengths) or "no axes"
        extra = f" + {len(include)} include entries" if include else ""
        raise InputError(
            f"{source}: the matrix makes {combinations:,} combinations ({shape}{extra}); imagekit plans"
            f" at most {MAX_COMBINATIONS:,}: split it into several matrices, or shorten the axes"
        )
    steps = crossed * (len(include) + len(exclude))
    if steps > MAX_EXPANSION_STEPS:
        raise InputError(
            f"{source}: {crossed:,} combinations x {len(include) + len(exclude):,} include/exclude"
            f" entries is {steps:,} comparisons; imagekit allows {MAX_EXPANSION_STEPS:,}: list fewer"
            " entries, or split the matrix"
        )
    return combinations


def collapse(warnings: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """Warnings as printed: each once, at most ``WARNINGS_SHOWN`` of a kind, then one line that
    counts the rest (100,000 unknown versions must not print 100,000 lines)."""
    out: list[str] = []
    seen: set[str] = set()
    hidden: dict[str, int] = {}
    shown_of: dict[str, int] = {}
    for kind, text in warnings:
        if text in seen:
            continue
        seen.add(text)
        if shown_of.get(kind, 0) < WARNINGS_SHOWN:
            shown_of[kind] = shown_of.get(kind, 0) + 1
            out.append(text)
        else:
            hidden[kind] = hidden.get(kind, 0) + 1
    for kind, count in hidden.items():
        out.append(f"... and {count:,} more warning{'s' if count > 1 else ''} like it ({kind})")
    return tuple(out)


def expand(
    axes: Mapping[str, Sequence[Any]],
    include: Sequence[Mapping[str, Any]],
    exclude: Sequence[Mapping[str, Any]],
) -> Expansion:
    """Cross the axes, drop what ``exclude`` matches, then apply ``include``.

    As in GitHub Actions: an exclude entry removes every combination that has all of its
    key/values (a partial match). Each include entry is merged into every *original*
    combination whose axis values it does not contradict (keys that are not axes may be added,
    and overwrite what an earlier include added); an entry that fits no original combination
    becomes a combination of its own. Combinations made by include are never extended.
    """
    keys = list(axes)
    originals: list[Combination] = (
        [dict(zip(keys, values, strict=True)) for values in product(*(axes[k] for k in keys))] if keys else []
    )
    unused: list[int] = []
    for index, rule in enumerate(exclude):
        kept = [c for c in originals if not all(c.get(k) == v for k, v in rule.items())]
        if len(kept) == len(originals):
            unused.append(index)
        originals = kept

    origins = ["axes"] * len(originals)
    added: list[Combination] = []
    for index, entry in enumerate(include):
        matched = False
        for combination in originals:
            if all(combination[k] == v for k, v in entry.items() if k in axes):
                combination.update(entry)
                matched = True
        if not matched:
            added.append(dict(entry))
            origins.append(f"include[{index}]")
    return Expansion(tuple(originals + added), tuple(origins), tuple(unused))
