"""The app with every command registered: one module per command, in the order `imagekit --help`
lists them."""

from __future__ import annotations

import ast
from collections import Counter

from typer.main import get_command_name

from imagekit.cli.app import app
from imagekit.cli.commands import COMMAND_MODULES
from tests.conftest import REPO, run_cli

CLI = REPO / "imagekit" / "cli"


def _registered(module: str) -> list[str]:
    """What ``imagekit/cli/<module>.py`` registers on the app: its commands and groups, read from
    its decorators and ``app.add_typer`` calls."""
    found = []
    for node in ast.walk(ast.parse((CLI / f"{module}.py").read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if (
                isinstance(owner, ast.Name)
                and owner.id == "app"
                and node.func.attr in ("command", "add_typer")
            ):
                found.append(node.func.attr)
    return found


def test_every_command_module_registers_one_command_and_is_imported() -> None:
    # build.py held build, verify and report: a module per command is where each is found
    registering = sorted(p.stem for p in CLI.glob("*.py") if _registered(p.stem))
    assert sorted(COMMAND_MODULES) == registering
    assert {module: len(_registered(module)) for module in COMMAND_MODULES} == dict.fromkeys(
        COMMAND_MODULES, 1
    )


def test_each_command_is_named_by_its_module() -> None:
    """`imagekit rebuild-check` lives in rebuild_check.py: a command's file is found from its name."""
    names = [info.name or get_command_name(info.callback.__name__) for info in app.registered_commands]  # type: ignore[union-attr]
    names += [info.name for info in app.registered_groups if info.name is not None]
    assert Counter(name.replace("-", "_") for name in names) == Counter(COMMAND_MODULES)


def test_help_lists_the_commands_in_the_order_they_are_registered() -> None:
    result = run_cli("--help")
    assert result.exit_code == 0
    listed = [
        line.split()[0] for line in result.stdout.split("Commands:", 1)[1].splitlines() if line[2:3].strip()
    ]
    assert listed == [
        "plan",
        "render",
        "schema",
        "matrix",
        "pin-bases",
        "build",
        "report",
        "verify",
        "rebuild-check",
        "publish",
        "images",
        "k8s",
        "k8s-results",
        "bake-import",
        "merge-reports",
        "attest",
    ]


def test_every_cli_module_has_its_test_module() -> None:
    # tests mirror the code (README, Architecture): a command's tests are found beside its name
    tests = REPO / "tests" / "unit" / "cli"
    missing = [
        p.stem
        for p in sorted(CLI.glob("*.py"))
        if p.stem != "__init__" and not (tests / f"test_{p.stem}.py").is_file()
    ]
    assert not missing, f"no tests/unit/cli/test_<module>.py for: {', '.join(missing)}"
