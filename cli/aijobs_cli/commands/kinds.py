"""`aijobs new-kind`: scaffold a job kind."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from aijobs_cli.commands._common import EXIT_USAGE, AsJson, _emit, err, out

# --- the local stack -------------------------------------------------------------------------------


def new_kind(
    name: Annotated[str, typer.Argument(help="the kind's name: lowercase letters, digits, hyphens")],
    capability: Annotated[
        str, typer.Option("--capability", "-c", help="text, embedding, image, speech or video")
    ] = "text",
    as_json: AsJson = False,
) -> None:
    """Scaffold a job kind: its module under aijobs/kinds/ and its entry in every stage file."""
    from aijobs_cdk import REPO_ROOT
    from aijobs_cli.scaffold import ScaffoldError
    from aijobs_cli.scaffold import new_kind as scaffold

    try:
        made = scaffold(REPO_ROOT, name, capability)
    except ScaffoldError as error:
        err.print(f"[red]new-kind:[/red] {escape(str(error))}")
        raise typer.Exit(EXIT_USAGE) from None
    result = {
        "kind": name,
        "module": str(made.module.relative_to(REPO_ROOT)),
        "stageFiles": [path.name for path in made.stage_files],
    }

    def render(r: Any) -> None:
        lines = [f"wrote {r['module']}"]
        lines += [f"added {name} to QUEUE_NAMES in {stage_file}" for stage_file in r["stageFiles"]]
        lines.append(f'next: `aijobs dev`, then submit a job: {{"kind": "{name}", "input": "..."}}')
        out.print("\n".join(lines), markup=False, highlight=False)

    _emit(result, as_json, render)
