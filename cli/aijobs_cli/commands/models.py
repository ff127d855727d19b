"""`aijobs models`: the models a stage calls, and whether Bedrock still serves them.

`aijobs models check --stack aijobs-prod` reads the plan the deployed stage runs with (its cron
dispatcher's environment) and checks it in the stack's region; `--stage dev` reads `.env.dev` and
checks it in `--region` (repeatable; default: your AWS region). One `GetFoundationModel` per model
and region (aijobs.providers.lifecycle): the same check the weekly cron runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Column, Table

# The lifecycle's names (and botocore with them) are imported by the functions that use them, so
# `aijobs --help` does not load them.
if TYPE_CHECKING:
    from aijobs.provider_plan import KindPlan
    from aijobs.providers.lifecycle import ModelLifecycle

models_app = typer.Typer(help="The models a stage calls: their lifecycle on Bedrock.", no_args_is_help=True)

out = Console(soft_wrap=True)
err = Console(stderr=True)

# Exit codes of `check`.
EXIT_NEEDS_ACTION = 1  # a model is Legacy, past its end of life, or unknown to the region
EXIT_UNREAD = 2  # no model needs action, but a lifecycle could not be read (permissions, throttling)

COLUMNS = ("model", "region", "status", "legacy", "end of life", "kinds")


def _fail(message: str, code: int = 1) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(message)}")
    return typer.Exit(code)


def _day(moment: datetime | None) -> str:
    return moment.date().isoformat() if moment is not None else ""


def rows(checks: Iterable[ModelLifecycle]) -> list[dict[str, str]]:
    """The table's rows: one per model and region, in the order checked."""
    return [
        {
            "model": check.model,
            "region": check.region,
            "status": check.status,
            "legacy": _day(check.legacy_at),
            "end of life": _day(check.end_of_life_at),
            "kinds": ", ".join(check.kinds),
            **({"detail": check.detail} if check.detail else {}),
        }
        for check in checks
    ]


def exit_code(checks: Iterable[ModelLifecycle]) -> int:
    from aijobs.providers.lifecycle import ACTIVE, UNKNOWN

    statuses = {check.status for check in checks}
    if statuses - {ACTIVE, UNKNOWN}:
        return EXIT_NEEDS_ACTION
    return EXIT_UNREAD if UNKNOWN in statuses else 0


def _render(found: list[dict[str, str]]) -> None:
    # Model ids, regions, statuses and dates are never cut (an ellipsis would hide which model it
    # is); the kinds wrap between names. Compact borders: the rows fit an 88-column terminal.
    from aijobs.providers.lifecycle import ACTIVE, LEGACY, UNKNOWN

    styles = {ACTIVE: "green", LEGACY: "yellow", UNKNOWN: "magenta"}

    def fixed(name: str) -> Column:
        return Column(name, no_wrap=True, min_width=max(len(name), *(len(row[name]) for row in found)))

    columns = [fixed(name) for name in COLUMNS[:-1]] + [Column("kinds", overflow="fold", min_width=12)]
    table = Table(
        *columns,
        title="Bedrock models of the stage",
        box=box.SIMPLE_HEAD,
        padding=(0, 1),
        collapse_padding=True,
    )
    for row in found:
        style = styles.get(row["status"], "red")
        table.add_row(*(escape(row[c]) for c in COLUMNS), style=style if row["status"] != ACTIVE else None)
    out.print(table)
    for row in found:
        if row.get("detail"):
            out.print(f"{escape(row['model'])} in {row['region']}: {escape(row['detail'])}", highlight=False)
    if any(row["status"] != ACTIVE for row in found):
        out.print(
            "Pick a current model for these kinds (KIND_MODELS / KIND_ALLOWED_MODELS in .env.<stage>) "
            "and deploy; a LEGACY model still works until its end of life (if the account used it "
            "lately), a model past it fails every job (model_unavailable).",
            highlight=False,
        )


def _stage_plans(stage: str) -> dict[str, KindPlan]:
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cdk.stage_config import ConfigError

    try:
        config = load_stage_config(stage)
    except ConfigError as error:
        raise _fail(str(error)) from None
    return {plan.kind: plan for plan in config.provider_plans}


def _default_region() -> str | None:
    import boto3

    return boto3.session.Session().region_name


def _bedrock(region: str) -> Any:
    """Bedrock's control plane in `region` (the cached client of aijobs.aws)."""
    from aijobs import aws

    return aws.bedrock(region)


def _plans_and_regions(
    stack: str | None, stage: str | None, profile: str | None, regions: list[str]
) -> tuple[Mapping[str, KindPlan], list[str]]:
    from aijobs_cli.target import Target, TargetError

    if stack and stage:
        raise _fail("pass --stack NAME or --stage STAGE, not both")
    if stack:
        if len(regions) > 1:
            raise _fail("with --stack, --region names the stack's one region")
        try:
            target = Target.from_stack(stack, region=regions[0] if regions else None, profile=profile)
            plans, region = target.deployed_plans()
        except TargetError as error:
            raise _fail(str(error)) from None
        return plans, [region]
    if profile:
        import os

        os.environ["AWS_PROFILE"] = profile
    if not regions:
        default = _default_region()
        if default is None:
            raise _fail("no AWS region: pass --region REGION (or set AWS_REGION)")
        regions = [default]
    return _stage_plans(stage or "dev"), regions


@models_app.command("check")
def check(
    stack: Annotated[
        str | None, typer.Option("--stack", help="a deployed stack (e.g. aijobs-prod): its plan, its region")
    ] = None,
    stage: Annotated[
        str | None, typer.Option("--stage", help="a stage's configuration, .env.<stage> (default: dev)")
    ] = None,
    profile: Annotated[str | None, typer.Option("--profile", help="AWS profile")] = None,
    region: Annotated[
        list[str] | None,
        typer.Option(
            "--region",
            help="with --stage: a region to check (repeatable; default: your AWS region); "
            "with --stack: the stack's region",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON for scripts")] = False,
) -> None:
    """The lifecycle of every Bedrock model the stage can call (each kind's default and allowed
    models; an inference profile as the model it routes to), per region: ACTIVE, LEGACY (with its
    end-of-life date), END_OF_LIFE (gone), NOT_FOUND (unknown to the region) or UNKNOWN (not
    readable). Exits 1 when any model needs action, 2 when a lifecycle could not be read."""
    from aijobs.providers.lifecycle import bedrock_models, check_models

    plans, regions = _plans_and_regions(stack, stage, profile, list(region or []))
    models = bedrock_models(plans.values())
    checks = check_models(models, [_bedrock(name) for name in regions])
    found = rows(checks)
    if as_json:
        out.print_json(json.dumps({"models": found, "regions": regions}))
    elif not found:
        out.print("The stage calls no Bedrock model.")
    else:
        _render(found)
    code = exit_code(checks)
    if code:
        raise typer.Exit(code)
