"""Scheduled runs under at-least-once schedules: one run per expression and scheduled time."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.scheduled.context import CronContext
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.maintenance import EXPIRE_LIMIT
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import CronSettings
from aijobs.store.retention import write_retention
from tests.integration.harness import Stage

pytestmark = pytest.mark.integration

MAINTENANCE = "*/10 * * * *"


def _ctx(stage: Stage) -> CronContext:
    return runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _fire(stage: Stage, scheduled: str, expression: str = MAINTENANCE) -> dict[str, Any]:
    event = {"cron": expression, "scheduledTime": scheduled, "executionId": "x"}
    return dispatch(event, _ctx(stage), SCHEDULED_HANDLERS)


def _due_grants(stage: Stage, count: int) -> Any:
    stage.directory.ensure_user("alice")
    ledger = stage.store_for("alice").ledger
    for _ in range(count):
        ledger.grant("alice", 1, stage.clock() + timedelta(minutes=1))
    stage.clock.advance(120)
    return ledger


def _expired(ledger: Any) -> int:
    return sum(tx.type == "expire" for tx in ledger.transactions("alice"))


# --- 3. per-run limits hold under double fires ---------------------------------------------------


def test_a_firing_delivered_twice_runs_once(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    ledger = _due_grants(stage, 30)
    first = _fire(stage, "2026-11-29T09:10:00Z")
    second = _fire(stage, "2026-11-29T09:10:00Z")
    assert first["result"]["shards"]["0"]["creditsExpired"] == EXPIRE_LIMIT
    assert second == {"cron": MAINTENANCE, "status": "duplicate"}
    assert _expired(ledger) == EXPIRE_LIMIT  # per run: 20, not 20 + 10
    # The next firing is a new run and takes the rest.
    assert _fire(stage, "2026-11-29T09:20:00Z")["result"]["shards"]["0"]["creditsExpired"] == 10


def test_a_duplicate_delivered_while_the_first_still_runs_is_skipped(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    ledger = _due_grants(stage, 30)
    inner: list[dict[str, Any]] = []
    real = SCHEDULED_HANDLERS[MAINTENANCE]

    def overlapping(run: Any, ctx: CronContext) -> dict[str, Any]:
        if not inner:  # while run A works, the scheduler delivers the same firing again
            inner.append(dispatch({"cron": MAINTENANCE, "scheduledTime": run.scheduled_time}, ctx, handlers))
        return real(run, ctx)

    handlers = {**SCHEDULED_HANDLERS, MAINTENANCE: overlapping}
    outer = dispatch({"cron": MAINTENANCE, "scheduledTime": "2026-11-29T09:10:00Z"}, _ctx(stage), handlers)
    assert (outer["status"], inner[0]["status"]) == ("ok", "duplicate")
    assert _expired(ledger) == EXPIRE_LIMIT


def test_a_failed_run_can_be_retried_but_a_succeeded_one_cannot(stage: Stage) -> None:
    # No retention configured: the run fails loudly, and gives its claim back.
    failed = _fire(stage, "2026-11-29T09:10:00Z")
    assert failed["status"] == "failed"
    assert "retention" in failed["error"]
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    assert _fire(stage, "2026-11-29T09:10:00Z")["status"] == "ok"  # the scheduler's retry runs
    assert _fire(stage, "2026-11-29T09:10:00Z")["status"] == "duplicate"


def test_a_run_whose_lambda_died_can_be_taken_over_after_its_lease(stage: Stage) -> None:
    from aijobs.store.cron_runs import RUN_LEASE, CronRuns

    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    runs = CronRuns(_meta(stage))
    assert runs.begin(MAINTENANCE, "2026-11-29T09:10:00Z", "a", stage.clock())  # then killed
    assert _fire(stage, "2026-11-29T09:10:00Z")["status"] == "duplicate"
    stage.clock.advance(RUN_LEASE.total_seconds() + 1)
    assert _fire(stage, "2026-11-29T09:10:00Z")["status"] == "ok"


def test_a_manual_run_without_a_scheduled_time_always_runs(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    for _ in range(2):
        assert dispatch({"cron": MAINTENANCE}, _ctx(stage), SCHEDULED_HANDLERS)["status"] == "ok"
