"""The event-source emulation against a moto queue: what a partial batch response deletes."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from aijobs_cli.local.esm import InvalidBatchResponse, QueueMapping
from tests.integration.harness import load_event

pytestmark = pytest.mark.integration


@pytest.fixture
def mapping() -> Iterator[QueueMapping]:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        # Visibility timeout 0: whatever the mapping does not delete is visible again at once.
        url = sqs.create_queue(QueueName="esm-test", Attributes={"VisibilityTimeout": "0"})["QueueUrl"]
        for index in range(3):
            sqs.send_message(QueueUrl=url, MessageBody=f"body-{index}")
        yield QueueMapping(
            sqs=sqs,
            queue_url=url,
            queue_arn="arn:aws:sqs:us-east-1:123456789012:esm-test",
            handler=lambda _event, _context: None,
            function_name="esm-test-consumer",
            batch_size=10,
        )


def _left_in_queue(mapping: QueueMapping) -> list[str]:
    response = mapping.sqs.receive_message(QueueUrl=mapping.queue_url, MaxNumberOfMessages=10)
    return sorted(message["Body"] for message in response.get("Messages", []))


def _answering(items: Callable[[list[str]], list[Any]]) -> Callable[[dict[str, Any], Any], Any]:
    """A fake consumer that reports `items(message ids of the batch)` as its batchItemFailures."""

    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        return {"batchItemFailures": items([record["messageId"] for record in event["Records"]])}

    return handler


def test_only_the_reported_failure_stays_in_the_queue(mapping: QueueMapping) -> None:
    bodies: dict[str, str] = {}

    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        bodies.update({r["messageId"]: r["body"] for r in event["Records"]})
        failed = next(r["messageId"] for r in event["Records"] if r["body"] == "body-1")
        return {"batchItemFailures": [{"itemIdentifier": failed}]}

    mapping.handler = handler
    outcome = mapping.poll_once()
    assert (outcome.received, outcome.error) == (3, None)
    assert [bodies[i] for i in outcome.failed_ids] == ["body-1"]
    assert _left_in_queue(mapping) == ["body-1"]


@pytest.mark.parametrize(
    "bad_item",
    [{"itemIdentifier": "not-a-message-of-this-batch"}, {"itemIdentifier": ""}, {"itemIdentifier": None}],
    ids=["unknown id", "empty id", "null id"],
)
def test_an_invalid_item_identifier_fails_the_whole_batch(
    mapping: QueueMapping, bad_item: dict[str, Any]
) -> None:
    mapping.handler = _answering(lambda ids: [{"itemIdentifier": ids[0]}, bad_item])
    outcome = mapping.poll_once()
    assert isinstance(outcome.error, InvalidBatchResponse)
    assert outcome.received == 3
    assert len(outcome.failed_ids) == 3
    assert _left_in_queue(mapping) == ["body-0", "body-1", "body-2"]


@pytest.mark.parametrize(
    "response",
    ["ok", [], {"batchItemFailures": ""}, {"batchItemFailures": {}}],
    ids=["a string", "a list", "an empty string for the list", "an object for the list"],
)
def test_a_response_that_is_no_partial_batch_response_fails_the_whole_batch(
    mapping: QueueMapping, response: Any
) -> None:
    mapping.handler = lambda _event, _context: response
    outcome = mapping.poll_once()
    assert isinstance(outcome.error, InvalidBatchResponse)
    assert (outcome.received, len(outcome.failed_ids)) == (3, 3)
    assert _left_in_queue(mapping) == ["body-0", "body-1", "body-2"]


def test_an_empty_response_deletes_the_whole_batch(mapping: QueueMapping) -> None:
    mapping.handler = _answering(lambda _ids: [])
    outcome = mapping.poll_once()
    assert (outcome.received, outcome.failed_ids, outcome.error) == (3, [], None)
    assert _left_in_queue(mapping) == []


def test_a_mapping_disabled_during_its_long_poll_invokes_nothing(mapping: QueueMapping) -> None:
    """Paused while its receive waits: what that receive brings back is not handled but left visible."""
    invoked: list[dict[str, Any]] = []
    mapping.handler = lambda event, _context: invoked.append(event)
    receive = mapping.sqs.receive_message

    def receive_then_pause(**kwargs: Any) -> Any:
        answer = receive(**kwargs)
        mapping.enabled = False  # the console's pause arrives while the poll is out
        return answer

    mapping.sqs.receive_message = receive_then_pause  # type: ignore[method-assign]
    try:
        outcome = mapping.poll_once()
    finally:
        mapping.sqs.receive_message = receive  # type: ignore[method-assign]
    assert (outcome.received, invoked) == (0, [])
    assert _left_in_queue(mapping) == ["body-0", "body-1", "body-2"]


def test_message_attributes_reach_the_handler_in_the_lambda_record_shape(mapping: QueueMapping) -> None:
    """Each record as the Lambda SQS event carries it (the shape of events/sqs-dlq-batch.json)."""
    mapping.sqs.purge_queue(QueueUrl=mapping.queue_url)
    mapping.sqs.send_message(
        QueueUrl=mapping.queue_url,
        MessageBody="with attributes",
        MessageAttributes={
            "aijobs-moved-by": {"DataType": "String", "StringValue": "consumer:attempt-budget-spent"},
            "attempt": {"DataType": "Number", "StringValue": "3"},
            "blob": {"DataType": "Binary", "BinaryValue": b"\x00\xff"},
        },
    )
    records: list[dict[str, Any]] = []
    mapping.handler = lambda event, _context: records.extend(event["Records"])
    assert mapping.poll_once().received == 1
    (record,) = records
    (sample,) = load_event("sqs-dlq-batch.json")["Records"]
    assert set(record) == set(sample)
    assert set(record["attributes"]) >= set(sample["attributes"])
    assert record["messageAttributes"] == {
        "aijobs-moved-by": {
            "stringValue": "consumer:attempt-budget-spent",
            "stringListValues": [],
            "binaryListValues": [],
            "dataType": "String",
        },
        "attempt": {"stringValue": "3", "stringListValues": [], "binaryListValues": [], "dataType": "Number"},
        "blob": {"binaryValue": "AP8=", "stringListValues": [], "binaryListValues": [], "dataType": "Binary"},
    }
