"""schema: the matrix file's JSON Schema."""

from __future__ import annotations

import json

import typer

from imagekit.cli.app import app


@app.command()
def schema() -> None:
    """Print the matrix file's JSON Schema (for editors and validators)."""
    from imagekit.plan.schema import json_schema

    typer.echo(json.dumps(json_schema(), indent=2, sort_keys=True))
