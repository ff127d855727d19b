"""The partial-batch consumer: every SQS record is finished on its own (DESIGN.md §4 steps 1-6).

Acknowledge = return normally (the mapping deletes the record); retry = raise, and the record is
listed in `batchItemFailures` after its visibility was set to the back-off delay.
"""

from __future__ import annotations

import math
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
from aijobs.errors import CANCELLED, ProviderAuthError, ProviderError, TransitionConflict, classify_exception
from aijobs.observability import (
    METRIC_CONSUMER_PAUSED,
    METRIC_DURATION,
    METRIC_FAILED_FINAL,
    METRIC_MODEL_SPEND,
    METRIC_POISON,
    METRIC_RETRIED,
    METRIC_SUCCEEDED,
    emit,
    log_context,
    logger,
)
from aijobs.pricing import spend
from aijobs.providers.base import Provider, ProviderResult
from aijobs.queues import JobQueues
from aijobs.stage_config import queue_name_of
from aijobs.store.jobs import PHASE_MERGE, JobKey, JobStore
from aijobs.store.keys import is_child_id
from aijobs.store.results import ResultStore
from aijobs.store.tenants import Directory
from aijobs.workflows.fanin import notify_parent


class RetryLater(Exception):
    """Raised for a record that must come back: the batch processor reports it as failed."""


# How long the rest of a batch waits after a pause: longer than disabling a mapping takes.
PAUSE_RESEND_DELAY_SECONDS = 300
# A retry that arrives this close to its due time runs (SQS and Lambda clocks are not one clock).
RETRY_TOLERANCE = timedelta(seconds=1)
# A workflow child in these statuses is not run once its parent has ended.
_NOT_STARTED = (JobStatus.QUEUED, JobStatus.FAILED_RETRYABLE)


def _runnable_now(job: Job, now: datetime) -> bool:
    """Whether a claim could take the row now (were its attempt budget not spent)."""
    if job.status is JobStatus.RUNNING:
        return not job.awaiting_provider and job.lease_expires_at is not None and job.lease_expires_at < now
    return job.status in (JobStatus.QUEUED, JobStatus.FAILED_RETRYABLE)


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
    # How long a workflow parent waits for its children before the sweeper looks at it again.
    hold: timedelta = timedelta(minutes=15)
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
        # Its own queue is the one in its environment (QUEUE_URL): names are never parsed for a kind.
        own_queue = queue_name_of(self.queues.url(self.kind))
        handler = self.handlers.get(self.kind)
        if handler is None or queue_name_of(record.event_source_arn) != own_queue:
            # Never fail a whole batch for a queue we do not serve: log and acknowledge.
            logger.warning(
                "record from an unknown queue acknowledged", extra={"eventSourceARN": record.event_source_arn}
            )
            return
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
        with log_context(
            jobId=message.jobId, userId=message.userId, kind=self.kind, correlation_id=message.jobId
        ):
            if self._paused:
                # Not an attempt: a fresh copy waits in the queue for the resumed consumer, so the
                # pause costs this message none of SQS's receive count. Delayed, so that it is not
                # picked up by a poller before disabling the mapping has taken effect.
                self._resend(message, PAUSE_RESEND_DELAY_SECONDS, "consumer paused earlier in this batch")
                return
            try:
                claimed = self._claim(record, message)
            except Exception:
                # Our own dependencies failed before any attempt started (a throttled table, a
                # network blip): a fresh delayed copy keeps the row's attempt budget the only thing
                # that can dead-letter the job; returning the record would spend a receive.
                logger.exception("could not load or claim the job: message re-sent")
                self._resend(message, self.policy.base_delay_seconds, "load or claim failed")
                return
            if claimed is None:
                return
            store, job = claimed
            with log_context(attempt=job.attempts):
                self._run(record, store, job, handler)

    def _claim(self, record: SQSRecord, message: QueueMessage) -> tuple[JobStore, Job] | None:
        """Decide what this delivery means for the row; the claimed row, or None to acknowledge."""
        table = self.directory.shard_for(message.userId)
        if table is None:
            logger.warning("job row missing: message acknowledged")
            return None
        store = JobStore(table, self.clock, buckets=self.directory.buckets)
        job: Job | None
        if message.check is None and not is_child_id(message.jobId):
            # The common case in one call: claim straight from the message. Only when that fails
            # does the row (returned by the failed condition, not read again) say what to do. A
            # re-check needs its row's id first, a workflow child its parent's state.
            claimed, job = store.claim_delivered(
                JobKey(message.userId, message.jobId, self.kind),
                now=self.clock(),
                lease=self.lease,
                max_attempts=self.max_attempts,
                due_tolerance=RETRY_TOLERANCE,
            )
            if claimed is not None:
                return store, claimed
        else:
            job = store.get(message.userId, message.jobId)
        if job is None:
            logger.warning("job row missing: message acknowledged")
            return None
        if job.kind != self.kind:
            logger.error("job of another kind on this queue acknowledged", extra={"rowKind": job.kind})
            return None
        if job.status.is_terminal:
            logger.info("job already finished: duplicate acknowledged", extra={"status": job.status.value})
            return None
        now = self.clock()
        if job.parent_id is not None and job.status in _NOT_STARTED and self._parent_finished(store, job):
            return None
        if job.status is JobStatus.RUNNING and job.awaiting_provider:
            if message.check is None or message.check != job.recheck_id:
                logger.info("not the job's pending re-check (a duplicate or stale copy): acknowledged")
                return None
            # A workflow's merge step arrives as a re-check but is an attempt of its own budget.
            claimed = store.claim_recheck(
                job,
                now=now,
                lease=self.lease,
                check=message.check,
                counts_as_attempt=job.phase == PHASE_MERGE,
            )
        else:
            due = job.next_attempt_at if job.status is JobStatus.FAILED_RETRYABLE else None
            if due is not None and now + RETRY_TOLERANCE < due:
                # Early (a duplicate, a sweeper re-send): wait for the back-off or Retry-After.
                self._resend(message, math.ceil((due - now).total_seconds()), "retry not due yet")
                return None
            if job.attempts >= self.max_attempts and _runnable_now(job, now):
                self._dead_letter(record, job, "attempt budget already spent")
                return None
            claimed = store.claim(job, now=now, lease=self.lease, max_attempts=self.max_attempts)
        if claimed is None:
            logger.info(
                "job not runnable (live lease or lost race): acknowledged", extra={"status": job.status.value}
            )
            return None
        return store, claimed

    def _parent_finished(self, store: JobStore, child: Job) -> bool:
        """A child whose parent already ended (cancelled, or failed by its policy) is never run:
        it is finalized as `cancelled` (and counted) instead."""
        assert child.parent_id is not None
        parent = store.get(child.user_id, child.parent_id)
        if parent is not None and not parent.status.is_terminal:
            return False
        try:
            finished = store.fail_final(
                child, now=self.clock(), error_class=CANCELLED,
                message="not run: its parent job had already finished", own_claim=False,
            )  # fmt: skip
        except TransitionConflict:
            return True
        emit(METRIC_FAILED_FINAL, kind=child.kind, error_class=CANCELLED)
        notify_parent(store, self.queues, finished, self.clock())
        logger.info("child of a finished parent not run", extra={"parentId": child.parent_id})
        return True

    def _run(self, record: SQSRecord, store: JobStore, job: Job, handler: KindHandler) -> None:
        started = time.monotonic()
        try:
            try:
                result = handler(
                    JobContext(
                        job=job, provider=self.provider, results=self.results, store=store,
                        queues=self.queues, clock=self.clock, lease_seconds=self.lease.total_seconds(),
                        hold_seconds=self.hold.total_seconds(),
                    )
                )  # fmt: skip
            except ProviderError as error:
                self._failed(record, store, job, error)
                return
            except Exception as error:
                # Not the provider: an infrastructure blip retries, anything deterministic (bad
                # input bytes, a bug) would fail the same way every time and is final at once.
                logger.exception("attempt failed outside the provider")
                classified = classify_exception(error)
                self._failed(record, store, job, classified)
                return
            if result is None:
                return  # a workflow parent parked itself to wait for its children
            if result.status == "running":
                self._await(store, job, result)
            else:
                self._succeeded(store, job, result, time.monotonic() - started)
        except TransitionConflict:
            # The lease expired and another consumer took the job, or an operator finalized it.
            logger.warning("job changed under this attempt: outcome dropped, message acknowledged")

    def _succeeded(self, store: JobStore, job: Job, result: ProviderResult, seconds: float) -> None:
        result_ref, inline = self.results.write(
            job.job_id, "main", result.output, result.artifacts, result.stored_artifacts
        )
        # The adapter's own cost wins; else the usage is priced from the model price table.
        spent = spend(
            self.provider.name,
            result.model or job.model,
            result.usage,
            given=result.cost,
            options=job.options,
        )
        finished = store.succeed(
            job,
            now=self.clock(),
            result=inline,
            result_ref=result_ref,
            model=result.model,
            usage=result.usage,
            cost=spent.usd,
        )
        notify_parent(store, self.queues, finished, self.clock())
        emit(METRIC_SUCCEEDED, kind=job.kind)
        emit(METRIC_DURATION, kind=job.kind, value=round(seconds * 1000, 1), unit=MetricUnit.Milliseconds)
        if spent.usd is not None:
            emit(
                METRIC_MODEL_SPEND, kind=job.kind, value=spent.usd, unit=MetricUnit.NoUnit, model=spent.model
            )
        logger.info(
            "job succeeded",
            extra={"durationMs": round(seconds * 1000, 1), "model": result.model, "costUsd": spent.usd},
        )

    def _await(self, store: JobStore, job: Job, result: ProviderResult) -> None:
        """Provider still running: re-check later with a *new* delayed message, so neither the
        attempt counter nor the original message's receive count is spent on waiting."""
        waiting = store.await_provider(
            job, now=self.clock(), handle=result.handle, hold=self.recheck + self.lease
        )
        self.queues.send(
            QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind, check=waiting.recheck_id),
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
            finished = store.fail_final(job, now=now, error_class=error_class, message=str(error))
            notify_parent(store, self.queues, finished, self.clock())
            emit(METRIC_FAILED_FINAL, kind=job.kind, error_class=error_class)
            logger.warning("job failed for good", extra=extra)
            if isinstance(error, ProviderAuthError):
                self._pause(record, error)
            return
        if job.attempts >= self.max_attempts:
            store.fail_retryable(job, now=now, error_class=error_class, message=str(error))
            self._dead_letter(record, job, "attempt budget spent")
            return
        delay = self.policy.delay_seconds(error, job.attempts)
        # The row remembers when the retry is due, so a duplicate or a sweeper re-send cannot run
        # it before the back-off or the provider's Retry-After.
        store.fail_retryable(
            job, now=now, error_class=error_class, message=str(error), retry_at=now + timedelta(seconds=delay)
        )
        self.queues.retry_later(job.kind, record.receipt_handle, delay)
        emit(METRIC_RETRIED, kind=job.kind, error_class=error_class)
        logger.warning("attempt failed, retry scheduled", extra={**extra, "delaySeconds": delay})
        raise RetryLater(f"{error_class}: retry in {delay}s")

    def _resend(self, message: QueueMessage, delay_seconds: int, reason: str) -> None:
        """Acknowledge this delivery and put a fresh copy on the queue: spends no receive count.
        A copy may wait at most SQS's 15 minutes; a longer wait repeats this when it arrives."""
        self.queues.send(message, kind=self.kind, delay_seconds=delay_seconds)
        logger.info(
            "message re-sent without an attempt", extra={"reason": reason, "delaySeconds": delay_seconds}
        )

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
                "reason": "the provider refused our credentials or configuration (401/403, model access not "
                "granted, unknown model): fix the secret, the IAM role or the model access, then resume "
                "the consumer",
                "error": str(error)[:300],
                "status": error.status,
                "mappingsDisabled": changed,
                "resume": f"aijobs resume {self.kind}",
            },
        )
