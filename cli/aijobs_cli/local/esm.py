"""Drive a consumer the way the Lambda SQS event-source mapping does, against any SQS endpoint.

moto's own SQS -> Lambda trigger ignores partial batch responses and needs Docker, so tests and
the local stack use this instead: receive up to the batch size, hand the handler a real SQS event,
delete only the records that are not listed in `batchItemFailures`, and leave the failed ones to
reappear after their visibility timeout (so receive counts and the redrive policy work as in AWS).
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aijobs.providers.local_directives import SimulatedCrash

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient
    from mypy_boto3_sqs.type_defs import MessageAttributeValueOutputTypeDef, MessageTypeDef

Handler = Callable[[dict[str, Any], Any], Any]


@dataclass
class LambdaContext:
    """The attributes of a Lambda context object that powertools and our handlers read."""

    function_name: str
    memory_limit_in_mb: int = 512
    function_version: str = "$LATEST"
    timeout_seconds: float = 60.0
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    invoked_function_arn: str = ""
    _deadline: float = field(default=0.0, repr=False)

    def __post_init__(self) -> None:
        if not self.invoked_function_arn:
            self.invoked_function_arn = f"arn:aws:lambda:us-east-1:123456789012:function:{self.function_name}"
        self._deadline = time.monotonic() + self.timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


def sqs_record(message: MessageTypeDef, queue_arn: str) -> dict[str, Any]:
    """One record of a Lambda SQS event, built from a ReceiveMessage result."""
    region = queue_arn.split(":")[3]
    attributes = message.get("Attributes", {})
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": {
            "ApproximateReceiveCount": attributes.get("ApproximateReceiveCount", "1"),
            "SentTimestamp": attributes.get("SentTimestamp", "0"),
            "SenderId": attributes.get("SenderId", ""),
            "ApproximateFirstReceiveTimestamp": attributes.get("ApproximateFirstReceiveTimestamp", "0"),
        },
        "messageAttributes": {
            name: _message_attribute(value) for name, value in message.get("MessageAttributes", {}).items()
        },
        "md5OfBody": message.get("MD5OfBody", ""),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": region,
    }


def _message_attribute(value: MessageAttributeValueOutputTypeDef) -> dict[str, Any]:
    """A ReceiveMessage message attribute as a Lambda SQS event carries it (binary as base64)."""
    entry: dict[str, Any] = {"stringListValues": [], "binaryListValues": [], "dataType": value["DataType"]}
    if "StringValue" in value:
        entry["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        entry["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    return entry


class InvalidBatchResponse(Exception):
    """A partial batch response Lambda would not accept: the whole batch counts as failed."""


def reported_failures(response: Any, batch_ids: list[str]) -> set[str]:
    """The message ids a partial batch response reports as failed, read as Lambda reads it.

    Lambda receives the handler's result as JSON (Lambda developer guide, "Handling errors for an
    SQS event source": success and failure conditions). Complete success: no response (null), an
    empty object, or `batchItemFailures` null or empty. Anything else Lambda would not accept fails
    the whole batch (InvalidBatchResponse; nothing is deleted, all reappear): a result that is not
    JSON or not an object, `batchItemFailures` that is not a list, or an item that is not an object
    with an `itemIdentifier` (a bad key name), whose identifier is null, empty, not a string, or
    names no message of the batch.
    """
    try:
        # What Lambda reads: the result as serialized (a tuple is a list, a set is refused).
        response = json.loads(json.dumps(response))
    except (TypeError, ValueError) as error:
        raise InvalidBatchResponse(f"the response is not JSON: {error}") from error
    if response is None:
        return set()
    if not isinstance(response, dict):
        raise InvalidBatchResponse(f"the response is not a JSON object: {type(response).__name__}")
    items = response.get("batchItemFailures")
    if items is None:
        return set()
    if not isinstance(items, list):
        raise InvalidBatchResponse(f"batchItemFailures is not a list: {type(items).__name__}")
    failed = set()
    for item in items:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or not identifier:
            raise InvalidBatchResponse(f"batchItemFailures item without an itemIdentifier: {item!r}")
        if identifier not in batch_ids:
            raise InvalidBatchResponse(f"itemIdentifier {identifier!r} is not a message of the batch")
        failed.add(identifier)
    return failed


@dataclass
class BatchOutcome:
    received: int
    failed_ids: list[str]
    response: Any = None
    error: BaseException | None = None


@dataclass
class QueueMapping:
    """One queue -> one handler, with the mapping's batch size, window and partial-batch rules."""

    sqs: SQSClient
    queue_url: str
    queue_arn: str
    handler: Handler
    function_name: str
    batch_size: int = 5
    batch_window_seconds: float = 0.0
    enabled: bool = True
    invocations: int = 0
    # Long-poll this long for the first message of a batch (the service long-polls 20 s).
    long_poll_seconds: int = 0

    def receive_batch(self) -> list[MessageTypeDef]:
        """Wait for a first message, then gather up to `batch_size` within the batching window."""
        messages: list[MessageTypeDef] = []
        deadline: float | None = None
        while len(messages) < self.batch_size:
            response = self.sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(10, self.batch_size - len(messages)),
                AttributeNames=["All"],
                MessageAttributeNames=["All"],
                WaitTimeSeconds=0 if messages else self.long_poll_seconds,
            )
            got = response.get("Messages", [])
            messages.extend(got)
            if not messages:
                return messages
            if deadline is None:
                deadline = time.monotonic() + self.batch_window_seconds
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if not got:
                time.sleep(min(0.2, remaining))
        return messages

    def poll_once(self) -> BatchOutcome:
        """One mapping cycle: receive a batch, invoke, delete what succeeded."""
        if not self.enabled:
            return BatchOutcome(received=0, failed_ids=[])
        messages = self.receive_batch()
        if messages and not self.enabled:
            # Disabled during a long poll: no invocation after the pause; the messages are visible
            # again at once (their receive counts, like any receive, went up).
            self.sqs.change_message_visibility_batch(
                QueueUrl=self.queue_url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(messages)
                ],
            )
            return BatchOutcome(received=0, failed_ids=[])
        if not messages:
            return BatchOutcome(received=0, failed_ids=[])
        event = {"Records": [sqs_record(message, self.queue_arn) for message in messages]}
        self.invocations += 1
        try:
            response = self.handler(event, LambdaContext(function_name=self.function_name))
        except (Exception, SimulatedCrash) as error:
            # A failed invocation returns the whole batch to the queue, as in AWS; so does one
            # killed mid-way (`#crash`: like a timeout, it leaves the rows it claimed leased).
            return BatchOutcome(
                received=len(messages), failed_ids=[m["MessageId"] for m in messages], error=error
            )
        ids = [m["MessageId"] for m in messages]
        try:
            failed = reported_failures(response, ids)
        except InvalidBatchResponse as error:
            return BatchOutcome(received=len(messages), failed_ids=ids, response=response, error=error)
        done = [m for m in messages if m["MessageId"] not in failed]
        for start in range(0, len(done), 10):
            chunk = done[start : start + 10]
            self.sqs.delete_message_batch(
                QueueUrl=self.queue_url,
                Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)],
            )
        return BatchOutcome(received=len(messages), failed_ids=sorted(failed), response=response)
