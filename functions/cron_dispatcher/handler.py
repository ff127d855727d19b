"""Cron dispatcher entry point: EventBridge Scheduler passes the exact CRONS expression (DESIGN.md §7)."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Tracer

from aijobs import runtime
from aijobs.observability import log_lambda_context
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS

# X-Ray subsegments for every AWS call (the function itself runs with active tracing).
tracer = Tracer()


@tracer.capture_lambda_handler
@log_lambda_context()
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dispatch(event, runtime.cron_context(), SCHEDULED_HANDLERS)
