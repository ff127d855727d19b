"""Domain models: the job, its five statuses, and the queue message that references it."""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class JobStatus(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED_RETRYABLE = "failed_retryable"
    FAILED_FINAL = "failed_final"

    @property
    def is_terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED_FINAL)


class QueueMessage(BaseModel):
    """The whole queue message: references only. Never input text, keys or provider config."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    jobId: str = Field(min_length=1, max_length=64)
    userId: str = Field(min_length=1, max_length=128)
    kind: str | None = Field(default=None, max_length=80)
    # A provider re-check names the wait it belongs to (the row's `recheck_id`): a duplicate of a
    # re-check message finds the id already used and is acknowledged, so one job never has two
    # polling chains.
    check: str | None = Field(default=None, min_length=1, max_length=64)


class Job(BaseModel):
    """A job row as the domain sees it (docs/design.md §4 fields plus bookkeeping)."""

    model_config = ConfigDict(extra="ignore")

    job_id: str
    user_id: str
    kind: str
    status: JobStatus
    input: str | dict[str, Any] | None = None
    input_ref: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    provider: str
    attempts: int = 0
    last_error_class: str | None = None
    last_error_message: str | None = None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None
    lease_expires_at: datetime | None = None
    awaiting_provider: bool = False
    provider_checks: int = 0
    provider_handle: str | None = None
    # How many of the job's asynchronous provider tasks ended `Failed` (each retry after one starts
    # a new task, with its own idempotency token: aijobs.providers.bedrock.client_request_token).
    provider_tasks: int = 0
    # The id the pending re-check message carries; cleared when that message claims the job.
    recheck_id: str | None = None
    # When a failed attempt may be retried (back-off, Retry-After): nobody runs it earlier.
    next_attempt_at: datetime | None = None
    # A waiting job held (spend brake, tenant running cap): its one copy is due back then.
    held_until: datetime | None = None
    # Set by each claim; only the holder of the current claim may finish the attempt.
    claim_id: str | None = None
    # When its owner cancelled the job while an attempt was running (aijobs.api.service.cancel):
    # that attempt finishes (charged if it succeeds), and the job is never tried again.
    cancel_requested_at: datetime | None = None
    result: Any = None
    result_ref: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost: float | None = None
    dead_lettered: bool = False
    reruns: int = 0
    # The error class that ended the job before its last operator re-run (the last error is the
    # new run's own).
    previous_error_class: str | None = None
    # The last ATTEMPT_LOG_SIZE ends of attempts (aijobs.store.attempt_log.attempt_entry), oldest first:
    # the operator console's timeline. Kept across re-runs.
    attempt_log: list[dict[str, Any]] = Field(default_factory=list)
    # Credits: the price reserved at submit, and whether it was settled or refunded since.
    price: int = 0
    charge_state: str | None = None
    charge_allocation: dict[str, int] = Field(default_factory=dict)
    # An operator re-run after the price was refunded (or a parent's settled): it runs on the house.
    charge_waived: bool = False
    # A child of a workflow (aijobs.workflows): its parent and its index among the parent's parts.
    parent_id: str | None = None
    part: int | None = None
    # A workflow parent: its step (`split` -> `children` -> `merge`) and its children's counters.
    # Each child's final transition adds to them in the same transaction (exactly once).
    phase: str | None = None
    children_total: int | None = None
    children_split: int = 0
    children_done: int = 0
    children_succeeded: int = 0
    children_failed: int = 0
    # How many children may fail before the parent fails (the workflow's failure policy).
    failures_allowed: int = 0
    # Credits: a parent pays `base_price` plus `child_price` per child that succeeded.
    base_price: int = 0
    child_price: int = 0
    # A webhook (aijobs.webhooks): where the final outcome is POSTed, and that delivery's state
    # (`pending` from the final transition on, then `delivered` or `failed`).
    callback_url: str | None = None
    callback_state: str | None = None
    callback_attempts: int = 0
    callback_status: int | None = None
    callback_error: str | None = None
    callback_at: datetime | None = None

    @property
    def is_parent(self) -> bool:
        return self.phase is not None

    @property
    def children_pending(self) -> int:
        return max(0, (self.children_total or 0) - self.children_succeeded - self.children_failed)


def utcnow() -> datetime:
    return datetime.now(UTC)


class Artifact(BaseModel):
    """A binary output the consumer stores under `results/<jobId>/<step>/<name>`."""

    # Like the provider port's models (aijobs.providers.base), which carry it: built on first use.
    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")
    content_type: str
    data: bytes
