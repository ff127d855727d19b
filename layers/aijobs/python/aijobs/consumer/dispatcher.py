"""The partial-batch consumer: every SQS record is finished on its own (DESIGN.md §4 steps 1-6).

Acknowledge = return normally (the mapping deletes the record); retry = raise, and the record is
listed in `batchItemFailures` after its visibility was set to the back-off delay.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import ValidationError

from aijobs.alerts import Alerts
from aijobs.consumer.control import ConsumerControl
from aijobs.consumer.handlers import JobContext, KindHandler
from aijobs.consumer.retry import RetryPolicy
from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import ProviderAuthError, ProviderError, TransientProviderError, TransitionConflict
from aijobs.observability import (
    METRIC_CONSUMER_PAUSED,
    METRIC_DURATION,
    METRIC_FAILED_FINAL,
    METRIC_POISON,
    METRIC_RETRIED,
    METRIC_SUCCEEDED,
    emit,
    logger,
)
from aijobs.providers.base import Provider, ProviderResult
from aijobs.queues import JobQueues
from aijobs.stage_config import queue_name_from_resource
from aijobs.store.jobs import JobStore
from aijobs.store.results import ResultStore
from aijobs.store.tenants import Directory


class RetryLater(Exception):
    """Raised for a record that must come back: the batch processor reports it as failed."""


class ConsumerPaused(Exception):
    """The kind's consumer was paused in this batch; the remaining records go back untouched."""


@dataclass
class Consumer:
    """Everything one consumer function needs, built once per container (see aijobs.runtime)."""

    stage: str
    kind: str
    directory: Directory
    queues: JobQueues
    results: ResultStore
    provider: Provider
    handlers: dict[str, KindHandler]
    policy: RetryPolicy
    control: ConsumerControl
    alerts: Alerts
    max_attempts: int
    lease: timedelta
    recheck: timedelta
    clock: Callable[[], datetime]
    function_name: str = ""
    _paused: bool = field(default=False, init=False)

    def handle(self, event: dict[str, Any], context: Any) -> dict[str, Any]:
        """The Lambda entry: process a batch, answer with its partial failures."""
        self._paused = False
        self.function_name = getattr(context, "function_name", self.function_name)
        # A batch whose every record failed is reported item by item too, not raised as an
        # invocation error: the outcome is the same and the function's error metric stays clean.
        processor = BatchProcessor(event_type=EventType.SQS, raise_on_entire_batch_failure=False)
        response: dict[str, Any] = dict(
            process_partial_response(
                event=event, record_handler=self.process, processor=processor, context=context
            )
        )
        return response

    def process(self, record: SQSRecord) -> None:
        """Finish one record: return to acknowledge, raise to have it redelivered."""
        queue_name = queue_name_from_resource(self.stage, record.event_source_arn.rsplit(":", 1)[-1])
        handler = self.handlers.get(queue_name or "")
        if queue_name is None or handler is None or queue_name != self.kind:
            # Never fail a whole batch for a queue we do not serve: log and acknowledge.
            logger.warning(
                "record from an unknown queue acknowledged", extra={"eventSourceARN": record.event_source_arn}
            )
            return
        if self._paused:
            raise ConsumerPaused("consumer paused earlier in this batch")
        try:
            message = QueueMessage.model_validate_json(record.body)
        except ValidationError as error:
            # A body we cannot read never becomes readable: finalize by acknowledging, loudly.
            logger.error(
                "poison message acknowledged",
                extra={"messageId": record.message_id, "errors": error.error_count()},
            )
            emit(METRIC_POISON, kind=self.kind)
            return
        with logger.append_context_keys(jobId=message.jobId, userId=message.userId, kind=self.kind):
            logger.set_correlation_id(message.jobId)
            self._process_message(record, message, handler)

    def _process_message(self, record: SQSRecord, message: QueueMessage, handler: KindHandler) -> None:
        table = self.directory.shard_for(message.userId)
        store = JobStore(table, self.clock) if table is not None else None
        job = store.get(message.userId, message.jobId) if store is not None else None
        if store is None or job is None:
            logger.warning("job row missing: message acknowledged")
            return
        if job.kind != self.kind:
            logger.error("job of another kind on this queue acknowledged", extra={"rowKind": job.kind})
            return
        if job.status.is_terminal:
            logger.info("job already finished: duplicate acknowledged", extra={"status": job.status.value})
            return
        if job.status is JobStatus.FAILED_RETRYABLE and job.attempts >= self.max_attempts:
            self._dead_letter(record, job, "attempt budget already spent")
            return
        now = self.clock()
        if job.status is JobStatus.RUNNING and job.awaiting_provider:
            claimed = store.claim_recheck(job, now=now, lease=self.lease)
        else:
            claimed = store.claim(job, now=now, lease=self.lease, max_attempts=self.max_attempts)
        if claimed is None:
            logger.info(
                "job not runnable (live lease or lost race): acknowledged", extra={"status": job.status.value}
            )
            return
        with logger.append_context_keys(attempt=claimed.attempts):
            self._run(record, store, claimed, handler)

    def _run(self, record: SQSRecord, store: JobStore, job: Job, handler: KindHandler) -> None:
        started = time.monotonic()
        try:
            try:
                result = handler(JobContext(job=job, provider=self.provider, results=self.results))
            except ProviderError as error:
                self._failed(record, store, job, error)
                return
            except Exception as error:  # a bug or an SDK failure in our own code: retry like a blip
                logger.exception("attempt crashed")
                internal = TransientProviderError(f"internal error: {type(error).__name__}")
                self._failed(record, store, job, internal, "internal")
                return
            if result.status == "running":
                self._await(store, job, result)
            else:
                self._succeeded(store, job, result, time.monotonic() - started)
        except TransitionConflict:
            # The lease expired and another consumer took the job, or an operator finalized it.
            logger.warning("job changed under this attempt: outcome dropped, message acknowledged")

    def _succeeded(self, store: JobStore, job: Job, result: ProviderResult, seconds: float) -> None:
        result_ref, inline = self.results.write(job.job_id, "main", result.output, result.artifacts)
        store.succeed(
            job,
            now=self.clock(),
            result=inline,
            result_ref=result_ref,
            model=result.model,
            usage=result.usage,
            cost=result.cost,
        )
        emit(METRIC_SUCCEEDED, kind=job.kind)
        emit(METRIC_DURATION, kind=job.kind, value=round(seconds * 1000, 1), unit=MetricUnit.Milliseconds)
        logger.info("job succeeded", extra={"durationMs": round(seconds * 1000, 1), "model": result.model})

    def _await(self, store: JobStore, job: Job, result: ProviderResult) -> None:
        """Provider still running: re-check later with a *new* delayed message, so neither the
        attempt counter nor the original message's receive count is spent on waiting."""
        store.await_provider(job, now=self.clock(), handle=result.handle, hold=self.recheck + self.lease)
        self.queues.send(
            QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind),
            kind=job.kind,
            delay_seconds=int(self.recheck.total_seconds()),
        )
        logger.info("provider still running: re-check scheduled", extra={"checks": job.provider_checks + 1})

    def _failed(
        self,
        record: SQSRecord,
        store: JobStore,
        job: Job,
        error: ProviderError,
        error_class: str | None = None,
    ) -> None:
        error_class = error_class or error.error_class
        extra = {"errorClass": error_class, "status": error.status}
        now = self.clock()
        if not error.retryable:
            store.fail_final(job, now=now, error_class=error_class, message=str(error))
            emit(METRIC_FAILED_FINAL, kind=job.kind, error_class=error_class)
            logger.warning("job failed for good", extra=extra)
            if isinstance(error, ProviderAuthError):
                self._pause(record, error)
            return
        store.fail_retryable(job, now=now, error_class=error_class, message=str(error))
        if job.attempts >= self.max_attempts:
            self._dead_letter(record, job, "attempt budget spent")
            return
        delay = self.policy.delay_seconds(error, job.attempts)
        self.queues.retry_later(job.kind, record.receipt_handle, delay)
        emit(METRIC_RETRIED, kind=job.kind, error_class=error_class)
        logger.warning("attempt failed, retry scheduled", extra={**extra, "delaySeconds": delay})
        raise RetryLater(f"{error_class}: retry in {delay}s")

    def _dead_letter(self, record: SQSRecord, job: Job, reason: str) -> None:
        """Past the attempt cap: hand the message to the DLQ ourselves and acknowledge it, so the
        cap on the row (not SQS's receive count) decides when a job is dead-lettered."""
        self.queues.send_to_dlq(record.body, kind=job.kind)
        logger.error("job moved to the dead-letter queue", extra={"reason": reason, "attempts": job.attempts})

    def _pause(self, record: SQSRecord, error: ProviderAuthError) -> None:
        self._paused = True
        emit(METRIC_CONSUMER_PAUSED, kind=self.kind)
        changed: list[str] = []
        try:
            changed = self.control.set_enabled(self.function_name, record.event_source_arn, enabled=False)
        except Exception:
            logger.exception("could not disable the event-source mapping")
        logger.error("provider rejected our credentials: consumer paused", extra={"mappings": changed})
        self.alerts.publish(
            f"aijobs {self.stage}: {self.kind} consumer paused",
            {
                "kind": self.kind,
                "reason": "provider answered 401/403: fix the provider secret, then resume the consumer",
                "status": error.status,
                "mappingsDisabled": changed,
                "resume": f"aijobs resume {self.kind}",
            },
        )
