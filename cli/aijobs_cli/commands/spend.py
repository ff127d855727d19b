"""`aijobs spend`: the daily model-spend brake (today's spend, caps, release)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, tzinfo
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aijobs.bounds import (
    SPEND_CAP_USD,
    BoundError,
)
from aijobs_cli.commands._common import (
    AsJson,
    InfoFile,
    Profile,
    Region,
    Stack,
    _emit,
    _fail,
    _print_table,
    _target,
    folded,
    out,
    whole,
)
from aijobs_cli.target import Target, TargetError

if TYPE_CHECKING:
    from aijobs.store.spend import SpendRecords

spend_app = typer.Typer(
    help="The daily model-spend brake (operators): today's spend, caps, release.", invoke_without_command=True
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
