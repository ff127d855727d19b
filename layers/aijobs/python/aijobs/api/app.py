"""The HTTP API (powertools resolver for API Gateway HTTP API payload v2): wiring only.

The routes live in `aijobs.api.routes` (one `Router` per route group), the caller's checks in
`aijobs.api.auth`, errors to HTTP in `aijobs.api.errors`. Client mistakes always get a 4xx JSON body
`{code, message, details}`. `resolve()` screens the raw event before routing
(`aijobs.api.screening`), so a hostile body never reaches a recursive parser or serializer, nor an
integer conversion that raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from aijobs.api import errors
from aijobs.api.auth import authenticate
from aijobs.api.routes import admin, classify, console, credits, docs, jobs, uploads, webhooks
from aijobs.api.screening import allowed_methods, screened
from aijobs.errors import ProviderError, RequestError


class ContainerResolver(APIGatewayHttpResolver):
    """The resolver, keeping the request it is resolving on itself.

    powertools sets the current event and Lambda context on its `BaseRouter` class, shared by
    every resolver of the process, and the routers read them back through their resolver. One
    Lambda container runs one invocation at a time, so that is safe in Lambda; the local stack runs
    its API containers as threads of one process (each with its own resolver), where one request's
    route would read another's body. Kept on the instance, each resolver reads its own.
    """

    def resolve(self, event: Mapping[str, Any], context: Any) -> dict[str, Any]:
        self.__dict__["lambda_context"] = context
        return super().resolve(event, context)

    def _to_proxy_event(self, event: dict[str, Any]) -> BaseProxyEvent:
        proxy = super()._to_proxy_event(event)
        self.__dict__["current_event"] = proxy
        return proxy


app = ContainerResolver(enable_validation=True)
app.use([authenticate])

app.exception_handler(RequestError)(errors.request_error)
app.exception_handler(ProviderError)(errors.provider_error)
app.exception_handler(RequestValidationError)(errors.validation_error)
app.not_found(errors.route_not_found)
app.exception_handler(Exception)(errors.unexpected)

# The order of inclusion is the order of the OpenAPI document's paths and schemas.
for routes in (jobs, uploads, credits, webhooks, classify, admin, console, docs):
    app.include_router(routes.router)


def resolve(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry: screen the raw request (a refusal answers here), then route."""
    method = str(event.get("requestContext", {}).get("http", {}).get("method", "")).upper()
    allowed = allowed_methods(app, APIGatewayProxyEventV2(event).path)
    try:
        event = screened(event, method, allowed)
    except RequestError as error:
        return errors.refusal(error, allowed)
    return app.resolve(event, context)
