"""Operator commands: the dead-letter queue, `rerun`, `redrive`, `fail-final`, `resume`, cron runs
and the meta table's dynamic configuration."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aijobs.bounds import (
    AI_TASK_RETENTION_DAYS,
    CREDIT_TX_RETENTION_DAYS,
)
from aijobs.errors import AijobsError
from aijobs_cli.commands._common import (
    AsJson,
    InfoFile,
    Profile,
    Region,
    Stack,
    _api,
    _emit,
    _fail,
    _print_table,
    _target,
    _within,
    folded,
    out,
    whole,
)
from aijobs_cli.target import TargetError

dlq_app = typer.Typer(help="Dead-letter queue: what failed for good.", no_args_is_help=True)
cron_app = typer.Typer(help="Scheduled jobs.", no_args_is_help=True)
config_app = typer.Typer(help="Dynamic configuration in the meta table.", no_args_is_help=True)


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
