"""`aijobs`: run the local stack and operate a local or deployed stage.

Every command takes `--info-file FILE` (the file `aijobs dev` writes) for the local stack. Job
commands take `--api-url/--api-key` for a deployed stage; operator commands take `--stack NAME`
(with `--profile/--region`) and read the stack's outputs. `--json` prints machine-readable output;
bad input exits non-zero with a message.
"""

from __future__ import annotations

import json
import math
import mimetypes
import signal
import statistics
import sys
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Column, Table

from aijobs.bounds import (
    AI_TASK_RETENTION_DAYS,
    CREDIT_GRANT,
    CREDIT_GRANT_DAYS,
    CREDIT_TX_RETENTION_DAYS,
    SPEND_CAP_USD,
    TENANT_MAX_RUNNING,
    Bound,
    BoundError,
)
from aijobs.domain import JobStatus
from aijobs.errors import CANCELLED, AijobsError
from aijobs.store.spend import SpendRecords
from aijobs_cdk.stage_config import ConfigError
from aijobs_cli.models import models_app
from aijobs_cli.target import ApiResponse, Target, TargetError

app = typer.Typer(help="aijobs: asynchronous AI jobs on AWS, locally or deployed.", no_args_is_help=True)
dlq_app = typer.Typer(help="Dead-letter queue: what failed for good.", no_args_is_help=True)
keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
credits_app = typer.Typer(help="Credits.", no_args_is_help=True)
cron_app = typer.Typer(help="Scheduled jobs.", no_args_is_help=True)
config_app = typer.Typer(help="Dynamic configuration in the meta table.", no_args_is_help=True)
tenants_app = typer.Typer(help="Per-tenant limits (operators).", no_args_is_help=True)
webhooks_app = typer.Typer(help="Signed webhooks: tenants' signing secrets.", no_args_is_help=True)
spend_app = typer.Typer(
    help="The daily model-spend brake (operators): today's spend, caps, release.", invoke_without_command=True
)
for sub, name in (
    (dlq_app, "dlq"),
    (keys_app, "keys"),
    (tenants_app, "tenants"),
    (webhooks_app, "webhooks"),
    (spend_app, "spend"),
    (credits_app, "credits"),
    (cron_app, "cron"),
    (config_app, "config"),
    (models_app, "models"),
):
    app.add_typer(sub, name=name)

out = Console(soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)  # an id in a message stays on one line


def _print_version(value: bool) -> None:
    if value:
        import aijobs

        out.print(f"aijobs {aijobs.__version__}")  # the CHANGELOG's heading for this release
        raise typer.Exit()


@app.callback()
def _quiet_library(
    ctx: typer.Context,
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="print the version and exit",
        ),
    ] = False,
) -> None:
    """Keep stdout for the command's own output (`--json` must parse): the library's JSON logs go
    to stderr at WARNING and its metrics stay off, except in `dev`, whose logs are the point."""
    if ctx.invoked_subcommand == "dev":
        return
    import os

    from aijobs.observability import logger

    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    logger.setLevel("WARNING")
    logger.registered_handler.setStream(CurrentStderr())  # type: ignore[attr-defined]


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


# --- how a job is shown ----------------------------------------------------------------------------


def workflow_note(job: Mapping[str, Any]) -> str:
    """A workflow parent's phase and progress, or a child's part and parent ('' for other jobs)."""
    progress = job.get("progress")
    if job.get("phase") is not None and isinstance(progress, Mapping):
        total = int(progress.get("total") or 0)
        if not total:
            return f"phase {job['phase']}: not split into parts yet"
        succeeded, failed = int(progress.get("succeeded") or 0), int(progress.get("failedFinal") or 0)
        return (
            f"phase {job['phase']}, {succeeded + failed}/{total} parts done: "
            f"{succeeded} succeeded, {failed} failed, {int(progress.get('pending') or 0)} pending"
        )
    if job.get("parentId"):
        return f"part {job.get('part')} of {job['parentId']}"
    return ""


def job_line(job: Mapping[str, Any]) -> str:
    """`<jobId>  <status>`, with the workflow note when there is one."""
    note = workflow_note(job)
    return f"{job['jobId']}  {job['status']}" + (f"  ({note})" if note else "")


def job_fields(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The fields `aijobs status` shows, in order (the result follows them)."""
    fields: list[tuple[str, Any]] = [
        ("job", job.get("jobId")),
        ("kind", job.get("kind")),
        ("status", job.get("status")),
        ("attempts", job.get("attempts")),
    ]
    if job.get("lastErrorClass") or job.get("lastErrorMessage"):
        fields.append(("error", f"{job.get('lastErrorClass') or ''}: {job.get('lastErrorMessage') or ''}"))
    if job.get("deadLettered"):
        fields.append(("dead-lettered", "yes"))
    if job.get("phase") is not None:
        progress = job.get("progress") or {}
        fields.append(("phase", job["phase"]))
        fields.append(
            (
                "progress",
                f"{progress.get('total', 0)} parts: {progress.get('succeeded', 0)} succeeded, "
                f"{progress.get('failedFinal', 0)} failed, {progress.get('pending', 0)} pending",
            )
        )
        fields.append(("children", f"aijobs children {job.get('jobId')}"))
    if job.get("parentId"):
        fields.append(("parent", job["parentId"]))
        fields.append(("part", job.get("part")))
    for key, label in (
        ("model", "model"),
        ("createdAt", "created"),
        ("startedAt", "started"),
        ("finishedAt", "finished"),
        ("resultRef", "result object"),
    ):
        if job.get(key):
            fields.append((label, job[key]))
    fields.extend(cost_fields(job))
    if job.get("cancelRequestedAt"):
        fields.append(("cancel requested", job["cancelRequestedAt"]))
    return [(label, str(value)) for label, value in fields if value is not None]


def cost_fields(job: Mapping[str, Any]) -> list[tuple[str, str]]:
    """What a job was charged and what its model call reported using and costing."""
    fields: list[tuple[str, str]] = []
    if job.get("price"):
        fields.append(("credits", f"{job['price']} ({job.get('charge') or 'not charged'})"))
    if job.get("usage"):
        fields.append(
            ("usage", ", ".join(f"{name} {value:,}" for name, value in sorted(job["usage"].items())))
        )
    if job.get("costUsd") is not None:
        fields.append(("cost", f"${job['costUsd']:.6f}"))
    return fields


def _render_job(job: Mapping[str, Any]) -> None:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    for label, value in job_fields(job):
        table.add_row(label, escape(value))
    out.print(table)
    if job.get("result") is not None:
        out.print_json(json.dumps(job["result"], default=str))
    elif job.get("resultUrl"):
        out.print(f"result: {job['resultUrl']}", markup=False, highlight=False)


# --- the local stack -------------------------------------------------------------------------------


@app.command("new-kind")
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


@app.command()
def dev(
    port: Annotated[int, typer.Option(help="port of the local HTTP API (0: any free port)")] = 8080,
    info_file: Annotated[
        Path, typer.Option("--info-file", help="where to write connection details")
    ] = DEFAULT_INFO,
    stage: Annotated[str, typer.Option(help="stage configuration to run (.env.<stage>)")] = "local",
    provider: Annotated[
        list[str] | None,
        typer.Option(
            "--provider",
            help="KIND=PROVIDER, repeatable (e.g. summary=openai); replaces the file's KIND_PROVIDERS",
        ),
    ] = None,
    model: Annotated[
        list[str] | None,
        typer.Option("--model", help="KIND=MODEL, repeatable (e.g. summary=llama3.2); replaces KIND_MODELS"),
    ] = None,
    openai_base_url: Annotated[
        str | None,
        typer.Option(help="an OpenAI-compatible server, e.g. http://127.0.0.1:11434/v1 (Ollama)"),
    ] = None,
) -> None:
    """Start the whole system locally (moto, HTTP API, pollers, DLQ consumer, schedules). Ctrl-C stops it.

    Real models on a laptop: `--provider summary=openai --openai-base-url http://127.0.0.1:11434/v1`
    (the key, if the server wants one, comes from the OPENAI_API_KEY environment variable)."""
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cli.local_stack import LocalStack

    overrides: dict[str, object] = {}
    if provider:
        overrides["KIND_PROVIDERS"] = ";".join(provider)
    if model:
        overrides["KIND_MODELS"] = ";".join(model)
    if openai_base_url:
        overrides["OPENAI_BASE_URL"] = openai_base_url
    try:
        config = load_stage_config(stage, overrides)
    except ConfigError as error:
        raise _fail(f"invalid stage configuration: {error}") from None
    info_file.parent.mkdir(parents=True, exist_ok=True)
    stack = LocalStack(
        config, port=port, info_file=info_file, log=lambda line: err.print(f"[yellow]{line}[/yellow]")
    )
    try:
        stack.start()
    except OSError as error:
        raise _fail(f"could not start: {error} (is port {port} free? try --port 0)") from None
    key = stack.api_key
    examples = "\n".join(
        [
            f'curl -s -X POST {stack.api_url}/jobs -H "Authorization: Bearer {key}" \\',
            '  -H "Content-Type: application/json" \\',
            """  -d '{"kind":"summary","input":"#fail:503x2 A long text. To summarise."}'""",
            f'curl -s {stack.api_url}/jobs/<jobId> -H "Authorization: Bearer {key}"',
            f'curl -s {stack.api_url}/credits -H "Authorization: Bearer {key}"',
            f"aijobs demo --info-file {info_file}",
        ]
    )
    out.rule("aijobs local stack")
    out.print(
        f"[bold]API[/bold]        {stack.api_url}   (OpenAPI: {stack.api_url}/openapi.json)\n"
        f"[bold]API key[/bold]    {key}   (user '{stack.info()['demo_user']}', with credits)\n"
        f"[bold]admin key[/bold]  {stack.admin_key}   (operator: {stack.api_url}/_local/*, `aijobs resume`)\n"
        f"[bold]AWS (moto)[/bold] {stack.endpoint_url}\n"
        f"[bold]stage[/bold]      {config.stage}: queues {', '.join(config.queue_names)}\n"
        f"[bold]info file[/bold]  {info_file}\n\n{examples}\n\nCtrl-C stops it."
    )
    out.rule()
    stopping = {"now": False}

    def _stop(*_args: Any) -> None:
        stopping["now"] = True

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    try:
        while not stopping["now"]:
            time.sleep(0.2)
    finally:
        out.print("stopping…")
        stack.stop()
        info_file.unlink(missing_ok=True)
        out.print("stopped.")


# --- jobs (HTTP API) -------------------------------------------------------------------------------


def _parse_options(options: list[str]) -> dict[str, Any]:
    parsed: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or not key:
            raise _fail(f"--option {option!r} must be KEY=VALUE")
        try:
            parsed[key] = json.loads(value)
        except json.JSONDecodeError:
            parsed[key] = value
    return parsed


# Extensions the platform's mimetypes tables may not know (or map differently).
_UPLOAD_TYPES = {".ndjson": "application/x-ndjson", ".jsonl": "application/x-ndjson", ".md": "text/markdown"}


def _upload_input(target: Target, path: Path, content_type: str | None) -> str:
    """Upload `path` through `POST /uploads` and its presigned form; returns the `inputRef`."""
    if not path.is_file():
        raise _fail(f"no such file: {escape(str(path))}")
    content_type = (
        content_type or _UPLOAD_TYPES.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0]
    )
    if content_type is None:
        raise _fail(
            f"cannot tell the content type of {escape(path.name)} from its extension: pass --content-type"
        )
    data = path.read_bytes()
    if not data:
        raise _fail(f"{escape(str(path))} is empty")
    return _upload_data(target, data, path.name, content_type)


def _upload_data(target: Target, data: bytes, name: str, content_type: str) -> str:
    """Upload `data` through `POST /uploads` and its presigned form; returns the `inputRef`."""
    form = _api(target, "POST", "/uploads", {"contentType": content_type, "size": len(data), "name": name})
    try:
        target.upload(form, data, name)
    except TargetError as error:
        raise _fail(escape(str(error))) from None
    return str(form["inputRef"])


@app.command()
def submit(
    kind: str,
    text: Annotated[
        str | None, typer.Argument(help="the input text or prompt (or give --file)", show_default=False)
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option(
            "--file", "-f", help="upload this file as the input (sent as `inputRef`) instead of TEXT"
        ),
    ] = None,
    content_type: Annotated[
        str | None, typer.Option("--content-type", help="the file's media type (default: from its extension)")
    ] = None,
    option: Annotated[list[str], typer.Option("--option", "-o", help="KEY=VALUE job option")] = [],  # noqa: B006
    idempotency_key: Annotated[str | None, typer.Option("--idempotency-key")] = None,
    wait: Annotated[bool, typer.Option(help="wait until the job is finished")] = False,
    timeout: Annotated[float, typer.Option(help="seconds to wait with --wait")] = 120.0,
    info_file: InfoFile = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Submit a job, with TEXT as its input or with --file PATH uploaded first.

    Each --file run uploads a new object: re-running it with the same --idempotency-key is a
    409 (same key, another inputRef), not a replay. With --wait the exit code says how the job
    ended: 0 succeeded, 3 not finished within --timeout, 4 failed, 5 cancelled.
    """
    if (text is None) == (file is None):
        raise _fail("give the input as TEXT or as --file PATH (one of them)")
    options = _parse_options(option)
    target = _target(info_file, api_url, api_key)
    if target.queue_urls and kind not in target.queue_urls:
        # Known before anything is uploaded (a deployed stage's API says the same, with its kinds).
        raise _fail(f"unknown kind {escape(repr(kind))}; kinds: {', '.join(target.queue_urls)}", EXIT_USAGE)
    payload: dict[str, Any] = {"kind": kind, "options": options}
    if file is not None:
        payload["inputRef"] = _upload_input(target, file, content_type)
    else:
        payload["input"] = text
    headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
    body = _api(target, "POST", "/jobs", payload, headers)
    if not wait:
        _emit(body, as_json, lambda b: out.print(escape(job_line(b))))
        return
    job = _wait(target, body["jobId"], timeout)
    _emit(job, as_json, lambda b: out.print(escape(job_line(b))))
    code = wait_exit_code(job)
    if code == EXIT_TIMED_OUT:
        err.print(
            escape(
                f"{job['jobId']} is still {job['status']} after {timeout:g} s: aijobs status {job['jobId']}"
            ),
            highlight=False,
        )
    elif code != 0:
        err.print(
            escape(f"{job['jobId']} {job['status']}: {job.get('lastErrorClass') or ''}: "
                   f"{job.get('lastErrorMessage') or ''}"),
            highlight=False,
        )  # fmt: skip
    if code:
        raise typer.Exit(code)


def wait_exit_code(job: Mapping[str, Any]) -> int:
    """How `submit --wait` exits for the job it waited for (docs/operations/runbook.md)."""
    if job["status"] == JobStatus.SUCCEEDED:
        return 0
    if job["status"] != JobStatus.FAILED_FINAL:
        return EXIT_TIMED_OUT
    return EXIT_CANCELLED if job.get("lastErrorClass") == CANCELLED else EXIT_FAILED


# The API's longest long-poll (GET /jobs/{id}?wait=N).
LONG_POLL_SECONDS = 20


def _wait(target: Target, job_id: str, timeout: float) -> Any:
    """Long-poll until the job is finished or `timeout` runs out: the API answers as soon as the
    job ends, so one request covers up to 20 s and the CLI never polls in a tight loop."""
    deadline = time.monotonic() + timeout
    while True:
        left = math.ceil(deadline - time.monotonic())
        wait = max(0, min(LONG_POLL_SECONDS, left))
        job = _api(target, "GET", _job_path(job_id) + (f"?wait={wait}" if wait else ""))
        if job["status"] in ("succeeded", "failed_final") or time.monotonic() >= deadline or not wait:
            return job


@app.command()
def status(
    job_id: Annotated[str | None, typer.Argument(help="a job id; without one: the consumers")] = None,
    info_file: InfoFile = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Show one of your jobs (a workflow's phase and progress; a part's parent); without JOB_ID,
    each kind's consumer concurrency (adaptive, on 429s) with its last changes (operators)."""
    if job_id is None:
        _consumers_status(_target(info_file, stack=stack, profile=profile, region=region), as_json)
        return
    target = _target(info_file, api_url, api_key)
    _emit(_api(target, "GET", _job_path(job_id)), as_json, _render_job)


def _consumers_status(target: Target, as_json: bool) -> None:
    from aijobs.store.flow import FlowRecords

    records = FlowRecords(target.directory().meta)
    data = {"consumers": {kind: records.state(kind).as_dict() for kind in target.queue_urls}}

    def render(data: Any) -> None:
        table = Table(
            whole("kind", data["consumers"]),
            folded("max concurrency"),
            folded("last change"),
            folded("reason"),
        )
        for kind, state in data["consumers"].items():
            value = state["maxConcurrency"]
            table.add_row(
                kind,
                "not limited" if value is None else str(value),
                state["changedAt"] or "",
                escape(state["reason"]),
            )
        _print_table(table)
        for kind, state in data["consumers"].items():
            for change in state["history"]:
                out.print(
                    f"{kind}: {change['at']} {change['action']} {change['from']} -> {change['value']}: "
                    f"{change['reason']}",
                    markup=False,
                    highlight=False,
                )

    _emit(data, as_json, render)


@app.command()
def children(
    job_id: str,
    status: Annotated[
        str | None, typer.Option(help="only the children in this status (queued, running, succeeded, ...)")
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=100, help="children per page")] = 50,
    cursor: Annotated[str | None, typer.Option(help="start at this page (a previous nextCursor)")] = None,
    all_pages: Annotated[bool, typer.Option("--all", help="follow the cursors to the last page")] = False,
    info_file: InfoFile = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """List a workflow job's children (its parts), in part order, a page at a time."""
    statuses = [member.value for member in JobStatus]
    if status is not None and status not in statuses:
        raise _fail(f"--status {escape(repr(status))} is not a job status; one of: {', '.join(statuses)}")
    if cursor is not None and not cursor.strip():
        raise _fail("--cursor is empty")
    target = _target(info_file, api_url, api_key)
    path = _job_path(job_id, "/children")
    jobs: list[Any] = []
    seen: set[str] = set()
    while True:
        query = {"limit": str(limit), "status": status, "cursor": cursor}
        page = _api(target, "GET", f"{path}?{urllib.parse.urlencode({k: v for k, v in query.items() if v})}")
        jobs.extend(page["jobs"])
        cursor = page.get("nextCursor")
        if not all_pages or not cursor:
            break
        if cursor in seen:
            raise _fail(f"the API returned the cursor {escape(cursor)} twice; stopping")
        seen.add(cursor)
    data = {"jobs": jobs, "nextCursor": cursor}

    def render(data: Any) -> None:
        table = Table(
            folded("part"),
            whole("jobId", [job["jobId"] for job in data["jobs"]]),
            whole("status", [job["status"] for job in data["jobs"]]),
            folded("attempts"),
            folded("error"),
            folded("finished"),
        )
        for job in data["jobs"]:
            table.add_row(
                str(job.get("part")),
                job["jobId"],
                job["status"],
                str(job["attempts"]),
                escape(job.get("lastErrorClass") or ""),
                job.get("finishedAt") or "",
            )
        _print_table(table)
        if data["nextCursor"]:
            out.print(
                f"more: aijobs children {job_id} --cursor {data['nextCursor']}  (or --all)",
                markup=False,
                highlight=False,
            )

    _emit(data, as_json, render)


@app.command()
def cancel(
    job_id: str,
    info_file: InfoFile = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Cancel one of your jobs. One not running ends failed_final (`cancelled`), refunded; a
    workflow's children that have not started never run. One whose attempt is running stays
    `running` with the cancel recorded: that attempt finishes (charged if it succeeds), and the
    job is never tried again."""
    job = _api(_target(info_file, api_url, api_key), "POST", _job_path(job_id, "/cancel"))
    _emit(job, as_json, lambda j: out.print(escape(job_line(j))))


@app.command("list")
def list_jobs(
    status: Annotated[
        str | None, typer.Option(help="queued, running, succeeded, failed_retryable, failed_final")
    ] = None,
    kind: Annotated[str | None, typer.Option()] = None,
    limit: Annotated[int, typer.Option(min=1, max=100)] = 20,
    info_file: InfoFile = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """List your jobs, newest first."""
    query = "&".join(f"{k}={v}" for k, v in (("status", status), ("kind", kind), ("limit", limit)) if v)
    page = _api(_target(info_file, api_url, api_key), "GET", f"/jobs?{query}")

    def render(data: Any) -> None:
        jobs = data["jobs"]
        table = Table(
            whole("jobId", [job["jobId"] for job in jobs]),
            whole("kind", [job["kind"] for job in jobs]),
            whole("status", [job["status"] for job in jobs]),
            folded("attempts"),
            folded("error"),
            folded("created"),
        )
        for job in jobs:
            table.add_row(
                escape(job["jobId"]),
                escape(job["kind"]),
                job["status"],
                str(job["attempts"]),
                escape(job.get("lastErrorClass") or ""),
                job["createdAt"],
            )
        _print_table(table)

    _emit(page, as_json, render)


# --- operator commands ----------------------------------------------------------------------------


@dlq_app.command("list")
def dlq_list(
    kind: Annotated[str | None, typer.Option(help="one kind (default: every kind)")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 50,
    include_resolved: Annotated[
        bool, typer.Option("--all", help="also the resolved ones (re-run and succeeded, failed, cancelled)")
    ] = False,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Open dead letters, newest first, each with its job's status now (--all: resolved ones too)."""
    target = _target(info_file, stack=stack, profile=profile, region=region)
    kinds = [kind] if kind else list(target.queue_urls)
    if kind and kind not in target.queue_urls:
        raise _fail(f"unknown kind {kind!r}; kinds: {', '.join(target.queue_urls)}")
    statuses = target.operator().dead_letters(kinds, include_resolved=include_resolved, limit=limit)
    entries = [
        status.entry.model_dump()
        | {
            "job_status": status.job.status.value if status.job else None,
            "reruns": status.job.reruns if status.job else 0,
            "resolution": status.resolution.value,
            "resolved": not status.resolution.is_open,
        }
        for status in statuses
    ]

    def render(data: Any) -> None:
        def ids(key: str) -> list[str]:
            return [e.get(key) or "" for e in data]

        table = Table(
            folded("when"), whole("kind", ids("kind")), whole("jobId", ids("job_id")),
            whole("parent", ids("parent_id")), whole("userId", ids("user_id")), folded("attempts"),
            folded("error class"), folded("message"), folded("status now"), folded("resolution"),
        )  # fmt: skip
        for e in data:
            message = escape((e.get("last_error_message") or "")[:60])
            table.add_row(
                e["dead_lettered_at"],
                escape(e["kind"]),
                escape(e["job_id"]),
                escape(e.get("parent_id") or ""),
                escape(e.get("user_id") or ""),
                str(e["attempts"]),
                escape(e.get("last_error_class") or ""),
                message,
                e.get("job_status") or "-",
                e["resolution"],
            )
        _print_table(table)

    _emit(entries, as_json, render)


def _operate(action: Any, as_json: bool, text: Any) -> None:
    """Run an operator action; print its result as JSON or as the line(s) `text(result)` makes."""
    try:
        result = action()
    except AijobsError as error:
        raise _fail(str(error)) from None
    _emit(result, as_json, lambda r: out.print(text(r), markup=False, highlight=False))


def rerun_text(result: Mapping[str, Any]) -> str:
    """`aijobs rerun`'s line: the job, its status, and whether the tenant pays again."""
    previous = result.get("previousErrorClass") or "none"
    charge = "not charged again" if result.get("chargeWaived") else "settled or refunded as usual"
    return (
        f"{result['jobId']}  {result['status']}  "
        f"(re-run {result['reruns']}, previous error {previous}, {charge})"
    )


def redrive_text(result: Mapping[str, Any]) -> str:
    """`aijobs redrive`'s lines: what matched, what was re-run, skipped or left alone."""
    lines = [
        f"dry run: {result['matched']} job(s) match; --execute re-runs them"
        if result["dryRun"]
        else f"{result['matched']} matched, {len(result['rerun'])} re-run, {len(result['skipped'])} skipped"
    ]
    if result["leftAlone"]:
        alone = ", ".join(f"{count} {reason}" for reason, count in sorted(result["leftAlone"].items()))
        lines.append(f"left alone: {alone}")
    lines.extend(f"re-run: {job_id}" + ("  (not charged again)" if job_id in result["waived"] else "")
                 for job_id in result["rerun"])  # fmt: skip
    lines.extend(f"skipped (changed meanwhile): {job_id}" for job_id in result["skipped"])
    return "\n".join(lines)


@app.command()
def rerun(
    job_id: str,
    user: Annotated[str, typer.Option(help="the job's user id")],
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Re-run one job: fresh attempt budget, status queued, reference re-sent."""
    target = _target(info_file, stack=stack, profile=profile, region=region)

    def action() -> Any:
        job = target.operator().rerun(user, job_id)
        return {
            "jobId": job.job_id, "status": job.status.value, "reruns": job.reruns,
            "previousErrorClass": job.previous_error_class, "chargeWaived": job.charge_waived,
        }  # fmt: skip

    _operate(action, as_json, rerun_text)


@app.command()
def redrive(
    kind: Annotated[str, typer.Option(help="job kind")],
    error_class: Annotated[
        str | None, typer.Option(help="only jobs that failed with this class (also: cancelled, operator)")
    ] = None,
    since: Annotated[datetime | None, typer.Option(help="failed at or after (UTC)")] = None,
    until: Annotated[datetime | None, typer.Option(help="failed before (UTC)")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run/--execute", help="count only (default) or re-run")
    ] = True,
    rate: Annotated[float, typer.Option(min=0.1, help="re-runs per second")] = 5.0,
    limit: Annotated[int | None, typer.Option(min=1)] = None,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Re-run failed_final jobs of a kind after a fix (dry run first: it counts what --execute takes).

    Jobs cancelled by their owner or failed by an operator are left alone unless --error-class
    names them (`cancelled`, `operator`). A re-run is not charged again (docs/operations/runbook.md).
    """
    target = _target(info_file, stack=stack, profile=profile, region=region)
    if kind not in target.queue_urls:
        raise _fail(f"unknown kind {kind!r}; kinds: {', '.join(target.queue_urls)}")

    def action() -> Any:
        report = target.operator().rerun_batch(
            kind,
            error_class=error_class,
            since=_utc(since),
            until=_utc(until),
            dry_run=dry_run,
            rate_per_second=rate,
            limit=limit,
        )
        return {
            "matched": report.matched,
            "rerun": report.rerun,
            "skipped": report.skipped,
            "dryRun": report.dry_run,
            "leftAlone": report.left_alone,
            "waived": report.waived,
        }

    _operate(action, as_json, redrive_text)


def _utc(moment: datetime | None) -> datetime | None:
    return moment.replace(tzinfo=UTC) if moment is not None and moment.tzinfo is None else moment


@app.command("fail-final")
def fail_final(
    job_id: str,
    user: Annotated[str, typer.Option(help="the job's user id")],
    reason: Annotated[str, typer.Option(help="why (kept on the job)")] = "marked failed by an operator",
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Mark a job failed_final (refunds its credits); it never runs again unless re-run."""
    target = _target(info_file, stack=stack, profile=profile, region=region)

    def action() -> Any:
        job = target.operator().fail_final(user, job_id, reason)
        return {"jobId": job.job_id, "status": job.status.value, "chargeState": job.charge_state}

    _operate(action, as_json, lambda r: f"{r['jobId']}  {r['status']}  (charge {r['chargeState']})")


@app.command()
def resume(
    kind: str,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Resume a kind's consumer after it paused on a provider 401/403 (fix the secret first)."""
    target = _target(info_file, stack=stack, profile=profile, region=region)
    if kind not in target.queue_urls:
        raise _fail(f"unknown kind {kind!r}; kinds: {', '.join(target.queue_urls)}")
    if target.is_local:
        try:
            local = target.local_control()
        except TargetError as error:
            raise _fail(str(error)) from None
        result = _api(local, "POST", f"/consumers/{kind}/resume")
    else:
        from aijobs import aws
        from aijobs.consumer.control import ConsumerControl

        function = target.consumer_functions.get(kind)
        if not function:
            raise _fail(f"stack outputs name no consumer function for {kind!r}")
        url = target.queue_urls[kind]
        region_, account, name = url.split(".")[1], url.split("/")[-2], url.split("/")[-1]
        mappings = ConsumerControl(aws.lambda_()).set_enabled(
            function, f"arn:aws:sqs:{region_}:{account}:{name}", enabled=True
        )
        result = {"kind": kind, "enabled": True, "mappings": mappings}
    _emit(result, as_json, lambda r: out.print(f"{kind}: consumer resumed ({len(r['mappings'])} mapping(s))"))


@keys_app.command("create")
def keys_create(
    user: str,
    operator: Annotated[
        bool, typer.Option("--operator", help="an operator key: the /admin routes and the console")
    ] = False,
    admin: Annotated[bool, typer.Option("--admin", hidden=True, help="the old name of --operator")] = False,
    label: Annotated[str, typer.Option()] = "",
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Create an API key for a user (creating the user). The key is shown once."""
    target = _target(info_file, stack=stack, profile=profile, region=region)
    role = "operator" if operator or admin else "user"
    key = target.directory().create_api_key(user, role=role, label=label)
    _emit({"userId": user, "apiKey": key}, as_json, lambda r: out.print(f"{r['apiKey']}  (user {user})"))


@webhooks_app.command("secret")
def webhooks_secret(
    user: Annotated[str, typer.Option("--user", help="the tenant (user id)")],
    rotate: Annotated[
        bool, typer.Option("--rotate", help="create or rotate it (the old one signs for 24 hours more)")
    ] = False,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """A tenant's webhook signing secret: whether it exists, or (--rotate) a new one, shown once."""
    target = _target(info_file, stack=stack, profile=profile, region=region)
    if target.directory().shard_for(user) is None:
        raise _fail(f"no tenant {user!r}: create it with `aijobs keys create {user}`")
    secrets = target.webhook_secrets()
    if rotate:
        issued = secrets.rotate(user)
        data: dict[str, Any] = {
            "userId": user,
            "secret": issued.secret,
            "createdAt": issued.created_at.isoformat(),
            "previousExpiresAt": _iso(issued.previous_expires_at),
        }
        _emit(data, as_json, lambda r: out.print(f"{r['secret']}  (shown once; user {user})"))
        return
    status = secrets.status(user)
    shown = {
        "userId": user,
        "exists": status.exists,
        "createdAt": _iso(status.created_at),
        "previousExpiresAt": _iso(status.previous_expires_at),
    }
    _emit(
        shown,
        as_json,
        lambda r: out.print(
            f"user {user}: secret created {r['createdAt']}" if r["exists"] else f"user {user}: no secret yet"
        ),
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


@tenants_app.command("limit")
def tenants_limit(
    user: str,
    max_running: Annotated[
        int | None,
        typer.Option(
            **_within(TENANT_MAX_RUNNING, "this tenant's jobs running at once, per kind (0: no cap)")
        ),
    ] = None,
    default: Annotated[
        bool, typer.Option("--default", help="back to the stage's TENANT_MAX_RUNNING")
    ] = False,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Set a tenant's own running cap per kind (takes effect within a minute in every consumer)."""
    if (max_running is None) == (not default):
        raise _fail("give exactly one of --max-running N or --default", 2)
    target = _target(info_file, stack=stack, profile=profile, region=region)
    try:
        target.directory().set_max_running(user, None if default else max_running)
    except KeyError:
        raise _fail(f"no such user: {user}") from None
    result = {"userId": user, "maxRunning": None if default else max_running}
    _emit(
        result,
        as_json,
        lambda r: out.print(
            f"{user}: max running per kind: "
            + ("the stage default" if r["maxRunning"] is None else str(r["maxRunning"] or "no cap"))
        ),
    )


# --- spend brake ---------------------------------------------------------------------------------


def _spend_now() -> datetime:
    """The moment that picks the spend day (tests move it)."""
    return datetime.now(UTC)


SpendTenant = Annotated[str | None, typer.Option("--tenant", help="a tenant (user id) instead of the stage")]


def _spend_target(
    info_file: Path | None, stack: str | None, profile: str | None, region: str | None
) -> tuple[Target, SpendRecords, tzinfo]:
    """The stage, its spend items and its time zone; a clear refusal on a stage without a brake."""
    from aijobs.bindings import time_zone

    target = _target(info_file, stack=stack, profile=profile, region=region)
    try:
        return target, target.spend_records(), time_zone(target.spend_time_zone)
    except (TargetError, ValueError) as error:
        raise _fail(str(error)) from None


def _usd(text: str) -> Decimal:
    """An amount from the command line: a plain number of dollars within SPEND_CAP_USD."""
    try:
        return SPEND_CAP_USD.check(text)
    except BoundError as error:
        raise _fail(f"--usd: {error} (e.g. 250 or 12.5)", 2) from None


def _known_tenant(target: Target, user: str) -> None:
    if target.directory().profile(user) is None:
        raise _fail(f"no such user: {user}")


def spend_report(
    target: Target, records: SpendRecords, zone: tzinfo, day: str | None = None
) -> dict[str, Any]:
    """The day's spend against its caps: the stage's and every tenant with its own cap."""
    from aijobs.spend import day_of, resets_at
    from aijobs.store.spend import usd

    now = _spend_now()
    day = day or day_of(now, zone)
    state = records.day_state(day)
    configured = usd(target.spend_cap_usd)
    cap = state.cap_usd if state.cap_usd is not None else configured
    directory = target.directory()
    tenants = []
    for user, tenant_cap in sorted(records.capped_tenants().items()):
        shard = directory.shard_for(user)
        spent = records.tenant_spend(shard, user, day) if shard is not None else Decimal(0)
        released = user in state.released_tenants
        tenants.append(
            {
                "userId": user,
                "spentUsd": str(spent),
                "capUsd": str(tenant_cap),
                "released": released,
                "held": spent >= tenant_cap and not released,
            }
        )
    return {
        "day": day,
        "timeZone": str(zone),
        "resetsAt": resets_at(now, zone).isoformat() if day == day_of(now, zone) else None,
        "stage": {
            "spentUsd": str(state.stage_usd),
            "capUsd": str(cap),
            "configuredCapUsd": str(configured),
            "capSetForTheDay": state.cap_usd is not None,
            "released": state.released,
            "held": state.stage_usd >= cap and not state.released,
        },
        "tenants": tenants,
    }


def _render_spend(data: Mapping[str, Any]) -> None:
    stage = data["stage"]
    out.print(
        f"day {data['day']} ({data['timeZone']})"
        + (f", resets at {data['resetsAt']}" if data["resetsAt"] else "")
    )
    table = Table(
        whole("who", ["stage", *(tenant["userId"] for tenant in data["tenants"])]),
        folded("spent (USD)"),
        folded("cap (USD)"),
        folded("state"),
    )

    def state(row: Mapping[str, Any]) -> str:
        return "released" if row["released"] else "HELD: jobs wait" if row["held"] else "running"

    cap = stage["capUsd"] + (" (set for the day)" if stage["capSetForTheDay"] else "")
    table.add_row("stage", stage["spentUsd"], cap, state(stage))
    for tenant in data["tenants"]:
        table.add_row(escape(tenant["userId"]), tenant["spentUsd"], tenant["capUsd"], state(tenant))
    _print_table(table)


@spend_app.callback()
def spend_show(
    ctx: typer.Context,
    day: Annotated[
        datetime | None, typer.Option(formats=["%Y-%m-%d"], help="another day (YYYY-MM-DD), kept 35 days")
    ] = None,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Today's model spend against the stage's cap and each capped tenant's (`cap`, `release`
    change them)."""
    if ctx.invoked_subcommand is not None:
        return
    target, records, zone = _spend_target(info_file, stack, profile, region)
    report = spend_report(target, records, zone, day.date().isoformat() if day else None)
    _emit(report, as_json, _render_spend)


@spend_app.command("cap")
def spend_cap(
    usd: Annotated[str | None, typer.Option("--usd", help="the cap in USD (0: nothing more runs)")] = None,
    clear: Annotated[
        bool, typer.Option("--clear", help="the stage: back to SPEND_DAILY_CAP_USD; a tenant: no own cap")
    ] = False,
    tenant: SpendTenant = None,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Set the stage's cap for the rest of today (SPEND_DAILY_CAP_USD again tomorrow), or a
    tenant's own daily cap (`--tenant`, kept until cleared). A new cap ends a release."""
    from aijobs.spend import day_of

    if (usd is None) == (not clear):
        raise _fail("give exactly one of --usd N or --clear", 2)
    amount = _usd(usd) if usd is not None else None
    target, records, zone = _spend_target(info_file, stack, profile, region)
    now = _spend_now()
    day = day_of(now, zone)
    if tenant is not None:
        try:
            records.set_tenant_cap(tenant, amount, day)
        except KeyError:
            raise _fail(f"no such user: {tenant}") from None
        result: dict[str, Any] = {"userId": tenant, "capUsd": None if amount is None else str(amount)}
        text = f"{tenant}: daily spend cap " + ("cleared" if amount is None else f"{amount} USD")
    else:
        records.set_day_cap(day, amount, now)
        cap = amount if amount is not None else target.spend_cap_usd
        result = {"day": day, "capUsd": str(cap), "setForTheDay": amount is not None}
        text = f"stage cap for {day} ({zone}): {cap} USD" + (
            f"; SPEND_DAILY_CAP_USD={target.spend_cap_usd} again from midnight" if amount is not None else ""
        )
    _emit(result, as_json, lambda _r: out.print(text, markup=False, highlight=False))


@spend_app.command("release")
def spend_release(
    tenant: SpendTenant = None,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Release the held jobs: lift the stage's brake (or one tenant's) until midnight or a new cap.
    Held jobs start within about 90 s."""
    from aijobs.spend import day_of

    target, records, zone = _spend_target(info_file, stack, profile, region)
    if tenant is not None:
        _known_tenant(target, tenant)
    now = _spend_now()
    day = day_of(now, zone)
    records.release(day, now, tenant)
    result = {"day": day, "released": tenant or "stage"}
    who = f"tenant {tenant}" if tenant else "the stage"
    _emit(
        result,
        as_json,
        lambda _r: out.print(f"{who}: released for {day} ({zone})", markup=False, highlight=False),
    )


@credits_app.command("grant")
def credits_grant(
    user: str,
    amount: Annotated[int, typer.Argument(**_within(CREDIT_GRANT, "credits to grant"))],
    days: Annotated[int, typer.Option(**_within(CREDIT_GRANT_DAYS, "days until the credits expire"))] = 30,
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Grant a user credits that expire after --days."""

    target = _target(info_file, stack=stack, profile=profile, region=region)
    directory = target.directory()
    directory.ensure_user(user)
    table = directory.shard_for(user)
    assert table is not None
    ledger = directory.job_store(table).ledger
    grant_id = ledger.grant(user, amount, datetime.now(UTC) + timedelta(days=days))
    result = {"userId": user, "grantId": grant_id, "balance": ledger.account(user).balance}
    _emit(result, as_json, lambda r: out.print(f"granted {amount} to {user}; balance {r['balance']}"))


@credits_app.command("show")
def credits_show(
    info_file: InfoFile = None, api_url: ApiUrl = None, api_key: ApiKey = None, as_json: AsJson = False
) -> None:
    """Your balance, grants and recent transactions."""
    body = _api(_target(info_file, api_url, api_key), "GET", "/credits")
    _emit(body, as_json, _render_credits)


def _render_credits(data: Mapping[str, Any]) -> None:
    out.print(f"balance: {data['balance']} credits", markup=False, highlight=False)
    grants = Table(
        whole("grant", [g["grantId"] for g in data["grants"]]), folded("amount"), folded("remaining"),
        folded("expires"), title="grants",
    )  # fmt: skip
    for grant in data["grants"]:
        expires = str(grant["expiresAt"]) + (" (expired)" if grant["expired"] else "")
        grants.add_row(escape(grant["grantId"]), str(grant["amount"]), str(grant["remaining"]), expires)
    _print_table(grants)
    transactions = Table(
        folded("when"), folded("type"), folded("amount"),
        whole("jobId", [t.get("jobId") or "" for t in data["transactions"]]), title="recent transactions",
    )  # fmt: skip
    for tx in data["transactions"]:
        transactions.add_row(
            str(tx["createdAt"]), tx["type"], str(tx["amount"]), escape(tx.get("jobId") or "")
        )
    _print_table(transactions)
    prices = ", ".join(f"{kind} {price}" for kind, price in sorted(data.get("prices", {}).items()))
    out.print(f"prices (credits per job): {prices or 'none'}", markup=False, highlight=False)
    if data.get("spendCounted"):
        days = data.get("spendByDay") or []
        spent = ", ".join(f"{day['day']} ${day['usd']:.2f}" for day in days) or "none in 30 days"
        out.print(f"model spend by day: {spent}", markup=False, highlight=False)


@cron_app.command("run")
def cron_run(
    expression: Annotated[str, typer.Argument(help="the exact CRONS entry, e.g. '*/10 * * * *'")],
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Run a scheduled job now, through the same dispatcher the schedules invoke."""
    from aijobs.scheduled.dispatcher import PAYLOAD_CRON, PAYLOAD_SCHEDULED_TIME, dispatch
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    target = _target(info_file, stack=stack, profile=profile, region=region)
    if expression not in SCHEDULED_HANDLERS:
        raise _fail(f"no scheduled job is registered for {expression!r}; known: {sorted(SCHEDULED_HANDLERS)}")
    payload = {
        PAYLOAD_CRON: expression,
        PAYLOAD_SCHEDULED_TIME: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if target.is_local:
        from aijobs_cdk.stage import load_stage_config

        try:
            result = dispatch(
                payload, target.cron_context(load_stage_config(target.stage)), SCHEDULED_HANDLERS
            )
        except Exception as error:
            raise _fail(f"the run failed: {type(error).__name__}: {error}") from None
    else:
        from aijobs import aws

        if not target.cron_function:
            raise _fail("stack outputs name no cron dispatcher function")
        response = aws.lambda_().invoke(
            FunctionName=target.cron_function, Payload=json.dumps(payload).encode()
        )
        result = json.loads(response["Payload"].read() or b"null")
        if response.get("FunctionError"):
            raise _fail(f"the run failed: {result}")
    # A failure the dispatcher handled (logged, counted, alerted once per incident) is a result.
    if isinstance(result, dict) and result.get("status") == "failed":
        raise _fail(f"the run failed: {result.get('error')}")
    _emit(result, as_json, lambda r: out.print_json(json.dumps(r, default=str)))


@config_app.command("retention")
def config_retention(
    tx_days: Annotated[
        int,
        typer.Option(
            "--credit-tx-days", **_within(CREDIT_TX_RETENTION_DAYS, "keep credit transactions this long")
        ),
    ],
    task_days: Annotated[
        int,
        typer.Option("--ai-task-days", **_within(AI_TASK_RETENTION_DAYS, "keep finished AI tasks this long")),
    ],
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Set the retention the */10 job reads from the meta table (it fails loudly without it)."""
    from aijobs import aws
    from aijobs.store.retention import write_retention

    target = _target(info_file, stack=stack, profile=profile, region=region)
    assert target.meta_table
    write_retention(
        aws.dynamodb().Table(target.meta_table),
        credit_tx_retention_days=tx_days,
        ai_task_retention_days=task_days,
    )
    _emit(
        {"creditTxRetentionDays": tx_days, "aiTaskRetentionDays": task_days},
        as_json,
        lambda _r: out.print(f"retention: credit transactions {tx_days} days, AI tasks {task_days} days"),
    )


# --- cost ----------------------------------------------------------------------------------------


@app.command()
def cost(
    jobs: Annotated[int, typer.Option(min=1, help="jobs per month")] = 20_000,
    retry_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of jobs retried once")] = 0.05,
    dlq_rate: Annotated[float, typer.Option(min=0.0, max=1.0, help="share of jobs dead-lettered")] = 0.01,
    failed_final_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of jobs failing for good on the first attempt")
    ] = 0.0,
    idempotency_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of submits with an Idempotency-Key")
    ] = 0.0,
    batch_size: Annotated[int | None, typer.Option(min=1, max=10_000, help="default: the stage's")] = None,
    message_kb: Annotated[float, typer.Option(min=0.001)] = 1.0,
    job_row_kb: Annotated[
        float | None,
        typer.Option(min=0.001, max=400, help="job row size (inline input); default: as measured"),
    ] = None,
    stage: Annotated[
        str | None,
        typer.Option(help="take CRONS, SHARD_COUNT, QUEUE_NAMES, MAX_RETRIES from .env.<stage> [dev]"),
    ] = None,
    call_profile: Annotated[
        Path | None, typer.Option(help="a call profile JSON (default: the measured call_profile.json)")
    ] = None,
    prices: Annotated[Path | None, typer.Option(help="a JSON price table (see --dump-prices)")] = None,
    dump_prices: Annotated[bool, typer.Option(help="print the default price table as JSON")] = False,
    model: Annotated[
        str | None,
        typer.Option(help="add the model's spend from the model price table, e.g. us.amazon.nova-lite-v1:0"),
    ] = None,
    model_provider: Annotated[
        str, typer.Option(help="the model's provider: bedrock, polly, openai")
    ] = "bedrock",
    model_usage: Annotated[
        list[str] | None,
        typer.Option(help="usage per job, UNIT=N, repeatable (e.g. inputTokens=2000 outputTokens=300)"),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Estimate the monthly AWS cost of a workload, next to Cloudflare Queues' operation count.

    Each code path's AWS calls come from the measured call profile (cli/aijobs_cli/call_profile.json);
    cron runs per hour, shards, kinds and retries from the stage's `.env.<stage>`. Prints the monthly
    total by service, the AWS cost per 1M jobs and, with `--model-usage`, what every model of every
    provider in the model price table would cost per 1M jobs. With `--model` the model's own spend
    is a line of its own, priced from the same table the consumers use (`aijobs/model_prices.json`)."""
    from pydantic import ValidationError

    from aijobs_cli.sizing.call_profile import CallProfile
    from aijobs_cli.sizing.cost import (
        DEFAULT_PRICES,
        PriceTable,
        Workload,
        estimate,
        render_text,
        stage_workload,
        to_dict,
    )

    if dump_prices:
        out.print(DEFAULT_PRICES.to_json())
        return
    try:
        from aijobs_cdk import REPO_ROOT
        from aijobs_cdk.stage import load_stage_config

        name = stage or ("dev" if (REPO_ROOT / ".env.dev").is_file() else None)
        from_stage = stage_workload(load_stage_config(name)) if name else {}
        if batch_size is not None:
            from_stage["batch_size"] = batch_size
        table = PriceTable.from_json(prices) if prices else DEFAULT_PRICES
        workload = Workload(
            jobs_per_month=jobs,
            retry_rate=retry_rate,
            dlq_rate=dlq_rate,
            failed_final_rate=failed_final_rate,
            idempotency_key_rate=idempotency_rate,
            message_kb=message_kb,
            job_row_kb=job_row_kb,
            model=model,
            model_provider=model_provider,
            model_usage_per_job=_usage_pairs(model_usage or []),
            **from_stage,
        )
        profile = CallProfile.from_json(call_profile) if call_profile else None
        result = estimate(workload, table, profile=profile)
    except (ValidationError, OSError, ValueError, KeyError) as error:
        raise _fail(str(error).strip('"')) from None
    if as_json:
        out.print_json(json.dumps(to_dict(result), default=str))
    else:
        out.print(render_text(result), markup=False, highlight=False)


def _usage_pairs(pairs: list[str]) -> dict[str, float]:
    usage: dict[str, float] = {}
    for pair in pairs:
        unit, sep, amount = pair.partition("=")
        try:
            usage[unit.strip()] = float(amount)
        except ValueError:
            raise _fail(f"--model-usage {pair!r} must be UNIT=NUMBER") from None
        if not sep or not unit.strip():
            raise _fail(f"--model-usage {pair!r} must be UNIT=NUMBER")
    return usage


def _kind_numbers(pairs: list[str], option: str) -> dict[str, float]:
    numbers: dict[str, float] = {}
    for pair in pairs:
        kind, sep, amount = pair.partition("=")
        try:
            numbers[kind.strip()] = float(amount)
        except ValueError:
            raise _fail(f"{option} {pair!r} must be KIND=NUMBER") from None
        if not sep or not kind.strip() or numbers[kind.strip()] <= 0:
            raise _fail(f"{option} {pair!r} must be KIND=NUMBER, the number above 0")
    return numbers


@app.command()
def capacity(
    jobs_per_second: Annotated[float, typer.Option(min=0.001, help="sustained jobs per second, all kinds")],
    kinds: Annotated[
        list[str] | None, typer.Option("--kinds", help="job kinds (repeatable); default: the stage's")
    ] = None,
    tenants: Annotated[int, typer.Option(min=1, help="tenants the jobs spread over")] = 1000,
    hot_tenant_share: Annotated[
        float | None, typer.Option(min=0.0001, max=1.0, help="share of all jobs from the busiest tenant")
    ] = None,
    stage: Annotated[str, typer.Option(help="read .env.<stage> (kinds, crons, throttles, buckets)")] = "dev",
    producer_ms: Annotated[float, typer.Option(min=0, help="api function time per request")] = 60.0,
    consumer_seconds: Annotated[
        float, typer.Option(min=0, help="consumer time per delivered message (mostly the model)")
    ] = 2.0,
    retry_rate: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.05,
    dlq_rate: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.01,
    failed_final_rate: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.0,
    idempotency_rate: Annotated[float, typer.Option(min=0.0, max=1.0)] = 0.0,
    polls_per_job: Annotated[float, typer.Option(min=0.0, help="GET /jobs/{id} per job")] = 3.0,
    grants_per_tenant_month: Annotated[
        float, typer.Option(min=0.0, help="credit grants a tenant gets a month (each expires once)")
    ] = 2.0,
    index_buckets: Annotated[
        int | None, typer.Option(min=1, help="index write-sharding buckets (default: INDEX_BUCKETS)")
    ] = None,
    provider_rpm: Annotated[
        list[str] | None, typer.Option(help="a kind's provider requests/minute quota, KIND=N (repeatable)")
    ] = None,
    provider_tpm: Annotated[
        list[str] | None, typer.Option(help="a kind's provider tokens/minute quota, KIND=N (repeatable)")
    ] = None,
    tokens_per_attempt: Annotated[float, typer.Option(min=0, help="tokens one attempt uses")] = 2300.0,
    lambda_concurrency: Annotated[
        float, typer.Option(min=1, help="the account's Lambda concurrent executions quota")
    ] = 1000.0,
    api_account_rps: Annotated[
        float, typer.Option(min=1, help="the account's HTTP API requests/s quota")
    ] = 10000.0,
    call_profile: Annotated[
        Path | None, typer.Option(help="a call profile JSON (default: the measured call_profile.json)")
    ] = None,
    top: Annotated[int, typer.Option(min=0, help="show only the first N limits (0: all)")] = 0,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="print the table as Markdown")] = False,
    as_json: AsJson = False,
) -> None:
    """Which limit a job rate reaches first: API Gateway, Lambda, SQS, DynamoDB partitions and
    tables, the maintenance run's limits, Scheduler, providers. Loads come from the measured call
    profile and partition trace and the stage's config; prints each limit's load, ceiling and the
    jobs/s at which it is reached, first wall first."""
    from pydantic import ValidationError

    from aijobs_cli.sizing.call_profile import CallProfile
    from aijobs_cli.sizing.capacity import CapacityInputs, markdown, model, rows, stage_inputs, summary

    try:
        from aijobs_cdk.stage import load_stage_config

        fields = stage_inputs(load_stage_config(stage))
        if kinds:
            fields["kinds"] = tuple(kinds)
        if index_buckets is not None:
            fields["index_buckets"] = index_buckets
        inputs = CapacityInputs(
            jobs_per_second=jobs_per_second,
            tenants=tenants,
            hot_tenant_share=hot_tenant_share,
            producer_ms=producer_ms,
            consumer_seconds=consumer_seconds,
            retry_rate=retry_rate,
            dlq_rate=dlq_rate,
            failed_final_rate=failed_final_rate,
            idempotency_rate=idempotency_rate,
            polls_per_job=polls_per_job,
            grants_per_tenant_month=grants_per_tenant_month,
            provider_rpm=_kind_numbers(provider_rpm or [], "--provider-rpm"),
            provider_tpm=_kind_numbers(provider_tpm or [], "--provider-tpm"),
            tokens_per_attempt=tokens_per_attempt,
            lambda_account_concurrency=lambda_concurrency,
            apigw_account_rps=api_account_rps,
            **fields,
        )
        profile = CallProfile.from_json(call_profile) if call_profile else None
        report = model(inputs, profile)
    except (ValidationError, OSError, ValueError, KeyError) as error:
        raise _fail(str(error).strip('"')) from None
    if as_json:
        out.print_json(json.dumps(report.to_dict(), default=str))
        return
    if as_markdown:
        out.print(markdown(report, top), markup=False, highlight=False)
        return
    table = Table(
        "limit", "scope", "load", "ceiling", "use", Column("wall at jobs/s", justify="right"), "owner",
        Column("raise or reshape", overflow="fold"),
        title=f"{jobs_per_second:,g} jobs/s, {len(inputs.kinds)} kinds, stage {stage}",
    )  # fmt: skip
    for row in rows(report)[: top or None]:
        table.add_row(*(escape(cell) for cell in row))
    out.print(table)
    for line in [*summary(report), *report.notes]:
        out.print(line, markup=False, highlight=False)


# --- sam local invoke ----------------------------------------------------------------------------


@app.command("sam-env")
def sam_env(
    template: Annotated[
        Path, typer.Option("--template", help="synthesized template, e.g. cdk.out/aijobs-dev.template.json")
    ],
    out_file: Annotated[Path, typer.Option("--out", help="the --env-vars file to write")] = Path(
        ".aijobs/sam-env.json"
    ),
    info_file: InfoFile = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    endpoint_host: Annotated[
        str,
        typer.Option(
            "--endpoint-host",
            help="how a SAM container reaches this machine (127.0.0.1 with `--docker-network host`)",
        ),
    ] = "host.docker.internal",
    as_json: AsJson = False,
) -> None:
    """Write the `sam local invoke --env-vars` file: each function's environment with real names,
    from a deployed stack (--stack) or the local stack (--info-file, the default)."""
    from aijobs_cli import sam_env as env_file

    if stack and info_file:
        raise _fail("pass --stack NAME or --info-file FILE, not both")
    try:
        written = env_file.generate(
            template, out_file, stack=stack, profile=profile, region=region,
            info_file=None if stack else (info_file or DEFAULT_INFO), endpoint_host=endpoint_host,
        )  # fmt: skip
    except env_file.SamEnvError as error:
        raise _fail(str(error)) from None
    result = {
        "envFile": str(written.env_file),
        "template": str(written.template),
        "eventsDir": str(written.events_dir),
        "events": written.events,
    }
    _emit(result, as_json, lambda _r: out.print(env_file.usage(written), markup=False, highlight=False))


@app.command()
def events(
    stage: Annotated[str, typer.Option(help="write the events of .env.<stage>'s kinds and crons")] = "dev",
    out_dir: Annotated[Path, typer.Option("--out", help="folder to write them to")] = Path(".aijobs/events"),
    as_json: AsJson = False,
) -> None:
    """Write the sample events for `sam local invoke -e`: an SQS batch per job kind of the stage
    (`sqs-<kind>-batch.json`, from the queue `aijobs-<stage>-<kind>`), the input of each cron's
    schedule (`schedule-<handler>.json`), and the hand-written events of events/ (API, DLQ,
    webhooks). `aijobs sam-env` writes the same, naming a deployed stage's real queues."""
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cli.sample_events import stage_events, write_events

    try:
        written = write_events(out_dir, stage_events(load_stage_config(stage)))
    except (ConfigError, ValueError) as error:
        raise _fail(str(error)) from None
    result = {"outDir": str(out_dir), "events": [path.name for path in written]}
    lines = [f"wrote {len(written)} sample events to {out_dir}", *(f"  {name}" for name in result["events"])]
    _emit(result, as_json, lambda _r: out.print("\n".join(lines), markup=False, highlight=False))


# --- demo ----------------------------------------------------------------------------------------

DEMO_MIX: list[tuple[str, str, str]] = [
    (
        "summary",
        "Queues decouple accepting work from doing it. The producer answers at once. "
        "A consumer does the slow part. Retries are classified.",
        "clean",
    ),
    ("summary", "#fail:503x2 A flapping upstream model. It answers on the third try.", "transient x2"),
    ("summary", "#fail:429x1 A throttled model that asks us to wait.", "throttled x1"),
    ("summary", "#fail:400 Input the model rejects for good.", "permanent"),
    ("embedding", "vectors for a search index", "clean"),
    ("image-generate", "a red lighthouse at dusk", "clean"),
    ("tts-generate", "welcome to the local stack", "clean"),
    ("video-generate", "#running:3 waves on a beach", "long running"),
    ("summary", "#sleep:2 A slow model. It takes two seconds.", "slow"),
    ("summary", "#outage A provider outage outlasting every retry.", "dead-lettered"),
]


REPORT_KIND = "report"
REPORT_CHUNK_CHARS = 2000
# Lines of the report's final summary `aijobs demo` prints.
REPORT_SUMMARY_LINES = 4


def sample_report() -> bytes:
    """The demo's long document (an operations handbook, about seven pages), shipped with the CLI."""
    return resources.files("aijobs_cli").joinpath("samples").joinpath("report.txt").read_bytes()


@app.command()
def demo(
    rounds: Annotated[int, typer.Option(min=1, max=50, help="times to submit the mix of jobs")] = 1,
    timeout: Annotated[float, typer.Option(help="seconds to wait for every job to finish")] = 180.0,
    report: Annotated[
        bool, typer.Option(help="also summarize a long document with a `report` workflow job")
    ] = True,
    report_file: Annotated[
        Path | None,
        typer.Option(help="the document for the report (default: the bundled sample handbook)"),
    ] = None,
    chunk_chars: Annotated[
        int, typer.Option(min=500, max=50_000, help="the report's chunk size (one summary job each)")
    ] = REPORT_CHUNK_CHARS,
    info_file: InfoFile = None,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    as_json: AsJson = False,
) -> None:
    """Submit a realistic mix of jobs and watch them to the end (needs a running stack).

    When the stage has the `report` workflow kind, a multi-page document is uploaded too and
    summarized chunk by chunk (one `summary` child job per chunk), then as a whole."""
    if report_file is not None and not report:
        raise _fail("--report-file needs the report (drop --no-report)")
    target = _target(info_file, api_url, api_key)
    submitted: list[tuple[str, str, str]] = []
    for _ in range(rounds):
        for kind, text, label in DEMO_MIX:
            if kind not in target.queue_urls and target.queue_urls:
                continue
            body = _api(target, "POST", "/jobs", {"kind": kind, "input": text})
            submitted.append((body["jobId"], kind, label))
    report_entry = _submit_report(target, report_file, chunk_chars) if report else _skipped("--no-report")
    report_id: str | None = report_entry.get("jobId")
    report_job: dict[str, Any] | None = None
    final: dict[str, Any] = {}
    deadline = time.monotonic() + timeout
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        console=err,
        disable=as_json,
    ) as progress:
        task = progress.add_task("jobs finished", total=len(submitted))
        # The total is unknown (a pulsing bar) until the report's split has counted its chunks.
        report_task = progress.add_task(f"report {report_id}: chunks summarized", total=None, visible=False)
        if report_id is not None:
            progress.update(report_task, visible=True)
        while time.monotonic() < deadline:
            for job_id, _kind, _label in submitted:
                if job_id in final:
                    continue
                job = _api(target, "GET", _job_path(job_id))
                if job["status"] in ("succeeded", "failed_final"):
                    final[job_id] = job
                    progress.advance(task)
            if report_id is not None and report_job is None:
                view = _api(target, "GET", _job_path(report_id))
                total, done = _children_done(view)
                progress.update(report_task, total=total or None, completed=done)
                if view["status"] in ("succeeded", "failed_final"):
                    report_job = view
            if len(final) == len(submitted) and (report_id is None or report_job is not None):
                break
            time.sleep(0.5)
    rows: list[dict[str, Any]] = []
    for job_id, kind, label in submitted:
        job = final.get(job_id)
        rows.append(
            {
                "jobId": job_id,
                "kind": kind,
                "case": label,
                "outcome": _outcome(job),
                "attempts": job["attempts"] if job else None,
                "latencySeconds": _latency(job),
            }
        )
    if report_job is not None:
        report_entry.update(_finished_report(report_job))
    latencies: list[float] = sorted(
        float(r["latencySeconds"]) for r in rows if r["latencySeconds"] is not None
    )
    summary = {
        "jobs": len(rows),
        "outcomes": {
            o: sum(1 for r in rows if r["outcome"] == o) for o in sorted({r["outcome"] for r in rows})
        },
        "p50Seconds": round(statistics.median(latencies), 2) if latencies else None,
        "p95Seconds": round(_percentile(latencies, 0.95), 2) if latencies else None,
        "jobsDetail": rows,
        "report": report_entry,
    }

    def render(data: Any) -> None:
        detail = data["jobsDetail"]
        table = Table(
            folded("case"),
            whole("jobId", [r["jobId"] for r in detail]),
            folded("kind"),
            folded("outcome"),
            folded("attempts"),
            folded("latency s"),
        )
        for r in detail:
            table.add_row(
                r["case"],
                r["jobId"],
                r["kind"],
                r["outcome"],
                str(r["attempts"]),
                f"{r['latencySeconds']:.1f}" if r["latencySeconds"] is not None else "-",
            )
        _print_table(table)
        out.print(
            f"outcomes: {outcomes_text(data['outcomes'])}   p50 {data['p50Seconds']} s   "
            f"p95 {data['p95Seconds']} s",
            markup=False,
            highlight=False,
        )
        _render_report(data["report"])

    _emit(summary, as_json, render)
    if any(r["outcome"] == "unfinished" for r in rows) or report_entry["outcome"] == "unfinished":
        raise typer.Exit(EXIT_TIMED_OUT)


def outcomes_text(outcomes: Mapping[str, int]) -> str:
    """`7 succeeded, 1 failed_final, 2 dead-lettered`: the demo's outcome counts, most first."""
    ordered = sorted(outcomes.items(), key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{count} {outcome}" for outcome, count in ordered) or "no jobs"


def _outcome(job: Mapping[str, Any] | None) -> str:
    if job is None:
        return "unfinished"
    return "dead-lettered" if job.get("deadLettered") else str(job["status"])


def _latency(job: Mapping[str, Any] | None) -> float | None:
    if job is None or not job.get("finishedAt"):
        return None
    finished, created = datetime.fromisoformat(job["finishedAt"]), datetime.fromisoformat(job["createdAt"])
    return (finished - created).total_seconds()


def _children_done(job: Mapping[str, Any]) -> tuple[int, int]:
    """A workflow job's (parts, parts finished): succeeded or failed for good."""
    progress = job.get("progress") or {}
    done = int(progress.get("succeeded") or 0) + int(progress.get("failedFinal") or 0)
    return int(progress.get("total") or 0), done


def _skipped(reason: str) -> dict[str, Any]:
    return {"jobId": None, "outcome": "skipped", "reason": reason}


def _submit_report(target: Target, file: Path | None, chunk_chars: int) -> dict[str, Any]:
    """Upload the document and submit a `report` job by `inputRef` (skipped without the kind)."""
    if target.queue_urls and REPORT_KIND not in target.queue_urls:
        return _skipped(f"the stage has no {REPORT_KIND!r} kind (QUEUE_NAMES)")
    if file is None:
        data, name = sample_report(), "report.txt"
        ref = _upload_data(target, data, name, "text/plain")
    else:
        name = file.name
        ref = _upload_input(target, file, None)
    response = _request(
        target,
        "POST",
        "/jobs",
        {"kind": REPORT_KIND, "inputRef": ref, "options": {"chunkChars": chunk_chars}},
    )
    if response.status >= 400:
        # A deployed stage (no queue list to check first) may not have the workflow.
        if isinstance(response.body, dict) and response.body.get("code") == "unknown_kind":
            return _skipped(f"the stage has no {REPORT_KIND!r} kind")
        raise _api_error(response)
    return {
        "jobId": str(response.body["jobId"]),
        "outcome": "unfinished",
        "document": name,
        "inputRef": ref,
        "chunkChars": chunk_chars,
    }


def _finished_report(job: Mapping[str, Any]) -> dict[str, Any]:
    """What the demo reports of a finished `report` job: outcome, parts and the final summary."""
    output = _result_output(job)
    parts = output.get("parts") if isinstance(output, dict) else None
    summary = output.get("summary") if isinstance(output, dict) else None
    total, done = _children_done(job)
    return {
        "status": job["status"],
        "outcome": _outcome(job),
        "attempts": job.get("attempts"),
        "phase": job.get("phase"),
        "progress": job.get("progress"),
        "parts": len(parts) if isinstance(parts, list) else None,
        "total": total,
        "partsFinished": done,
        "missingParts": output.get("missingParts") if isinstance(output, dict) else None,
        "summary": summary if isinstance(summary, str) else None,
        "error": job.get("lastErrorClass"),
        "errorMessage": job.get("lastErrorMessage"),
        "latencySeconds": _latency(job),
    }


def _result_output(job: Mapping[str, Any]) -> Any:
    """A finished job's output: inline in its view, or read through its presigned `resultUrl`
    (None when neither works: the demo still reports the outcome)."""
    if job.get("result") is not None:
        return job["result"]
    url = job.get("resultUrl")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        return None
    try:
        with urllib.request.urlopen(url, timeout=30) as response:  # noqa: S310 - the URL the API signed
            document = json.loads(response.read())
    except (OSError, ValueError):
        return None
    return document.get("output") if isinstance(document, dict) else None


def _render_report(entry: Mapping[str, Any]) -> None:
    if entry["outcome"] == "skipped":
        out.print(f"report: skipped ({escape(str(entry.get('reason')))})")
        return
    head = f"report {entry['jobId']}: {entry['outcome']}"
    if entry["outcome"] == "unfinished":
        out.print(f"{head} (still running: `aijobs status {entry['jobId']}`)", markup=False)
        return
    latency = entry.get("latencySeconds")
    parts = entry.get("parts")
    out.print(
        f"{head}, {parts if parts is not None else '?'} parts summarized of {entry.get('total')}"
        + (f", missing {entry['missingParts']}" if entry.get("missingParts") else "")
        + (f", {latency:.1f} s" if latency is not None else ""),
        markup=False,
        highlight=False,
    )
    if entry.get("error"):
        out.print(f"  error: {entry['error']}: {entry.get('errorMessage') or ''}", markup=False)
    summary = entry.get("summary")
    if summary:
        lines = textwrap.wrap(summary, width=max(40, min(100, out.width - 4)))
        shown = lines[:REPORT_SUMMARY_LINES]
        if len(lines) > len(shown):
            shown[-1] += " …"
        out.print("  summary:", markup=False)
        for line in shown:
            out.print(f"    {line}", markup=False, highlight=False)


def _percentile(ordered: list[float], share: float) -> float:
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


# --- chaos soak ----------------------------------------------------------------------------------


@app.command()
def soak(
    jobs: Annotated[int, typer.Option(min=1, max=100_000, help="jobs to submit")] = 300,
    users: Annotated[int, typer.Option(min=1, max=1000, help="users (each with its own key and grants)")] = 6,
    seed: Annotated[int, typer.Option(help="seed of the job mix and the injections")] = 1,
    timeout: Annotated[
        float, typer.Option(min=10, help="seconds before unfinished jobs count as lost")
    ] = 900.0,
    verbose: Annotated[bool, typer.Option(help="show the functions' warnings and errors")] = False,
    rate: Annotated[
        float | None, typer.Option(min=0.01, help="submit at this many jobs/s (a paced load test)")
    ] = None,
    duration: Annotated[
        float | None, typer.Option(min=1, help="stop submitting after this many seconds")
    ] = None,
    max_jobs: Annotated[
        int | None, typer.Option(min=1, max=1_000_000, help="hard cap on jobs submitted (replaces --jobs)")
    ] = None,
    max_spend_usd: Annotated[
        float | None, typer.Option(min=0, help="hard cap on model spend, USD (see --cost-per-job-usd)")
    ] = None,
    cost_per_job_usd: Annotated[
        float, typer.Option(min=0, help="upper bound of one job's model spend, counted per job submitted")
    ] = 0.5,
    submit_workers: Annotated[int, typer.Option(min=1, max=256, help="concurrent submitting clients")] = 4,
    api_url: ApiUrl = None,
    api_key: ApiKey = None,
    stack: Stack = None,
    profile: Profile = None,
    region: Region = None,
    as_json: AsJson = False,
) -> None:
    """Chaos soak: a mix of faults, duplicate messages, double cron fires and killed attempts, then
    an invariant report. Exits 1 when any invariant is not 0.

    By default it starts its own local stack (stage `local`). With --api-url/--api-key it soaks a
    deployed stage (add --stack for copies, cron fires, ledger and DLQ checks, and CloudWatch's
    throttle metrics; not verified here): a deployed soak needs --max-jobs and --max-spend-usd.
    With --rate (and --duration) it is a paced load test whose report adds the throttles seen and
    the capacity model's prediction for that rate.
    """
    from aijobs.observability import logger
    from aijobs_cli.sizing.capacity import stage_inputs
    from aijobs_cli.soak import (
        INVARIANTS,
        DeployedSoakTarget,
        LoadPlan,
        LocalSoakTarget,
        SoakReport,
        SoakTarget,
        run_soak,
    )

    if not verbose:
        logger.setLevel("CRITICAL")
    deployed = bool(api_url or stack)
    if deployed and (not api_url or not api_key):
        raise _fail("a deployed soak needs --api-url and --api-key (and --stack for AWS access)")
    if deployed and (max_jobs is None or max_spend_usd is None):
        raise _fail("a deployed soak needs both hard caps: --max-jobs N and --max-spend-usd USD")
    load = None
    if deployed or any(value is not None for value in (rate, duration, max_jobs, max_spend_usd)):
        load = LoadPlan(
            max_jobs=max_jobs or jobs,
            max_spend_usd=max_spend_usd,
            cost_per_job_usd=cost_per_job_usd,
            rate=rate,
            duration_seconds=duration,
        )

    def go(target: SoakTarget, users: int, inputs: dict[str, Any]) -> SoakReport:
        return run_soak(
            target, jobs=jobs, users=users, seed=seed, timeout_seconds=timeout, progress=err.print,
            load=load, submit_workers=submit_workers, capacity_inputs=inputs,
        )  # fmt: skip

    target: SoakTarget
    if api_url and api_key:  # deployed (checked above)
        aws_target = _target(None, api_url, api_key, stack, profile, region) if stack else None
        max_retries = 3
        inputs: dict[str, Any] = {}
        try:
            from aijobs_cdk.stage import load_stage_config

            if aws_target is not None:
                config = load_stage_config(aws_target.stage)
                max_retries, inputs = config.max_retries, stage_inputs(config)
        except ConfigError:
            pass  # no local copy of that stage's configuration: the default budget
        try:
            target = DeployedSoakTarget(api_url, api_key, aws_target, max_retries)
        except TargetError as error:
            raise _fail(str(error)) from None
        report = go(target, 1, inputs)
    else:
        with LocalSoakTarget() as local:
            report = go(local, users, stage_inputs(local.config))
    if as_json:
        out.print_json(json.dumps(report.to_dict(), default=str))
    else:
        table = Table("invariant", "count", "means")
        for name, count in report.invariants.items():
            shown = "n/a" if count is None else ("[green]0[/green]" if count == 0 else f"[red]{count}[/red]")
            table.add_row(name, shown, INVARIANTS[name])
        out.print(table)
        outcomes = Table("fault", "outcomes")
        for fault, counts in report.outcomes.items():
            outcomes.add_row(fault, ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        out.print(outcomes)
        out.print(
            f"{report.jobs} jobs, {report.users} users, {report.duration_seconds} s, "
            f"{report.jobs_per_second} jobs/s, seed {report.seed}, target: {report.target}"
        )
        out.print_json(json.dumps(report.figures, default=str))
        for name, lines in report.examples.items():
            out.print(f"[bold]{name}[/bold]")
            for line in lines:
                out.print(f"  {line}", markup=False, highlight=False)
        for note in report.notes:
            out.print(f"[yellow]note:[/yellow] {note}")
        if report.load is not None:
            out.print("[bold]load[/bold]")
            out.print_json(json.dumps(report.load, default=str))
    if not report.ok:
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
