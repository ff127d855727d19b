"""What every command shares: the connection options, the exit codes, the stage/target
resolution, the API call helpers and the console."""

from __future__ import annotations

import json
import sys
import urllib.parse
import urllib.request
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

from aijobs.bounds import (
    Bound,
    BoundError,
)
from aijobs_cli.target import ApiResponse, Target, TargetError

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)  # an id in a message stays on one line


class CurrentStderr:
    """A log stream writing to whatever sys.stderr is at the time of writing (test runners swap
    it; a handler given sys.stderr itself would keep writing to the one it was given)."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


InfoFile = Annotated[Path | None, typer.Option("--info-file", help="connection file written by `aijobs dev`")]
ApiUrl = Annotated[str | None, typer.Option("--api-url", envvar="AIJOBS_API_URL", help="deployed API URL")]
ApiKey = Annotated[str | None, typer.Option("--api-key", envvar="AIJOBS_API_KEY", help="API key")]
Stack = Annotated[str | None, typer.Option("--stack", help="deployed stack name, e.g. aijobs-prod")]
Profile = Annotated[str | None, typer.Option("--profile", help="AWS profile for --stack")]
Region = Annotated[str | None, typer.Option("--region", help="AWS region for --stack")]
AsJson = Annotated[bool, typer.Option("--json", help="print JSON for scripts")]
DEFAULT_INFO = Path(".aijobs/local.json")


# Exit codes (docs/operations/runbook.md). 1 and 2 are click's own: an error, a usage error.
EXIT_ERROR = 1  # the CLI refused the input, the API or AWS could not be reached, or answered 5xx
EXIT_USAGE = 2  # a usage error (click's code), or a request the API refused (4xx)
EXIT_TIMED_OUT = 3  # `submit --wait`: the job had not finished in time (`demo`: a job unfinished)
EXIT_FAILED = 4  # `submit --wait`: the job ended failed_final
EXIT_CANCELLED = 5  # `submit --wait`: the job ended failed_final because its owner cancelled it


def _fail(message: str, code: int = EXIT_ERROR) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(code)


def whole(name: str, values: Iterable[str]) -> Column:
    """A column never cut or wrapped: ids, kinds and users, which the next command takes whole."""
    return Column(name, no_wrap=True, min_width=max([len(name), *(len(value) for value in values)]))


def folded(name: str, **options: Any) -> Column:
    """A column whose cells wrap (long words folded) as narrow as its heading."""
    return Column(name, overflow="fold", min_width=len(name), **options)


def _print_table(table: Table) -> None:
    """Print `table` at the console's width, or wider when its columns' minimum widths need more
    (rich would otherwise cut the whole columns' cells to fit)."""
    needed = sum((column.min_width or 1) + 3 for column in table.columns) + 1  # padding, rules
    if needed > out.width:
        table.width = needed
    out.print(table)


def _target(
    info_file: Path | None,
    api_url: str | None = None,
    api_key: str | None = None,
    stack: str | None = None,
    profile: str | None = None,
    region: str | None = None,
) -> Target:
    try:
        if stack:
            target = Target.from_stack(stack, region=region, profile=profile)
            target.api_key = api_key
            return target
        if api_url:
            return Target(stage="remote", api_url=api_url, api_key=api_key)
        return Target.from_info_file(info_file or DEFAULT_INFO)
    except TargetError as error:
        raise _fail(str(error)) from None


def _within(bound: Bound, help_text: str) -> dict[str, Any]:
    """A typer option or argument for a whole-number bound of aijobs.bounds (docs/configuration.md,
    "Bounds of what operators set"): its range in the help, and a value outside refused with the bound's
    message (exit 2) before anything is touched."""

    def check(value: int | None) -> int | None:
        if value is None:
            return None
        try:
            return bound.whole(value)
        except BoundError as error:
            raise typer.BadParameter(str(error)) from None

    return {"callback": check, "help": f"{help_text} ({bound.low}-{bound.high} {bound.unit})"}


def _emit(data: Any, as_json: bool, render: Any = None) -> None:
    if as_json or render is None:
        out.print_json(json.dumps(data, default=str))
    else:
        render(data)


def _request(
    target: Target, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> ApiResponse:
    """One API call, whatever its status (an unreachable API is a failure with a message)."""
    try:
        return target.request(method, path, body, headers)
    except TargetError as error:
        raise _fail(str(error)) from None


def _api_error(response: ApiResponse) -> typer.Exit:
    body = response.body if isinstance(response.body, dict) else {"message": response.body}
    message = f"{response.status} {body.get('code', '')}: {body.get('message', body)}"
    details = body.get("details")
    if isinstance(details, dict) and isinstance(details.get("kinds"), list):
        message += f"; kinds: {', '.join(map(str, details['kinds']))}"
    return _fail(escape(message), EXIT_USAGE if response.status < 500 else EXIT_ERROR)


def _api(
    target: Target, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> Any:
    response = _request(target, method, path, body, headers)
    if response.status >= 400:
        raise _api_error(response)
    return response.body


def _job_path(job_id: str, suffix: str = "") -> str:
    """`/jobs/<id><suffix>`, the id quoted as one path segment."""
    if not job_id.strip():
        raise _fail("JOB_ID is empty")
    return f"/jobs/{urllib.parse.quote(job_id, safe='')}{suffix}"
