"""Who is calling: the API key (or JWT) check before every route, and the operator check.

The keys themselves are checked by the service (`JobService.authenticate`, `require_operator`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter

from aijobs.api import wiring
from aijobs.api.admin import AdminService, require_operator
from aijobs.errors import UnauthorizedError
from aijobs.observability import logger

PUBLIC_PATHS = frozenset({"/openapi.json", "/console"})
# The console's page loads its assets without a key (they hold no data); its data calls need one.
PUBLIC_PREFIXES = ("/console/",)


def authenticate(
    resolver: APIGatewayHttpResolver, next_middleware: Callable[..., Response[Any]]
) -> Response[Any]:
    """The resolver's middleware: the caller's principal goes on the request context."""
    path = resolver.current_event.path
    if path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
        event = resolver.current_event
        claims = event.raw_event.get("requestContext", {}).get("authorizer", {}).get("jwt", {}).get("claims")
        principal = wiring.service().authenticate(event.headers.get("authorization"), claims)
        resolver.append_context(principal=principal)  # type: ignore[no-untyped-call]
        logger.thread_safe_append_keys(userId=principal.user_id)
    return next_middleware(resolver)


def principal(router: BaseRouter) -> Any:
    """The authenticated caller of the current request."""
    caller = router.context.get("principal")
    if caller is None:
        raise UnauthorizedError("not authenticated")
    return caller


def operator(router: BaseRouter, route: str) -> tuple[AdminService, str]:
    """The operator service and the caller's key id, after the role check and the rate limit."""
    admin = wiring.admin_service()
    operator_id = require_operator(
        principal(router), router.current_event.headers.get("authorization"), admin.limiter, route
    )
    return admin, operator_id
