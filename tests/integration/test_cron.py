"""The cron dispatcher, the */10 maintenance job and the */5 sweeper, including duplicate runs."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.maintenance import run_maintenance
from aijobs.scheduled.registry import SCHEDULED_HANDLERS, ScheduledHandler
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs.store.job_items import JobKey
from aijobs.store.retention import RetentionConfigError, write_retention
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, schedule_event

pytestmark = pytest.mark.integration

TEXT = "One sentence to summarise. And a second one."
MAINTENANCE = CronRun("*/10 * * * *", "2026-11-29T09:10:00Z")
SWEEP = CronRun("*/5 * * * *", "2026-11-29T09:10:00Z")


def _ctx(stage: Stage) -> CronContext:
    return runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _user(stage: Stage, user: str = "alice") -> Any:
    stage.directory.ensure_user(user)
    return stage.store_for(user).ledger


# --- dispatcher --------------------------------------------------------------------------------


def test_entry_point_runs_the_registered_job_for_the_sample_schedule_event(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in stage.resources.cron_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=30)
    from cron_dispatcher import handler

    result = handler.handler(schedule_event("*/10 * * * *"), LambdaContext("aijobs-dev-cron"))
    assert (result["cron"], result["status"]) == ("*/10 * * * *", "ok")
    assert result["result"]["shards"]["0"] == {
        "creditsExpired": 0,
        "transactionsRemoved": 0,
        "tasksRemoved": 0,
    }


def _recorder(seen: list[str], name: str) -> ScheduledHandler:
    def handler(run: CronRun, ctx: CronContext) -> dict[str, Any]:
        seen.append(name)
        return {}

    return handler


def test_unknown_expression_is_skipped_and_logged(stage: Stage) -> None:
    seen: list[str] = []
    handlers = {"*/10 * * * *": _recorder(seen, "ten")}
    result = dispatch({"cron": "0 0 * * *"}, _ctx(stage), handlers)
    assert result == {"cron": "0 0 * * *", "status": "skipped"}
    assert dispatch({}, _ctx(stage), handlers)["status"] == "skipped"
    assert seen == []


def test_the_exact_expression_selects_the_handler(stage: Stage) -> None:
    seen: list[str] = []
    handlers = {"*/10 * * * *": _recorder(seen, "ten"), "*/5 * * * *": _recorder(seen, "five")}
    dispatch({"cron": "*/5 * * * *", "scheduledTime": "t"}, _ctx(stage), handlers)
    dispatch({"cron": "*/10  * * * *"}, _ctx(stage), handlers)  # not the exact text: skipped
    assert seen == ["five"]


def test_every_shipped_cron_has_a_handler() -> None:
    from aijobs_cdk.stage import load_stage_config

    for stage in ("dev", "prod"):
        assert {cron.text for cron in load_stage_config(stage).crons} <= set(SCHEDULED_HANDLERS)


# --- maintenance -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item",
    [None, {"credit_tx_retention_days": 90}, {"credit_tx_retention_days": 0, "ai_task_retention_days": 30},
     {"credit_tx_retention_days": "ninety", "ai_task_retention_days": 30},
     # Outside aijobs.bounds (written around `aijobs config retention`, which refuses them).
     {"credit_tx_retention_days": 3_000_000, "ai_task_retention_days": 30},
     {"credit_tx_retention_days": 90, "ai_task_retention_days": 3651}],
)  # fmt: skip
def test_missing_or_invalid_retention_fails_the_run_loudly(
    stage: Stage, item: dict[str, Any] | None, capfd: pytest.CaptureFixture[str]
) -> None:
    inbox = stage.subscribe_inbox()
    if item is not None:
        _meta(stage).put_item(Item={"pk": "CONFIG", "sk": "retention", **item})
    ledger = _user(stage)
    ledger.grant("alice", 5, stage.clock() + timedelta(minutes=1))
    stage.clock.advance(120)
    result = dispatch({"cron": "*/10 * * * *"}, _ctx(stage), SCHEDULED_HANDLERS)
    assert result["status"] == "failed"
    assert result["error"].startswith(RetentionConfigError.__name__)
    assert ledger.account("alice").balance == 5  # no fallback: nothing ran
    (alert,) = stage.receive(inbox)
    assert "RetentionConfigError" in json.loads(json.loads(alert["Body"])["Message"])["error"]
    assert '"CronRunFailed"' in capfd.readouterr().out


def test_more_due_items_than_the_limits_wait_for_the_next_run(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=1, ai_task_retention_days=30)
    ledger = _user(stage)
    for _ in range(25):
        ledger.grant("alice", 2, stage.clock() + timedelta(hours=1))  # 25 grant transactions too
    stage.clock.advance(2 * 86_400)
    first = run_maintenance(MAINTENANCE, _ctx(stage))["shards"]["0"]
    assert (first["creditsExpired"], first["transactionsRemoved"]) == (20, 25)
    second = run_maintenance(MAINTENANCE, _ctx(stage))["shards"]["0"]
    assert second["creditsExpired"] == 5
    third = run_maintenance(MAINTENANCE, _ctx(stage))["shards"]["0"]
    assert third == {"creditsExpired": 0, "transactionsRemoved": 0, "tasksRemoved": 0}
    assert ledger.account("alice").balance == 0
    assert sum(1 for tx in ledger.transactions("alice") if tx.type == "expire") == 25


def test_transaction_cleanup_is_limited_to_100_per_run(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=1, ai_task_retention_days=30)
    ledger = _user(stage)
    for _ in range(130):
        ledger.grant("alice", 1, stage.clock() + timedelta(days=365))
    stage.clock.advance(2 * 86_400)
    counts = [
        run_maintenance(MAINTENANCE, _ctx(stage))["shards"]["0"]["transactionsRemoved"] for _ in range(3)
    ]
    assert counts == [100, 30, 0]
    assert ledger.account("alice").archived["grant"] == 130
    assert ledger.account("alice").balance == 130


def test_finished_tasks_past_retention_are_removed_and_nothing_else(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=90, ai_task_retention_days=7)
    old_done = stage.submit("alice", "summary", TEXT)
    old_failed = stage.submit("alice", "summary", "#fail:400 " + TEXT)
    list(stage.drain("summary"))
    old_queued = stage.submit("alice", "embedding", "still waiting")
    stage.clock.advance(8 * 86_400)
    recent = stage.submit("alice", "summary", TEXT)
    list(stage.drain("summary"))
    counts = run_maintenance(MAINTENANCE, _ctx(stage))["shards"]["0"]
    assert counts["tasksRemoved"] == 2
    store = stage.store_for("alice")
    assert store.get("alice", old_done.job_id) is None
    assert store.get("alice", old_failed.job_id) is None
    assert store.get("alice", old_queued.job_id) is not None  # not finished: never cleaned up
    assert store.get("alice", recent.job_id) is not None


def test_two_overlapping_maintenance_runs_expire_and_delete_once(stage: Stage) -> None:
    write_retention(_meta(stage), credit_tx_retention_days=1, ai_task_retention_days=1)
    ledger = _user(stage)
    for _ in range(3):
        ledger.grant("alice", 4, stage.clock() + timedelta(hours=1))
    stage.clock.advance(2 * 86_400)
    ctx_a, ctx_b = _ctx(stage), _ctx(stage)
    results: dict[str, Any] = {}
    original = type(ledger).due_grants

    def interleaved(self: Any, now: Any, limit: int) -> Any:
        listed = original(self, now, limit)  # run A has listed its work...
        if not results:
            results["b"] = None
            results["b"] = run_maintenance(MAINTENANCE, ctx_b)  # ...when duplicate run B does it all
        return listed

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(type(ledger), "due_grants", interleaved)
        results["a"] = run_maintenance(MAINTENANCE, ctx_a)
    assert results["b"]["shards"]["0"]["creditsExpired"] == 3
    assert results["a"]["shards"]["0"]["creditsExpired"] == 0
    assert (
        results["a"]["shards"]["0"]["transactionsRemoved"]
        + results["b"]["shards"]["0"]["transactionsRemoved"]
        == 3
    )
    assert ledger.account("alice").balance == 0
    assert sorted(tx.type for tx in ledger.transactions("alice")) == ["expire"] * 3
    assert ledger.account("alice").archived["grant"] == 12


# --- sweeper -----------------------------------------------------------------------------------


def test_a_killed_consumer_leaves_no_job_running_forever(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    consumer = stage.consumer("summary")
    store = stage.store_for("alice")
    store.claim(job, now=stage.clock(), lease=consumer.lease, max_attempts=4)
    stage.receive(stage.resources.queue_urls["summary"])  # the dead consumer's message is in flight
    stage.clock.advance(consumer.lease.total_seconds() + 1)
    result = run_sweeper(SWEEP, _ctx(stage))
    assert result["actions"] == {"summary:requeued": 1}
    row = stage.job(job)
    assert (row.status, row.last_error_class) == (JobStatus.FAILED_RETRYABLE, "lease_expired")
    list(stage.drain("summary"))
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 2)


def test_a_running_job_out_of_attempts_is_finalized_with_its_refund(stage: Stage) -> None:
    ledger = _user(stage)
    ledger.grant("alice", 10, stage.clock() + timedelta(days=1))
    job = stage.submit("alice", "summary", TEXT)
    store = stage.store_for("alice")
    writes, allocation = ledger.reserve("alice", job.job_id, 4)
    ledger._transact(writes)  # reserve as the producer would have
    store._table.update_item(
        Key={"pk": "USER#alice", "sk": f"JOB#{job.job_id}"},
        UpdateExpression="SET price = :p, charge_state = :s, charge_json = :a, attempts = :n",
        ExpressionAttributeValues={":p": 4, ":s": "reserved", ":a": json.dumps(allocation), ":n": 3},
    )
    lease = stage.consumer("summary").lease
    claimed = store.claim(stage.job(job), now=stage.clock(), lease=lease, max_attempts=4)
    assert claimed is not None
    assert claimed.attempts == 4
    stage.clock.advance(lease.total_seconds() + 1)
    assert run_sweeper(SWEEP, _ctx(stage))["actions"] == {"summary:finalized": 1}
    row = stage.job(job)
    assert (row.status, row.last_error_class, row.charge_state) == (
        JobStatus.FAILED_FINAL,
        "lease_expired",
        "refunded",
    )
    assert ledger.account("alice").balance == 10


def test_a_lost_recheck_message_is_resent(stage: Stage) -> None:
    job = stage.submit("alice", "video-generate", "#running:2 a storm")
    stage.mapping("video-generate").poll_once()  # running, awaiting its provider
    stage.receive(stage.resources.queue_urls["video-generate"])  # the re-check message gets lost
    ctx = _ctx(stage)
    stage.clock.advance((ctx.recheck + ctx.lease).total_seconds() + 1)
    assert run_sweeper(SWEEP, ctx)["actions"] == {"video-generate:recheck_resent": 1}
    list(stage.drain("video-generate"))
    row = stage.job(job)
    assert (row.status, row.attempts) == (JobStatus.SUCCEEDED, 1)


def test_a_queued_job_whose_message_never_arrived_is_resent_once_by_overlapping_runs(stage: Stage) -> None:
    job = stage.submit("alice", "summary", TEXT)
    stage.receive(stage.resources.queue_urls["summary"])  # the message is lost
    ctx_a, ctx_b = _ctx(stage), _ctx(stage)
    stage.clock.advance(ctx_a.stuck_after.total_seconds() + 1)
    assert run_sweeper(SWEEP, ctx_a)["actions"] == {"summary:resent": 1}
    assert run_sweeper(SWEEP, ctx_b)["actions"] == {}  # touched by run A: no longer stale
    list(stage.drain("summary"))
    assert stage.provider.calls == {job.job_id: 1}
    assert stage.job(job).status is JobStatus.SUCCEEDED


def test_a_young_queued_job_is_left_alone(stage: Stage) -> None:
    stage.submit("alice", "summary", TEXT)
    stage.clock.advance(60)
    assert run_sweeper(SWEEP, _ctx(stage))["actions"] == {}


def test_a_held_job_is_left_alone_until_its_hold_is_overdue(stage: Stage) -> None:
    """A hold may be longer than STUCK_QUEUED_SECONDS (TENANT_HOLD_SECONDS up to 15 minutes): its
    copy is still waiting, so the sweeper re-sends it only once the hold is that much overdue."""
    job = stage.submit("alice", "summary", TEXT)
    stage.receive(stage.resources.queue_urls["summary"])  # the held copy, waiting in the queue
    ctx = _ctx(stage)
    now = stage.clock()
    store = stage.store_for("alice")
    assert store.hold(JobKey("alice", job.job_id, "summary"), now=now, until=now + 2 * ctx.stuck_after)
    stage.clock.advance(ctx.stuck_after.total_seconds() + 1)
    held = run_sweeper(SWEEP, ctx)
    assert held["actions"] == {"summary:not_due": 1}
    assert held["resentJobs"] == []
    stage.clock.advance(2 * ctx.stuck_after.total_seconds())
    lost = run_sweeper(SWEEP, ctx)
    assert lost["actions"] == {"summary:resent": 1}  # the copy was lost after all
    assert lost["resentJobs"] == [job.job_id]  # named, so a held row re-sent can be told apart
