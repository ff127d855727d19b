"""`aijobs cost` and `aijobs capacity`: the commands over aijobs_cli.sizing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Column, Table

from aijobs_cli.commands._common import AsJson, _fail, out

if TYPE_CHECKING:
    from aijobs_cli.sizing.call_profile import CallProfile
    from aijobs_cli.sizing.capacity import CapacityInputs, CapacityReport
    from aijobs_cli.sizing.cost import PriceTable, Workload

# Options both commands take: how a client waits for its job, and shares of the jobs.
PollsPerJob = Annotated[
    float, typer.Option(min=0.0, help="GET /jobs/{id} per job (1: one ?wait= long-poll; 0: webhooks)")
]
PollWaitSeconds = Annotated[
    float, typer.Option(min=0.0, max=20.0, help="seconds each status call waits (0: short polls)")
]
Share = Annotated[float, typer.Option(min=0.0, max=1.0)]
CallProfilePath = Annotated[
    Path | None, typer.Option(help="a call profile JSON (default: the measured call_profile.json)")
]

# --- cost ----------------------------------------------------------------------------------------


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
    polls_per_job: PollsPerJob = 1.0,
    poll_wait_seconds: PollWaitSeconds = 2.0,
    webhook_rate: Annotated[
        float, typer.Option(min=0.0, max=1.0, help="share of jobs with a callbackUrl")
    ] = 0.0,
    message_kb: Annotated[float, typer.Option(min=0.001)] = 1.0,
    job_row_kb: Annotated[
        float | None,
        typer.Option(min=0.001, max=400, help="job row size (inline input); default: as measured"),
    ] = None,
    stage: Annotated[
        str | None,
        typer.Option(help="take CRONS, SHARD_COUNT, QUEUE_NAMES, MAX_RETRIES from .env.<stage> [dev]"),
    ] = None,
    call_profile: CallProfilePath = None,
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

    Each code path's AWS calls come from the measured call profile (cli/aijobs_cli/sizing/call_profile.json);
    cron runs per hour, shards, kinds and retries from the stage's `.env.<stage>`. Prints the monthly
    total by service, the AWS cost per 1M jobs and, with `--model-usage`, what every model of every
    provider in the model price table would cost per 1M jobs. With `--model` the model's own spend
    is a line of its own, priced from the same table the consumers use (`aijobs/model_prices.json`)."""
    from pydantic import ValidationError

    from aijobs_cli.sizing.call_profile import CallProfile
    from aijobs_cli.sizing.cost import DEFAULT_PRICES, estimate, render_text, to_dict

    if dump_prices:
        out.print(DEFAULT_PRICES.to_json())
        return
    try:
        workload, table = _cost_workload(
            stage, batch_size, prices, model_usage or [], jobs_per_month=jobs, retry_rate=retry_rate,
            dlq_rate=dlq_rate, failed_final_rate=failed_final_rate, idempotency_key_rate=idempotency_rate,
            status_polls_per_job=polls_per_job, poll_wait_seconds=poll_wait_seconds,
            webhook_rate=webhook_rate, message_kb=message_kb, job_row_kb=job_row_kb, model=model,
            model_provider=model_provider,
        )  # fmt: skip
        profile = CallProfile.from_json(call_profile) if call_profile else None
        result = estimate(workload, table, profile=profile)
    except (ValidationError, OSError, ValueError, KeyError) as error:
        raise _fail(str(error).strip('"')) from None
    if as_json:
        out.print_json(json.dumps(to_dict(result), default=str))
    else:
        out.print(render_text(result), markup=False, highlight=False)


def _cost_workload(
    stage: str | None, batch_size: int | None, prices: Path | None, model_usage: list[str], **fields: Any
) -> tuple[Workload, PriceTable]:
    """The workload `aijobs cost` prices (the stage's crons, shards, kinds and retries under the
    options) and the price table it is priced with."""
    from aijobs_cdk import REPO_ROOT
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cli.sizing.cost import DEFAULT_PRICES, PriceTable, Workload, stage_workload

    name = stage or ("dev" if (REPO_ROOT / ".env.dev").is_file() else None)
    from_stage = stage_workload(load_stage_config(name)) if name else {}
    if batch_size is not None:
        from_stage["batch_size"] = batch_size
    table = PriceTable.from_json(prices) if prices else DEFAULT_PRICES
    workload = Workload(**fields, model_usage_per_job=_usage_pairs(model_usage), **from_stage)
    return workload, table


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
    retry_rate: Share = 0.05,
    dlq_rate: Share = 0.01,
    failed_final_rate: Share = 0.0,
    idempotency_rate: Share = 0.0,
    polls_per_job: PollsPerJob = 1.0,
    poll_wait_seconds: PollWaitSeconds = 2.0,
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
    call_profile: CallProfilePath = None,
    top: Annotated[int, typer.Option(min=0, help="show only the first N limits (0: all)")] = 0,
    as_markdown: Annotated[bool, typer.Option("--markdown", help="print the table as Markdown")] = False,
    as_json: AsJson = False,
) -> None:
    """Which limit a job rate reaches first: API Gateway, Lambda, SQS, DynamoDB partitions and
    tables, the maintenance run's limits, Scheduler, providers. Loads come from the measured call
    profile and partition trace and the stage's config; prints each limit's load, ceiling and the
    jobs/s at which it is reached, first wall first."""
    from pydantic import ValidationError

    from aijobs_cli.sizing.capacity import model

    try:
        inputs = _capacity_inputs(
            stage,
            kinds,
            index_buckets,
            provider_rpm or [],
            provider_tpm or [],
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
            poll_wait_seconds=poll_wait_seconds,
            grants_per_tenant_month=grants_per_tenant_month,
            tokens_per_attempt=tokens_per_attempt,
            lambda_account_concurrency=lambda_concurrency,
            apigw_account_rps=api_account_rps,
        )
        report = model(inputs, _call_profile(call_profile))
    except (ValidationError, OSError, ValueError, KeyError) as error:
        raise _fail(str(error).strip('"')) from None
    title = f"{jobs_per_second:,g} jobs/s, {len(inputs.kinds)} kinds, stage {stage}"
    _print_capacity(report, title, top, as_json, as_markdown)


def _call_profile(path: Path | None) -> CallProfile | None:
    """The call profile at `path`, or None for the measured one (call_profile.json)."""
    from aijobs_cli.sizing.call_profile import CallProfile

    return CallProfile.from_json(path) if path else None


def _capacity_inputs(
    stage: str,
    kinds: list[str] | None,
    index_buckets: int | None,
    provider_rpm: list[str],
    provider_tpm: list[str],
    **options: Any,
) -> CapacityInputs:
    """What `aijobs capacity` models: the stage's config under the options."""
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cli.sizing.capacity import CapacityInputs, stage_inputs

    fields = stage_inputs(load_stage_config(stage))
    if kinds:
        fields["kinds"] = tuple(kinds)
    if index_buckets is not None:
        fields["index_buckets"] = index_buckets
    return CapacityInputs(
        **options,
        provider_rpm=_kind_numbers(provider_rpm, "--provider-rpm"),
        provider_tpm=_kind_numbers(provider_tpm, "--provider-tpm"),
        **fields,
    )


def _print_capacity(report: CapacityReport, title: str, top: int, as_json: bool, as_markdown: bool) -> None:
    """The report as JSON, as Markdown, or as a table of the limits, first wall first, then the
    summary and the notes."""
    from aijobs_cli.sizing.capacity import markdown, rows, summary

    if as_json:
        out.print_json(json.dumps(report.to_dict(), default=str))
        return
    if as_markdown:
        out.print(markdown(report, top), markup=False, highlight=False)
        return

    table = Table(
        "limit", "scope", "load", "ceiling", "use", Column("wall at jobs/s", justify="right"), "owner",
        Column("raise or reshape", overflow="fold"),
        title=title,
    )  # fmt: skip
    for row in rows(report)[: top or None]:
        table.add_row(*(escape(cell) for cell in row))
    out.print(table)
    for line in [*summary(report), *report.notes]:
        out.print(line, markup=False, highlight=False)
