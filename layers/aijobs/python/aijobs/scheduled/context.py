"""What a scheduled job gets: the run it is, and the stage's collaborators."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from aijobs.alerts import Alerts
from aijobs.flow import FlowSettings
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
    flow: FlowSettings = field(default_factory=FlowSettings)
    # The weekly model check (aijobs.scheduled.models): the stage's provider plan per kind, and
    # Bedrock's control plane in the function's own region (created when first called).
    plans: dict[str, KindPlan] = field(default_factory=dict)
    bedrock: Callable[[], Any] | None = None
