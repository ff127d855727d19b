"""What a scheduled job gets: the run it is, and the stage's collaborators."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from aijobs.alerts import Alerts
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
