"""`/jobs`: submit, read, long-poll, cancel and list your jobs, and a workflow's children."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import BaseRouter, Router
from aws_lambda_powertools.event_handler.openapi.params import Header, Query

from aijobs.api.auth import principal
from aijobs.api.errors import responses
from aijobs.api.schemas import JobAccepted, JobList, JobRequest, JobView
from aijobs.api.service import LONG_POLL_MAX_SECONDS, links
from aijobs.api.submission import IDEMPOTENCY_KEY_PATTERN
from aijobs.api.wiring import service
from aijobs.domain import JobStatus

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


@router.post(
    "/jobs",
    summary="Submit a job",
    operation_id="createJob",
    tags=["jobs"],
    responses=responses(
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
    job, replayed = service().submit(principal(router), body, idempotency_key)
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


@router.get(
    "/jobs/<job_id>",
    summary="Get one of your jobs",
    operation_id="getJob",
    tags=["jobs"],
    responses=responses(200, "the job (with `wait`: once finished, or as it is when the wait ends)", 404),
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
        return svc.view(svc.get(principal(router), job_id))
    return svc.view(
        svc.wait_for(principal(router), job_id, min(wait, seconds_left(router) - LONG_POLL_MARGIN_SECONDS))
    )


# A long-poll answers this long before its function would time out, whatever `wait` says.
LONG_POLL_MARGIN_SECONDS = 2.0


def seconds_left(router: BaseRouter) -> float:
    """The invocation's remaining time (a long-poll's and the admin batch re-run's limit)."""
    remaining = getattr(router.lambda_context, "get_remaining_time_in_millis", None)
    if not callable(remaining):  # no Lambda context (a direct call): the longest wait applies
        return float(LONG_POLL_MAX_SECONDS + LONG_POLL_MARGIN_SECONDS)
    return float(remaining()) / 1000


@router.post(
    "/jobs/<job_id>/cancel",
    summary="Cancel one of your jobs (a workflow's children not started yet never run)",
    operation_id="cancelJob",
    tags=["jobs"],
    responses=responses(
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
    job = svc.cancel(principal(router), job_id)
    return Response(
        status_code=200 if job.status.is_terminal else 202,
        content_type=content_types.APPLICATION_JSON,
        body=svc.view(job),
    )


@router.get(
    "/jobs/<job_id>/children",
    summary="A workflow job's children (its parts), in part order",
    operation_id="listJobChildren",
    tags=["jobs"],
    responses=responses(200, "one page of the job's children", 400, 404),
)
def list_children(
    job_id: str,
    status: Annotated[JobStatus | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 50,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> JobList:
    svc = service()
    page = svc.children(principal(router), job_id, status=status, limit=limit, cursor=cursor)
    return JobList(jobs=[svc.view(job) for job in page.jobs], nextCursor=page.cursor)


@router.get(
    "/jobs",
    summary="List your jobs, newest first",
    operation_id="listJobs",
    tags=["jobs"],
    responses=responses(200, "one page of your jobs", 400),
)
def list_jobs(
    status: Annotated[JobStatus | None, Query()] = None,
    kind: Annotated[str | None, Query(max_length=80)] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    cursor: Annotated[str | None, Query(max_length=2000)] = None,
) -> JobList:
    svc = service()
    page = svc.list_jobs(principal(router), status=status, kind=kind, limit=limit, cursor=cursor)
    return JobList(jobs=[svc.view(job) for job in page.jobs], nextCursor=page.cursor)
