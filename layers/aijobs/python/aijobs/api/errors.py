"""Errors to HTTP, in one place: every refusal is a JSON `ErrorBody` `{code, message, details}`.

The exception handlers (`aijobs.api.app` registers them on the resolver), the answer of a request
refused before routing (`refusal`), and each operation's documented responses (`responses`).
"""

from __future__ import annotations

import json
import math
from http import HTTPStatus
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError as RouteNotFound
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from pydantic import BaseModel

from aijobs.api.schemas import ErrorBody
from aijobs.api.screening import MAX_JSON_INTEGER_DIGITS
from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    MethodNotAllowedError,
    ProviderError,
    RateLimitedError,
    RequestError,
    ServiceUnavailableError,
    StageSpendCapReachedError,
    TenantRateLimitedError,
    ThrottledError,
)
from aijobs.observability import logger


def json_response(
    status: int, body: BaseModel | dict[str, Any], headers: dict[str, str] | None = None
) -> Response[Any]:
    text = body.model_dump_json(exclude_none=False) if isinstance(body, BaseModel) else json.dumps(body)
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=text, headers=headers
    )


def error_headers(status: int, retry_after: float | None = None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if status == HTTPStatus.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    if status in (HTTPStatus.SERVICE_UNAVAILABLE, HTTPStatus.TOO_MANY_REQUESTS):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after or 5)))
    return headers


def error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    *,
    headers: dict[str, str] | None = None,
    retry_after: float | None = None,
) -> Response[Any]:
    all_headers = error_headers(status, retry_after) | (headers or {})
    return json_response(status, ErrorBody(code=code, message=message, details=details), all_headers)


def refusal(error: RequestError, allowed: list[str]) -> dict[str, Any]:
    """The Lambda answer to a request refused before routing (`aijobs.api.screening`)."""
    logger.warning("request refused before routing", extra={"code": error.code, "status": error.status})
    extra = {"Allow": ", ".join(allowed)} if isinstance(error, MethodNotAllowedError) else {}
    body = ErrorBody(code=error.code, message=error.message, details=error.details)
    return {
        "statusCode": error.status,
        "headers": {"Content-Type": "application/json", **error_headers(error.status), **extra},
        "body": body.model_dump_json(),
        "isBase64Encoded": False,
    }


# --- the exception handlers ----------------------------------------------------------------------


def request_error(error: RequestError) -> Response[Any]:
    if isinstance(error, ServiceUnavailableError):
        logger.warning("request refused: dependency unavailable", extra={"code": error.code})
    limited = (RateLimitedError, TenantRateLimitedError, StageSpendCapReachedError)
    retry_after = error.retry_after if isinstance(error, limited) else None
    return error_response(error.status, error.code, error.message, error.details, retry_after=retry_after)


# The synchronous path calls the provider inside the request: its classified errors become HTTP
# here (the queued path records them on the job row instead). Most specific class first.
PROVIDER_ERRORS: tuple[tuple[type[ProviderError], int, str, str], ...] = (
    (InvalidInputError, 422, "invalid_input", "the provider refused the input"),
    (InputTooLargeError, 413, "input_too_large", "the input is too large for the provider"),
    (ThrottledError, 503, "provider_throttled", "the provider is busy; retry later"),
    (ProviderError, 503, "provider_unavailable", "the provider is unavailable; retry later"),
)


def provider_error(error: ProviderError) -> Response[Any]:
    status, code, message = next((s, c, m) for cls, s, c, m in PROVIDER_ERRORS if isinstance(error, cls))
    logger.warning("provider call refused", extra={"code": code, "errorClass": error.error_class})
    retry_after = error.retry_after if isinstance(error, ThrottledError) else None
    return error_response(status, code, message, retry_after=retry_after)


def validation_error(error: RequestValidationError) -> Response[Any]:
    problems = error.errors()
    if any(problem.get("type") == "json_invalid" for problem in problems):
        return error_response(400, "malformed_json", "the request body is not valid JSON")
    details = [
        {
            "path": ".".join(str(part) for part in problem.get("loc", ())),
            "message": problem.get("msg", ""),
            "type": problem.get("type", ""),
        }
        for problem in problems
    ]
    return error_response(422, "validation_error", "the request does not match the schema", details)


def route_not_found(_error: RouteNotFound) -> Response[Any]:
    return error_response(404, "route_not_found", "no such route")


def unexpected(_error: Exception) -> Response[Any]:
    logger.exception("unhandled error")
    return error_response(500, "internal_error", "something went wrong on our side")


# --- the OpenAPI contract ------------------------------------------------------------------------

ERROR_DESCRIPTIONS: dict[int, str] = {
    400: "malformed JSON, body encoding, header or cursor; JSON nested too deep, or an integer of more "
    f"than {MAX_JSON_INTEGER_DIGITS} digits (`number_too_long`)",
    401: "missing or invalid API key",
    402: "not enough credits (`insufficient_credits`), or your daily model-spend cap is reached "
    "(`spend_cap_reached`)",
    403: "the key is not an operator key",
    404: "no such job (or another user's)",
    409: "Idempotency-Key reused with another body or its call still running, credits changed meanwhile, "
    "or the job already finished",
    413: "body or inline input too large",
    415: "the body is not `application/json`",
    422: (
        "schema error (with field paths), unknown kind, a missing, foreign or oversized input object, "
        "an upload of a refused content type or size, or workflow options or an input it cannot split"
    ),
    429: "too many operator calls from this key (`rate_limited`), you submit faster than your account's "
    "items take writes (`tenant_rate_limited`), or (`POST /classify`) the service's daily model-spend cap "
    "is reached (`stage_spend_cap_reached`); retry after `Retry-After` seconds",
    500: "unexpected failure on our side",
    503: "a dependency (queue, provider) is unavailable; retry after `Retry-After` seconds",
}
ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}},
    503: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}},
}
# Every authenticated operation can answer these; each route adds what its own logic can refuse.
COMMON_ERRORS = (401, 422, 500)


def responses(
    status: int,
    description: str,
    *errors: int,
    model: type[BaseModel] | None = None,
    headers: dict[str, Any] | None = None,
    extra: dict[int, str] | None = None,
) -> dict[int, OpenAPIResponse]:
    """One operation's documented responses: its success, and every error with the ErrorBody schema.

    Without `model` the success schema comes from the route's return annotation. `extra`: other
    successes (status -> description) with the same schema.
    """
    success: OpenAPIResponse = {"description": description}
    if model is not None:
        success["content"] = {"application/json": {"model": model}}
    if headers:
        success["headers"] = headers
    documented: dict[int, OpenAPIResponse] = {status: success}
    for other, text in (extra or {}).items():
        documented[other] = {**success, "description": text}
    for code in sorted({*COMMON_ERRORS, *errors}):
        error: OpenAPIResponse = {
            "description": ERROR_DESCRIPTIONS[code],
            "content": {"application/json": {"model": ErrorBody}},
        }
        if code in ERROR_HEADERS:
            error["headers"] = ERROR_HEADERS[code]
        documented[code] = error
    return documented
