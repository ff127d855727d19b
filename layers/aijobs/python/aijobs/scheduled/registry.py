"""SCHEDULED_HANDLERS: the exact 5-field CRONS expression -> its job. Register new crons here.

Every CRONS entry must have a handler here: `cdk synth` fails otherwise (see aijobs_cdk.stage).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aijobs.scheduled.concurrency import run_concurrency_control
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.maintenance import run_maintenance
from aijobs.scheduled.models import run_model_check
from aijobs.scheduled.sweeper import run_sweeper

ScheduledHandler = Callable[[CronRun, CronContext], dict[str, Any]]

SCHEDULED_HANDLERS: dict[str, ScheduledHandler] = {
    # Drives real credit expiry and retention clean-up: do not change the timing casually.
    "*/10 * * * *": run_maintenance,
    "*/5 * * * *": run_sweeper,
    # Adaptive consumer concurrency: narrows a throttled kind, widens it again when quiet.
    "* * * * *": run_concurrency_control,
    # Mondays 06:00 UTC: the lifecycle of every Bedrock model the stage calls (Legacy, end of life).
    "0 6 * * 1": run_model_check,
}
