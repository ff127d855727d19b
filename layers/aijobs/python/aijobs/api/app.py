"""The HTTP API routes (powertools resolver for API Gateway HTTP API payload v2).

Client mistakes always get a 4xx JSON body `{code, message, details}`; see `_error_response`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from http import HTTPStatus
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError as RouteNotFound
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer
from aws_lambda_powertools.event_handler.openapi.params import Header, Query
from pydantic import BaseModel

from aijobs.api.schemas import (
    ClassifyRequest,
    ClassifyResponse,
    CreditsView,
    ErrorBody,
    JobAccepted,
    JobList,
    JobRequest,
    JobView,
    Links,
)
from aijobs.api.service import JobService
from aijobs.domain import JobStatus
from aijobs.errors import RequestError, ServiceUnavailableError, UnauthorizedError, UnsupportedMediaTypeError
from aijobs.observability import logger

PUBLIC_PATHS = frozenset({"/openapi.json"})
API_VERSION = "1"

app = APIGatewayHttpResolver(enable_validation=True)
_service_factory: Callable[[], JobService] | None = None


def configure(factory: Callable[[], JobService]) -> None:
    """Tell the routes where their service comes from (the handler passes the cached runtime one)."""
    global _service_factory
    _service_factory = factory


def service() -> JobService:
    assert _service_factory is not None, "aijobs.api.app.configure() was not called"
    return _service_factory()


def _json(
    status: int, body: BaseModel | dict[str, Any], headers: dict[str, str] | None = None
) -> Response[Any]:
    text = body.model_dump_json(exclude_none=False) if isinstance(body, BaseModel) else json.dumps(body)
    return Response(
        status_code=status, content_type=content_types.APPLICATION_JSON, body=text, headers=headers
    )


def _error_response(status: int, code: str, message: str, details: Any = None) -> Response[Any]:
    headers = {}
    if status == HTTPStatus.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    if status == HTTPStatus.SERVICE_UNAVAILABLE:
        headers["Retry-After"] = "5"
    return _json(status, ErrorBody(code=code, message=message, details=details), headers)


def _authenticate(
    resolver: APIGatewayHttpResolver, next_middleware: Callable[..., Response[Any]]
) -> Response[Any]:
    if resolver.current_event.path not in PUBLIC_PATHS:
        event = resolver.current_event
        claims = event.raw_event.get("requestContext", {}).get("authorizer", {}).get("jwt", {}).get("claims")
        principal = service().authenticate(event.headers.get("authorization"), claims)
        resolver.append_context(principal=principal)  # type: ignore[no-untyped-call]
        logger.append_keys(userId=principal.user_id)
    return next_middleware(resolver)


app.use([_authenticate])


@app.exception_handler(RequestError)  # type: ignore[untyped-decorator]
def _request_error(error: RequestError) -> Response[Any]:
    if isinstance(error, ServiceUnavailableError):
        logger.warning("request refused: dependency unavailable", extra={"code": error.code})
    return _error_response(error.status, error.code, error.message, error.details)


@app.exception_handler(RequestValidationError)  # type: ignore[untyped-decorator]
def _validation_error(error: RequestValidationError) -> Response[Any]:
    problems = error.errors()
    if any(problem.get("type") == "json_invalid" for problem in problems):
        return _error_response(400, "malformed_json", "the request body is not valid JSON")
    details = [
        {
            "path": ".".join(str(part) for part in problem.get("loc", ())),
            "message": problem.get("msg", ""),
            "type": problem.get("type", ""),
        }
        for problem in problems
    ]
    return _error_response(422, "validation_error", "the request does not match the schema", details)


@app.not_found
def _route_not_found(_error: RouteNotFound) -> Response[Any]:
    return _error_response(404, "route_not_found", "no such route")


@app.exception_handler(Exception)  # type: ignore[untyped-decorator]
def _unexpected(_error: Exception) -> Response[Any]:
    logger.exception("unhandled error")
    return _error_response(500, "internal_error", "something went wrong on our side")


def _principal() -> Any:
    principal = app.context.get("principal")
    if principal is None:
        raise UnauthorizedError("not authenticated")
    return principal


@app.post(
    "/jobs",
    summary="Submit a job",
    responses={
        202: {"description": "accepted and queued", "content": {"application/json": {"model": JobAccepted}}},
        400: {
            "description": "malformed JSON or header",
            "content": {"application/json": {"model": ErrorBody}},
        },
        402: {"description": "not enough credits", "content": {"application/json": {"model": ErrorBody}}},
        401: {
            "description": "missing or invalid API key",
            "content": {"application/json": {"model": ErrorBody}},
        },
        409: {"description": "Idempotency-Key reused", "content": {"application/json": {"model": ErrorBody}}},
        413: {"description": "inline input too large", "content": {"application/json": {"model": ErrorBody}}},
        422: {
            "description": "schema error or unknown kind",
            "content": {"application/json": {"model": ErrorBody}},
        },
        503: {
            "description": "queue unavailable; retry",
            "content": {"application/json": {"model": ErrorBody}},
        },
    },
)
def create_job(
    body: JobRequest,
    idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
) -> Response[JobAccepted]:
    job, replayed = service().submit(_principal(), body, idempotency_key)
    accepted = JobAccepted(
        jobId=job.job_id,
        status=job.status,
        kind=job.kind,
        createdAt=job.created_at,
        links=Links(self=f"/jobs/{job.job_id}"),
    )
    headers = {"Location": f"/jobs/{job.job_id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(
        status_code=202, content_type=content_types.APPLICATION_JSON, body=accepted, headers=headers
    )


@app.get("/jobs/<job_id>", summary="Get one of your jobs")
def get_job(job_id: str) -> JobView:
    return service().view(service().get(_principal(), job_id))


@app.get("/jobs", summary="List your jobs, newest first")
def list_jobs(
    status: Annotated[JobStatus | None, Query()] = None,
    kind: Annotated[str | None, Query(max_length=80)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> JobList:
    svc = service()
    page = svc.list_jobs(_principal(), status=status, kind=kind, limit=limit, cursor=cursor)
    return JobList(jobs=[svc.view(job) for job in page.jobs], nextCursor=page.cursor)


@app.get("/credits", summary="Your credit balance, grants and recent transactions")
def get_credits(limit: Annotated[int, Query(ge=1, le=100)] = 20) -> CreditsView:
    return service().credits(_principal(), limit=limit)


@app.post("/classify", summary="Classify a short text synchronously (no queue)")
def classify(body: ClassifyRequest) -> ClassifyResponse:
    _principal()
    result = service().classify(body.text)
    return ClassifyResponse(
        label=result.label, score=result.score, tags=list(result.tags), model=result.model
    )


@app.get("/openapi.json", include_in_schema=False)
def openapi() -> Response[Any]:
    document = app.get_openapi_json_schema(
        title="aijobs",
        version=API_VERSION,
        description="Submit asynchronous AI jobs and poll their status.",
        security_schemes={"apiKey": HTTPBearer(description="Authorization: Bearer <api key>")},
        security=[{"apiKey": []}],
    )
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=document)


def resolve(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry: refuse non-JSON bodies first (schema validation would half-parse a
    form-encoded body into confusing errors), then route."""
    method = event.get("requestContext", {}).get("http", {}).get("method", "")
    headers = {key.lower(): value for key, value in (event.get("headers") or {}).items()}
    content_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
    if method in ("POST", "PUT", "PATCH") and content_type != "application/json":
        error = UnsupportedMediaTypeError(
            f"send the body as JSON with `Content-Type: application/json` (got {content_type or 'none'!r})"
        )
        body = ErrorBody(code=error.code, message=error.message).model_dump_json()
        return {
            "statusCode": error.status,
            "headers": {"Content-Type": "application/json"},
            "body": body,
            "isBase64Encoded": False,
        }
    return app.resolve(event, context)
