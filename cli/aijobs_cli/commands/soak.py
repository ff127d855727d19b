"""`aijobs soak`: the chaos soak and paced load test over the aijobs_cli.soak package."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from aijobs_cli.commands._common import (
    ApiKey,
    ApiUrl,
    AsJson,
    Profile,
    Region,
    Stack,
    _fail,
    _target,
    err,
    out,
)

if TYPE_CHECKING:
    from aijobs_cli.soak.report import SoakReport
    from aijobs_cli.soak.targets import SoakTarget
from aijobs_cli.target import TargetError

# --- chaos soak ----------------------------------------------------------------------------------


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
    from aijobs_cli.soak.load import LoadPlan
    from aijobs_cli.soak.run import run_soak
    from aijobs_cli.soak.targets import LocalSoakTarget

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
            max_jobs=max_jobs or jobs, max_spend_usd=max_spend_usd, cost_per_job_usd=cost_per_job_usd,
            rate=rate, duration_seconds=duration,
        )  # fmt: skip

    def go(target: SoakTarget, users: int, inputs: dict[str, Any]) -> SoakReport:
        return run_soak(
            target, jobs=jobs, users=users, seed=seed, timeout_seconds=timeout, progress=err.print,
            load=load, submit_workers=submit_workers, capacity_inputs=inputs,
        )  # fmt: skip

    if api_url and api_key:  # deployed (checked above)
        target, inputs = _deployed_target(api_url, api_key, stack, profile, region)
        report = go(target, 1, inputs)
    else:
        with LocalSoakTarget() as local:
            report = go(local, users, stage_inputs(local.config))
    if as_json:
        out.print_json(json.dumps(report.to_dict(), default=str))
    else:
        _print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def _deployed_target(
    api_url: str, api_key: str, stack: str | None, profile: str | None, region: str | None
) -> tuple[SoakTarget, dict[str, Any]]:
    """The deployed stage to soak (with AWS access when --stack names it) and its capacity inputs
    (from the local copy of its stage file, when there is one)."""
    from aijobs_cli.sizing.capacity import stage_inputs
    from aijobs_cli.soak.targets import DeployedSoakTarget

    target: SoakTarget
    aws_target = _target(None, api_url, api_key, stack, profile, region) if stack else None
    max_retries = 3
    inputs: dict[str, Any] = {}
    from aijobs_cdk.stage_config import ConfigError

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
    return target, inputs


def _print_report(report: SoakReport) -> None:
    """The invariants, each fault's outcomes, the figures, examples, notes and the load."""
    from aijobs_cli.soak.checks import INVARIANTS

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
