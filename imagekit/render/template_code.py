"""imagekit's own Dockerfile templates, compiled ahead of time.

Jinja turns a template into Python on every load: lexing, parsing and generating the Dockerfile
template's code takes ~17 ms, paid by every `imagekit plan` and every build (twice with front ends),
no-change nightlies included. The Python Jinja generates for imagekit's own templates is shipped as
package data (``imagekit/data/templates/<key>.py.txt``) and executed instead.

Never from a cache directory: what is executed is a file of the installed imagekit, as trusted as
its modules, and never for a matrix's own templates (those render in the sandbox, compiled each run).
A file is used only under its key: the sha256 of the Jinja version, the environment's syntax
settings and the (spliced) template source, so an edited template or another Jinja compiles as
before. ``python -m imagekit.render.template_code`` writes the files; a unit test fails when one is stale.
"""

from __future__ import annotations

import hashlib
import sys
from importlib import resources
from pathlib import Path

import jinja2

from imagekit.render.environment import make_environment
from imagekit.render.template_dirs import FRONTEND_TEMPLATES, default_templates_dir

COMPILED = "templates"  # the directory under imagekit/data
SUFFIX = ".py.txt"  # not importable, not a module: code Jinja made, run by Template.from_code


def key(env: jinja2.Environment, name: str, source: str) -> str:
    """What the code Jinja generates for ``source`` depends on."""
    settings = (
        jinja2.__version__,
        f"{type(env).__module__}.{type(env).__qualname__}",
        env.block_start_string,
        env.block_end_string,
        env.variable_start_string,
        env.variable_end_string,
        env.comment_start_string,
        env.comment_end_string,
        env.line_statement_prefix,
        env.line_comment_prefix,
        env.trim_blocks,
        env.lstrip_blocks,
        env.newline_sequence,
        env.keep_trailing_newline,
        env.optimized,
        env.autoescape,
        sorted(env.extensions),
        name,
    )
    return hashlib.sha256(f"{settings!r}\0{source}".encode()).hexdigest()


def _compiled(digest: str) -> str | None:
    try:
        return (
            resources.files("imagekit.data").joinpath(COMPILED, digest + SUFFIX).read_text(encoding="utf-8")
        )
    except (FileNotFoundError, NotADirectoryError):
        return None


def load_template(env: jinja2.Environment, name: str) -> jinja2.Template:
    """``env.get_template(name)``, from the shipped code when ``env`` is imagekit's own (a plain
    Environment: a matrix's templates get the sandbox) and the code was made from this source."""
    if type(env) is not jinja2.Environment or env.loader is None:
        return env.get_template(name)
    source, filename, uptodate = env.loader.get_source(env, name)
    code = _compiled(key(env, name, source))
    if code is None:
        return env.get_template(name)
    compiled = compile(code, filename or name, "exec")
    # The globals as a plain dict, not get_template's ChainMap over the environment's: every render
    # copies them into a new context, a dict at C speed where a ChainMap is walked in Python (twice,
    # ~3 us per cell). The same values: nothing changes an own environment's globals after it is made.
    names = dict(env.make_globals(None))
    return env.template_class.from_code(env, compiled, names, uptodate)


def generate(envs: list[jinja2.Environment], out: Path, name: str = "Dockerfile.j2") -> list[Path]:
    """Write the code of ``name`` in each environment's templates into ``out``; remove the rest."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for env in envs:
        assert env.loader is not None
        source, filename, _ = env.loader.get_source(env, name)
        path = out / (key(env, name, source) + SUFFIX)
        path.write_text(env.compile(source, name, filename, raw=True), encoding="utf-8")
        written.append(path)
    for stale in set(out.glob("*" + SUFFIX)) - set(written):
        stale.unlink()
    return written


def own_environments() -> list[jinja2.Environment]:
    """The environments of imagekit's own templates: the cell's and the front ends'."""
    return [
        make_environment(default_templates_dir()),
        make_environment(default_templates_dir() / FRONTEND_TEMPLATES),
    ]


def main() -> int:
    out = Path(__file__).parent.parent / "data" / COMPILED
    for path in generate(own_environments(), out):
        print(path.relative_to(Path(__file__).parent.parent.parent))
    return 0


if __name__ == "__main__":
    sys.exit(main())
