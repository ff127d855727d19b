"""Credits: reserved with the job row, settled on success, refunded exactly once, expired on time."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.errors import TransitionConflict
from aijobs.operator import Operator
from aijobs.queues import JobQueues
from aijobs.store.credits import CreditLedger
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, load_event

pytestmark = pytest.mark.integration

TEXT = "One sentence to summarise. And a second one."


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Any:
    env = {**stage.resources.api_env(), "KIND_PRICES": "summary:3;embedding:1;video-generate:20"}
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    runtime.api_service().clock = stage.clock
    from api import handler

    key = stage.directory.create_api_key("alice")

    def call(sample: str, body: Any = None, path: str | None = None) -> tuple[int, Any]:
        event = load_event(sample)
        event["headers"]["authorization"] = f"Bearer {key}"
        event["headers"].pop("idempotency-key", None)
        if body is not None:
            event["body"] = json.dumps(body)
        if path is not None:
            event["rawPath"] = event["requestContext"]["http"]["path"] = path
        response = handler.handler(event, LambdaContext("api"))
        return response["statusCode"], json.loads(response["body"])

    yield call
    runtime.reset_runtime()


def _ledger(stage: Stage, user: str = "alice") -> CreditLedger:
    return stage.store_for(user).ledger


def _totals(ledger: CreditLedger, user: str) -> dict[str, int]:
    account = ledger.account(user)
    totals = dict(account.archived)
    for tx in ledger.transactions(user):
        totals[tx.type] += tx.amount
    return totals


def _invariant(ledger: CreditLedger, user: str) -> int:
    totals = _totals(ledger, user)
    balance = ledger.account(user).balance
    assert balance == totals["grant"] - totals["debit"] + totals["refund"] - totals["expire"]
    assert balance >= 0
    return balance


def _submit(api: Any, kind: str = "summary", text: str = TEXT) -> tuple[int, Any]:
    status, body = api("api-post-jobs.json", {"kind": kind, "input": text})
    return int(status), body


def test_submitting_reserves_the_kinds_price_with_the_row(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    status, body = _submit(api)
    assert status == 202
    row = stage.store_for("alice").get("alice", body["jobId"])
    assert row is not None
    assert (row.price, row.charge_state) == (3, "reserved")
    assert _invariant(_ledger(stage), "alice") == 7
    (debit,) = [tx for tx in _ledger(stage).transactions("alice") if tx.type == "debit"]
    assert (debit.amount, debit.job_id) == (3, body["jobId"])


def test_not_enough_credits_is_402_with_no_row_and_no_message(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 2, stage.clock() + timedelta(days=1))
    status, body = _submit(api)
    assert (status, body["code"]) == (402, "insufficient_credits")
    assert body["details"] == {"price": 3, "balance": 2}
    assert stage.store_for("alice").list_jobs("alice").jobs == []
    assert stage.receive(stage.resources.queue_urls["summary"]) == []
    assert _invariant(_ledger(stage), "alice") == 2


def test_credits_endpoint_shows_balance_grants_and_transactions(stage: Stage, api: Any) -> None:
    grant_id = _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    stage.clock.advance(1)
    _submit(api, kind="embedding")
    status, body = api("api-get-job.json", path="/credits")
    assert status == 200
    assert body["balance"] == 9
    assert [(g["grantId"], g["remaining"]) for g in body["grants"]] == [(grant_id, 9)]
    assert [t["type"] for t in body["transactions"]] == ["debit", "grant"]  # newest first
    assert body["prices"]["video-generate"] == 20
    # This stage has no spend cap, so it counts no model spend, and says so.
    assert (body["spendCounted"], body["spendByDay"]) == (False, [])


def test_success_settles_and_keeps_the_debit(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    _status, body = _submit(api)
    list(stage.drain("summary"))
    row = stage.store_for("alice").get("alice", body["jobId"])
    assert row is not None
    assert (row.status, row.charge_state) == (JobStatus.SUCCEEDED, "settled")
    assert _invariant(_ledger(stage), "alice") == 7


def test_a_final_failure_refunds_exactly_once(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    _status, body = _submit(api, text="#fail:400 " + TEXT)
    list(stage.drain("summary"))
    store = stage.store_for("alice")
    row = store.get("alice", body["jobId"])
    assert row is not None
    assert (row.status, row.charge_state) == (JobStatus.FAILED_FINAL, "refunded")
    assert _invariant(_ledger(stage), "alice") == 10
    # An operator (or a duplicate DLQ delivery) finalizing again cannot refund twice.
    stale = row.model_copy(update={"status": JobStatus.QUEUED, "charge_state": "reserved"})
    with pytest.raises(TransitionConflict):
        store.fail_final(stale, now=stage.clock(), error_class="operator", message="again", own_claim=False)
    assert _invariant(_ledger(stage), "alice") == 10
    refunds = [tx for tx in _ledger(stage).transactions("alice") if tx.type == "refund"]
    assert [(tx.amount, tx.job_id) for tx in refunds] == [(3, body["jobId"])]


def test_a_dead_lettered_job_is_refunded_once_even_if_delivered_twice(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    _status, body = _submit(api, text="#fail:503 " + TEXT)
    list(stage.drain("summary"))
    assert _invariant(_ledger(stage), "alice") == 7  # still reserved while retrying
    (message,) = stage.receive(stage.resources.dlq_urls["summary"])
    consumer = stage.dead_letter_consumer()
    record = load_event("sqs-dlq-batch.json")["Records"][0]
    record |= {"body": message["Body"], "messageId": message["MessageId"]}
    record["eventSourceARN"] = stage.resources.dlq_arns["summary"]
    for _ in range(2):
        assert consumer.handle({"Records": [record]}, LambdaContext("dlq")) == {"batchItemFailures": []}
    row = stage.store_for("alice").get("alice", body["jobId"])
    assert row is not None
    assert (row.status, row.dead_lettered, row.charge_state) == (JobStatus.FAILED_FINAL, True, "refunded")
    assert _invariant(_ledger(stage), "alice") == 10


def test_a_failed_enqueue_refunds(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    stage.sqs.delete_queue(QueueUrl=stage.resources.queue_urls["summary"])
    status, _body = _submit(api)
    assert status == 503
    assert _invariant(_ledger(stage), "alice") == 10


def test_operator_rerun_is_not_charged_again(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(days=1))
    _status, body = _submit(api, text="#fail:400 " + TEXT)
    list(stage.drain("summary"))
    Operator(stage.directory, JobQueues(stage.sqs, stage.resources.queue_urls), stage.clock).rerun(
        "alice", body["jobId"]
    )
    list(stage.drain("summary"))
    assert _invariant(_ledger(stage), "alice") == 10


def test_debits_draw_on_the_grant_that_expires_first(stage: Stage, api: Any) -> None:
    ledger = _ledger(stage)
    late = ledger.grant("alice", 5, stage.clock() + timedelta(days=30))
    soon = ledger.grant("alice", 2, stage.clock() + timedelta(hours=1))
    _submit(api)  # price 3: 2 from the grant expiring soon, 1 from the late one
    remaining = {g.grant_id: g.remaining for g in ledger.grants("alice")}
    assert remaining == {soon: 0, late: 4}
    stage.clock.advance(2 * 3600)
    assert ledger.expire_due(stage.clock()) == 1  # nothing unspent to take away, but it is closed
    assert _invariant(ledger, "alice") == 4


def test_expiry_boundaries(stage: Stage) -> None:
    stage.directory.ensure_user("alice")
    ledger = _ledger(stage)
    at = stage.clock() + timedelta(hours=1)
    ledger.grant("alice", 7, at)
    assert ledger.expire_due(at - timedelta(microseconds=1)) == 0
    assert ledger.account("alice").balance == 7
    assert ledger.expire_due(at) == 1  # due exactly at its expiry time
    assert ledger.expire_due(at) == 0  # and only once
    assert _invariant(ledger, "alice") == 0
    (expire,) = [tx for tx in ledger.transactions("alice") if tx.type == "expire"]
    assert expire.amount == 7


def test_an_expired_but_unswept_grant_cannot_pay(stage: Stage, api: Any) -> None:
    _ledger(stage).grant("alice", 10, stage.clock() + timedelta(minutes=5))
    stage.clock.advance(600)  # expired, though the cron has not run yet
    status, body = _submit(api)
    assert (status, body["details"]["balance"]) == (402, 0)


def test_a_refund_to_a_grant_that_expired_meanwhile_expires_at_once(stage: Stage, api: Any) -> None:
    ledger = _ledger(stage)
    ledger.grant("alice", 3, stage.clock() + timedelta(minutes=5))
    _status, body = _submit(api, text="#fail:400 " + TEXT)
    stage.clock.advance(600)
    assert ledger.expire_due(stage.clock()) == 1
    list(stage.drain("summary"))  # fails for good now: refund of credit whose grant is gone
    row = stage.store_for("alice").get("alice", body["jobId"])
    assert row is not None
    assert row.charge_state == "refunded"
    assert _invariant(ledger, "alice") == 0
    types = sorted(tx.type for tx in ledger.transactions("alice"))
    assert types == ["debit", "expire", "grant", "refund"]


def test_transactions_past_retention_are_archived_into_the_totals(stage: Stage) -> None:
    stage.directory.ensure_user("alice")
    ledger = _ledger(stage)
    for _ in range(3):
        ledger.grant("alice", 4, stage.clock() + timedelta(days=90))
    stage.clock.advance(86_400 * 10)
    assert ledger.cleanup_transactions(stage.clock() - timedelta(days=5), limit=2) == 2
    assert ledger.cleanup_transactions(stage.clock() - timedelta(days=5), limit=2) == 1
    assert ledger.transactions("alice") == []
    assert ledger.account("alice").archived["grant"] == 12
    assert _invariant(ledger, "alice") == 12
