"""HTTP API entry point (producer): authenticate, validate, write the row, enqueue, answer 202."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Tracer

from aijobs import runtime
from aijobs.api.app import configure, resolve
from aijobs.observability import logger

configure(runtime.api_service)


# X-Ray subsegments for every AWS call (the function itself runs with active tracing).
tracer = Tracer()


@tracer.capture_lambda_handler
@logger.inject_lambda_context(clear_state=True, correlation_id_path="requestContext.requestId")
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return resolve(event, context)
