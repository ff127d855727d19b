"""The DLQ consumer: record each dead letter for operators, finalize its job, alert. It never
re-runs a dead job.

The row decides whether a job is dead, not the message: only a spent attempt budget (the kind's
own) finalizes it. The consumer moves a message to the DLQ itself once the row's budget is spent
(marked `aijobs.queues.MOVED_BY`); SQS's redrive is only the safety net for receives that never
reached the consumer's code. So a dead letter whose job is not finished and still has attempts
left is one of two things:

- a copy our consumer moved, of a job an operator re-ran since (the re-run reset its attempts):
  stale, acknowledged as stray, nothing recorded, no alert;
- a message SQS redrove: the job is alive and never got to run, so its reference goes back to its
  kind's queue, without finalizing, recording or alerting.

A copy of a message whose job succeeded, ended for another reason or is running under a live lease
is acknowledged as stray too. Duplicate deliveries of one dead letter are normal: the job
transition is conditional and the operator entry is keyed by job and remembers which
dead-lettering it recorded (the row's `finished_at`), so each dead letter alerts once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from botocore.exceptions import ClientError
from pydantic import ValidationError

from aijobs.alerts import Alerts
from aijobs.bindings import queue_name_of
from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import TransitionConflict
from aijobs.job_end import job_ended
from aijobs.observability import METRIC_DEAD_LETTERED, emit, log_context, logger
from aijobs.queues import MOVED_BY, MOVED_BY_CONSUMER, JobQueues
from aijobs.store.dead_letter_records import DeadLetter
from aijobs.store.jobs import JobStore
from aijobs.store.keys import PK, SK, dead_letter_pk, iso
from aijobs.store.tenants import Directory

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

DEAD_LETTERED = "dead_lettered"
# What a dead letter means for its job (`_decide`).
STRAY, SEND_BACK, FINALIZE = "stray", "send_back", "finalize"


@dataclass
class DeadLetterConsumer:
    stage: str
    directory: Directory
    meta: Table
    alerts: Alerts
    clock: Callable[[], datetime]
    # DLQ name -> kind (DEAD_LETTER_QUEUES): a letter from any other queue is not ours.
    kinds_by_queue: dict[str, str]
    # Kind -> its attempt budget (KIND_LIMITS): only a spent one finalizes a job.
    max_attempts: dict[str, int]
    # Every kind's queue: a redriven job with attempts left goes back to its own; a dead child may
    # be its parent's last, whose merge it queues.
    queues: JobQueues

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        # A batch whose every record failed is reported item by item too, not raised as an
        # invocation error: the outcome is the same and the function's error metric stays clean.
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        return dict(
            process_partial_response(
                event=event, record_handler=self.process, processor=processor, context=context
            )
        )

    def process(self, record: SQSRecord) -> None:
        kind = self.kinds_by_queue.get(queue_name_of(record.event_source_arn))
        if kind is None:
            logger.warning(
                "dead letter from an unknown queue acknowledged",
                extra={"eventSourceARN": record.event_source_arn},
            )
            return
        now = self.clock()
        try:
            message = QueueMessage.model_validate_json(record.body)
        except ValidationError:
            # Keep no copy of an unreadable body (it may hold anything); its digest identifies it.
            digest = hashlib.sha256(record.body.encode()).hexdigest()[:16]
            entry = self._entry(kind, f"unreadable-{digest}", None, None, record, now)
        else:
            with log_context(
                jobId=message.jobId, userId=message.userId, kind=kind, correlation_id=message.jobId
            ):
                store, job = self._load(message)
                if store is not None and job is not None:
                    action, reason = _decide(job, now, self.max_attempts[kind], _moved_by_consumer(record))
                    extra = {"reason": reason, "status": job.status.value, "attempts": job.attempts}
                    if action == STRAY:
                        # The row is the source of truth: this copy did not kill the job.
                        logger.info("stray dead letter acknowledged", extra=extra)
                        return
                    if action == SEND_BACK:
                        self._send_back(store, job, message, kind, now, extra)
                        return
                    job = self._finalize(store, job, now)
                entry = self._entry(kind, message.jobId, message.userId, job, record, now)
        if self._record(entry):
            emit(METRIC_DEAD_LETTERED, kind=kind)
            logger.error("dead letter recorded", extra=entry.model_dump())
            self.alerts.publish(f"aijobs {self.stage}: {kind} job dead-lettered", entry.model_dump())
        else:
            logger.info("duplicate delivery of a recorded dead letter acknowledged")

    def _load(self, message: QueueMessage) -> tuple[JobStore | None, Job | None]:
        table = self.directory.shard_for(message.userId)
        if table is None:
            return None, None
        store = self.directory.job_store(table, self.clock)
        return store, store.get(message.userId, message.jobId)

    def _send_back(
        self,
        store: JobStore,
        job: Job,
        message: QueueMessage,
        kind: str,
        now: datetime,
        extra: dict[str, Any],
    ) -> None:
        """A live job SQS dead-lettered before it could run: its reference goes back to its kind's
        queue (no attempt spent, nothing recorded). The conditional touch lets one delivery of the
        dead letter send it, and tells the sweeper a fresh copy is on its way."""
        if not store.touch(job, now=now):
            logger.info("stray dead letter acknowledged", extra={**extra, "reason": "job changed meanwhile"})
            return
        self.queues.send(message, kind=kind)
        logger.warning("redriven job sent back to its queue", extra=extra)

    def _finalize(self, store: JobStore, job: Job, now: datetime) -> Job | None:
        if job.status is JobStatus.FAILED_FINAL:
            return job  # dead-lettered already: a redelivery, recorded once below
        try:
            finished = store.fail_final(
                job,
                now=now,
                error_class=job.last_error_class or DEAD_LETTERED,
                message=job.last_error_message or "retries exhausted",
                dead_lettered=True,
                own_claim=False,
            )
            job_ended(store, self.queues, finished, now)
            return finished
        except TransitionConflict:
            # Finished meanwhile (a duplicate delivery, or the job succeeded after all): keep the row.
            return store.get(job.user_id, job.job_id)

    @staticmethod
    def _entry(
        kind: str, job_id: str, user_id: str | None, job: Job | None, record: SQSRecord, now: datetime
    ) -> DeadLetter:
        return DeadLetter(
            kind=kind,
            job_id=job_id,
            user_id=user_id,
            attempts=job.attempts if job else 0,
            last_error_class=job.last_error_class if job else None,
            last_error_message=job.last_error_message if job else None,
            dead_lettered_at=iso(now),
            message_id=record.message_id,
            receive_count=int(record.attributes.approximate_receive_count or 0),
            job_status=job.status.value if job else None,
            job_finished_at=iso(job.finished_at) if job and job.finished_at else None,
            parent_id=job.parent_id if job else None,
        )

    def _record(self, entry: DeadLetter) -> bool:
        """Write the operator entry; False when this dead-lettering was recorded already (the same
        message again, or another copy of it: same job, same `finished_at`)."""
        if entry.job_finished_at is not None:
            condition = "attribute_not_exists(pk) OR job_finished_at <> :finished"
            values = {":finished": entry.job_finished_at}
        else:
            condition = "attribute_not_exists(pk) OR message_id <> :message_id"
            values = {":message_id": entry.message_id}
        try:
            self.meta.put_item(
                Item={
                    PK: dead_letter_pk(entry.kind),
                    SK: f"JOB#{entry.job_id}",
                    "gsi1pk": dead_letter_pk(entry.kind),
                    "gsi1sk": f"{entry.dead_lettered_at}#{entry.job_id}",
                    **{k: v for k, v in entry.model_dump().items() if v is not None},
                },
                ConditionExpression=condition,
                ExpressionAttributeValues=values,
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True


def _moved_by_consumer(record: SQSRecord) -> bool:
    """Whether our consumer moved this message here (its attempt budget spent), not SQS's redrive."""
    mark = (record.get("messageAttributes") or {}).get(MOVED_BY) or {}
    return bool(mark.get("stringValue") == MOVED_BY_CONSUMER)


def _decide(job: Job, now: datetime, max_attempts: int, moved_by_consumer: bool) -> tuple[str, str]:
    """What a dead letter means for its job, and why: STRAY (acknowledge, nothing else), SEND_BACK
    (the job is alive: its reference goes back to its queue) or FINALIZE (the job is dead).

    Only the attempt budget on the row dead-letters a job; a copy of a message whose job succeeded,
    finished for another reason, or is being worked on right now is noise.
    """
    if job.status is JobStatus.SUCCEEDED:
        return STRAY, "job succeeded"
    if job.status is JobStatus.FAILED_FINAL:
        if not job.dead_lettered:
            return STRAY, "job finished for another reason"
        return FINALIZE, "job dead-lettered already"  # a redelivery: recorded once
    if job.status is JobStatus.RUNNING and (
        job.awaiting_provider or (job.lease_expires_at is not None and job.lease_expires_at > now)
    ):
        return STRAY, "job is running under a live lease"
    if job.attempts >= max_attempts:
        return FINALIZE, "attempt budget spent"
    if moved_by_consumer:
        # Our consumer moves a message only once the budget is spent; budget left now means an
        # operator re-ran the job since (a re-run resets it), and the re-run sent its own message.
        return STRAY, "job re-run since it was dead-lettered"
    return SEND_BACK, "redriven by SQS with attempts left"
