"""The webhook consumer: each delivery message is finished on its own (partial batch response).

A message names a job and one of its outcomes. The row decides: a delivery already made, given up,
or held by another attempt is acknowledged without a POST (at-least-once copies are normal). Else
the attempt is claimed on the row, the event signed with the tenant's secrets and POSTed:

- 2xx: delivered.
- 408, 429, 5xx, a timeout or a connection error: retried with exponential back-off through the
  message's visibility, up to `max_attempts`; then given up and the message moved to the DLQ.
- any other answer (4xx, 3xx), or a URL/address the SSRF rules refuse: given up at once.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import BaseModel, ValidationError

from aijobs.domain import Job
from aijobs.observability import log_context, logger
from aijobs.queues import MAX_VISIBILITY_SECONDS, JobQueues
from aijobs.store.tenants import Directory
from aijobs.webhooks.messages import EVENT_TYPES, PENDING, CallbackMessage, delivery_id
from aijobs.webhooks.rows import CallbackRows, Claim
from aijobs.webhooks.secrets import WebhookSecrets
from aijobs.webhooks.signing import DELIVERY_HEADER, EVENT_HEADER, SIGNATURE_HEADER, signature_header
from aijobs.webhooks.transport import Answer, CallbackUrlError, Poster

# The webhook queue inside JobQueues (its URL and DLQ); not a job kind.
WEBHOOK_QUEUE = "webhooks"
_RETRY_STATUSES = frozenset({408, 429})


class DeliveryRetryLater(Exception):
    """Raised for a record that must come back: the batch processor reports it as failed."""


class JobSummary(BaseModel):
    """The job in a webhook event: `GET /jobs/{id}`'s fields without the result itself and its
    download links (they expire, and a retried delivery may arrive hours later): fetch them with
    `GET /jobs/{id}` when the event says the job succeeded."""

    jobId: str
    kind: str
    status: str
    attempts: int
    lastErrorClass: str | None
    lastErrorMessage: str | None
    createdAt: datetime
    finishedAt: datetime | None
    model: str | None
    resultRef: str | None
    parentId: str | None
    part: int | None


def event_body(job: Job, created: datetime) -> bytes:
    """The event a delivery POSTs (its exact bytes are what is signed)."""
    summary = JobSummary(
        jobId=job.job_id, kind=job.kind, status=job.status.value, attempts=job.attempts,
        lastErrorClass=job.last_error_class, lastErrorMessage=job.last_error_message,
        createdAt=job.created_at, finishedAt=job.finished_at, model=job.model, resultRef=job.result_ref,
        parentId=job.parent_id, part=job.part,
    )  # fmt: skip
    event = {
        "id": delivery_id(job),
        "type": EVENT_TYPES[job.status],
        "createdAt": created.isoformat().replace("+00:00", "Z"),
        "data": {"job": summary.model_dump(mode="json")},
    }
    return json.dumps(event, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Backoff:
    """Exponential back-off with equal jitter, honouring Retry-After, capped."""

    base_seconds: int
    max_seconds: int
    rng: random.Random = field(default_factory=random.Random, compare=False)

    def delay_seconds(self, attempt: int, retry_after: float | None = None) -> int:
        ceiling = min(self.max_seconds, self.base_seconds * (1 << max(0, attempt - 1)))
        delay = ceiling / 2 + self.rng.uniform(0, ceiling / 2)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_seconds))
        return min(MAX_VISIBILITY_SECONDS, math.ceil(delay))


@dataclass
class WebhookConsumer:
    directory: Directory
    secrets: WebhookSecrets
    queues: JobQueues
    poster: Poster
    backoff: Backoff
    max_attempts: int
    lease: timedelta
    clock: Callable[[], datetime]

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        return dict(
            process_partial_response(
                event=event, record_handler=self.process, processor=processor, context=context
            )
        )

    def process(self, record: SQSRecord) -> None:
        """Finish one delivery message: return to acknowledge, raise to have it come back."""
        try:
            message = CallbackMessage.model_validate_json(record.body)
        except ValidationError as error:
            logger.error("unreadable webhook message acknowledged", extra={"errors": error.error_count()})
            return
        with log_context(jobId=message.jobId, userId=message.userId, deliveryId=message.deliveryId):
            table = self.directory.shard_for(message.userId)
            job = (
                self.directory.job_store(table, self.clock).get(message.userId, message.jobId)
                if table is not None
                else None
            )
            if table is None or job is None:
                logger.warning("webhook for a missing job acknowledged")
                return
            if (
                job.callback_url is None
                or not job.status.is_terminal
                or delivery_id(job) != message.deliveryId
            ):
                logger.info("stale webhook message acknowledged (the job moved on)")
                return
            if job.callback_state != PENDING:
                logger.info(
                    "webhook already settled: duplicate acknowledged", extra={"state": job.callback_state}
                )
                return
            rows = CallbackRows(table)
            claim = rows.claim(job, now=self.clock(), lease=self.lease)
            if claim is None:
                logger.info("webhook held by another attempt or settled: duplicate acknowledged")
                return
            with log_context(callbackAttempt=claim.job.callback_attempts):
                self._attempt(record, rows, claim)

    def _attempt(self, record: SQSRecord, rows: CallbackRows, claim: Claim) -> None:
        job = claim.job
        assert job.callback_url is not None
        signing = self.secrets.signing_secrets(job.user_id)
        if not signing:
            rows.failed(claim, now=self.clock(), status=None, error="the tenant has no webhook secret")
            logger.warning("webhook given up: the tenant has no signing secret")
            return
        now = self.clock()
        body = event_body(job, now)
        headers = {
            SIGNATURE_HEADER: signature_header(signing, int(now.timestamp()), body),
            DELIVERY_HEADER: delivery_id(job),
            EVENT_HEADER: EVENT_TYPES[job.status],
        }
        try:
            answer = self.poster.post(job.callback_url, body, headers)
        except CallbackUrlError as refused:
            rows.failed(claim, now=self.clock(), status=None, error=f"refused: {refused}")
            logger.warning("webhook refused by the address rules: given up", extra={"reason": str(refused)})
            return
        self._settle(record, rows, claim, answer)

    def _settle(self, record: SQSRecord, rows: CallbackRows, claim: Claim, answer: Answer) -> None:
        now = self.clock()
        extra = {"httpStatus": answer.status, "error": answer.error}
        if answer.status is not None and 200 <= answer.status < 300:
            rows.delivered(claim, now=now, status=answer.status)
            logger.info("webhook delivered", extra=extra)
            return
        error = answer.error or f"HTTP {answer.status}"
        retryable = answer.status is None or answer.status >= 500 or answer.status in _RETRY_STATUSES
        if not retryable:
            rows.failed(claim, now=now, status=answer.status, error=error)
            logger.warning("webhook refused by the receiver: given up", extra=extra)
            return
        attempts = claim.job.callback_attempts
        if attempts >= self.max_attempts:
            rows.failed(claim, now=now, status=answer.status, error=f"{error} (after {attempts} attempts)")
            self.queues.send_to_dlq(record.body, kind=WEBHOOK_QUEUE)
            logger.error("webhook given up after its last attempt: moved to the DLQ", extra=extra)
            return
        delay = self.backoff.delay_seconds(attempts, answer.retry_after)
        rows.retry_later(claim, now=now, status=answer.status, error=error)
        self.queues.retry_later(WEBHOOK_QUEUE, record.receipt_handle, delay)
        logger.warning("webhook attempt failed, retry scheduled", extra={**extra, "delaySeconds": delay})
        raise DeliveryRetryLater(f"{error}: retry in {delay}s")
