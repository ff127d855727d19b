"""Queue consumer entry point (one function per job kind, same code): DESIGN.md §4."""

from __future__ import annotations

from typing import Any

from aijobs import runtime
from aijobs.observability import logger


@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return runtime.consumer().handle(event, context)
