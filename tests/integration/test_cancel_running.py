"""Cancelling a job whose attempt is running (issue 24 point 1): the model call cannot be recalled,
so the attempt finishes and is paid for and counted; the job is never tried again.

The cancel arrives *during* the provider call (the provider's `before_run` hook calls the API),
the way a tenant's `POST /jobs/{id}/cancel` races a consumer in production.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest

from aijobs.domain import JobStatus
from aijobs.errors import TransientProviderError
from aijobs.scheduled.context import CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.store.spend import SpendRecords
from tests.integration.harness import CountingProvider, Stage, api_caller

pytestmark = pytest.mark.integration

COST = 0.05  # USD the model call reports
PRICE = 2  # credits per summary (the stage's default price is the kind's declared one)
TEXT = "Queues decouple accepting work from doing it. The producer answers at once."
Call = Any


class PricedProvider(CountingProvider):
    def after(self, result: Any) -> Any:
        return result.model_copy(update={"cost": COST})


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    # A spend cap, so the brake's counters exist and can be read.
    return {**stage_values, "KIND_PRICES": f"summary:{PRICE}", "SPEND_DAILY_CAP_USD": "100"}


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Call]:
    stage.provider = PricedProvider()
    yield from api_caller(stage, monkeypatch, credits=10)


def _balance(stage: Stage) -> int:
    return stage.store_for("alice").ledger.account("alice").balance


def _spent(stage: Stage) -> Decimal:
    day = stage.clock().strftime("%Y-%m-%d")
    return SpendRecords(boto3.resource("dynamodb").Table(stage.resources.meta_table)).day_state(day).stage_usd


def _cancel_during_the_call(stage: Stage, api: Call, job_id: str, answers: list[tuple[int, Any]]) -> None:
    def cancel(_request: Any) -> None:
        answers.append(api("POST", f"/jobs/{job_id}/cancel"))

    stage.provider.before_run = cancel


def _cancelled_during_a_failing_call(stage: Stage, api: Call) -> tuple[str, list[tuple[int, Any]]]:
    """A summary job whose owner cancels it during its model call, which then fails with a 503:
    its id and the cancel's answers, once the consumer is done with it."""
    _status, accepted = api("POST", "/jobs", {"kind": "summary", "input": TEXT})
    job_id = accepted["jobId"]
    answers: list[tuple[int, Any]] = []

    def cancel_then_fail(_request: Any) -> None:
        answers.append(api("POST", f"/jobs/{job_id}/cancel"))
        raise TransientProviderError("503 from the model", status=503)

    stage.provider.before_run = cancel_then_fail
    list(stage.drain("summary"))
    return job_id, answers


def test_a_cancel_during_a_call_that_succeeds_is_answered_202_and_the_attempt_is_charged(
    stage: Stage, api: Call
) -> None:
    status, accepted = api("POST", "/jobs", {"kind": "summary", "input": TEXT})
    assert status == 202
    job_id = accepted["jobId"]
    answers: list[tuple[int, Any]] = []
    _cancel_during_the_call(stage, api, job_id, answers)
    list(stage.drain("summary"))

    ((status, view),) = answers
    assert status == 202, view  # the attempt is running: the cancel is recorded, not yet final
    assert (view["status"], view["cancelRequestedAt"]) == ("running", view["cancelRequestedAt"])
    assert view["cancelRequestedAt"] is not None
    # The model ran and was paid for: the job succeeded, is charged once, its cost counted.
    row = stage.job_by_id("alice", job_id)
    assert (row.status, row.charge_state, row.cost) == (JobStatus.SUCCEEDED, "settled", COST)
    assert row.usage
    assert _balance(stage) == 10 - PRICE
    assert _spent(stage) == Decimal(str(COST))
    assert stage.provider.calls == {job_id: 1}
    status, shown = api("GET", f"/jobs/{job_id}")
    assert (shown["status"], shown["costUsd"], shown["charge"], shown["price"]) == (
        "succeeded",
        COST,
        "settled",
        2,
    )
    assert shown["usage"] == row.usage
    assert shown["cancelRequestedAt"] == view["cancelRequestedAt"]
    assert shown["result"] is not None  # what was paid for is delivered
    status, credits = api("GET", "/credits")
    assert (status, credits["spendCounted"]) == (200, True)
    assert credits["spendByDay"] == [{"day": stage.clock().strftime("%Y-%m-%d"), "usd": COST}]
    # A second cancel of a finished job is a 409, as for any finished job.
    status, again = api("POST", f"/jobs/{job_id}/cancel")
    assert (status, again["code"]) == (409, "job_finished")


def test_a_cancel_during_a_call_that_fails_ends_the_job_cancelled_refunded_and_never_retried(
    stage: Stage, api: Call
) -> None:
    job_id, answers = _cancelled_during_a_failing_call(stage, api)

    assert answers[0][0] == 202
    row = stage.job_by_id("alice", job_id)
    assert (row.status, row.last_error_class, row.charge_state) == (
        JobStatus.FAILED_FINAL,
        "cancelled",
        "refunded",
    )
    assert row.attempts == 1
    assert stage.provider.calls == {job_id: 1}  # a retryable failure, yet no retry
    assert _balance(stage) == 10
    assert stage.receive(stage.resources.queue_urls["summary"]) == []
    status, again = api("POST", f"/jobs/{job_id}/cancel")  # now final and cancelled: answered again
    assert (status, again["status"], again["lastErrorClass"]) == (200, "failed_final", "cancelled")


def test_a_cancelled_job_whose_consumer_died_is_refunded_by_the_sweeper_not_retried(
    stage: Stage, api: Call
) -> None:
    status, accepted = api("POST", "/jobs", {"kind": "summary", "input": TEXT})
    job_id = accepted["jobId"]
    store = stage.store_for("alice")
    consumer = stage.consumer("summary")
    claimed = store.claim(
        stage.job_by_id("alice", job_id), now=stage.clock(), lease=consumer.lease, max_attempts=4
    )
    assert claimed is not None
    stage.receive(stage.resources.queue_urls["summary"])  # the dead consumer's message is in flight
    status, view = api("POST", f"/jobs/{job_id}/cancel")
    assert (status, view["status"]) == (202, "running")
    stage.clock.advance(consumer.lease.total_seconds() + 1)
    from aijobs import runtime
    from aijobs.settings import CronSettings

    ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
    assert run_sweeper(CronRun("*/5 * * * *", "2026-11-29T09:10:00Z"), ctx)["actions"] == {
        "summary:finalized": 1
    }
    row = stage.job_by_id("alice", job_id)
    assert (row.status, row.last_error_class, row.charge_state) == (
        JobStatus.FAILED_FINAL,
        "cancelled",
        "refunded",
    )
    assert _balance(stage) == 10
    assert job_id not in stage.provider.calls


def test_a_cancel_that_races_a_claim_never_refunds_a_running_attempt(stage: Stage, api: Call) -> None:
    """The cancel read the row `queued`; a consumer claimed it before the cancel's write. The
    write must not finalize (and refund) a job whose attempt now runs: the cancel is re-decided."""
    status, accepted = api("POST", "/jobs", {"kind": "summary", "input": TEXT})
    job_id = accepted["jobId"]
    store = stage.store_for("alice")
    queued = stage.job_by_id("alice", job_id)
    claimed = store.claim(queued, now=stage.clock(), lease=timedelta(minutes=1), max_attempts=4)
    assert claimed is not None
    from aijobs.errors import CANCELLED, TransitionConflict

    with pytest.raises(TransitionConflict):
        store.fail_final(
            queued, now=stage.clock(), error_class=CANCELLED, message="cancelled", own_claim=False,
            only_from=(JobStatus.QUEUED,),
        )  # fmt: skip
    assert stage.job_by_id("alice", job_id).status is JobStatus.RUNNING
    status, view = api("POST", f"/jobs/{job_id}/cancel")  # the service reads again and asks instead
    assert (status, view["status"]) == (202, "running")
    assert _balance(stage) == 10 - PRICE


def test_an_operator_rerun_of_a_cancelled_job_forgets_the_cancel(stage: Stage, api: Call) -> None:
    from aijobs.store.jobs import JobStore

    job_id, _answers = _cancelled_during_a_failing_call(stage, api)
    store: JobStore = stage.store_for("alice")
    row = stage.job_by_id("alice", job_id)
    rerun = store.requeue(row, now=stage.clock(), allowed_from=(JobStatus.FAILED_FINAL,))
    assert rerun.cancel_requested_at is None
