"""`aijobs spend`: today's spend against the caps, a cap for the day or a tenant, a release; and a
clear refusal on a stage without a brake, for an unknown tenant or a bad amount. The commands reach
the stage as operators do, through a deployed stack's outputs (moto stands in for AWS)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import boto3
import pytest
from typer.testing import CliRunner, Result

from aijobs.spend import SpendBrake, build_brake
from aijobs.store.spend import SpendRecords
from aijobs_cli.commands import spend as spend_cli
from aijobs_cli.main import app
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration

# 03:00 UTC on the 30th is still the 29th in New York: the day the commands act on.
NOW = datetime(2026, 11, 30, 3, 0, tzinfo=UTC)
DAY = "2026-11-29"


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    # One kind, no cron: the commands touch only the tables (provisioning is most of the time).
    return {
        **stage_values, "QUEUE_NAMES": "summary", "CRONS": "",
        "SPEND_DAILY_CAP_USD": "1", "SPEND_TIME_ZONE": "America/New_York",
    }  # fmt: skip


def _stack(stage: Stage, name: str, *, brake: bool) -> None:
    """A deployed stack's outputs, as `aijobs_stack.py` writes them (the spend ones with a brake)."""
    outputs = {
        "MetaTableName": stage.resources.meta_table,
        "ShardTableNames": ",".join(stage.resources.shard_tables),
        "QueueNames": "-",
    }
    if brake:
        outputs |= {"SpendDailyCapUsd": "1", "SpendTimeZone": "America/New_York"}
    template = {
        "Resources": {"Placeholder": {"Type": "AWS::SQS::Queue"}},
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=name, TemplateBody=json.dumps(template))


@pytest.fixture
def spend(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Runs `aijobs spend ARGS --stack aijobs-dev`; the day is picked at NOW."""
    # The CLI turns the library's metrics off for its process: have that undone after the test.
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    monkeypatch.setattr(spend_cli, "_spend_now", lambda: NOW)
    _stack(stage, "aijobs-dev", brake=True)

    def run(*args: str, stack: str = "aijobs-dev") -> Result:
        return CliRunner().invoke(app, ["spend", *args, "--stack", stack])

    return run


def _spent(stage: Stage, user: str, cost: str) -> None:
    """What a consumer's finishing transaction adds for one job of `user` on DAY."""
    meta = boto3.resource("dynamodb").Table(stage.resources.meta_table)
    shard = stage.directory.shard_for(user)
    assert shard is not None
    writes = SpendRecords(meta).count_writes(
        day=DAY, job_id=f"job-{user}-{cost}", user_id=user, cost=Decimal(cost), shard_name=shard.name,
        expires=NOW,
    )  # fmt: skip
    meta.meta.client.transact_write_items(TransactItems=writes)  # type: ignore[arg-type]


def _brake(stage: Stage) -> SpendBrake:
    """A consumer's brake on the same stage, at NOW (what decides whether jobs start)."""
    brake = build_brake(
        boto3.resource("dynamodb").Table(stage.resources.meta_table), "1", "America/New_York", lambda: NOW
    )
    assert brake is not None
    return brake


def _may_start(stage: Stage, user: str) -> bool:
    profile = stage.directory.profile(user)
    assert profile is not None
    return _brake(stage).verdict(user, stage.directory.shard_for(user), profile.spend_cap_usd) is None


def _json(result: Result) -> Any:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_show_raise_clear_and_release_the_stage_cap(stage: Stage, spend: Any) -> None:
    stage.directory.ensure_user("alice")
    _spent(stage, "alice", "0.6")
    _spent(stage, "alice", "0.6")
    report = _json(spend("--json"))
    assert (report["day"], report["timeZone"]) == (DAY, "America/New_York")
    assert report["resetsAt"] == "2026-11-30T05:00:00+00:00"
    assert report["stage"] == {
        "spentUsd": "1.2", "capUsd": "1", "configuredCapUsd": "1", "capSetForTheDay": False,
        "released": False, "held": True,
    }  # fmt: skip
    assert not _may_start(stage, "alice")
    before = _json(spend("--day", "2026-11-28", "--json"))  # another day: its own counters
    assert (before["day"], before["resetsAt"], before["stage"]["spentUsd"]) == ("2026-11-28", None, "0")

    assert _json(spend("cap", "--usd", "5", "--json")) == {"day": DAY, "capUsd": "5", "setForTheDay": True}
    assert _json(spend("--json"))["stage"] == {
        "spentUsd": "1.2", "capUsd": "5", "configuredCapUsd": "1", "capSetForTheDay": True,
        "released": False, "held": False,
    }  # fmt: skip
    assert _may_start(stage, "alice")

    assert _json(spend("cap", "--clear", "--json"))["capUsd"] == "1"
    assert _json(spend("--json"))["stage"]["held"] is True
    assert not _may_start(stage, "alice")

    released = spend("release")
    assert released.exit_code == 0, released.output
    assert f"the stage: released for {DAY}" in released.stdout
    after = _json(spend("--json"))["stage"]
    assert (after["released"], after["held"], after["capUsd"]) == (True, False, "1")
    assert _may_start(stage, "alice")
    # The table shows the same (no --json).
    shown = spend()
    assert shown.exit_code == 0, shown.output
    assert "released" in shown.stdout
    assert DAY in shown.stdout


def test_a_tenant_cap_is_listed_released_and_cleared(stage: Stage, spend: Any) -> None:
    for user in ("alice", "bob"):
        stage.directory.ensure_user(user)
    _spent(stage, "alice", "0.6")
    assert _json(spend("cap", "--tenant", "alice", "--usd", "0.5", "--json")) == {
        "userId": "alice", "capUsd": "0.5",
    }  # fmt: skip
    report = _json(spend("--json"))
    assert report["tenants"] == [
        {"userId": "alice", "spentUsd": "0.6", "capUsd": "0.5", "released": False, "held": True}
    ]
    assert report["stage"]["held"] is False  # 0.6 of the stage's 1
    assert not _may_start(stage, "alice")
    assert _may_start(stage, "bob")

    assert _json(spend("release", "--tenant", "alice", "--json")) == {"day": DAY, "released": "alice"}
    (tenant,) = _json(spend("--json"))["tenants"]
    assert (tenant["released"], tenant["held"]) == (True, False)
    assert _may_start(stage, "alice")

    cleared = _json(spend("cap", "--tenant", "alice", "--clear", "--json"))
    assert cleared == {"userId": "alice", "capUsd": None}
    assert _json(spend("--json"))["tenants"] == []


# One stage for all the cases: provisioning it is what a test costs.
BAD_INPUT = [
    (("cap", "--usd", "-1"), 2, "spend cap '-1' is out of bounds"),
    (("cap", "--usd", "ten"), 2, "is not a plain number"),
    (("cap", "--usd", "NaN"), 2, "is not a plain number"),
    (("cap", "--usd", "0.1234567"), 2, "has too many decimals"),
    (("cap", "--usd", "1", "--clear"), 2, "exactly one of --usd N or --clear"),
    (("cap",), 2, "exactly one of --usd N or --clear"),
    (("cap", "--tenant", "nobody", "--usd", "1"), 1, "no such user: nobody"),
    (("release", "--tenant", "nobody"), 1, "no such user: nobody"),
]


def test_bad_input_exits_non_zero_with_a_message_and_writes_nothing(stage: Stage, spend: Any) -> None:
    for args, code, message in BAD_INPUT:
        result = spend(*args)
        assert result.exit_code == code, (args, result.output)
        assert message in result.output, (args, result.output)
    state = SpendRecords(boto3.resource("dynamodb").Table(stage.resources.meta_table)).day_state(DAY)
    assert (state.cap_usd, state.released, state.released_tenants) == (None, False, frozenset())
    assert SpendRecords(boto3.resource("dynamodb").Table(stage.resources.meta_table)).capped_tenants() == {}


def test_a_stage_without_a_brake_is_refused(stage: Stage, spend: Any) -> None:
    _stack(stage, "aijobs-plain", brake=False)
    for args in [(), ("cap", "--usd", "5"), ("release",), ("cap", "--tenant", "alice", "--usd", "1")]:
        result = spend(*args, stack="aijobs-plain")
        assert result.exit_code == 1, (args, result.output)
        assert "has no spend brake: set SPEND_DAILY_CAP_USD" in result.output, (args, result.output)
