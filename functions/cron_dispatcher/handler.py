"""Cron dispatcher entry point: EventBridge Scheduler passes the exact CRONS expression
(docs/design.md §7)."""

from __future__ import annotations

from typing import Any

from aijobs import runtime
from aijobs.observability import lambda_tracing, log_lambda_context
from aijobs.scheduled.dispatcher import dispatch
from aijobs.scheduled.registry import SCHEDULED_HANDLERS
from aijobs.settings import cron as _own_settings  # noqa: F401 - its own model, at init


# X-Ray subsegments for the invocation and every AWS call, set up in Lambda only (see lambda_tracing).
@lambda_tracing
@log_lambda_context()
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return dispatch(event, runtime.cron_context(), SCHEDULED_HANDLERS)
