"""The operator routes' logic (`/admin/...`, docs/operations/console.md): the CLI's operator
commands over HTTP.

Every call comes from an operator key (`Principal.is_operator`), is rate-limited per key in this
container (a token bucket; the stage's API Gateway throttling applies in front of it) and is logged
with the key's id: a short hash prefix, never the key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Protocol

from aijobs.api.admin_schemas import (
    AdminJob,
    AdminJobDetail,
    BatchRerunRequest,
    BatchRerunView,
    ConsumerState,
    DeadLetterView,
    HourCount,
    KindOverview,
    Overview,
    SpendView,
    attempt_views,
)
from aijobs.domain import Job, JobStatus
from aijobs.errors import (
    ConflictError,
    ForbiddenError,
    MalformedRequestError,
    NotFoundError,
    RateLimitedError,
    UnprocessableError,
)
from aijobs.observability import logger
from aijobs.operator import Operator
from aijobs.store.dead_letter_records import DeadLetterStatus
from aijobs.store.job_queries import position
from aijobs.store.keys import iso
from aijobs.store.spend import SpendRecords
from aijobs.store.tenants import Directory, Principal

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table
    from mypy_boto3_sqs import SQSClient

# A page of the cross-tenant listing continues below this position (`<iso time>#<job id>`).
_POSITION = re.compile(r"\d{4}-\d\d-\d\dT[0-9:.+Z-]{8,40}#[0-9A-HJKMNP-TV-Z]{26}(?:\.[0-9]{5})?")
_JOB_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}(?:\.[0-9]{5})?")
# The overview's chart: this many hours back, and at most this many rows read per kind and status.
CHART_HOURS = 6
_CHART_ROWS = 2000
# A batch re-run from the API paces its sends like the CLI, but fast enough to answer in time.
BATCH_RATE_PER_SECOND = 20.0
# The overview counts each kind's open dead letters up to this many.
_DEAD_LETTERS_COUNTED = 100


class Control(Protocol):
    """Switches a consumer's event-source mapping (aijobs.mappings.ConsumerControl; the local
    stack's emulated mappings)."""

    def set_mapping_enabled(self, mapping_id: str, *, enabled: bool) -> None: ...

    def mapping_enabled(self, mapping_id: str) -> bool | None: ...


def key_id(authorization: str | None) -> str:
    """The id an operator's key is logged by: a prefix of its hash (never the key)."""
    _scheme, _, key = (authorization or "").partition(" ")
    return hashlib.sha256(key.strip().encode()).hexdigest()[:12]


@dataclass
class RateLimiter:
    """A token bucket per key id, in this container only: `rate` calls a second, bursts of `burst`."""

    rate: float = 5.0
    burst: float = 30.0
    monotonic: Callable[[], float] = time.monotonic
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, key: str) -> float | None:
        """None when the call may go ahead; else the seconds until it may."""
        with self._lock:
            now = self.monotonic()
            tokens, seen = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - seen) * self.rate)
            if tokens < 1:
                self._buckets[key] = (tokens, now)
                return (1 - tokens) / self.rate
            self._buckets[key] = (tokens - 1, now)
            if len(self._buckets) > 1000:  # forget idle keys; a few operators is the normal case
                self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < 600}
            return None


def require_operator(
    principal: Principal, authorization: str | None, limiter: RateLimiter, route: str
) -> str:
    """Refuse a non-operator (403) or a caller over its rate (429); returns the key id to log."""
    operator_id = key_id(authorization) if authorization else f"jwt:{principal.user_id[:12]}"
    if not principal.is_operator:
        logger.warning("operator route refused", extra={"route": route, "keyId": operator_id})
        raise ForbiddenError("this route needs an operator key (`aijobs keys create NAME --operator`)")
    wait = limiter.take(operator_id)
    if wait is not None:
        logger.warning("operator route rate-limited", extra={"route": route, "keyId": operator_id})
        raise RateLimitedError("too many operator calls; slow down", retry_after=wait)
    logger.info("operator call", extra={"route": route, "keyId": operator_id})
    return operator_id


@dataclass
class AdminService:
    directory: Directory
    operator: Operator
    sqs: SQSClient
    queue_urls: dict[str, str]
    control: Control
    # kind -> its consumer's event-source mapping id (CONSUMER_MAPPINGS).
    mappings: dict[str, str]
    spend: SpendRecords
    spend_zone: str
    spend_counted: bool
    clock: Callable[[], datetime]
    limiter: RateLimiter = field(default_factory=RateLimiter)

    # --- jobs ------------------------------------------------------------------------------------

    def _kind(self, kind: str) -> str:
        if kind not in self.queue_urls:
            raise UnprocessableError(f"unknown kind {kind!r}", code="unknown_kind")
        return kind

    def list_jobs(
        self,
        *,
        kind: str | None,
        status: JobStatus | None,
        error_class: str | None,
        tenant: str | None,
        since: datetime | None,
        until: datetime | None,
        limit: int,
        cursor: str | None,
    ) -> tuple[list[Job], str | None]:
        """Jobs across tenants, newest change first, one page; the cursor is the last job's position.

        Each (shard, kind, status) query reads one job more than the page, to know if more follow."""
        kinds = [self._kind(kind)] if kind else list(self.queue_urls)
        statuses = [status] if status else list(JobStatus)
        below = _decode_position(cursor) if cursor else None
        if until is not None:
            until_position = f"{iso(until)}#~"  # after every job id of that instant
            below = min(below, until_position) if below else until_position
        tables = self._tables(tenant)
        found: list[Job] = []
        for table in tables:
            store = self.directory.job_store(table, self.clock)
            for each_kind in kinds:
                for each_status in statuses:
                    found.extend(
                        store.newest_of_kind_status(
                            each_kind, each_status, limit=limit + 1, below=below, after=since,
                            user_id=tenant, error_class=error_class,
                        )
                    )  # fmt: skip
        found.sort(key=position, reverse=True)
        page = found[:limit]
        more = len(found) > limit
        return page, _encode_position(position(page[-1])) if more and page else None

    def _tables(self, tenant: str | None) -> list[Table]:
        if tenant is None:
            return [self.directory.shard_tables[i] for i in self.directory.active_shards()]
        table = self.directory.shard_for(tenant)
        return [] if table is None else [table]

    def job(self, user_id: str, job_id: str) -> Job:
        table = self.directory.shard_for(user_id) if _JOB_ID.fullmatch(job_id) else None
        job = self.directory.job_store(table, self.clock).get(user_id, job_id) if table is not None else None
        if job is None:
            raise NotFoundError(f"no job {job_id!r} for user {user_id!r}")
        return job

    def rerun(self, user_id: str, job_id: str, operator_id: str) -> Job:
        self.job(user_id, job_id)
        job = self.operator.rerun(user_id, job_id)
        logger.info("operator re-run (console)", extra={"jobId": job_id, "keyId": operator_id})
        return job

    def fail_final(self, user_id: str, job_id: str, reason: str, operator_id: str) -> Job:
        job = self.job(user_id, job_id)
        if job.status.is_terminal:
            raise ConflictError(f"job {job_id} already finished ({job.status.value})", code="job_finished")
        finished = self.operator.fail_final(user_id, job_id, reason)
        logger.info("operator fail-final (console)", extra={"jobId": job_id, "keyId": operator_id})
        return finished

    def rerun_batch(
        self, request: BatchRerunRequest, operator_id: str, seconds_left: Callable[[], float] | None = None
    ) -> BatchRerunView:
        report = self.operator.rerun_batch(
            self._kind(request.kind), error_class=request.errorClass, since=request.since,
            until=request.until, dry_run=request.dryRun, rate_per_second=BATCH_RATE_PER_SECOND,
            limit=request.limit, seconds_left=seconds_left,
        )  # fmt: skip
        logger.info(
            "operator batch re-run (console)",
            extra={"kind": request.kind, "dryRun": request.dryRun, "matched": report.matched,
                   "keyId": operator_id},
        )  # fmt: skip
        return BatchRerunView(
            matched=report.matched, dryRun=report.dry_run, rerun=report.rerun, skipped=report.skipped,
            leftAlone=report.left_alone, waived=report.waived, notReached=report.not_reached,
        )  # fmt: skip

    # --- dead letters, queues, consumers ------------------------------------------------------------

    def dead_letters(self, kind: str | None, limit: int, *, include_resolved: bool) -> list[DeadLetterView]:
        kinds = [self._kind(kind)] if kind else list(self.queue_urls)
        return [
            dead_letter_view(status)
            for status in self.operator.dead_letters(kinds, include_resolved=include_resolved, limit=limit)
        ]

    def overview(self) -> Overview:
        now = self.clock()
        return Overview(kinds=[self._kind_overview(kind, now) for kind in self.queue_urls], generatedAt=now)

    def _kind_overview(self, kind: str, now: datetime) -> KindOverview:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_urls[kind],
            AttributeNames=[
                "ApproximateNumberOfMessages",
                "ApproximateNumberOfMessagesNotVisible",
                "ApproximateNumberOfMessagesDelayed",
            ],
        )["Attributes"]
        start = (now - timedelta(hours=CHART_HOURS - 1)).replace(minute=0, second=0, microsecond=0)
        hours = [start + timedelta(hours=i) for i in range(CHART_HOURS)]
        counts = {hour: [0, 0] for hour in hours}
        oldest: datetime | None = None
        stores = [
            self.directory.job_store(self.directory.shard_tables[i], self.clock)
            for i in self.directory.active_shards()
        ]
        for store in stores:
            for column, status in enumerate((JobStatus.SUCCEEDED, JobStatus.FAILED_FINAL)):
                for job in store.query_kind_status(kind, status, after=start, limit=_CHART_ROWS):
                    hour = job.updated_at.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
                    if hour in counts:
                        counts[hour][column] += 1
            waiting = store.query_kind_status(kind, JobStatus.QUEUED, limit=1)
            if waiting and (oldest is None or waiting[0].updated_at < oldest):
                oldest = waiting[0].updated_at
        last_hour = now - timedelta(hours=1)
        recent = [(hour, c) for hour, c in counts.items() if hour + timedelta(hours=1) > last_hour]
        return KindOverview(
            kind=kind,
            backlog=int(attributes.get("ApproximateNumberOfMessages", 0)),
            inFlight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
            delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
            oldestQueuedAgeSeconds=max(0, int((now - oldest).total_seconds())) if oldest else None,
            paused=self._paused(kind),
            # Whole hours: "the last hour" is the current and the previous clock hour's rows.
            succeededLastHour=sum(c[0] for _hour, c in recent),
            failedLastHour=sum(c[1] for _hour, c in recent),
            hours=[HourCount(hour=hour, succeeded=c[0], failed=c[1]) for hour, c in counts.items()],
            deadLetters=self.operator.open_dead_letters(kind, cap=_DEAD_LETTERS_COUNTED),
        )

    def _paused(self, kind: str) -> bool | None:
        mapping = self.mappings.get(kind)
        if mapping is None:
            return None
        enabled = self.control.mapping_enabled(mapping)
        return None if enabled is None else not enabled

    def set_paused(self, kind: str, paused: bool, operator_id: str) -> ConsumerState:
        mapping = self.mappings.get(self._kind(kind))
        if mapping is None:
            raise UnprocessableError(f"no consumer mapping is known for {kind!r}", code="no_mapping")
        self.control.set_mapping_enabled(mapping, enabled=not paused)
        logger.info(
            "operator paused a consumer" if paused else "operator resumed a consumer",
            extra={"kind": kind, "keyId": operator_id},
        )
        return ConsumerState(kind=kind, paused=paused, mappings=[mapping])

    def spend_today(self) -> SpendView:
        from aijobs.bindings import time_zone
        from aijobs.spend import day_of

        day = day_of(self.clock(), time_zone(self.spend_zone))
        total = self.spend.day_state(day).stage_usd if self.spend_counted else 0
        return SpendView(day=day, timeZone=self.spend_zone, usd=str(total), counted=self.spend_counted)


def admin_job(job: Job) -> AdminJob:
    return AdminJob(
        jobId=job.job_id, userId=job.user_id, kind=job.kind, status=job.status, attempts=job.attempts,
        reruns=job.reruns, lastErrorClass=job.last_error_class, lastErrorMessage=job.last_error_message,
        previousErrorClass=job.previous_error_class, deadLettered=job.dead_lettered,
        parentId=job.parent_id, chargeState=job.charge_state, chargeWaived=job.charge_waived,
        createdAt=job.created_at, updatedAt=job.updated_at,
    )  # fmt: skip


def dead_letter_view(status: DeadLetterStatus) -> DeadLetterView:
    letter, job = status.entry, status.job
    return DeadLetterView(
        kind=letter.kind, jobId=letter.job_id, userId=letter.user_id, attempts=letter.attempts,
        lastErrorClass=letter.last_error_class, lastErrorMessage=letter.last_error_message,
        deadLetteredAt=letter.dead_lettered_at, jobStatus=job.status.value if job else None,
        jobErrorClass=job.last_error_class if job else None, reruns=job.reruns if job else 0,
        resolution=status.resolution, resolved=not status.resolution.is_open,
        parentId=letter.parent_id,
    )  # fmt: skip


def admin_job_detail(job: Job) -> AdminJobDetail:
    return AdminJobDetail(
        **admin_job(job).model_dump(),
        input=job.input, inputRef=job.input_ref, model=job.model, price=job.price, usage=job.usage,
        costUsd=job.cost, cancelRequestedAt=job.cancel_requested_at, finishedAt=job.finished_at,
        attemptLog=attempt_views(job.attempt_log),
    )  # fmt: skip


def _encode_position(value: str) -> str:
    return base64.urlsafe_b64encode(value.encode()).decode().rstrip("=")


def _decode_position(cursor: str) -> str:
    """A cursor back to its position, checked: anything else is a 400, never a query."""
    try:
        value = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (binascii.Error, ValueError, UnicodeDecodeError):
        value = ""
    if not _POSITION.fullmatch(value):
        raise MalformedRequestError("cursor is not valid", code="invalid_cursor")
    return value


# A time filter's useful range: no job changed outside it, and every time in it has a fixed-width
# ISO form (the index's sort keys compare as text).
_EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
_LATEST = datetime(9000, 1, 1, tzinfo=UTC)


def as_utc(moment: datetime | None) -> datetime | None:
    """A query time in UTC (without a zone: UTC), clamped to the range a job can have changed in
    (`0001-01-01T00:00+05:00` is a valid time that has no UTC equivalent)."""
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        moment = moment.astimezone(UTC)
    except OverflowError:
        return _EARLIEST if moment.year < 5000 else _LATEST
    return min(max(moment, _EARLIEST), _LATEST)
