"""`aijobs submit`, `status`, `children`, `cancel`, `list`: a tenant's jobs through the HTTP API,
and how a job is shown."""

from __future__ import annotations

import json
import math
import mimetypes
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aijobs.errors import CANCELLED
from aijobs_cli.commands._common import (
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_TIMED_OUT,
    EXIT_USAGE,
    ApiKey,
    ApiUrl,
    AsJson,
    InfoFile,
    Profile,
    Region,
    Stack,
    _api,
    _emit,
    _fail,
    _job_path,
    _print_table,
    _target,
    err,
    folded,
    out,
    whole,
)
from aijobs_cli.target import Target, TargetError

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
    from aijobs.domain import JobStatus

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
    from aijobs.store.throttle_counts import ThrottleCounts

    records = ThrottleCounts(target.directory().meta)
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
    from aijobs.domain import JobStatus

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
