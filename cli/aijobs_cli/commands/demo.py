"""`aijobs demo`: a realistic mix of jobs (and a long `report` workflow) watched to the end."""

from __future__ import annotations

import json
import statistics
import textwrap
import time
import urllib.parse
import urllib.request
from collections.abc import Mapping
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aijobs_cli.commands._common import (
    EXIT_TIMED_OUT,
    ApiKey,
    ApiUrl,
    AsJson,
    InfoFile,
    _api,
    _api_error,
    _emit,
    _fail,
    _job_path,
    _print_table,
    _request,
    _target,
    err,
    folded,
    out,
    whole,
)
from aijobs_cli.commands.jobs import _upload_data, _upload_input
from aijobs_cli.target import Target

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
    return resources.files("aijobs_cli.local").joinpath("samples").joinpath("report.txt").read_bytes()


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
    submitted = _submit_mix(target, rounds)
    report_entry = _submit_report(target, report_file, chunk_chars) if report else _skipped("--no-report")
    report_id: str | None = report_entry.get("jobId")
    final, report_job = _watch(target, submitted, report_id, timeout, as_json)
    rows, summary = _summary(submitted, final, report_entry, report_job)
    _emit(summary, as_json, _render_demo)
    if any(r["outcome"] == "unfinished" for r in rows) or report_entry["outcome"] == "unfinished":
        raise typer.Exit(EXIT_TIMED_OUT)


def _submit_mix(target: Target, rounds: int) -> list[tuple[str, str, str]]:
    """Submit DEMO_MIX `rounds` times (the kinds the stage has): each job's id, kind and case."""
    submitted: list[tuple[str, str, str]] = []
    for _ in range(rounds):
        for kind, text, label in DEMO_MIX:
            if kind not in target.queue_urls and target.queue_urls:
                continue
            body = _api(target, "POST", "/jobs", {"kind": kind, "input": text})
            submitted.append((body["jobId"], kind, label))
    return submitted


def _watch(
    target: Target,
    submitted: list[tuple[str, str, str]],
    report_id: str | None,
    timeout: float,
    as_json: bool,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Poll the jobs (and the report) until all finish or `timeout` passes, with progress bars on
    stderr: the finished jobs by id, and the report's job once it finished."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

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
    return final, report_job


def _summary(
    submitted: list[tuple[str, str, str]],
    final: Mapping[str, Any],
    report_entry: dict[str, Any],
    report_job: Mapping[str, Any] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Each job's row and the demo's summary (outcomes, latency percentiles, the report)."""
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
    return rows, summary


def _render_demo(data: Any) -> None:
    """The jobs as a table, their outcomes and latencies, then the report."""
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
