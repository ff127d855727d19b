"""The producer's floor of AWS calls per POST /jobs, and the guarantees kept on the way there: the
Idempotency-Key is guarded by the transaction (no read first), valid API keys are remembered for a
short, stated time, and the key item carries its user's shard."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import boto3
import pytest
from boto3.dynamodb.conditions import Key

from aijobs import runtime
from aijobs.store import tenants
from aijobs.store.keys import API_KEY_SK, PK, SK, TTL_ATTRIBUTE, api_key_pk, user_pk
from aijobs.store.retention import write_retention
from tests.aws_calls import CallLog, recording_calls
from tests.integration.harness import Stage
from tests.integration.test_api import Api

pytestmark = pytest.mark.integration

BODY = {"kind": "summary", "input": "Queues decouple accepting work from doing it. A consumer runs it."}


@contextmanager
def recorded_producer(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, CallLog]]:
    """A producer container built inside a recording (its clients are recorded), keys issued and
    credits granted; the log starts empty (that set-up is not the producer's)."""
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    with recording_calls() as log:
        runtime.reset_runtime()
        runtime.api_service().clock = stage.clock
        from api import handler

        api = Api(stage, handler.handler)
        log.clear()
        yield api, log
    runtime.reset_runtime()


@pytest.fixture
def recorded(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Api, CallLog]]:
    with recorded_producer(stage, monkeypatch) as producer:
        yield producer


def _meta(stage: Stage) -> Any:
    return boto3.resource("dynamodb").Table(stage.resources.meta_table)


def _transactions(stage: Stage, user_id: str) -> list[dict[str, Any]]:
    table = stage.directory.shard_for(user_id)
    assert table is not None
    condition = Key(PK).eq(user_pk(user_id)) & Key(SK).begins_with("TX#")
    items: list[dict[str, Any]] = table.query(KeyConditionExpression=condition)["Items"]
    return items


def _post(api: Api, headers: dict[str, str] | None = None, user: str = "alice") -> tuple[int, Any]:
    status, _, body = api.call("api-post-jobs.json", body=BODY, headers=headers or {}, user=user)
    return status, body


def test_a_cold_container_looks_the_key_up_once_and_needs_no_shard_lookup(
    recorded: tuple[Api, CallLog], stage: Stage
) -> None:
    api, log = recorded
    write_retention(_meta(stage), credit_tx_retention_days=30, ai_task_retention_days=7)
    log.clear()
    assert _post(api)[0] == 202
    # The key (its item names the user's shard) with the stage's retention in the same request (the
    # debit's TTL; once per container and 5 minutes), the grants to draw credits from, the write,
    # the send.
    assert log.calls == [
        ("dynamodb", "BatchGetItem"),
        ("dynamodb", "Query"),
        ("dynamodb", "TransactWriteItems"),
        ("sqs", "SendMessage"),
    ]
    # The retention that came with the key is the one the debit was stamped with.
    (debit,) = [tx for tx in _transactions(stage, "alice") if tx["type"] == "debit"]
    assert debit.get("folded") is True
    assert int(debit[TTL_ATTRIBUTE]) == int((stage.clock() + timedelta(days=30)).timestamp())


@pytest.mark.parametrize("with_key", [False, True])
def test_a_warm_container_accepts_a_job_in_three_calls(recorded: tuple[Api, CallLog], with_key: bool) -> None:
    api, log = recorded
    assert _post(api)[0] == 202
    log.clear()
    headers = {"idempotency-key": "once"} if with_key else {}
    assert _post(api, headers)[0] == 202
    assert log.calls == [("dynamodb", "Query"), ("dynamodb", "TransactWriteItems"), ("sqs", "SendMessage")]


def test_a_replay_is_still_the_same_job_and_sends_nothing(
    recorded: tuple[Api, CallLog], stage: Stage
) -> None:
    api, log = recorded
    status, first = _post(api, {"idempotency-key": "k"})
    log.clear()
    status, again = _post(api, {"idempotency-key": "k"})
    assert (status, again["jobId"]) == (202, first["jobId"])
    assert ("sqs", "SendMessage") not in log.calls
    assert len(stage.receive(stage.resources.queue_urls["summary"])) == 1


def test_a_replay_after_the_credits_ran_out_is_answered_not_refused(
    recorded: tuple[Api, CallLog], stage: Stage
) -> None:
    """The key is no longer read first, so a refusal before the transaction must still check it."""
    api, _ = recorded
    carol = {"authorization": f"Bearer {stage.directory.create_api_key('carol')}"}
    stage.store_for("carol").ledger.grant("carol", 2, stage.clock() + timedelta(days=1))

    def post(headers: dict[str, str]) -> tuple[int, Any]:
        status, _, body = api.call("api-post-jobs.json", body=BODY, user=None, headers={**carol, **headers})
        return status, body

    status, first = post({"idempotency-key": "spent"})
    assert status == 202
    assert post({})[0] == 202
    assert post({})[0] == 402  # no credits left
    status, again = post({"idempotency-key": "spent"})
    assert (status, again["jobId"]) == (202, first["jobId"])


def test_a_revoked_key_is_refused_once_the_cache_time_has_passed(
    recorded: tuple[Api, CallLog], stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    api, _ = recorded
    now = [1000.0]
    directory = runtime.api_service().directory
    monkeypatch.setattr(directory, "_monotonic", lambda: now[0])
    assert _post(api)[0] == 202
    key_item = {PK: api_key_pk(tenants.hash_api_key(api.keys["alice"])), SK: API_KEY_SK}
    meta = stage.directory.meta
    assert "Item" in meta.get_item(Key=key_item)
    meta.update_item(
        Key=key_item, UpdateExpression="SET revoked = :t", ExpressionAttributeValues={":t": True}
    )
    now[0] += tenants.API_KEY_CACHE_SECONDS - 1
    assert _post(api)[0] == 202  # still trusted within the stated time
    now[0] += 2
    assert _post(api)[0] == 401


def test_an_unknown_key_is_not_remembered(recorded: tuple[Api, CallLog], stage: Stage) -> None:
    api, _ = recorded
    status, _, _ = api.call(
        "api-post-jobs.json", body=BODY, user=None, headers={"authorization": "Bearer nope"}
    )
    assert status == 401
    assert runtime.api_service().directory.authenticate("nope") is None
