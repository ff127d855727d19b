"""Accounts: API keys, webhook signing secrets, per-tenant limits, credits."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from aijobs.bounds import (
    CREDIT_GRANT,
    CREDIT_GRANT_DAYS,
    TENANT_MAX_RUNNING,
)
from aijobs_cli.commands._common import (
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
    _print_table,
    _target,
    _within,
    folded,
    out,
    whole,
)

keys_app = typer.Typer(help="API keys.", no_args_is_help=True)
credits_app = typer.Typer(help="Credits.", no_args_is_help=True)
tenants_app = typer.Typer(help="Per-tenant limits (operators).", no_args_is_help=True)
webhooks_app = typer.Typer(help="Signed webhooks: tenants' signing secrets.", no_args_is_help=True)


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
