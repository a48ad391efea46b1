"""The Jinja environment a template directory renders in, with the filters the templates use.

imagekit's own templates (``dockerfiles/templates``) render in a plain Environment, whose code
``imagekit.render.template_code`` ships compiled; a directory the matrix names renders in the
immutable sandbox (``UserTemplates``). Either way ``{% include %}`` is spliced at load time and a
template must be a regular file inside its directory.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.loaders
import jinja2.runtime
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment

from imagekit.core.errors import InputError
from imagekit.core.limits import TEMPLATE_BYTES
from imagekit.core.paths import read_regular_text
from imagekit.render.template_dirs import default_templates_dir


class _InliningLoader(jinja2.FileSystemLoader):
    """Splices ``{% include "partial" %}`` into the including template when it is loaded.

    The partials stay separate files to read and review; Jinja compiles one template, which
    saves a template lookup and a new context per include per cell (a third of render time
    on a 10,000-cell matrix).
    """

    _INCLUDE = re.compile(r'^\{% include "([A-Za-z0-9_.-]+)" %\}\n', re.MULTILINE)

    def get_source(
        self, environment: jinja2.Environment, template: str
    ) -> tuple[str, str, Callable[[], bool]]:
        source, filename, uptodate = self._contained(environment, template)
        seen: set[str] = {template}

        def splice(match: re.Match[str]) -> str:
            name = match.group(1)
            if name in seen:
                raise jinja2.TemplateError(f"{template} includes {name} recursively")
            seen.add(name)
            text = self._INCLUDE.sub(splice, self._contained(environment, name)[0])
            seen.discard(name)
            return text if text.endswith("\n") else text + "\n"

        return self._INCLUDE.sub(splice, source), filename, uptodate

    def _contained(self, environment: jinja2.Environment, name: str) -> tuple[str, str, Callable[[], bool]]:
        """A template's source, which must be a regular file inside the template directory once
        links are followed, checked before it is read: a template linked to a file elsewhere (a
        device, a huge file) is never opened, and one over ``TEMPLATE_BYTES`` is refused."""
        pieces = jinja2.loaders.split_template_path(name)
        for root in self.searchpath:
            path = Path(root, *pieces)
            if path.is_file():
                break
        else:
            raise jinja2.TemplateNotFound(name)
        # os.path.realpath, not Path.resolve: a link loop is an answer here, not a RuntimeError
        if not Path(os.path.realpath(path)).is_relative_to(os.path.realpath(root)):
            raise jinja2.TemplateError(f"{name} leads outside the template directory (a symbolic link?)")
        try:
            source = read_regular_text(path, TEMPLATE_BYTES, "a Jinja template (a few kB)")
        except FileNotFoundError:
            raise jinja2.TemplateNotFound(name) from None
        return source, str(path), lambda: True  # auto_reload is off: a template never changes in a run


class UserTemplates(ImmutableSandboxedEnvironment):
    """The sandbox for templates the matrix names, with '*' and '**' bounded too: the sandbox
    stops range() at 100,000 items, but 'x' * 10**10 would still take 10 GB."""

    intercepted_binops = frozenset({"*", "**"})
    MAX_ITEMS = 1_000_000  # characters or items a '*' may make; a Dockerfile is a few kB

    def call_binop(self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "**" and isinstance(right, int) and abs(right) > 1_000:
            raise SecurityError(f"'**' with an exponent of {right} is too large")
        for sequence, times in ((left, right), (right, left)):
            if (
                operator == "*"
                and isinstance(sequence, str | list | tuple)
                and isinstance(times, int)
                and len(sequence) * times > self.MAX_ITEMS
            ):
                raise SecurityError(f"'*' would make more than {self.MAX_ITEMS} items")
        return super().call_binop(context, operator, left, right)


def make_environment(templates: Path) -> jinja2.Environment:
    """The Jinja environment for a template directory.

    A directory the matrix names holds someone's templates: they render in Jinja's immutable
    sandbox, which lets a template reach only the values it is given, never Python's internals
    (``__class__``, ``__globals__``) nor a method that changes something, so rendering runs no
    other code. imagekit's own templates are part of imagekit and render without the sandbox's
    checks on every attribute (half the render time of a large matrix).
    """
    if not (templates / "Dockerfile.j2").is_file():
        raise InputError(f"{templates}: no Dockerfile.j2 template here; fix `templates` in the matrix")
    # imagekit's own: its template directory or one below it (the front ends' templates)
    own = Path(os.path.realpath(templates)).is_relative_to(default_templates_dir().resolve())
    environment = jinja2.Environment if own else UserTemplates
    env = environment(
        loader=_InliningLoader(str(templates)),
        undefined=jinja2.StrictUndefined,  # a typo in a template fails, never renders as ""
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,  # templates do not change during a run: no stat() per include per cell
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["sh"] = sh
    env.filters["shjoin"] = shjoin
    env.filters["pairs"] = pairs
    return env


@lru_cache(maxsize=4096)
def _quoted(text: str) -> str:
    return shlex.quote(text)


def sh(value: Any) -> str:
    """``shlex.quote``, as the ``sh`` filter: each string quoted once per process (every cell of a
    matrix quotes the same paths, pip options and package names; a tenth of render time)."""
    return _quoted(value) if type(value) is str else shlex.quote(value)


def shjoin(items: Iterable[Any]) -> str:
    """``shlex.join``, as the ``shjoin`` filter, quoting through ``sh``."""
    return " ".join(map(sh, items))


def pairs(items: Iterable[tuple[Any, Any]], separator: str, quote: str = "", shell: bool = False) -> str:
    """``NAME=VALUE`` for each pair, joined by ``separator``: the value between ``quote``s, or
    shell-quoted with ``shell``. A Jinja filter (``{{ recipe.env | pairs(" \\\n    ") }}``): what a
    ``{% for %}`` with ``loop.last`` lays out, without a loop context per line (a tenth of
    render time on a large matrix). Plain concatenation, no format string: safe in the sandbox."""
    if shell:
        return separator.join(f"{name}={sh(str(value))}" for name, value in items)
    return separator.join(f"{name}={quote}{value}{quote}" for name, value in items)
