"""The spend brake (issue 13 point 2): past the stage's daily cap jobs are held (no attempt, never
dead-lettered) and one alert fires; a release or a raised cap runs them; a tenant past its own
cap gets 402 and its queued jobs wait; credits stay exact; days follow SPEND_TIME_ZONE."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.consumer.attempts import Consumer
from aijobs.domain import JobStatus
from aijobs.settings import ConsumerSettings
from aijobs.store.spend import SpendRecords
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import CountingProvider, Stage, load_event

pytestmark = pytest.mark.integration

COST = 0.6  # USD each job reports: two jobs pass a 1 USD cap


class PricedProvider(CountingProvider):
    def after(self, result: Any) -> Any:
        return result.model_copy(update={"cost": COST})


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {**stage_values, "SPEND_DAILY_CAP_USD": "1", "SPEND_TIME_ZONE": "America/New_York"}


@pytest.fixture
def braked(stage: Stage) -> Stage:
    stage.provider = PricedProvider()
    return stage


def _consumer(stage: Stage) -> Consumer:
    """A consumer of `summary` on the test's clock; its brake's cache follows that clock too."""
    consumer = runtime.build_consumer(
        ConsumerSettings.from_env(stage.resources.consumer_env("summary")), clock=stage.clock
    )
    consumer.provider = stage.provider
    assert consumer.spend is not None
    consumer.spend.monotonic = lambda: stage.clock().timestamp()
    delays: list[int] = []
    send = consumer.queues.send

    def send_now(message: Any, *, kind: str, delay_seconds: int = 0) -> None:
        # SQS delays are real time; the test's clock stands in for them (advanced per round).
        delays.append(delay_seconds)
        send(message, kind=kind, delay_seconds=0)

    consumer.queues.send = send_now  # type: ignore[method-assign,assignment]
    consumer.sent_delays = delays  # type: ignore[attr-defined]
    return consumer


def _deliver(stage: Stage, consumer: Consumer) -> int:
    """One round: every waiting message of `summary` to `consumer`, as its mapping would."""
    url, arn = stage.resources.queue_urls["summary"], stage.resources.queue_arns["summary"]
    from aijobs_cli.local.esm import sqs_record

    messages = stage.receive(url)
    if messages:
        response = consumer.handle(
            {"Records": [sqs_record(m, arn) for m in messages]}, LambdaContext("aijobs-dev-consumer-summary")
        )
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        for message in messages:
            if message["MessageId"] not in failed:
                stage.sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    return len(messages)


@pytest.fixture
def api(braked: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in {**braked.resources.api_env(), "KIND_PRICES": "summary:2"}.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    service = runtime.api_service()
    service.clock = braked.clock
    assert service.spend is not None
    service.spend.clock = braked.clock
    from api import handler

    keys = {user: braked.directory.create_api_key(user) for user in ("alice", "bob")}
    for user in keys:
        braked.store_for(user).ledger.grant(user, 10, braked.clock() + timedelta(days=30))

    def call(user: str, text: str = "hello") -> tuple[int, Any]:
        event = load_event("api-post-jobs.json")
        event["headers"]["authorization"] = f"Bearer {keys[user]}"
        event["headers"].pop("idempotency-key", None)
        event["body"] = json.dumps({"kind": "summary", "input": text})
        response = handler.handler(event, LambdaContext("api"))
        return response["statusCode"], json.loads(response["body"])

    yield call
    runtime.reset_runtime()


def _records(stage: Stage) -> SpendRecords:
    return SpendRecords(boto3.resource("dynamodb").Table(stage.resources.meta_table))


def _alerts(stage: Stage, inbox: str) -> list[dict[str, Any]]:
    messages = stage.receive(inbox)
    return [json.loads(json.loads(m["Body"])["Message"]) for m in messages]


def test_past_the_stage_cap_jobs_are_held_alert_once_then_release_runs_them(braked: Stage, api: Any) -> None:
    stage = braked
    inbox = stage.subscribe_inbox()
    ids = [api("alice", f"text {i}")[1]["jobId"] for i in range(4)]
    first, second = _consumer(stage), _consumer(stage)  # two containers of the same kind
    _deliver(stage, first)
    rows = [stage.job_by_id("alice", job_id) for job_id in ids]
    assert [r.status for r in rows] == [JobStatus.SUCCEEDED] * 2 + [JobStatus.QUEUED] * 2
    assert [r.attempts for r in rows] == [1, 1, 0, 0]
    assert _records(stage).day_state("2026-11-29").stage_usd == Decimal("1.2")
    # A duplicate of a held job's message: dropped (its row is held by the first copy).
    stage.send(rows[2])
    stage.clock.advance(60)
    _deliver(stage, second)  # the other container reads the state itself, and alerts no more
    stage.clock.advance(60)
    _deliver(stage, first)
    held = [stage.job_by_id("alice", job_id) for job_id in ids[2:]]
    assert all(r.status is JobStatus.QUEUED and r.attempts == 0 and not r.dead_lettered for r in held)
    assert set(stage.provider.calls) == set(ids[:2])
    assert stage.receive(stage.resources.dlq_urls["summary"]) == []
    alerts = _alerts(stage, inbox)
    assert len(alerts) == 1, alerts
    assert alerts[0]["capUsd"] == "1"
    assert 60 in first.sent_delays  # type: ignore[attr-defined]

    _records(stage).release("2026-11-29", stage.clock())
    stage.clock.advance(60)
    _deliver(stage, second)
    done = [stage.job_by_id("alice", job_id) for job_id in ids]
    assert [r.status for r in done] == [JobStatus.SUCCEEDED] * 4
    assert [r.attempts for r in done] == [1, 1, 1, 1]
    # Credits: four debits of 2, each settled once, nothing refunded.
    ledger = stage.store_for("alice").ledger
    assert ledger.account("alice").balance == 10 - 4 * 2
    assert sorted(t.type for t in ledger.transactions("alice")) == ["debit"] * 4 + ["grant"]


def test_a_raised_cap_runs_held_jobs(braked: Stage, api: Any) -> None:
    ids = [api("alice", f"text {i}")[1]["jobId"] for i in range(3)]
    consumer = _consumer(braked)
    _deliver(braked, consumer)
    assert braked.job_by_id("alice", ids[2]).status is JobStatus.QUEUED
    _records(braked).set_day_cap("2026-11-29", Decimal("5"), braked.clock())
    braked.clock.advance(60)
    _deliver(braked, consumer)
    assert braked.job_by_id("alice", ids[2]).status is JobStatus.SUCCEEDED


def test_a_tenant_past_its_cap_gets_402_its_jobs_wait_and_a_cancel_refunds(braked: Stage, api: Any) -> None:
    stage = braked
    records = _records(stage)
    records.set_day_cap("2026-11-29", Decimal("100"), stage.clock())  # the stage's own cap is far
    records.set_tenant_cap("alice", Decimal("0.5"), "2026-11-29")
    waiting = [api("alice", f"a {i}")[1]["jobId"] for i in range(2)]
    consumer = _consumer(stage)
    _deliver(stage, consumer)
    assert stage.job_by_id("alice", waiting[0]).status is JobStatus.SUCCEEDED
    assert stage.job_by_id("alice", waiting[1]).status is JobStatus.QUEUED

    rows_before = stage.store_for("alice").list_jobs("alice", limit=50).jobs
    status, body = api("alice")
    assert (status, body["code"]) == (402, "spend_cap_reached"), body
    assert "0.5 USD" in body["message"]
    assert body["details"]["resetsAt"] == "2026-11-30T05:00:00+00:00"
    assert stage.store_for("alice").list_jobs("alice", limit=50).jobs == rows_before  # nothing written

    status, body = api("bob")  # another tenant is not touched
    assert status == 202
    stage.clock.advance(60)
    _deliver(stage, consumer)
    assert stage.job_by_id("bob", body["jobId"]).status is JobStatus.SUCCEEDED
    assert stage.job_by_id("alice", waiting[1]).status is JobStatus.QUEUED

    # Cancelled while held: refunded as any cancel is, exactly once.
    store = stage.store_for("alice")
    store.fail_final(
        stage.job_by_id("alice", waiting[1]), now=stage.clock(), error_class="cancelled",
        message="cancelled by its owner", own_claim=False,
    )  # fmt: skip
    assert store.ledger.account("alice").balance == 10 - 2
    assert sorted(t.type for t in store.ledger.transactions("alice")) == ["debit", "debit", "grant", "refund"]


def test_the_day_turns_at_midnight_in_the_configured_time_zone(braked: Stage, api: Any) -> None:
    ids = [api("alice", f"text {i}")[1]["jobId"] for i in range(3)]
    consumer = _consumer(braked)
    _deliver(braked, consumer)
    assert braked.job_by_id("alice", ids[2]).status is JobStatus.QUEUED
    braked.clock.now = datetime(2026, 11, 30, 0, 30, tzinfo=UTC)  # a new day in UTC, not in New York
    _deliver(braked, consumer)
    assert braked.job_by_id("alice", ids[2]).status is JobStatus.QUEUED
    braked.clock.now = datetime(2026, 11, 30, 5, 1, tzinfo=UTC)  # 00:01 in New York
    _deliver(braked, consumer)
    assert braked.job_by_id("alice", ids[2]).status is JobStatus.SUCCEEDED
    assert _records(braked).day_state("2026-11-30").stage_usd == Decimal("0.6")


def test_a_duplicated_finish_counts_once(braked: Stage) -> None:
    job = braked.submit("alice", "summary", "hello")
    consumer = _consumer(braked)
    store = braked.store_for("alice")
    claimed = store.claim(braked.job(job), now=braked.clock(), lease=timedelta(minutes=5), max_attempts=4)
    assert claimed is not None
    assert consumer.spend is not None

    def finish() -> None:
        writes = consumer.spend.count_writes(  # type: ignore[union-attr]
            job_id=job.job_id, user_id="alice", cost=COST, shard_name=store.table_name
        )
        store.succeed(
            claimed, now=braked.clock(), result={"output": "x"}, result_ref=None, model=None, usage={},
            cost=COST, extra_writes=writes,
        )  # fmt: skip

    finish()
    from aijobs.errors import TransitionConflict

    with pytest.raises(TransitionConflict):
        finish()
    assert _records(braked).day_state("2026-11-29").stage_usd == Decimal("0.6")
    assert SpendRecords.tenant_spend(braked.directory.shard_for("alice"), "alice", "2026-11-29") == Decimal(  # type: ignore[arg-type]
        "0.6"
    )
