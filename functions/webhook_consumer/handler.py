"""Webhook consumer entry point: sign and POST each finished job's outcome (aijobs.webhooks)."""

from __future__ import annotations

from typing import Any

from aijobs import runtime
from aijobs.observability import lambda_tracing, log_lambda_context
from aijobs.settings import webhook as _own_settings  # noqa: F401 - its own model, at init
from aijobs.webhooks import delivery as _own_code  # noqa: F401 - its own path, at init


# X-Ray subsegments for the invocation and every AWS call, set up in Lambda only (see lambda_tracing).
@lambda_tracing
@log_lambda_context()
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return runtime.webhook_consumer().handle(event, context)
