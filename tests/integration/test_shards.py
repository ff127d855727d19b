"""Every shard a user can land on is maintained, with 2 and 4 shard tables (issue 8, 4)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.scheduled.context import CronRun
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs.store.keys import PK, SHARD_PK, SK
from aijobs.store.retention import write_retention
from aijobs.store.tenants import OrphanedShardError
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _fire(stage: Stage, scheduled: str) -> dict[str, Any]:
    ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
    return dispatch({"cron": "*/10 * * * *", "scheduledTime": scheduled}, ctx, SCHEDULED_HANDLERS)


@pytest.fixture(params=[2, 4])
def stage_values(request: pytest.FixtureRequest, stage_values: dict[str, str]) -> dict[str, str]:
    return {**stage_values, "SHARD_COUNT": str(request.param)}


def _users_on_every_shard(stage: Stage) -> dict[int, str]:
    """One user per shard (users are hashed over all shard tables)."""
    shards = stage.resources.config.shard_count
    found: dict[int, str] = {}
    for n in range(500):
        user = f"user-{n}"
        index = stage.directory.ensure_user(user)
        found.setdefault(index, user)
        if len(found) == shards:
            return found
    raise AssertionError(f"users landed on {sorted(found)} only")


def test_grants_expire_on_every_shard(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    users = _users_on_every_shard(stage)
    for user in users.values():
        stage.store_for(user).ledger.grant(user, 5, stage.clock() + timedelta(minutes=1))
    stage.clock.advance(120)
    result = _fire(stage, "2026-11-29T09:10:00Z")
    assert sorted(result["result"]["shards"]) == [str(i) for i in range(len(users))]
    for user in users.values():
        assert stage.store_for(user).ledger.account(user).balance == 0
    # The registry records every shard that holds tenants.
    assert stage.directory.registered_shards() == sorted(users)


def test_a_registered_shard_that_is_no_longer_configured_fails_the_run_loudly(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    _meta(stage).put_item(Item={PK: SHARD_PK, SK: "31", "status": "active"})  # SHARD_COUNT was lowered
    result = _fire(stage, "2026-11-29T09:10:00Z")
    assert result["status"] == "failed"  # logged, counted and alerted by the dispatcher
    assert result["error"].startswith(OrphanedShardError.__name__)
    assert "[31]" in result["error"]


def test_the_sweeper_visits_every_shard(stage: Stage) -> None:
    users = _users_on_every_shard(stage)
    jobs = [stage.submit(user, "summary", "A sentence. Another one.") for user in users.values()]
    for _ in jobs:
        stage.receive(stage.resources.queue_urls["summary"], count=1)  # every message is lost
    ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
    stage.clock.advance(ctx.stuck_after.total_seconds() + 1)
    assert run_sweeper(CronRun("*/5 * * * *", None), ctx)["actions"] == {"summary:resent": len(users)}
    list(stage.drain("summary"))
    assert {stage.job(job).status for job in jobs} == {JobStatus.SUCCEEDED}
