"""The partial-batch consumer: every SQS record is finished on its own (docs/design.md §4 steps 1-6).

Acknowledge = return normally (the mapping deletes the record); retry = raise, and the record is
listed in `batchItemFailures` after its visibility was set to the back-off delay.
"""

from __future__ import annotations

import math
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
from pydantic import ValidationError

from aijobs.alerts import Alerts
from aijobs.bindings import queue_name_of
from aijobs.consumer.control import ConsumerControl
from aijobs.consumer.handlers import KindHandler
from aijobs.consumer.meter import ThrottleMeter
from aijobs.consumer.retry import RetryPolicy
from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import (
    CANCELLED,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransitionConflict,
    classify_exception,
)
from aijobs.job_end import job_ended
from aijobs.kinds.context import JobContext
from aijobs.observability import (
    METRIC_CONSUMER_PAUSED,
    METRIC_DURATION,
    METRIC_FAILED_FINAL,
    METRIC_MODEL_SPEND,
    METRIC_POISON,
    METRIC_RETRIED,
    METRIC_SPEND_HELD,
    METRIC_SUCCEEDED,
    METRIC_TENANT_HELD,
    emit,
    log_context,
    logger,
)
from aijobs.pricing import spend
from aijobs.providers.base import Provider, ProviderResult
from aijobs.queues import MAX_SEND_DELAY_SECONDS, JobQueues
from aijobs.spend import HOLD_SECONDS, SpendBrake, Verdict
from aijobs.store.job_items import PHASE_MERGE, JobKey
from aijobs.store.jobs import JobStore
from aijobs.store.keys import is_child_id
from aijobs.store.results import ResultStore
from aijobs.store.tenants import Directory

if TYPE_CHECKING:
    from aijobs.store.model_alerts import ModelAlerts


class RetryLater(Exception):
    """Raised for a record that must come back: the batch processor reports it as failed."""


# How long the rest of a batch waits after a pause: longer than disabling a mapping takes.
PAUSE_RESEND_DELAY_SECONDS = 300
# A retry that arrives this close to its due time runs (SQS and Lambda clocks are not one clock).
RETRY_TOLERANCE = timedelta(seconds=1)
# A workflow child in these statuses is not run once its parent has ended.
_NOT_STARTED = (JobStatus.QUEUED, JobStatus.FAILED_RETRYABLE)


def parent_stopping(parent: Job) -> bool:
    """A workflow parent whose children not started yet must not start (see `_parent_finished`)."""
    return (
        parent.status.is_terminal
        or parent.cancel_requested_at is not None
        or parent.children_failed > parent.failures_allowed
    )


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
    handlers: Mapping[str, KindHandler]
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
    # Per-tenant fairness: a tenant's jobs of this kind running at once (0: no cap; a tenant's own
    # cap in its profile wins) and how long a job over the cap waits before it is tried again.
    tenant_max_running: int = 0
    tenant_hold: timedelta = timedelta(seconds=30)
    # Attempts and 429s of this kind for the adaptive concurrency cron (None: not recorded).
    meter: ThrottleMeter | None = None
    # The daily spend brake (aijobs.spend); None: the stage sets no SPEND_DAILY_CAP_USD.
    spend: SpendBrake | None = None
    # The kind's default model (its plan), which a job without a `model` of its own runs on.
    model: str | None = None
    # Once-per-model alerts of a model that can no longer be called (None: not recorded).
    model_alerts: ModelAlerts | None = None
    # The kind's fallback models, each with its provider (aijobs.kinds.run.run_chain).
    fallbacks: tuple[tuple[Provider, str], ...] = ()
    _paused: bool = field(default=False, init=False)
    # The (day, cap) whose spend alert this container knows was sent.
    _spend_alerted: tuple[str, Decimal] | None = field(default=None, init=False)
    # The unavailable models this container knows were alerted.
    _models_alerted: set[str] = field(default_factory=set, init=False)

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
        if self.meter is not None:
            self.meter.flush()
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
                if self._tenant_at_cap(message):
                    return
                if self._spend_held(message):
                    return
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

    def _tenant_at_cap(self, message: QueueMessage) -> bool:
        """Per-tenant fairness (Inngest's concurrency key, keyed by tenant): a job whose tenant
        already runs its cap of this kind is not started. Its row is marked held, as the spend
        brake marks its holds, and its message re-sent delayed (no attempt, no receive count spent,
        never dead-lettered) and acknowledged; True if so. The mark keeps the sweeper from taking
        the row for lost, and drops any other copy that arrives while it is held, so a held job
        keeps one message however long it waits.

        Only a fresh start is held: a provider re-check belongs to a job already counted. With no
        cap configured this costs nothing but the cached profile read. The count is one query of
        the tenant's own index partition, so concurrent consumers may overshoot the cap by their
        number less one when jobs arrive together, for as long as those jobs run
        (docs/concepts/flow-control.md#fairness-between-tenants).
        """
        if message.check is not None or is_child_id(message.jobId):
            return False
        profile = self.directory.profile(message.userId)
        cap = profile.running_cap(self.tenant_max_running) if profile is not None else 0
        if cap <= 0:
            return False
        table = self.directory.shard_for(message.userId)
        assert table is not None  # the profile exists
        store = self.directory.job_store(table, self.clock)
        running = store.count_running(message.userId, self.kind, now=self.clock())
        if running < cap:
            return False
        # Spread over up to half as long again (by job id, so a flood does not return in one wave);
        # never past SQS's longest delay, or the copy would come back before its mark ends.
        hold = int(self.tenant_hold.total_seconds())
        spread = zlib.crc32(message.jobId.encode()) % (hold // 2 + 1)
        delay = min(hold + spread, MAX_SEND_DELAY_SECONDS)
        now = self.clock()
        key = JobKey(message.userId, message.jobId, self.kind)
        if not store.hold(key, now=now, until=now + timedelta(seconds=delay)):
            # Another copy holds it already (a duplicate, a sweeper re-send), or it is not waiting.
            logger.info("job not held: a copy waits already, or it is not queued; acknowledged")
            return True
        emit(METRIC_TENANT_HELD, kind=self.kind)
        self._resend(message, delay, f"tenant at its running cap ({running} of {cap})")
        return True

    def _spend_held(self, message: QueueMessage) -> bool:
        """The spend brake: past the stage's daily cap (or its tenant's), a job is not started. Its
        row is marked held and its message re-sent delayed (no attempt, no receive count, never
        dead-lettered) and acknowledged; True if so. A provider re-check is never held: that
        spend is made already."""
        if self.spend is None or message.check is not None:
            return False
        profile = self.directory.profile(message.userId)
        shard = self.directory.shard_for(message.userId) if profile is not None else None
        verdict = self.spend.verdict(message.userId, shard, profile.spend_cap_usd if profile else None)
        if verdict is None:
            return False
        if verdict.stage:
            self._spend_alert(verdict)
        if shard is None:
            return False  # an unknown user: the claim acknowledges it
        now = self.clock()
        key = JobKey(message.userId, message.jobId, self.kind)
        store = self.directory.job_store(shard, self.clock)
        if not store.hold(key, now=now, until=now + timedelta(seconds=HOLD_SECONDS)):
            # Another copy holds it already (a duplicate, a sweeper re-send), or it is not waiting.
            logger.info("job not held: a copy waits already, or it is not queued; acknowledged")
            return True
        emit(METRIC_SPEND_HELD, kind=self.kind)
        self._resend(message, HOLD_SECONDS, verdict.reason)
        return True

    def _spend_alert(self, verdict: Verdict) -> None:
        """Once per day and cap (a conditional marker; the first consumer to see it alerts)."""
        assert self.spend is not None
        day = self.spend.day()
        if self.spend.state().alerted_cap == verdict.cap or self._spend_alerted == (day, verdict.cap):
            return  # known to be sent already: no write per held job
        if not self.spend.records.mark_alerted(day, verdict.cap, self.clock()):
            self._spend_alerted = (day, verdict.cap)
            return
        try:
            self.alerts.publish(
                f"aijobs {self.stage}: daily model spend cap reached",
                {
                    "day": day,
                    "spentUsd": str(verdict.spent),
                    "capUsd": str(verdict.cap),
                    "resetsAt": self.spend.resets_at().isoformat(),
                    "reason": "jobs are held (not started, no attempt spent) until the day ends, the cap is "
                    "raised or the held jobs are released",
                    "raise": "aijobs spend cap --usd <N>",
                    "release": "aijobs spend release",
                },
            )
        except Exception:
            self.spend.records.withdraw_alert(day, verdict.cap)
            raise
        self._spend_alerted = (day, verdict.cap)
        logger.warning("daily spend cap reached: jobs held", extra={"capUsd": str(verdict.cap)})

    def _claim(self, record: SQSRecord, message: QueueMessage) -> tuple[JobStore, Job] | None:
        """Decide what this delivery means for the row; the claimed row, or None to acknowledge."""
        table = self.directory.shard_for(message.userId)
        if table is None:
            logger.warning("job row missing: message acknowledged")
            return None
        store = self.directory.job_store(table, self.clock)
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
        """A child whose parent ended or is ending (cancelled by its owner, or more children failed
        than its policy allows) is never run: it is finalized as `cancelled` (and counted), so
        the parent settles once its running children are done."""
        assert child.parent_id is not None
        parent = store.get(child.user_id, child.parent_id)
        if parent is not None and not parent_stopping(parent):
            return False
        try:
            finished = store.fail_final(
                child, now=self.clock(), error_class=CANCELLED,
                message="not run: its parent job had already finished", own_claim=False,
            )  # fmt: skip
        except TransitionConflict:
            return True
        emit(METRIC_FAILED_FINAL, kind=child.kind, error_class=CANCELLED)
        self._ended(store, finished)
        logger.info("child of a finished parent not run", extra={"parentId": child.parent_id})
        return True

    def _run(self, record: SQSRecord, store: JobStore, job: Job, handler: KindHandler) -> None:
        started = time.monotonic()
        if self.meter is not None:
            self.meter.count()
        try:
            try:
                result = handler(
                    JobContext(
                        job=job, provider=self.provider, results=self.results, store=store,
                        queues=self.queues, clock=self.clock, lease_seconds=self.lease.total_seconds(),
                        hold_seconds=self.hold.total_seconds(), model=self.model, fallbacks=self.fallbacks,
                    )
                )  # fmt: skip
            except ProviderError as error:
                if self.meter is not None and isinstance(error, ThrottledError):
                    self.meter.count_throttle()
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
            if self._end_cancelled(store, job):
                return
            # The lease expired and another consumer took the job, or an operator finalized it.
            logger.warning("job changed under this attempt: outcome dropped, message acknowledged")

    def _end_cancelled(self, store: JobStore, job: Job) -> bool:
        """The owner cancelled the job while this attempt ran and the attempt failed: the job ends
        `cancelled`, refunded (a success would have been kept and charged), never retried."""
        current = store.get(job.user_id, job.job_id)
        if (
            current is None
            or current.status is not JobStatus.RUNNING
            or current.claim_id != job.claim_id
            or current.cancel_requested_at is None
        ):
            return False
        try:
            finished = store.fail_final(
                current, now=self.clock(), error_class=CANCELLED,
                message="cancelled by its owner while an attempt ran; the attempt failed: refunded",
            )  # fmt: skip
        except TransitionConflict:
            return False
        self._ended(store, finished)
        emit(METRIC_FAILED_FINAL, kind=job.kind, error_class=CANCELLED)
        logger.info("cancelled job's attempt failed: job cancelled and refunded")
        return True

    def _succeeded(self, store: JobStore, job: Job, result: ProviderResult, seconds: float) -> None:
        result_ref, inline = self.results.write(
            job.job_id, "main", result.output, result.artifacts, result.stored_artifacts
        )
        # The adapter's own cost wins; else the usage is priced from the model price table.
        spent = spend(
            result.provider or self.provider.name,
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
            # The day's spend counters move in the same transaction as the row (counted once).
            extra_writes=self._spend_writes(store, job, spent.usd),
        )
        self._ended(store, finished)
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
        # A fallback answered, but the operator must still move off the models that are gone.
        self._alert_passed_over(result.unavailable)

    def _ended(self, store: JobStore, finished: Job) -> None:
        """What follows each final transition this consumer makes (aijobs.job_end)."""
        job_ended(store, self.queues, finished, self.clock())

    def _spend_writes(self, store: JobStore, job: Job, cost: float | None) -> list[dict[str, Any]]:
        if self.spend is None or not cost:
            return []
        return self.spend.count_writes(
            job_id=job.job_id, user_id=job.user_id, cost=cost, shard_name=store.table_name
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
            earlier: tuple[str, ...] = ()
            if isinstance(error, ModelUnavailableError):
                # Every model of the kind's chain was tried (aijobs.kinds.run.run_chain): the error
                # names the last one, `earlier` the ones before it, each alerted once.
                earlier = error.earlier
                error = error.named(job.model or self.model).for_job(job.kind)
            finished = store.fail_final(job, now=now, error_class=error_class, message=str(error))
            self._ended(store, finished)
            emit(METRIC_FAILED_FINAL, kind=job.kind, error_class=error_class)
            logger.warning("job failed for good", extra=extra)
            if isinstance(error, ProviderAuthError):
                self._pause(record, error)
            elif isinstance(error, ModelUnavailableError):
                # Never a pause: the credentials are fine, and the kind's other models still work.
                self._alert_passed_over(earlier)
                self._model_alert(error)
            return
        if job.attempts >= self.max_attempts:
            store.fail_retryable(
                job, now=now, error_class=error_class, message=str(error), task_ended=error.task_ended
            )
            self._dead_letter(record, job, "attempt budget spent")
            return
        delay = self.policy.delay_seconds(error, job.attempts)
        # The row remembers when the retry is due, so a duplicate or a sweeper re-send cannot run
        # it before the back-off or the provider's Retry-After.
        store.fail_retryable(
            job,
            now=now,
            error_class=error_class,
            message=str(error),
            retry_at=now + timedelta(seconds=delay),
            # A provider task that ended Failed is dead: the retry starts a new one.
            task_ended=error.task_ended,
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

    def _alert_passed_over(self, models: tuple[str, ...]) -> None:
        """Alert (once each) the unavailable models an attempt moved past to a fallback model."""
        for model in models:
            self._model_alert(
                ModelUnavailableError(f"{model} is unavailable; the attempt moved on", model=model)
            )

    def _model_alert(self, error: ModelUnavailableError) -> None:
        """Alert once per model (a conditional marker in the meta table: the first consumer to see
        the model fail alerts, every other container and job of it stays quiet)."""
        from aijobs.store.model_alerts import FAILING

        model = error.model or f"{self.provider.name}:{self.kind}"
        logger.error(
            "model unavailable: job failed, consumer not paused",
            extra={"model": model, "reason": error.reason},
        )
        if self.model_alerts is None or model in self._models_alerted:
            return  # known to be alerted already: no write per failed job
        now = self.clock()
        try:
            first = self.model_alerts.mark(model, FAILING, now)
        except Exception:
            # Without the marker, alert anyway: a repeated alert beats a silent one.
            logger.exception("model alert marker unavailable; alerting from this container")
            first = True
        self._models_alerted.add(model)
        if not first:
            return
        try:
            self.alerts.publish(
                f"aijobs {self.stage}: model {model} unavailable",
                {
                    "kind": self.kind,
                    "model": model,
                    "reason": error.reason,
                    "error": error.detail[:300],
                    "status": error.status,
                    "consumer": "not paused: jobs on the kind's other models keep running; jobs on this "
                    "model fail at once (failed_final, model_unavailable)",
                    "fix": f"pick a current model for {self.kind} (KIND_MODELS / KIND_ALLOWED_MODELS in "
                    f".env.{self.stage}) and deploy; `aijobs models check --stack aijobs-{self.stage}` "
                    "lists every model the stage calls and its lifecycle",
                },
            )
        except Exception:
            # The job is finished already: give the marker back so the next failure alerts.
            logger.exception("model alert not sent: its marker withdrawn")
            self._models_alerted.discard(model)
            try:
                self.model_alerts.withdraw(model, FAILING, now)
            except Exception:
                logger.exception("could not withdraw the model alert marker")

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
