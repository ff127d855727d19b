"""Dead-letter consumer entry point: record, finalize, alert; never re-queue (docs/design.md §5)."""

from __future__ import annotations

from typing import Any

from aijobs import dead_letters as _own_code  # noqa: F401 - its own path, at init
from aijobs import runtime
from aijobs.observability import lambda_tracing, log_lambda_context
from aijobs.settings import dlq as _own_settings  # noqa: F401 - its own model, at init


# X-Ray subsegments for the invocation and every AWS call, set up in Lambda only (see lambda_tracing).
@lambda_tracing
@log_lambda_context()
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return runtime.dead_letter_consumer().handle(event, context)
