"""Queue consumer entry point (one function per job kind, same code): docs/design.md §4."""

from __future__ import annotations

from typing import Any

from aijobs import runtime
from aijobs.consumer import registry as _own_code  # noqa: F401 - its own path, at init
from aijobs.observability import lambda_tracing, log_lambda_context
from aijobs.settings import consumer as _own_settings  # noqa: F401 - its own model, at init


# X-Ray subsegments for the invocation and every AWS call, set up in Lambda only (see lambda_tracing).
@lambda_tracing
@log_lambda_context()
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return runtime.consumer().handle(event, context)
