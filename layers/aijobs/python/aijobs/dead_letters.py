"""The DLQ consumer: record each dead letter for operators, finalize its job, alert. Never re-queue.

Duplicate deliveries of one dead letter are normal: the job transition is conditional and the
operator entry is keyed by job and remembers the message id, so each dead letter alerts once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from boto3.dynamodb.conditions import Key
from botocore.exceptions import ClientError
from pydantic import BaseModel, ValidationError

from aijobs.alerts import Alerts
from aijobs.domain import Job, QueueMessage
from aijobs.errors import TransitionConflict
from aijobs.observability import METRIC_DEAD_LETTERED, emit, logger
from aijobs.stage_config import queue_name_from_resource
from aijobs.store.jobs import JobStore
from aijobs.store.keys import PK, SK, dead_letter_pk, iso
from aijobs.store.tenants import Directory

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

DEAD_LETTERED = "dead_lettered"


class DeadLetter(BaseModel):
    """One entry of the operator-visible dead-letter list."""

    kind: str
    job_id: str
    user_id: str | None = None
    attempts: int
    last_error_class: str | None = None
    last_error_message: str | None = None
    dead_lettered_at: str
    message_id: str
    receive_count: int
    job_status: str | None = None


@dataclass
class DeadLetterConsumer:
    stage: str
    directory: Directory
    meta: Table
    alerts: Alerts
    clock: Callable[[], datetime]

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
        kind = queue_name_from_resource(self.stage, record.event_source_arn.rsplit(":", 1)[-1])
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
            with logger.append_context_keys(jobId=message.jobId, userId=message.userId, kind=kind):
                job = self._finalize(message, now)
                entry = self._entry(kind, message.jobId, message.userId, job, record, now)
        if self._record(entry):
            emit(METRIC_DEAD_LETTERED, kind=kind)
            logger.error("dead letter recorded", extra=entry.model_dump())
            self.alerts.publish(f"aijobs {self.stage}: {kind} job dead-lettered", entry.model_dump())
        else:
            logger.info("duplicate delivery of a recorded dead letter acknowledged")

    def _finalize(self, message: QueueMessage, now: datetime) -> Job | None:
        table = self.directory.shard_for(message.userId)
        if table is None:
            return None
        store = JobStore(table, self.clock)
        job = store.get(message.userId, message.jobId)
        if job is None:
            return None
        try:
            return store.fail_final(
                job,
                now=now,
                error_class=job.last_error_class or DEAD_LETTERED,
                message=job.last_error_message or "retries exhausted",
                dead_lettered=True,
                own_claim=False,
            )
        except TransitionConflict:
            # Already finished (a duplicate delivery, or the job succeeded after all): keep the row.
            return store.get(message.userId, message.jobId)

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
        )

    def _record(self, entry: DeadLetter) -> bool:
        """Write the operator entry; False when this very message was recorded already."""
        try:
            self.meta.put_item(
                Item={
                    PK: dead_letter_pk(entry.kind),
                    SK: f"JOB#{entry.job_id}",
                    "gsi1pk": dead_letter_pk(entry.kind),
                    "gsi1sk": f"{entry.dead_lettered_at}#{entry.job_id}",
                    **{k: v for k, v in entry.model_dump().items() if v is not None},
                },
                ConditionExpression="attribute_not_exists(pk) OR message_id <> :message_id",
                ExpressionAttributeValues={":message_id": entry.message_id},
            )
        except ClientError as error:
            if error.response["Error"]["Code"] == "ConditionalCheckFailedException":
                return False
            raise
        return True


def list_dead_letters(meta: Table, kind: str, *, limit: int = 50) -> list[DeadLetter]:
    """The operator list of one kind, newest first."""
    response = meta.query(
        IndexName="by_time",
        KeyConditionExpression=Key("gsi1pk").eq(dead_letter_pk(kind)),
        ScanIndexForward=False,
        Limit=limit,
    )
    fields = DeadLetter.model_fields
    return [
        DeadLetter.model_validate({k: v for k, v in item.items() if k in fields})
        for item in response["Items"]
    ]
