"""Sending job references to the per-kind queues. The body is a `QueueMessage` and nothing else.

Every job message carries its user id as `MessageGroupId`. On a standard queue that makes SQS a
fair queue (no queue setting needed): when one tenant floods a kind, SQS delivers the other
tenants' waiting messages first, so their jobs start within their normal latency (docs/concepts/
flow-control.md, "Fairness between tenants"). It changes nothing else: standard queues keep at-least-once,
unordered delivery, and a group never blocks another as it would on a FIFO queue.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from aijobs.domain import QueueMessage

if TYPE_CHECKING:
    from mypy_boto3_sqs import SQSClient

# SQS caps DelaySeconds and a visibility change at these values.
MAX_SEND_DELAY_SECONDS = 900
MAX_VISIBILITY_SECONDS = 12 * 60 * 60
# SendMessageBatch takes at most 10 entries.
SEND_BATCH = 10
# The message attribute on a message our own code moved to a DLQ because the row's attempt budget
# was spent. A dead letter without it was moved by SQS's redrive policy (receives that never
# reached the consumer's code), which says nothing about the job's budget (aijobs.dead_letters).
MOVED_BY = "aijobs-moved-by"
MOVED_BY_CONSUMER = "consumer:attempt-budget-spent"


class UnknownKindError(KeyError):
    pass


class SendBatchError(ConnectionError):
    """SQS refused some entries of a batch (classified as a transient infrastructure failure)."""


class JobQueues:
    """Queue URLs by kind (from the `Q_*` bindings) and the SQS calls made on them."""

    def __init__(
        self,
        sqs: SQSClient,
        urls: Mapping[str, str],
        dlq_urls: Mapping[str, str] | None = None,
        *,
        webhook_url: str | None = None,
    ) -> None:
        self._sqs = sqs
        self._urls = dict(urls)
        self._dlq_urls = dict(dlq_urls or {})
        # The webhook delivery queue (aijobs.webhooks): not a job kind, so not among `kinds`.
        self.webhook_url = webhook_url

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self._urls)

    def url(self, kind: str) -> str:
        try:
            return self._urls[kind]
        except KeyError:
            raise UnknownKindError(kind) from None

    def send(self, message: QueueMessage, *, kind: str, delay_seconds: int = 0) -> str:
        """Send a reference; returns the SQS message id."""
        response = self._sqs.send_message(
            QueueUrl=self.url(kind),
            MessageBody=message.model_dump_json(exclude_none=True),
            DelaySeconds=max(0, min(delay_seconds, MAX_SEND_DELAY_SECONDS)),
            MessageGroupId=message.userId,
        )
        return response["MessageId"]

    def send_batch(self, messages: Sequence[QueueMessage], *, kind: str) -> int:
        """Send references ten per call (SendMessageBatch); returns how many calls were made.

        Any entry SQS refuses fails the whole call with an error, so the caller's step is retried:
        entries that did go out become duplicates, which every consumer handles already.
        """
        url = self.url(kind)
        calls = 0
        for start in range(0, len(messages), SEND_BATCH):
            chunk = messages[start : start + SEND_BATCH]
            response = self._sqs.send_message_batch(
                QueueUrl=url,
                Entries=[
                    {
                        "Id": str(index),
                        "MessageBody": message.model_dump_json(exclude_none=True),
                        "MessageGroupId": message.userId,
                    }
                    for index, message in enumerate(chunk)
                ],
            )
            calls += 1
            failed = response.get("Failed", [])
            if failed:
                codes = sorted({str(entry.get("Code")) for entry in failed})
                raise SendBatchError(
                    f"{len(failed)} of {len(chunk)} messages were not sent to {kind}: {codes}"
                )
        return calls

    def send_webhook(self, body: str) -> bool:
        """Queue a webhook delivery message; False when this function has no webhook queue."""
        if self.webhook_url is None:
            return False
        self._sqs.send_message(QueueUrl=self.webhook_url, MessageBody=body)
        return True

    def send_to_dlq(self, body: str, *, kind: str) -> None:
        """Move a message whose attempt budget is spent to its kind's DLQ (the body is unchanged;
        the `MOVED_BY` attribute says our code moved it, not SQS's redrive)."""
        self._sqs.send_message(
            QueueUrl=self._dlq_urls[kind],
            MessageBody=body,
            MessageAttributes={MOVED_BY: {"DataType": "String", "StringValue": MOVED_BY_CONSUMER}},
        )

    def retry_later(self, kind: str, receipt_handle: str, delay_seconds: int) -> None:
        """Make a received message reappear after `delay_seconds` (it stays in flight until then)."""
        self._sqs.change_message_visibility(
            QueueUrl=self.url(kind),
            ReceiptHandle=receipt_handle,
            VisibilityTimeout=max(0, min(delay_seconds, MAX_VISIBILITY_SECONDS)),
        )
