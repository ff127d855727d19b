"""HTTP API entry point (producer): authenticate, validate, write the row, enqueue, answer 202."""

from __future__ import annotations

from typing import Any

from aijobs import runtime
from aijobs.api.app import app, configure
from aijobs.observability import logger

configure(runtime.api_service)


@logger.inject_lambda_context(clear_state=True, correlation_id_path="requestContext.requestId")
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return app.resolve(event, context)
