"""`POST /classify` is billed like a job (issue 24 point 6): its price reserved before the model is
called (402 without credits, 402 / 429 past the tenant's / the stage's spend cap, and no model call),
settled once (charged with the answer, refunded when the call fails or its function dies), its usage
and cost on its row and its spend in the brake's counters; an Idempotency-Key never charges twice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.errors import TransientProviderError, TransitionConflict
from aijobs.operator import Operator
from aijobs.providers.local_directives import SimulatedCrash
from aijobs.scheduled.context import CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings
from aijobs.store.spend import SpendRecords
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, load_event

pytestmark = pytest.mark.integration

DAY = "2026-11-29"  # the harness clock's day (UTC)
CREDITS = 5


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {**stage_values, "QUEUE_NAMES": "summary", "SPEND_DAILY_CAP_USD": "0.1"}


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: Any


class ClassifyApi:
    """POST /classify and GET /credits through the real API handler, as alice (with CREDITS) or
    broke (with none)."""

    def __init__(self, stage: Stage, handler: Any) -> None:
        self.stage = stage
        self._handler = handler
        self.keys = {user: stage.directory.create_api_key(user) for user in ("alice", "broke")}
        stage.store_for("alice").ledger.grant("alice", CREDITS, stage.clock() + timedelta(days=30))

    def _event(self, sample: str, user: str, idempotency_key: str | None) -> dict[str, Any]:
        event = load_event(sample)
        event["headers"]["authorization"] = f"Bearer {self.keys[user]}"
        event["headers"].pop("idempotency-key", None)
        if idempotency_key is not None:
            event["headers"]["idempotency-key"] = idempotency_key
        return event

    def classify(self, text: str, *, user: str = "alice", idempotency_key: str | None = None) -> Answer:
        event = self._event("api-post-classify.json", user, idempotency_key)
        event["body"] = json.dumps({"text": text})
        response = self._handler(event, LambdaContext("aijobs-dev-api"))
        return Answer(response["statusCode"], response.get("headers") or {}, json.loads(response["body"]))

    def credits(self, user: str = "alice") -> dict[str, Any]:
        event = self._event("api-get-credits.json", user, None)
        response = self._handler(event, LambdaContext("aijobs-dev-api"))
        assert response["statusCode"] == 200, response
        body: dict[str, Any] = json.loads(response["body"])
        return body


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[ClassifyApi]:
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    service = runtime.api_service()
    service.clock = stage.clock
    service.provider = stage.provider  # counts the model calls per call (row) id
    assert service.spend is not None
    service.spend.clock = stage.clock
    service.spend.monotonic = lambda: stage.clock().timestamp()  # its 30 s cache follows the clock
    from api import handler

    yield ClassifyApi(stage, handler.handler)
    runtime.reset_runtime()


def _records(stage: Stage) -> SpendRecords:
    return SpendRecords(boto3.resource("dynamodb").Table(stage.resources.meta_table))


def _tenant_spend(stage: Stage, user: str = "alice") -> Decimal:
    shard = stage.directory.shard_for(user)
    assert shard is not None
    return _records(stage).tenant_spend(shard, user, DAY)


def _sweep(stage: Stage) -> dict[str, Any]:
    ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock)
    return run_sweeper(CronRun("*/5 * * * *", "2026-11-29T09:10:00Z"), ctx)


def test_a_call_charges_its_price_and_records_its_usage_cost_and_spend(
    api: ClassifyApi, stage: Stage
) -> None:
    answer = api.classify("#cost:0.06 What a lovely day, thank you!")
    assert answer.status == 200, answer.body
    assert answer.body["label"] in {"positive", "negative", "neutral", "question"}
    call_id = answer.body["jobId"]
    credits = api.credits()
    price = credits["prices"]["classify"]
    assert price == 1  # the kind's declared price, which the stage's KIND_PRICES lists for the API
    assert credits["balance"] == CREDITS - price
    debits = [t for t in credits["transactions"] if t["type"] == "debit"]
    assert [(t["amount"], t["jobId"]) for t in debits] == [(price, call_id)]
    row = stage.job_by_id("alice", call_id)
    assert (row.kind, row.status, row.charge_state) == ("classify", JobStatus.SUCCEEDED, "settled")
    assert (row.cost, row.model, row.input) == (0.06, "local-text-1", None)  # the text is not kept
    assert min(row.usage["input_tokens"], row.usage["output_tokens"]) > 0
    assert row.result["output"]["label"] == answer.body["label"]
    # The brake counted it, for the stage and for the tenant, in the settlement's transaction.
    assert _records(stage).day_state(DAY).stage_usd == Decimal("0.06")
    assert _tenant_spend(stage) == Decimal("0.06")
    assert stage.provider.calls == {call_id: 1}


def test_without_credits_a_call_is_a_402_and_the_model_is_not_called(api: ClassifyApi, stage: Stage) -> None:
    answer = api.classify("Is the export broken again?", user="broke")
    assert (answer.status, answer.body["code"]) == (402, "insufficient_credits")
    assert answer.body["details"] == {"price": 1, "balance": 0}
    assert stage.provider.calls == {}
    rows = stage.store_for("broke").list_jobs("broke", status=None, kind=None, limit=10, cursor=None)
    assert rows.jobs == []


def test_a_tenant_past_its_own_cap_gets_the_402_post_jobs_gives_and_no_model_call(
    api: ClassifyApi, stage: Stage
) -> None:
    _records(stage).set_tenant_cap("alice", Decimal("0.05"), DAY)
    assert api.classify("#cost:0.06 Great support, thanks!").status == 200
    refused = api.classify("#cost:0.06 Great support again!")
    assert (refused.status, refused.body["code"]) == (402, "spend_cap_reached")
    assert refused.body["details"]["capUsd"] == "0.05"
    assert len(stage.provider.calls) == 1
    assert api.credits()["balance"] == CREDITS - 1


def test_past_the_stage_cap_a_call_is_a_429_until_the_brake_is_released(
    api: ClassifyApi, stage: Stage
) -> None:
    assert [api.classify(f"#cost:0.06 Nice {n}").status for n in range(2)] == [200, 200]  # 0.12 of 0.1
    refused = api.classify("#cost:0.06 Nice again")
    assert (refused.status, refused.body["code"]) == (429, "stage_spend_cap_reached")
    assert refused.headers["Retry-After"] == "60"
    assert set(refused.body["details"]) == {"resetsAt"}  # a tenant is not told the stage's spend
    assert len(stage.provider.calls) == 2
    assert api.credits()["balance"] == CREDITS - 2
    _records(stage).release(DAY, stage.clock())
    stage.clock.advance(31)  # the API's brake reads the day's state again
    assert api.classify("#cost:0.06 Nice again").status == 200
    assert _records(stage).day_state(DAY).stage_usd == Decimal("0.18")


@pytest.mark.parametrize("failure", ["503", "timeout"])
def test_a_failed_model_call_is_refunded_and_counts_no_spend(
    api: ClassifyApi, stage: Stage, failure: str
) -> None:
    answer = api.classify(f"#fail:{failure} #cost:0.06 Where is my parcel?")
    assert (answer.status, answer.body["code"]) == (503, "provider_unavailable")
    credits = api.credits()
    assert credits["balance"] == CREDITS
    moves = sorted((t["type"], t["amount"]) for t in credits["transactions"] if t["type"] != "grant")
    assert moves == [("debit", 1), ("refund", 1)]
    (call_id,) = {t["jobId"] for t in credits["transactions"] if t["type"] == "debit"}
    row = stage.job_by_id("alice", call_id)
    assert (row.status, row.charge_state, row.last_error_class) == (
        JobStatus.FAILED_FINAL, "refunded", "transient",
    )  # fmt: skip
    assert _records(stage).day_state(DAY).stage_usd == 0
    # An operator cannot re-run a call: its caller was answered, and it has no queue.
    with pytest.raises(TransitionConflict):
        Operator(stage.directory, runtime.api_service().queues, stage.clock).rerun("alice", call_id)


def test_a_call_whose_function_died_is_refunded_by_the_sweeper(api: ClassifyApi, stage: Stage) -> None:
    with pytest.raises(SimulatedCrash):  # the Lambda dies between the reservation and the settlement
        api.classify("#crash Is anyone there?")
    assert api.credits()["balance"] == CREDITS - 1  # reserved, not lost
    assert _sweep(stage)["actions"] == {}  # its lease is live
    stage.clock.advance(61)
    assert _sweep(stage)["actions"] == {"classify:finalized": 1}
    assert _sweep(stage)["actions"] == {}  # once
    credits = api.credits()
    assert credits["balance"] == CREDITS
    (call_id,) = {t["jobId"] for t in credits["transactions"] if t["type"] == "refund"}
    row = stage.job_by_id("alice", call_id)
    assert (row.status, row.charge_state, row.last_error_class) == (
        JobStatus.FAILED_FINAL, "refunded", "lease_expired",
    )  # fmt: skip


def test_an_idempotency_key_answers_again_without_a_second_charge(api: ClassifyApi, stage: Stage) -> None:
    first = api.classify("Thanks, it works!", idempotency_key="k-1")
    again = api.classify("Thanks, it works!", idempotency_key="k-1")
    assert (first.status, again.status) == (200, 200)
    assert again.body == first.body
    assert again.headers.get("Idempotent-Replayed") == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert stage.provider.calls == {first.body["jobId"]: 1}
    assert api.credits()["balance"] == CREDITS - 1
    reused = api.classify("Something else entirely", idempotency_key="k-1")
    assert (reused.status, reused.body["code"]) == (409, "idempotency_key_reused")

    def blip(_request: Any) -> None:
        raise TransientProviderError("provider 503", status=503)

    stage.provider.before_run = blip  # the next model call fails, once
    assert api.classify("Is it fixed?", idempotency_key="k-2").status == 503
    assert api.credits()["balance"] == CREDITS - 1  # refunded
    retried = api.classify("Is it fixed?", idempotency_key="k-2")  # a failed call's key works again
    assert retried.status == 200
    assert "Idempotent-Replayed" not in retried.headers
    assert api.credits()["balance"] == CREDITS - 2
    assert api.classify("Is it fixed?", idempotency_key="k-2").body == retried.body
    assert api.credits()["balance"] == CREDITS - 2
