"""Every value an operator sets while a stage runs has bounds, defined once (aijobs.bounds): the CLI
and the writers themselves refuse a value outside them and write nothing; a value already stored
outside them (written around the writers, straight into DynamoDB) never fails a user's request or
job: the reader logs an error and uses its documented fallback. The */10 run fails loudly on a bad
retention as on a missing one (tests/integration/test_cron.py). Issue 25, point 3: a retention of
3,000,000 days was accepted, and every submit after it was a 500 (OverflowError in the ledger)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner, Result

from aijobs.bounds import INVALID_STORED, BoundError
from aijobs.domain import JobStatus
from aijobs.spend import day_of
from aijobs.store.keys import PK, PROFILE_SK, SK, user_pk
from aijobs.store.retention import RETENTION_KEY, write_retention
from aijobs.store.spend import STATE_SK, SpendRecords, day_pk
from aijobs_cli.main import app
from tests.integration.harness import Stage, api_caller

pytestmark = pytest.mark.integration

TEXT = "One sentence to summarise. And a second one."


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    # A spend brake, so submits and deliveries read the tenant's profile and the day's state.
    return {**stage_values, "QUEUE_NAMES": "summary", "CRONS": "", "SPEND_DAILY_CAP_USD": "100"}


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _everything(stage: Stage) -> list[Any]:
    """Every item of the stage's tables, to show that a refusal wrote nothing."""
    names = [stage.resources.meta_table, *stage.resources.shard_tables]
    tables = [boto3.resource("dynamodb").Table(name) for name in names]
    return [sorted(table.scan()["Items"], key=lambda item: (item[PK], item[SK])) for table in tables]


Call = Callable[..., tuple[int, Any]]


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Call]:
    """`call(method, path, body, key=...)` through the API's Lambda handler, as alice (credits
    granted) or as the operator `ops`."""
    yield from api_caller(stage, monkeypatch, credits=100, operators=("ops",))


@pytest.fixture
def cli(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Callable[..., Result]:
    """`aijobs ARGS --stack aijobs-dev` against the stage's tables (a deployed stack's outputs)."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")  # the CLI turns metrics off: undone after
    outputs = {
        "MetaTableName": stage.resources.meta_table,
        "ShardTableNames": ",".join(stage.resources.shard_tables),
        "QueueNames": "-",
        "SpendDailyCapUsd": "100",
        "SpendTimeZone": "UTC",
    }
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName="aijobs-dev", TemplateBody=json.dumps(template))
    stage.directory.ensure_user("alice")

    def run(*args: str) -> Result:
        return CliRunner().invoke(app, [*args, "--stack", "aijobs-dev"])

    return run


def _said(result: Result) -> str:
    """The command's output as one line (typer's error panel wraps and frames it)."""
    return " ".join(result.output.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


# --- the CLI -------------------------------------------------------------------------------------


def test_a_retention_of_3000000_days_is_refused_and_submits_go_on(
    stage: Stage, cli: Callable[..., Result], api: Call
) -> None:
    result = cli("config", "retention", "--credit-tx-days", "3000000", "--ai-task-days", "30")
    assert result.exit_code == 2, result.output
    assert (
        "Invalid value for '--credit-tx-days': credit-transaction retention 3000000 is out of bounds; "
        "it must be a whole number from 1 to 3650 days"
    ) in _said(result)
    assert "Item" not in _meta(stage).get_item(Key=RETENTION_KEY)
    status, body = api("POST", "/jobs", {"kind": "summary", "input": TEXT})
    assert status == 202, body


# One stage for all the cases: provisioning it is what a test costs.
RETENTION = ("config", "retention")
REFUSED = [
    ((*RETENTION, "--credit-tx-days", "3651", "--ai-task-days", "30"),
     "credit-transaction retention 3651 is out of bounds; it must be a whole number from 1 to 3650 days"),
    ((*RETENTION, "--credit-tx-days", "90", "--ai-task-days", "0"), "AI-task retention 0 is out of bounds"),
    ((*RETENTION, "--credit-tx-days", "9" * 5000, "--ai-task-days", "30"),
     "Unable to parse input string as an integer"),
    (("tenants", "limit", "alice", "--max-running", "10001"),
     "running cap 10001 is out of bounds; it must be a whole number from 0 to 10000 jobs per kind"),
    (("tenants", "limit", "alice", "--max-running", "-1"), "running cap -1 is out of bounds"),
    (("spend", "cap", "--usd", "1000000000"),
     "spend cap '1000000000' is out of bounds; it must be an amount with at most 6 decimals from 0 to "
     "999999999.999999 USD"),
    (("spend", "cap", "--tenant", "alice", "--usd", "1e12"), "spend cap '1e12' is not a plain number"),
    (("credits", "grant", "alice", "1000000001"),
     "credit grant 1000000001 is out of bounds; it must be a whole number from 1 to 1000000000 credits"),
    (("credits", "grant", "alice", "5", "--days", "3000000"),
     "credit grant's lifetime 3000000 is out of bounds"),
]  # fmt: skip


def test_the_cli_refuses_a_value_outside_its_bounds_writes_nothing_and_takes_the_bounds(
    stage: Stage, cli: Callable[..., Result]
) -> None:
    before = _everything(stage)
    for args, message in REFUSED:
        result = cli(*args)
        assert result.exit_code == 2, (args[:3], result.output)
        assert message in _said(result), (args[:3], result.output)
    assert _everything(stage) == before

    for args in [
        ("config", "retention", "--credit-tx-days", "3650", "--ai-task-days", "1"),
        ("tenants", "limit", "alice", "--max-running", "10000"),
        ("spend", "cap", "--usd", "999999999.999999"),
        ("spend", "cap", "--tenant", "alice", "--usd", "0"),
        ("credits", "grant", "alice", "1000000000", "--days", "3650"),
    ]:
        result = cli(*args)
        assert result.exit_code == 0, (args, result.output)
    retention = _meta(stage).get_item(Key=RETENTION_KEY)["Item"]
    assert (retention["credit_tx_retention_days"], retention["ai_task_retention_days"]) == (3650, 1)
    profile = stage.directory.profile("alice")
    assert profile is not None
    assert (profile.max_running, profile.spend_cap_usd) == (10_000, Decimal(0))


# --- the writers ---------------------------------------------------------------------------------


def test_every_writer_refuses_a_value_outside_its_bounds_and_writes_nothing(stage: Stage) -> None:
    stage.directory.ensure_user("alice")
    meta, records = _meta(stage), SpendRecords(_meta(stage))
    ledger = stage.store_for("alice").ledger
    expires = stage.clock() + timedelta(days=1)
    before = _everything(stage)
    day, user = "2026-11-29", "alice"
    writes: list[tuple[Callable[[], Any], str]] = [
        (lambda: write_retention(meta, credit_tx_retention_days=3_000_000, ai_task_retention_days=30),
         "credit-transaction retention 3000000 is out of bounds; it must be a whole number from 1 to "
         "3650 days"),
        (lambda: write_retention(meta, credit_tx_retention_days=90, ai_task_retention_days=0),
         "AI-task retention 0 is out of bounds"),
        (lambda: stage.directory.set_max_running(user, 10_001), "running cap 10001 is out of bounds"),
        (lambda: stage.directory.set_max_running(user, True), "running cap True is not a plain number"),
        (lambda: records.set_day_cap(day, Decimal("1e9"), stage.clock()), "spend cap 1E+9 is out of bounds"),
        (lambda: records.set_tenant_cap(user, Decimal("-0.01"), day), "spend cap -0.01 is out of bounds"),
        (lambda: records.set_tenant_cap(user, Decimal("0.0000001"), day), "has too many decimals"),
        (lambda: records.set_tenant_cap(user, Decimal("NaN"), day), "spend cap NaN is out of bounds"),
        (lambda: ledger.grant(user, 10**40, expires), "credit grant (41 digits) is out of bounds"),
        (lambda: ledger.grant(user, 0, expires), "credit grant 0 is out of bounds"),
    ]  # fmt: skip
    for write, message in writes:
        with pytest.raises(BoundError) as refused:
            write()
        assert message in str(refused.value)
        assert isinstance(refused.value, ValueError)  # what these writers raised before for bad input
    assert _everything(stage) == before


# --- a bad value already stored ------------------------------------------------------------------


def _store_retention(stage: Stage, **values: Any) -> None:
    _meta(stage).put_item(Item={**RETENTION_KEY, **values})


def _store_on_profile(stage: Stage, name: str, value: Any) -> None:
    _meta(stage).update_item(
        Key={PK: user_pk("alice"), SK: PROFILE_SK},
        UpdateExpression="SET #name = :value",
        ExpressionAttributeNames={"#name": name},
        ExpressionAttributeValues={":value": value},
    )


def _store_day_cap(stage: Stage, value: Any) -> None:
    # The API's day (real time) and the consumers' (the test's clock).
    for day in {day_of(datetime.now(UTC), UTC), day_of(stage.clock(), UTC)}:
        _meta(stage).put_item(Item={PK: day_pk(day), SK: STATE_SK, "cap_usd": value})


STORED_BADLY: dict[str, Callable[[Stage], None]] = {
    "retention-3000000-days": lambda s: _store_retention(
        s, credit_tx_retention_days=3_000_000, ai_task_retention_days=30
    ),
    "retention-forever": lambda s: _store_retention(
        s, credit_tx_retention_days=90, ai_task_retention_days="forever"
    ),
    "max-running-text": lambda s: _store_on_profile(s, "max_running", "lots"),
    "max-running-negative": lambda s: _store_on_profile(s, "max_running", -3),
    "spend-cap-text": lambda s: _store_on_profile(s, "spend_cap_usd", "abc"),
    "spend-cap-negative": lambda s: _store_on_profile(s, "spend_cap_usd", Decimal(-1)),
    "day-cap-text": lambda s: _store_day_cap(s, "a lot"),
    "day-cap-huge": lambda s: _store_day_cap(s, Decimal("1e100")),
}


@pytest.mark.parametrize("bad", sorted(STORED_BADLY))
def test_a_bad_stored_value_never_fails_a_users_submit_or_job(
    stage: Stage, api: Call, bad: str, caplog: pytest.LogCaptureFixture
) -> None:
    STORED_BADLY[bad](stage)
    status, body = api("POST", "/jobs", {"kind": "summary", "input": TEXT})
    assert status == 202, body
    list(stage.drain("summary"))
    job = stage.job_by_id("alice", body["jobId"])
    assert job.status is JobStatus.SUCCEEDED, (job.status, job.last_error_message)
    errors = [record for record in caplog.records if record.getMessage() == INVALID_STORED]
    assert errors, "the bad value must be logged as an error"
    assert {record.levelname for record in errors} == {"ERROR"}
    assert all(record.config and record.fallback for record in errors)  # type: ignore[attr-defined]


def test_the_operator_routes_read_past_a_bad_stored_value(stage: Stage, api: Call) -> None:
    _store_day_cap(stage, "a lot")
    _store_on_profile(stage, "max_running", "lots")
    status, spend = api("GET", "/admin/spend", key="ops")
    assert status == 200, spend
    status, credits = api("GET", "/admin/tenants/alice/credits", key="ops")
    assert (status, credits["balance"]) == (200, 100)
