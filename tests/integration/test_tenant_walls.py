"""A tenant past its own items' write rate (docs/operations/scale.md) gets a 429 with Retry-After and a
reason, and nothing is written: not a 500, not a hot retry loop, not a 409 "credits busy"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from aijobs import runtime
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, load_event

pytestmark = pytest.mark.integration


class _Http:
    status_code = 400


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for key, value in {**stage.resources.api_env(), "KIND_PRICES": "summary:3"}.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    runtime.api_service().clock = stage.clock
    from api import handler

    key = stage.directory.create_api_key("alice")

    def call() -> tuple[int, dict[str, str], Any]:
        event = load_event("api-post-jobs.json")
        event["headers"]["authorization"] = f"Bearer {key}"
        event["headers"]["idempotency-key"] = "walls-1"
        event["body"] = json.dumps({"kind": "summary", "input": "One sentence. And another."})
        response = handler.handler(event, LambdaContext("api"))
        return response["statusCode"], response.get("headers") or {}, json.loads(response["body"])

    yield call
    runtime.reset_runtime()


def _throttle_transactions(parsed: dict[str, Any]) -> list[int]:
    """Make DynamoDB answer every TransactWriteItems of the API's client with `parsed`."""
    calls: list[int] = []

    def answer(**_: Any) -> tuple[_Http, dict[str, Any]]:
        calls.append(1)
        return _Http(), parsed

    client = runtime.api_service().directory.meta.meta.client
    # A before-call handler that returns (http, parsed) stands in for the service.
    client.meta.events.register("before-call.dynamodb.TransactWriteItems", answer)  # type: ignore[arg-type]
    return calls


@pytest.mark.parametrize(
    "parsed",
    [
        {  # a transaction item over its partition's or item's rate
            "Error": {"Code": "TransactionCanceledException", "Message": "Transaction cancelled"},
            "CancellationReasons": [{"Code": "ThrottlingError"}, {"Code": "None"}, {"Code": "None"}],
        },
        {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}},
    ],
    ids=["transaction-item", "request"],
)
def test_a_throttled_submit_is_429_with_retry_after_and_writes_nothing(
    stage: Stage, api: Any, parsed: dict[str, Any]
) -> None:
    ledger = stage.store_for("alice").ledger
    ledger.grant("alice", 10, stage.clock() + timedelta(days=1))
    calls = _throttle_transactions(parsed)
    status, headers, body = api()
    assert (status, body["code"]) == (429, "tenant_rate_limited")
    assert headers.get("Retry-After") == "1"
    assert len(calls) == 1  # refused at once: no retry against a partition that is already hot
    assert stage.store_for("alice").list_jobs("alice").jobs == []
    assert stage.receive(stage.resources.queue_urls["summary"]) == []
    assert ledger.account("alice").balance == 10
    # The same request once DynamoDB takes writes again (new clients, without the stand-in):
    # accepted, since the refused one used neither the Idempotency-Key nor any credit.
    runtime.reset_runtime()
    runtime.api_service().clock = stage.clock
    status, _headers, body = api()
    assert status == 202, body
    assert ledger.account("alice").balance == 7
