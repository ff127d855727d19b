"""What a scheduled job gets: the run it is, and the stage's collaborators."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from aijobs.aimd import ConcurrencySettings
from aijobs.alerts import Alerts
from aijobs.bindings import KindLimits
from aijobs.mappings import ConsumerControl
from aijobs.provider_plan import KindPlan
from aijobs.queues import JobQueues
from aijobs.store.tenants import Directory

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table


@dataclass(frozen=True)
class CronRun:
    """One firing of a schedule. EventBridge Scheduler may deliver the same run twice."""

    expression: str
    scheduled_time: str | None = None
    execution_id: str | None = None


@dataclass
class CronContext:
    stage: str
    directory: Directory
    meta: Table
    queues: JobQueues
    alerts: Alerts
    kinds: tuple[str, ...]
    max_attempts: int
    lease: timedelta
    recheck: timedelta
    stuck_after: timedelta
    clock: Callable[[], datetime]
    # Adaptive concurrency (aijobs.scheduled.concurrency): the mappings' control, kind -> mapping id
    # (none with QUEUE_MAX_CONCURRENCY=1), and the thresholds.
    control: ConsumerControl | None = None
    mappings: dict[str, str] = field(default_factory=dict)
    concurrency: ConcurrencySettings = field(default_factory=ConcurrencySettings)
    # The weekly model check (aijobs.scheduled.models): the stage's provider plan per kind, and
    # Bedrock's control plane in the function's own region (created when first called).
    plans: dict[str, KindPlan] = field(default_factory=dict)
    bedrock: Callable[[], Any] | None = None
    # Kinds whose declaration changes the stage's attempt budget, lease or concurrency ceiling
    # (KIND_LIMITS); a kind not listed has `max_attempts`, `lease` and `concurrency.ceiling`.
    limits: dict[str, KindLimits] = field(default_factory=dict)

    def max_attempts_of(self, kind: str) -> int:
        own = self.limits.get(kind)
        return own.attempts if own is not None else self.max_attempts

    def lease_of(self, kind: str) -> timedelta:
        own = self.limits.get(kind)
        return timedelta(seconds=own.lease) if own is not None else self.lease

    def concurrency_of(self, kind: str) -> ConcurrencySettings:
        """The controller's thresholds for a kind, with its own ceiling (never above the stage's)."""
        own = self.limits.get(kind)
        if own is None:
            return self.concurrency
        return replace(self.concurrency, ceiling=min(own.ceiling, self.concurrency.ceiling))
