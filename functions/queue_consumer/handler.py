"""Queue consumer entry point (one function per job kind, same code): DESIGN.md §4."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Tracer

from aijobs import runtime
from aijobs.observability import log_lambda_context

# X-Ray subsegments for every AWS call (the function itself runs with active tracing).
tracer = Tracer()


@tracer.capture_lambda_handler
@log_lambda_context()
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return runtime.consumer().handle(event, context)
