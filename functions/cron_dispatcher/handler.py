"""Cron dispatcher entry point: EventBridge Scheduler passes the exact CRONS expression (DESIGN.md §7)."""

from __future__ import annotations

from typing import Any

from aijobs import runtime
from aijobs.observability import logger
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dispatch(event, runtime.cron_context(), SCHEDULED_HANDLERS)
