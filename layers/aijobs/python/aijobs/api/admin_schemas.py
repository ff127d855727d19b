"""Response and request models of the operator routes (`/admin/...`, aijobs.api.admin)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, ConfigDict, Field

from aijobs.api.schemas import ApiModel
from aijobs.domain import JobStatus
from aijobs.store.attempt_log import attempt_history
from aijobs.store.dead_letter_records import Resolution

_ISO_TIME = re.compile(r"\d{4}-\d\d-\d\d([T ]\d\d:\d\d.*)?")


def _iso_text(value: Any) -> Any:
    """Only an ISO 8601 text is a time here: pydantic would also take `0.5` as a Unix timestamp,
    which the documented `format: date-time` does not allow."""
    if isinstance(value, datetime) or (isinstance(value, str) and _ISO_TIME.fullmatch(value)):
        return value
    raise ValueError("expected an ISO 8601 date-time, like 2026-01-31T09:00:00Z")


IsoTime = Annotated[datetime, BeforeValidator(_iso_text)]


class AttemptView(ApiModel):
    """One end of an attempt (or a job finalized while it waited: no start, no duration)."""

    attempt: int
    outcome: str
    endedAt: str
    startedAt: str | None = None
    durationMs: int | None = None
    errorClass: str | None = None
    message: str | None = None


class AdminJob(ApiModel):
    """A job as an operator sees it in a list (any tenant's)."""

    jobId: str
    userId: str
    kind: str
    status: JobStatus
    attempts: int
    reruns: int
    lastErrorClass: str | None = Field(default=None, description="the current run's last error")
    lastErrorMessage: str | None = None
    previousErrorClass: str | None = Field(
        default=None, description="the error class that ended the job before its last operator re-run"
    )
    deadLettered: bool
    parentId: str | None = None
    chargeState: str | None = Field(
        default=None, description="its price: `reserved`, `settled` or `refunded` (none: a free kind)"
    )
    chargeWaived: bool = Field(
        default=False,
        description="an operator re-ran it after its price was refunded: this run is on the house",
    )
    createdAt: datetime
    updatedAt: datetime


class AdminJobDetail(AdminJob):
    """One job with its input and its attempt timeline (oldest first)."""

    input: Any = None
    inputRef: str | None = None
    model: str | None = Field(
        default=None, description="the model that answered (with fallbacks, the last tried)"
    )
    price: int = Field(default=0, description="the credits the job costs")
    usage: dict[str, int] = Field(default_factory=dict, description="what its model call reported using")
    costUsd: float | None = Field(default=None, description="what its model call cost, in USD")
    cancelRequestedAt: datetime | None = None
    finishedAt: datetime | None = None
    attemptLog: list[AttemptView]


class AdminJobList(ApiModel):
    jobs: list[AdminJob]
    nextCursor: str | None = None


class DeadLetterView(ApiModel):
    """One dead letter: what killed its job (`attempts`, `lastError...`, as recorded), and what
    became of it since (`jobStatus`, `resolution`, from the job's row now)."""

    kind: str
    jobId: str
    userId: str | None = None
    attempts: int
    lastErrorClass: str | None = None
    lastErrorMessage: str | None = None
    deadLetteredAt: str
    jobStatus: str | None = Field(default=None, description="the job's status now (none: its row is gone)")
    jobErrorClass: str | None = Field(default=None, description="the job's last error now")
    reruns: int = 0
    resolution: Resolution = Field(
        description="open, rerunning, rerun_failed (all three open: an operator must decide), or "
        "resolved: succeeded, failed_by_operator, cancelled, gone"
    )
    resolved: bool
    parentId: str | None = None


class DeadLetterList(ApiModel):
    deadLetters: list[DeadLetterView]


class FailFinalRequest(ApiModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=300, description="why the job is given up (kept on the row)")


class BatchRerunRequest(ApiModel):
    """Re-run a kind's `failed_final` jobs after a fix; `dryRun` (the default) only counts them,
    with the very selection the re-run takes. Without `errorClass`, jobs cancelled by their owner
    or failed by an operator are left alone; `errorClass: cancelled` (or `operator`) re-runs them."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=80)
    errorClass: str | None = Field(default=None, min_length=1, max_length=80)
    since: IsoTime | None = None
    until: IsoTime | None = None
    dryRun: bool = True
    limit: int = Field(default=50, ge=1, le=200, description="at most this many jobs (oldest first)")


class BatchRerunView(ApiModel):
    matched: int = Field(description="the jobs selected: a dry run's count is what its re-run takes")
    dryRun: bool
    rerun: list[str]
    skipped: list[str] = Field(description="selected, but changed before their turn")
    leftAlone: dict[str, int] = Field(
        description="passed over, by reason: `cancelled` / `operator` (name the class to re-run them), "
        "`parent_not_waiting` (a workflow child: re-run its parent)"
    )
    waived: list[str] = Field(
        description="re-run jobs that run on the house: their price was refunded when they failed"
    )
    notReached: list[str] = Field(
        default_factory=list,
        description="selected, but not reached before the function had to answer (its timeout): "
        "untouched; send the same request again to re-run them",
    )


class HourCount(ApiModel):
    hour: datetime = Field(description="the hour's start (UTC)")
    succeeded: int
    failed: int


class KindOverview(ApiModel):
    """One kind at a glance: its queue, its consumer, its last hours."""

    kind: str
    backlog: int = Field(description="messages waiting in the queue (SQS ApproximateNumberOfMessages)")
    inFlight: int = Field(description="messages received and not yet deleted")
    delayed: int
    oldestQueuedAgeSeconds: int | None = Field(
        description="age of the oldest `queued` job row (from the jobs index; SQS itself does not say)"
    )
    paused: bool | None = Field(description="whether its consumer is switched off (None: unknown)")
    succeededLastHour: int
    failedLastHour: int
    hours: list[HourCount] = Field(description="succeeded and failed_final jobs per hour, oldest first")
    deadLetters: int = Field(description="open entries of its dead-letter list (up to 100 counted)")


class Overview(ApiModel):
    kinds: list[KindOverview]
    generatedAt: datetime


class ConsumerState(ApiModel):
    kind: str
    paused: bool
    mappings: list[str]


class SpendView(ApiModel):
    day: str
    timeZone: str
    usd: str = Field(description="the stage's model spend today, in USD (a decimal string)")
    counted: bool = Field(description="false when the spend brake is off: then nothing counts spend")


def attempt_views(log: list[dict[str, Any]]) -> list[AttemptView]:
    """The row's compact attempt log (aijobs.store.attempt_log) as the API shows it."""
    return [AttemptView.model_validate(entry) for entry in attempt_history(log)]
