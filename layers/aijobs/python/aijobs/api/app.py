"""The HTTP API routes (powertools resolver for API Gateway HTTP API payload v2).

Client mistakes always get a 4xx JSON body `{code, message, details}`; see `_error_response`.
`resolve()` screens the raw event before routing (method, media type, body encoding, size, JSON
depth and integer length), so a hostile body never reaches a recursive parser or serializer, nor
an integer conversion that raises.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Iterable
from functools import lru_cache
from http import HTTPStatus
from importlib import resources
from typing import Annotated, Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError as RouteNotFound
from aws_lambda_powertools.event_handler.openapi.exceptions import RequestValidationError
from aws_lambda_powertools.event_handler.openapi.params import Header, Path, Query
from aws_lambda_powertools.event_handler.openapi.types import OpenAPIResponse
from aws_lambda_powertools.utilities.data_classes import APIGatewayProxyEventV2
from pydantic import BaseModel

from aijobs.api.admin import AdminService, admin_job, admin_job_detail, as_utc, require_operator
from aijobs.api.admin_schemas import (
    AdminJobDetail,
    AdminJobList,
    BatchRerunRequest,
    BatchRerunView,
    ConsumerState,
    DeadLetterList,
    FailFinalRequest,
    IsoTime,
    Overview,
    SpendView,
)
from aijobs.api.schemas import (
    ClassifyRequest,
    ClassifyResponse,
    CreditsView,
    ErrorBody,
    JobAccepted,
    JobList,
    JobRequest,
    JobView,
    PresignedUpload,
    UploadRequest,
    WebhookSecretIssued,
    WebhookSecretStatus,
)
from aijobs.api.service import IDEMPOTENCY_KEY_PATTERN, LONG_POLL_MAX_SECONDS, JobService, links
from aijobs.domain import JobStatus
from aijobs.errors import (
    BodyTooLargeError,
    ConflictError,
    InputTooLargeError,
    InvalidBodyEncodingError,
    InvalidInputError,
    JsonNumberTooLongError,
    JsonTooDeepError,
    MethodNotAllowedError,
    NotFoundError,
    ProviderError,
    RateLimitedError,
    RequestError,
    ServiceUnavailableError,
    StageSpendCapReachedError,
    TenantRateLimitedError,
    ThrottledError,
    TransitionConflict,
    UnauthorizedError,
    UnsupportedMediaTypeError,
)
from aijobs.observability import logger
from aijobs.store.tenants import Principal

PUBLIC_PATHS = frozenset({"/openapi.json", "/console"})
# The console's page loads its assets without a key (they hold no data); its data calls need one.
PUBLIC_PREFIXES = ("/console/",)
API_VERSION = "1"
# Far above any legitimate request: the largest configurable inline input (256 KiB) with every
# character JSON-escaped as \uXXXX is 1.5 MiB. Lambda itself would take up to 6 MB.
MAX_BODY_BYTES = 2 * 1024 * 1024
# Legitimate bodies nest a few levels (`input` / `options` objects); parsers and pydantic recurse.
MAX_JSON_DEPTH = 32
# Far beyond any count, size or id a client means (a 64-bit integer has 20 digits), and far below
# the 4,300 digits past which Python's int() raises ValueError inside the router (a 500).
MAX_JSON_INTEGER_DIGITS = 100
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
# A JSON string (to its closing quote, or to the end if unterminated) or one bracket. Possessive
# quantifiers keep the scan linear on long strings.
_JSON_TOKEN = re.compile(r'"(?:[^"\\]++|\\.)*+"?|[\[\]{}]', re.DOTALL)

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


def _error_headers(status: int, retry_after: float | None = None) -> dict[str, str]:
    headers: dict[str, str] = {}
    if status == HTTPStatus.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    if status in (HTTPStatus.SERVICE_UNAVAILABLE, HTTPStatus.TOO_MANY_REQUESTS):
        headers["Retry-After"] = str(max(1, math.ceil(retry_after or 5)))
    return headers


def _error_response(
    status: int,
    code: str,
    message: str,
    details: Any = None,
    *,
    headers: dict[str, str] | None = None,
    retry_after: float | None = None,
) -> Response[Any]:
    all_headers = _error_headers(status, retry_after) | (headers or {})
    return _json(status, ErrorBody(code=code, message=message, details=details), all_headers)


def _authenticate(
    resolver: APIGatewayHttpResolver, next_middleware: Callable[..., Response[Any]]
) -> Response[Any]:
    path = resolver.current_event.path
    if path not in PUBLIC_PATHS and not path.startswith(PUBLIC_PREFIXES):
        event = resolver.current_event
        claims = event.raw_event.get("requestContext", {}).get("authorizer", {}).get("jwt", {}).get("claims")
        principal = service().authenticate(event.headers.get("authorization"), claims)
        resolver.append_context(principal=principal)  # type: ignore[no-untyped-call]
        logger.thread_safe_append_keys(userId=principal.user_id)
    return next_middleware(resolver)


app.use([_authenticate])


@app.exception_handler(RequestError)  # type: ignore[untyped-decorator]
def _request_error(error: RequestError) -> Response[Any]:
    if isinstance(error, ServiceUnavailableError):
        logger.warning("request refused: dependency unavailable", extra={"code": error.code})
    limited = (RateLimitedError, TenantRateLimitedError, StageSpendCapReachedError)
    retry_after = error.retry_after if isinstance(error, limited) else None
    return _error_response(error.status, error.code, error.message, error.details, retry_after=retry_after)


# The synchronous path calls the provider inside the request: its classified errors become HTTP
# here (the queued path records them on the job row instead). Most specific class first.
_PROVIDER_ERRORS: tuple[tuple[type[ProviderError], int, str, str], ...] = (
    (InvalidInputError, 422, "invalid_input", "the provider refused the input"),
    (InputTooLargeError, 413, "input_too_large", "the input is too large for the provider"),
    (ThrottledError, 503, "provider_throttled", "the provider is busy; retry later"),
    (ProviderError, 503, "provider_unavailable", "the provider is unavailable; retry later"),
)


@app.exception_handler(ProviderError)  # type: ignore[untyped-decorator]
def _provider_error(error: ProviderError) -> Response[Any]:
    status, code, message = next((s, c, m) for cls, s, c, m in _PROVIDER_ERRORS if isinstance(error, cls))
    logger.warning("provider call refused", extra={"code": code, "errorClass": error.error_class})
    retry_after = error.retry_after if isinstance(error, ThrottledError) else None
    return _error_response(status, code, message, retry_after=retry_after)


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


# --- the OpenAPI contract ------------------------------------------------------------------------

_ERROR_DESCRIPTIONS: dict[int, str] = {
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
_ERROR_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"description": "`Bearer`", "schema": {"type": "string"}}},
    429: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}},
    503: {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}},
}
# Every authenticated operation can answer these; each route adds what its own logic can refuse.
_COMMON_ERRORS = (401, 422, 500)


def _responses(
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
    for code in sorted({*_COMMON_ERRORS, *errors}):
        error: OpenAPIResponse = {
            "description": _ERROR_DESCRIPTIONS[code],
            "content": {"application/json": {"model": ErrorBody}},
        }
        if code in _ERROR_HEADERS:
            error["headers"] = _ERROR_HEADERS[code]
        documented[code] = error
    return documented


def _principal() -> Any:
    principal = app.context.get("principal")
    if principal is None:
        raise UnauthorizedError("not authenticated")
    return principal


@app.post(
    "/jobs",
    summary="Submit a job",
    operation_id="createJob",
    tags=["jobs"],
    responses=_responses(
        202,
        "accepted and queued (or the same job again, for a replayed Idempotency-Key)",
        400, 402, 409, 413, 415, 429, 503,
        model=JobAccepted,
        headers={"Location": {"description": "the job's URL", "schema": {"type": "string"}}},
    ),
)  # fmt: skip
def create_job(
    body: JobRequest,
    idempotency_key: Annotated[
        str | None,
        # Documented, but checked by the service: a bad key is a 400, not a schema error.
        Header(alias="Idempotency-Key", json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN}),
    ] = None,
) -> Response[JobAccepted]:
    job, replayed = service().submit(_principal(), body, idempotency_key)
    accepted = JobAccepted(
        jobId=job.job_id,
        status=job.status,
        kind=job.kind,
        createdAt=job.created_at,
        links=links(job),
    )
    headers = {"Location": f"/jobs/{job.job_id}"}
    if replayed:
        headers["Idempotent-Replayed"] = "true"
    return Response(
        status_code=202, content_type=content_types.APPLICATION_JSON, body=accepted, headers=headers
    )


@app.post(
    "/uploads",
    summary="Get a presigned form to upload a job input",
    operation_id="createUpload",
    tags=["uploads"],
    responses=_responses(
        201,
        "upload the file with this form, then submit a job with its `inputRef`",
        400, 413, 415,
        model=PresignedUpload,
    ),
)  # fmt: skip
def create_upload(body: UploadRequest) -> Response[PresignedUpload]:
    upload = service().create_upload(_principal(), body)
    return Response(status_code=201, content_type=content_types.APPLICATION_JSON, body=upload)


@app.get(
    "/jobs/<job_id>",
    summary="Get one of your jobs",
    operation_id="getJob",
    tags=["jobs"],
    responses=_responses(200, "the job (with `wait`: once finished, or as it is when the wait ends)", 404),
)
def get_job(
    job_id: str,
    wait: Annotated[
        int,
        Query(
            ge=0,
            le=LONG_POLL_MAX_SECONDS,
            description="long-poll: answer as soon as the job is finished (`succeeded` or `failed_final`), "
            f"or after this many seconds (at most {LONG_POLL_MAX_SECONDS}) with the job as it is then",
        ),
    ] = 0,
) -> JobView:
    svc = service()
    if not wait:
        return svc.view(svc.get(_principal(), job_id))
    return svc.view(svc.wait_for(_principal(), job_id, min(wait, _seconds_left() - LONG_POLL_MARGIN_SECONDS)))


# A long-poll answers this long before its function would time out, whatever `wait` says.
LONG_POLL_MARGIN_SECONDS = 2.0


def _seconds_left() -> float:
    remaining = getattr(app.lambda_context, "get_remaining_time_in_millis", None)
    if not callable(remaining):  # no Lambda context (a direct call): the longest wait applies
        return float(LONG_POLL_MAX_SECONDS + LONG_POLL_MARGIN_SECONDS)
    return float(remaining()) / 1000


@app.post(
    "/jobs/<job_id>/cancel",
    summary="Cancel one of your jobs (a workflow's children not started yet never run)",
    operation_id="cancelJob",
    tags=["jobs"],
    responses=_responses(
        200,
        "the job, now failed_final with error class `cancelled` (refunded)",
        404, 409, 503,
        model=JobView,
        extra={
            202: "the job's attempt is running: it finishes (charged if it succeeds), then the job is "
            "never tried again; the job, still running, with `cancelRequestedAt`",
        },
    ),
)  # fmt: skip
def cancel_job(job_id: str) -> Response[JobView]:
    svc = service()
    job = svc.cancel(_principal(), job_id)
    return Response(
        status_code=200 if job.status.is_terminal else 202,
        content_type=content_types.APPLICATION_JSON,
        body=svc.view(job),
    )


@app.get(
    "/jobs/<job_id>/children",
    summary="A workflow job's children (its parts), in part order",
    operation_id="listJobChildren",
    tags=["jobs"],
    responses=_responses(200, "one page of the job's children", 400, 404),
)
def list_children(
    job_id: str,
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> JobList:
    svc = service()
    page = svc.children(_principal(), job_id, status=status, limit=limit, cursor=cursor)
    return JobList(jobs=[svc.view(job) for job in page.jobs], nextCursor=page.cursor)


@app.get(
    "/jobs",
    summary="List your jobs, newest first",
    operation_id="listJobs",
    tags=["jobs"],
    responses=_responses(200, "one page of your jobs", 400),
)
def list_jobs(
    status: Annotated[JobStatus | None, Query()] = None,
    kind: Annotated[str | None, Query(max_length=80)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> JobList:
    svc = service()
    page = svc.list_jobs(_principal(), status=status, kind=kind, limit=limit, cursor=cursor)
    return JobList(jobs=[svc.view(job) for job in page.jobs], nextCursor=page.cursor)


@app.get(
    "/credits",
    summary="Your credit balance, grants and recent transactions",
    operation_id="getCredits",
    tags=["credits"],
    responses=_responses(200, "your credits"),
)
def get_credits(limit: Annotated[int, Query(ge=1, le=100)] = 20) -> CreditsView:
    return service().credits(_principal(), limit=limit)


@app.post(
    "/webhooks/secret",
    summary="Create or rotate your webhook signing secret (shown once)",
    operation_id="rotateWebhookSecret",
    tags=["webhooks"],
    responses=_responses(
        201, "the new secret; a replaced one still signs deliveries for 24 hours", 409,
        model=WebhookSecretIssued,
    ),
)  # fmt: skip
def rotate_webhook_secret() -> Response[WebhookSecretIssued]:
    issued = service().rotate_webhook_secret(_principal())
    body = WebhookSecretIssued(
        secret=issued.secret, createdAt=issued.created_at, previousExpiresAt=issued.previous_expires_at
    )
    # The secret is in this answer only: no cache may keep it.
    return Response(
        status_code=201, content_type=content_types.APPLICATION_JSON, body=body,
        headers={"Cache-Control": "no-store"},
    )  # fmt: skip


@app.get(
    "/webhooks/secret",
    summary="Whether you have a webhook signing secret (never the secret itself)",
    operation_id="getWebhookSecret",
    tags=["webhooks"],
    responses=_responses(200, "whether a secret exists, and since when"),
)
def get_webhook_secret() -> WebhookSecretStatus:
    status = service().webhook_secret(_principal())
    return WebhookSecretStatus(
        exists=status.exists, createdAt=status.created_at, previousExpiresAt=status.previous_expires_at
    )


@app.post(
    "/classify",
    summary="Classify a short text synchronously (no queue); each call costs classify's price",
    operation_id="classify",
    tags=["classify"],
    responses=_responses(
        200,
        "the label, charged (or the same answer again, not charged again, for a replayed Idempotency-Key)",
        400, 402, 409, 413, 415, 429, 503,
        model=ClassifyResponse,
    ),
)  # fmt: skip
def classify(
    body: ClassifyRequest,
    idempotency_key: Annotated[
        str | None,
        Header(alias="Idempotency-Key", json_schema_extra={"pattern": IDEMPOTENCY_KEY_PATTERN}),
    ] = None,
) -> Response[ClassifyResponse]:
    svc = service()
    job, replayed = svc.classify(_principal(), body, idempotency_key)
    headers = {"Idempotent-Replayed": "true"} if replayed else None
    return Response(
        status_code=200,
        content_type=content_types.APPLICATION_JSON,
        body=svc.classify_view(job),
        headers=headers,
    )


# --- the operator routes and the console (aijobs.api.admin; docs/operations/console.md) ---------------------

_admin_factory: Callable[[], AdminService] | None = None


def configure_admin(factory: Callable[[], AdminService]) -> None:
    """Tell the operator routes where their service comes from (the handler passes the runtime one)."""
    global _admin_factory
    _admin_factory = factory


def _admin(route: str) -> tuple[AdminService, str]:
    """The operator service and the caller's key id, after the role check and the rate limit."""
    assert _admin_factory is not None, "aijobs.api.app.configure_admin() was not called"
    admin = _admin_factory()
    operator_id = require_operator(
        _principal(), app.current_event.headers.get("authorization"), admin.limiter, route
    )
    return admin, operator_id


_ADMIN_ERRORS = (403, 429)
_UserId = Annotated[str, Path(min_length=1, max_length=128)]
_JobId = Annotated[str, Path(min_length=1, max_length=40)]


@app.get(
    "/admin/overview",
    summary="Each kind at a glance: backlog, oldest queued job, paused, the last hours (operators)",
    operation_id="adminOverview",
    tags=["admin"],
    responses=_responses(200, "one entry per kind", *_ADMIN_ERRORS),
)
def admin_overview() -> Overview:
    admin, _ = _admin("overview")
    return admin.overview()


@app.get(
    "/admin/jobs",
    summary="Jobs of every tenant, newest change first, filtered (operators)",
    operation_id="adminListJobs",
    tags=["admin"],
    responses=_responses(200, "one page of jobs", 400, *_ADMIN_ERRORS),
)
def admin_list_jobs(
    kind: Annotated[str | None, Query(max_length=80)] = None,
    status: Annotated[JobStatus | None, Query()] = None,
    error_class: Annotated[str | None, Query(alias="errorClass", max_length=80)] = None,
    tenant: Annotated[str | None, Query(min_length=1, max_length=128)] = None,
    since: Annotated[IsoTime | None, Query(description="changed after this time")] = None,
    until: Annotated[IsoTime | None, Query(description="changed before this time")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 25,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> AdminJobList:
    admin, _ = _admin("jobs")
    jobs, next_cursor = admin.list_jobs(
        kind=kind, status=status, error_class=error_class, tenant=tenant, since=as_utc(since),
        until=as_utc(until), limit=limit, cursor=cursor,
    )  # fmt: skip
    return AdminJobList(jobs=[admin_job(job) for job in jobs], nextCursor=next_cursor)


@app.get(
    "/admin/jobs/<user_id>/<job_id>",
    summary="One job of any tenant, with its attempt timeline (operators)",
    operation_id="adminGetJob",
    tags=["admin"],
    responses=_responses(200, "the job", 404, *_ADMIN_ERRORS),
)
def admin_get_job(user_id: _UserId, job_id: _JobId) -> AdminJobDetail:
    admin, _ = _admin("job")
    return admin_job_detail(admin.job(user_id, job_id))


@app.post(
    "/admin/jobs/<user_id>/<job_id>/rerun",
    summary="Re-run a failed job: a fresh attempt budget, queued again (operators)",
    operation_id="adminRerunJob",
    tags=["admin"],
    responses=_responses(200, "the job, queued again", 404, 409, *_ADMIN_ERRORS),
)
def admin_rerun_job(user_id: _UserId, job_id: _JobId) -> AdminJobDetail:
    admin, operator_id = _admin("rerun")
    try:
        return admin_job_detail(admin.rerun(user_id, job_id, operator_id))
    except TransitionConflict:
        raise ConflictError(f"job {job_id} cannot be re-run now", code="not_rerunnable") from None


@app.post(
    "/admin/jobs/<user_id>/<job_id>/fail-final",
    summary="Give up on a job for good (operators)",
    operation_id="adminFailFinal",
    tags=["admin"],
    responses=_responses(200, "the job, now failed_final", 400, 404, 409, 415, *_ADMIN_ERRORS),
)
def admin_fail_final(user_id: _UserId, job_id: _JobId, body: FailFinalRequest) -> AdminJobDetail:
    admin, operator_id = _admin("fail-final")
    try:
        return admin_job_detail(admin.fail_final(user_id, job_id, body.reason, operator_id))
    except TransitionConflict:
        raise ConflictError(f"job {job_id} finished meanwhile", code="job_finished") from None


@app.post(
    "/admin/reruns",
    summary="Re-run a kind's failed_final jobs after a fix; a dry run only counts them (operators)",
    operation_id="adminBatchRerun",
    tags=["admin"],
    responses=_responses(200, "what matched, and what was re-run", 400, 415, *_ADMIN_ERRORS),
)
def admin_batch_rerun(body: BatchRerunRequest) -> BatchRerunView:
    admin, operator_id = _admin("batch-rerun")
    request = body.model_copy(update={"since": as_utc(body.since), "until": as_utc(body.until)})
    return admin.rerun_batch(request, operator_id, seconds_left=_seconds_left)


@app.get(
    "/admin/dead-letters",
    summary="The open dead letters, newest first, each with what became of its job (operators)",
    operation_id="adminDeadLetters",
    tags=["admin"],
    responses=_responses(200, "the entries", *_ADMIN_ERRORS),
)
def admin_dead_letters(
    kind: Annotated[str | None, Query(max_length=80)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    include_resolved: Annotated[
        bool,
        Query(
            alias="all",
            description="also the resolved ones (re-run and succeeded, failed "
            "by an operator, cancelled, gone)",
        ),
    ] = False,
) -> DeadLetterList:
    admin, _ = _admin("dead-letters")
    return DeadLetterList(deadLetters=admin.dead_letters(kind, limit, include_resolved=include_resolved))


@app.post(
    "/admin/kinds/<kind>/pause",
    summary="Stop a kind's consumer (messages wait in the queue) (operators)",
    operation_id="adminPauseKind",
    tags=["admin"],
    responses=_responses(200, "the consumer, paused", *_ADMIN_ERRORS),
)
def admin_pause(kind: Annotated[str, Path(max_length=80)]) -> ConsumerState:
    admin, operator_id = _admin("pause")
    return admin.set_paused(kind, True, operator_id)


@app.post(
    "/admin/kinds/<kind>/resume",
    summary="Start a kind's consumer again (operators)",
    operation_id="adminResumeKind",
    tags=["admin"],
    responses=_responses(200, "the consumer, consuming", *_ADMIN_ERRORS),
)
def admin_resume(kind: Annotated[str, Path(max_length=80)]) -> ConsumerState:
    admin, operator_id = _admin("resume")
    return admin.set_paused(kind, False, operator_id)


@app.get(
    "/admin/tenants/<user_id>/credits",
    summary="A tenant's credit balance, grants and recent transactions (operators)",
    operation_id="adminTenantCredits",
    tags=["admin"],
    responses=_responses(200, "the tenant's credits", 404, *_ADMIN_ERRORS),
)
def admin_tenant_credits(user_id: _UserId, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> CreditsView:
    admin, _ = _admin("credits")
    if admin.directory.shard_for(user_id) is None:
        raise NotFoundError(f"no tenant {user_id!r}")
    return service().credits(Principal(user_id=user_id), limit=limit)


@app.get(
    "/admin/spend",
    summary="The stage's model spend today (operators)",
    operation_id="adminSpend",
    tags=["admin"],
    responses=_responses(200, "today's spend", *_ADMIN_ERRORS),
)
def admin_spend() -> SpendView:
    admin, _ = _admin("spend")
    return admin.spend_today()


# The console is static: no inline script or style, nothing from elsewhere, no framing.
CONSOLE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_CONSOLE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


@lru_cache(maxsize=len(_CONSOLE_FILES))
def _console_file(name: str) -> str:
    return resources.files("aijobs.api").joinpath("console", name).read_text(encoding="utf-8")


@app.get("/console", include_in_schema=False)
def console_page() -> Response[str]:
    return _console_response("index.html")


@app.get("/console/<asset>", include_in_schema=False)
def console_asset(asset: str) -> Response[Any]:
    if asset not in _CONSOLE_FILES or asset == "index.html":
        return _error_response(404, "route_not_found", "no such console file")
    return _console_response(asset)


def _console_response(name: str) -> Response[str]:
    return Response(
        status_code=200, content_type=_CONSOLE_FILES[name], body=_console_file(name), headers=CONSOLE_HEADERS
    )


@app.get("/openapi.json", include_in_schema=False)
def openapi() -> Response[Any]:
    document = _openapi_document(tuple(service().queues.kinds))
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=document)


@lru_cache(maxsize=4)
def _openapi_document(kinds: tuple[str, ...]) -> str:
    """The generated document, with what the generator cannot express patched in.

    The stage's kinds are configuration, not code: `kind` becomes an enum of them here.
    """
    # powertools' OpenAPI models (a hundred pydantic classes) load here, on the first request for
    # the document: no other route needs them.
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    document: dict[str, Any] = json.loads(
        app.get_openapi_json_schema(
            title="aijobs",
            version=API_VERSION,
            description=(
                "Submit asynchronous AI jobs and poll their status. Every error is an `ErrorBody`; "
                "a known path called with another method answers 405 with an `Allow` header."
            ),
            security_schemes={"apiKey": HTTPBearer(description="Authorization: Bearer <api key>")},
            security=[{"apiKey": []}],
        )
    )
    kind_schema = {"type": "string", "enum": list(kinds)}
    document["components"]["schemas"]["JobRequest"]["properties"]["kind"].update(kind_schema)
    _describe_kind_options(document, kinds)
    document["components"]["schemas"]["BatchRerunRequest"]["properties"]["kind"].update(kind_schema)
    listings = [("/jobs", "get"), *[(path, method) for path in document["paths"] if path.startswith("/admin/")
                                    for method in document["paths"][path]]]  # fmt: skip
    for path, method in listings:
        for parameter in document["paths"][path][method].get("parameters", []):
            if parameter["name"] == "kind":
                parameter["schema"] = {**kind_schema, "title": "Kind"}
    return json.dumps(document)


def _describe_kind_options(document: dict[str, Any], kinds: tuple[str, ...]) -> None:
    """Each kind's options model as a component schema (`<Kind>Options`), and the map from kind to
    it on `JobRequest.options` (`x-options-by-kind`): what `POST /jobs` checks at submit."""
    from aijobs.kinds.registry import kind as kind_of
    from aijobs.workflows.registry import workflow

    schemas = document["components"]["schemas"]
    by_kind: dict[str, dict[str, str]] = {}
    for name in kinds:
        definition = workflow(name)
        declaration = kind_of(definition.child_kind if definition is not None else name)
        if declaration is None:
            continue
        schema = declaration.options_model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        if definition is not None:  # a workflow takes its own options besides its child kind's
            for option in definition.all_options:
                kind = "integer" if option.integer else "number"
                schema.setdefault("properties", {})[option.name] = {
                    "type": kind, "minimum": option.low, "maximum": option.high,
                    "default": option.default, "description": option.doc,
                }  # fmt: skip
        component = "".join(part.title() for part in name.split("-")) + "Options"
        schema["title"] = component
        schema["description"] = f"options of `{name}`: {declaration.description}"
        schemas[component] = schema
        by_kind[name] = {"$ref": f"#/components/schemas/{component}"}
    options = schemas["JobRequest"]["properties"]["options"]
    options["x-options-by-kind"] = by_kind
    options["description"] = "kind-specific options: see x-options-by-kind (an unknown option is a 422)"


# --- the Lambda entry ------------------------------------------------------------------------------


def resolve(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """The Lambda entry: screen the raw request, then route.

    A wrong method on a known path is a 405; a body must be JSON (schema validation would half-parse
    a form-encoded body into confusing errors), valid UTF-8 (base64 bodies are decoded here), of a
    sane size and nesting depth, without integers too long to convert. The router then sees the
    decoded text.
    """
    method = str(event.get("requestContext", {}).get("http", {}).get("method", "")).upper()
    allowed = _allowed_methods(APIGatewayProxyEventV2(event).path)
    try:
        if allowed and method not in allowed:
            raise MethodNotAllowedError(
                f"{method or 'this method'} is not allowed here", details={"allowed": allowed}
            )
        if allowed and method in _BODY_METHODS:
            event = _screened_body(event)
    except RequestError as error:
        logger.warning("request refused before routing", extra={"code": error.code, "status": error.status})
        extra = {"Allow": ", ".join(allowed)} if isinstance(error, MethodNotAllowedError) else {}
        refusal = ErrorBody(code=error.code, message=error.message, details=error.details)
        return {
            "statusCode": error.status,
            "headers": {"Content-Type": "application/json", **_error_headers(error.status), **extra},
            "body": refusal.model_dump_json(),
            "isBase64Encoded": False,
        }
    return app.resolve(event, context)


def _allowed_methods(path: str) -> list[str]:
    """The methods registered for `path`: powertools answers 404 for a method mismatch, we 405."""
    routes: Iterable[Any] = [*app._static_routes, *app._dynamic_routes]
    return sorted({route.method for route in routes if route.rule.match(path)})


def _screened_body(event: dict[str, Any]) -> dict[str, Any]:
    """The event with its body as checked UTF-8 text (never base64), or a RequestError.

    A request without a body needs no `Content-Type` (`POST /jobs/{id}/cancel`; a route that needs
    a body answers 422 for the missing one)."""
    body = event.get("body")
    if not body:
        return event
    headers = {key.lower(): value for key, value in (event.get("headers") or {}).items()}
    content_type = str(headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise UnsupportedMediaTypeError(
            f"send the body as JSON with `Content-Type: application/json` (got {content_type or 'none'!r})"
        )
    if event.get("isBase64Encoded"):
        try:
            raw = base64.b64decode(body, validate=True)
        except ValueError:  # binascii.Error, or non-ASCII text
            raise InvalidBodyEncodingError("the body is not valid base64", code="invalid_base64") from None
    else:
        try:
            raw = body.encode("utf-8")
        except UnicodeEncodeError:  # unpaired surrogates smuggled into a text body
            raise InvalidBodyEncodingError("the body is not valid UTF-8") from None
    if len(raw) > MAX_BODY_BYTES:
        raise BodyTooLargeError(
            f"the body is {len(raw)} bytes; the limit is {MAX_BODY_BYTES}",
            details={"limit": MAX_BODY_BYTES},
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidBodyEncodingError("the body is not valid UTF-8") from None
    if json_depth_exceeds(text, MAX_JSON_DEPTH):
        raise JsonTooDeepError(
            f"the JSON body nests deeper than {MAX_JSON_DEPTH} levels", details={"limit": MAX_JSON_DEPTH}
        )
    if json_integer_too_long(text, MAX_JSON_INTEGER_DIGITS):
        raise JsonNumberTooLongError(
            f"the JSON body has an integer of more than {MAX_JSON_INTEGER_DIGITS} digits "
            "(send such a value as a string)",
            details={"limit": MAX_JSON_INTEGER_DIGITS},
        )
    return {**event, "body": text, "isBase64Encoded": False}


class _IntegerTooLong(Exception):
    pass


def json_integer_too_long(text: str, limit: int) -> bool:
    """True when `text` holds an integer literal of more than `limit` digits (outside strings).

    Parses `text` as the router will (json.loads, so only after the depth check), looking at each
    integer literal before it is converted. Invalid JSON is left to the router to refuse, unless an
    over-long integer comes before its first error (the router would convert that one too).
    """

    def parse_int(literal: str) -> int:
        if len(literal.lstrip("-")) > limit:
            raise _IntegerTooLong
        return int(literal)

    try:
        json.loads(text, parse_int=parse_int)
    except _IntegerTooLong:
        return True
    except ValueError:  # json.JSONDecodeError: not JSON at all
        return False
    return False


def json_depth_exceeds(text: str, limit: int) -> bool:
    """True when `text` opens more than `limit` nested arrays/objects, found without recursion.

    Brackets inside strings do not count. On invalid JSON the count may be off after the first
    error, but a parser stops there too, so it never recurses deeper than this scan saw.
    """
    depth = 0
    for match in _JSON_TOKEN.finditer(text):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            if depth > limit:
                return True
        elif token in ("]", "}"):
            depth -= 1
    return False
