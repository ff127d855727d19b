"""`/admin`: the operator API (aijobs.api.admin; docs/operations/console.md)."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Path, Query

from aijobs.api.admin import AdminService, admin_job, admin_job_detail, as_utc
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
from aijobs.api.auth import operator
from aijobs.api.errors import responses
from aijobs.api.routes.jobs import seconds_left
from aijobs.api.schemas import CreditsView
from aijobs.api.wiring import service
from aijobs.domain import JobStatus
from aijobs.errors import ConflictError, NotFoundError, TransitionConflict
from aijobs.store.tenants import Principal

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


def _admin(route: str) -> tuple[AdminService, str]:
    return operator(router, route)


_ADMIN_ERRORS = (403, 429)
_UserId = Annotated[str, Path(min_length=1, max_length=128)]
_JobId = Annotated[str, Path(min_length=1, max_length=40)]


@router.get(
    "/admin/overview",
    summary="Each kind at a glance: backlog, oldest queued job, paused, the last hours (operators)",
    operation_id="adminOverview",
    tags=["admin"],
    responses=responses(200, "one entry per kind", *_ADMIN_ERRORS),
)
def admin_overview() -> Overview:
    admin, _ = _admin("overview")
    return admin.overview()


@router.get(
    "/admin/jobs",
    summary="Jobs of every tenant, newest change first, filtered (operators)",
    operation_id="adminListJobs",
    tags=["admin"],
    responses=responses(200, "one page of jobs", 400, *_ADMIN_ERRORS),
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


@router.get(
    "/admin/jobs/<user_id>/<job_id>",
    summary="One job of any tenant, with its attempt timeline (operators)",
    operation_id="adminGetJob",
    tags=["admin"],
    responses=responses(200, "the job", 404, *_ADMIN_ERRORS),
)
def admin_get_job(user_id: _UserId, job_id: _JobId) -> AdminJobDetail:
    admin, _ = _admin("job")
    return admin_job_detail(admin.job(user_id, job_id))


@router.post(
    "/admin/jobs/<user_id>/<job_id>/rerun",
    summary="Re-run a failed job: a fresh attempt budget, queued again (operators)",
    operation_id="adminRerunJob",
    tags=["admin"],
    responses=responses(200, "the job, queued again", 404, 409, *_ADMIN_ERRORS),
)
def admin_rerun_job(user_id: _UserId, job_id: _JobId) -> AdminJobDetail:
    admin, operator_id = _admin("rerun")
    try:
        return admin_job_detail(admin.rerun(user_id, job_id, operator_id))
    except TransitionConflict:
        raise ConflictError(f"job {job_id} cannot be re-run now", code="not_rerunnable") from None


@router.post(
    "/admin/jobs/<user_id>/<job_id>/fail-final",
    summary="Give up on a job for good (operators)",
    operation_id="adminFailFinal",
    tags=["admin"],
    responses=responses(200, "the job, now failed_final", 400, 404, 409, 415, *_ADMIN_ERRORS),
)
def admin_fail_final(user_id: _UserId, job_id: _JobId, body: FailFinalRequest) -> AdminJobDetail:
    admin, operator_id = _admin("fail-final")
    try:
        return admin_job_detail(admin.fail_final(user_id, job_id, body.reason, operator_id))
    except TransitionConflict:
        raise ConflictError(f"job {job_id} finished meanwhile", code="job_finished") from None


@router.post(
    "/admin/reruns",
    summary="Re-run a kind's failed_final jobs after a fix; a dry run only counts them (operators)",
    operation_id="adminBatchRerun",
    tags=["admin"],
    responses=responses(200, "what matched, and what was re-run", 400, 415, *_ADMIN_ERRORS),
)
def admin_batch_rerun(body: BatchRerunRequest) -> BatchRerunView:
    admin, operator_id = _admin("batch-rerun")
    request = body.model_copy(update={"since": as_utc(body.since), "until": as_utc(body.until)})
    return admin.rerun_batch(request, operator_id, seconds_left=lambda: seconds_left(router))


@router.get(
    "/admin/dead-letters",
    summary="The open dead letters, newest first, each with what became of its job (operators)",
    operation_id="adminDeadLetters",
    tags=["admin"],
    responses=responses(200, "the entries", *_ADMIN_ERRORS),
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


@router.post(
    "/admin/kinds/<kind>/pause",
    summary="Stop a kind's consumer (messages wait in the queue) (operators)",
    operation_id="adminPauseKind",
    tags=["admin"],
    responses=responses(200, "the consumer, paused", *_ADMIN_ERRORS),
)
def admin_pause(kind: Annotated[str, Path(max_length=80)]) -> ConsumerState:
    admin, operator_id = _admin("pause")
    return admin.set_paused(kind, True, operator_id)


@router.post(
    "/admin/kinds/<kind>/resume",
    summary="Start a kind's consumer again (operators)",
    operation_id="adminResumeKind",
    tags=["admin"],
    responses=responses(200, "the consumer, consuming", *_ADMIN_ERRORS),
)
def admin_resume(kind: Annotated[str, Path(max_length=80)]) -> ConsumerState:
    admin, operator_id = _admin("resume")
    return admin.set_paused(kind, False, operator_id)


@router.get(
    "/admin/tenants/<user_id>/credits",
    summary="A tenant's credit balance, grants and recent transactions (operators)",
    operation_id="adminTenantCredits",
    tags=["admin"],
    responses=responses(200, "the tenant's credits", 404, *_ADMIN_ERRORS),
)
def admin_tenant_credits(user_id: _UserId, limit: Annotated[int, Query(ge=1, le=100)] = 20) -> CreditsView:
    admin, _ = _admin("credits")
    if admin.directory.shard_for(user_id) is None:
        raise NotFoundError(f"no tenant {user_id!r}")
    return service().credits(Principal(user_id=user_id), limit=limit)


@router.get(
    "/admin/spend",
    summary="The stage's model spend today (operators)",
    operation_id="adminSpend",
    tags=["admin"],
    responses=responses(200, "today's spend", *_ADMIN_ERRORS),
)
def admin_spend() -> SpendView:
    admin, _ = _admin("spend")
    return admin.spend_today()
