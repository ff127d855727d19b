"""HTTP API entry point (producer): authenticate, validate, write the row, enqueue, answer 202."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths

from aijobs import runtime
from aijobs.api.app import resolve
from aijobs.api.wiring import configure, configure_admin
from aijobs.observability import lambda_tracing, log_lambda_context
from aijobs.settings import api as _own_settings  # noqa: F401 - its own model, at init

configure(runtime.api_service)
configure_admin(runtime.admin_service)


# X-Ray subsegments for the invocation and every AWS call, set up in Lambda only (see lambda_tracing).
@lambda_tracing
@log_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return resolve(event, context)
