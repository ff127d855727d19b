"""What the API does, independent of HTTP: `JobService` submits (its submission steps are
aijobs.api.submission's `JobSubmission`), reads, waits for, lists and cancels jobs, shows credits,
issues upload forms and webhook secrets, and runs the synchronous `classify` call; and how a job
is shown (its view, links and callback)."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit

from aijobs.api.schemas import (
    ArtifactLink,
    CallbackView,
    ClassifyRequest,
    ClassifyResponse,
    CreditsView,
    DaySpend,
    GrantView,
    JobView,
    Links,
    PresignedUpload,
    Progress,
    TransactionView,
    UploadRequest,
)
from aijobs.api.submission import JobSubmission, check_idempotency_key, request_hash
from aijobs.bindings import DEFAULT_JWT_OPERATOR_GROUP
from aijobs.domain import Job, JobStatus
from aijobs.errors import (
    CANCELLED,
    ConflictError,
    InfrastructureError,
    InputTooLargeError,
    NotFoundError,
    PayloadTooLargeError,
    ProviderError,
    ServiceUnavailableError,
    TransitionConflict,
    UnauthorizedError,
    UnprocessableError,
    UnsupportedUploadTypeError,
    UploadTooLargeError,
    classify_exception,
)
from aijobs.ids import new_job_id
from aijobs.job_end import job_ended
from aijobs.kinds.base import Kind
from aijobs.kinds.registry import kind as kind_of
from aijobs.kinds.run import Step, check_input, run
from aijobs.observability import METRIC_MODEL_SPEND, emit, logger
from aijobs.pricing import spend
from aijobs.provider_plan import CLASSIFY, KindPlan
from aijobs.providers.base import Provider
from aijobs.spend import day_of
from aijobs.store.job_creation import IdempotencyKeyExists
from aijobs.store.job_queries import Page
from aijobs.store.jobs import JobStore
from aijobs.store.results import UPLOAD_RULES, new_input_key
from aijobs.store.tenants import OPERATOR_ROLE, USER_ROLE, Principal
from aijobs.webhooks.secrets import IssuedSecret, SecretStatus

# GET /credits shows this much of the tenant's model spend per day.
SPEND_HISTORY = timedelta(days=30)
# A cancel re-reads a row that changed under it (claimed, retried) at most this many times.
_CANCEL_TRIES = 4
# What `new_job_id` makes (a workflow child adds `.<5-digit index>`): anything else cannot be a job.
_JOB_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}(?:\.[0-9]{5})?")


def links(job: Job) -> Links:
    """Where a job's related resources are (the same in the 202 answer and in `GET /jobs/{id}`)."""
    return Links(
        self=f"/jobs/{job.job_id}",
        children=f"/jobs/{job.job_id}/children" if job.is_parent else None,
        parent=f"/jobs/{job.parent_id}" if job.parent_id else None,
        cancel=None if job.status.is_terminal else f"/jobs/{job.job_id}/cancel",
    )


def token_groups(claim: Any) -> frozenset[str]:
    """The group names of a `cognito:groups` claim, in either form it reaches the function: a list
    (the token's own JSON array), or the string API Gateway's JWT authorizer flattens an array
    into (`"[a b]"`; also `"[a, b]"`, `"a,b"`, a JSON array as text, or one name)."""
    if isinstance(claim, list | tuple):
        return frozenset(str(name) for name in claim)
    if not isinstance(claim, str):
        return frozenset()
    text = claim.strip()
    if text.startswith("["):
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            return frozenset(str(name) for name in parsed)
        text = text.removeprefix("[").removesuffix("]")
    return frozenset(name for name in re.split(r"[\s,]+", text) if name)


# GET /jobs/{id}?wait=N: the longest wait (an HTTP API integration times out at 30 s) and the
# pauses between reads of the row while the job is not finished (the last one repeats).
LONG_POLL_MAX_SECONDS = 20
LONG_POLL_BACKOFF = (0.25, 0.5, 1.0, 2.0)
# A synchronous call's row is `running` under its request's claim for this long: longer than the API
# function may run (25 s; the HTTP API gives up at 30 s), so only a call whose function died outlives
# it, and the sweeper then refunds it (aijobs.scheduled.sweeper).
SYNC_LEASE = timedelta(seconds=60)


@dataclass(kw_only=True)
class JobService(JobSubmission):
    """The API's logic: submit (JobSubmission), read, wait for, list, cancel; credits, uploads,
    webhook secrets; the synchronous `classify` call."""

    provider: Provider
    auth_mode: str = "api_key"
    # AUTH_MODE=jwt: members of exactly this Cognito group are operators (JWT_OPERATOR_GROUP).
    jwt_operator_group: str = DEFAULT_JWT_OPERATOR_GROUP
    # Long-poll pacing (GET /jobs/{id}?wait=N); tests pass a fake clock and sleep.
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic

    def authenticate(self, authorization: str | None, jwt_claims: dict[str, Any] | None = None) -> Principal:
        """The caller: from a hashed API key, or (AUTH_MODE=jwt) from the claims the gateway verified."""
        if self.auth_mode == "jwt":
            return self._from_jwt(jwt_claims or {})
        scheme, _, key = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise UnauthorizedError("send `Authorization: Bearer <api key>`", code="missing_api_key")
        principal = self.directory.authenticate(key.strip())
        if principal is None:
            raise UnauthorizedError("the API key is not valid", code="invalid_api_key")
        return principal

    def _from_jwt(self, claims: dict[str, Any]) -> Principal:
        subject = str(claims.get("sub") or "")
        if not subject:
            raise UnauthorizedError("no verified token subject", code="missing_token")
        if self.directory.shard_for(subject) is None:
            self.directory.ensure_user(subject)  # first request of a new identity: give it a tenant
        operator = self.jwt_operator_group in token_groups(claims.get("cognito:groups"))
        return Principal(user_id=subject, role=OPERATOR_ROLE if operator else USER_ROLE)

    def credits(self, principal: Principal, *, limit: int = 20) -> CreditsView:
        ledger = self._store(principal).ledger
        account = ledger.account(principal.user_id)
        now = self.clock()
        return CreditsView(
            balance=account.balance,
            grants=[
                GrantView(
                    grantId=g.grant_id, amount=g.amount, remaining=g.remaining, expiresAt=g.expires_at,
                    expired=g.expired or g.expires_at <= now,
                )
                for g in ledger.grants(principal.user_id)
            ],
            transactions=[
                TransactionView(
                    txId=t.tx_id, type=t.type, amount=t.amount, jobId=t.job_id, createdAt=t.created_at
                )
                for t in ledger.transactions(principal.user_id, limit=limit)
            ],
            prices=self.prices,
            spendCounted=self.spend is not None,
            spendByDay=self._spend_by_day(principal.user_id),
        )  # fmt: skip

    def _spend_by_day(self, user_id: str) -> list[DaySpend]:
        """The tenant's day counters of the spend brake (none when the stage counts no spend)."""
        if self.spend is None:
            return []
        shard = self.directory.shard_for(user_id)
        if shard is None:
            return []
        since = day_of(self.clock() - SPEND_HISTORY, self.spend.zone)
        return [
            DaySpend(day=day, usd=float(amount))
            for day, amount in self.spend.records.tenant_days(shard, user_id, since)
        ]

    def rotate_webhook_secret(self, principal: Principal) -> IssuedSecret:
        """Create or rotate the caller's signing secret; the old one signs for 24 hours more."""
        issued = self._webhook_secrets().rotate(principal.user_id)
        logger.info("webhook secret rotated", extra={"rotated": issued.previous_expires_at is not None})
        return issued

    def webhook_secret(self, principal: Principal) -> SecretStatus:
        return self._webhook_secrets().status(principal.user_id)

    def create_upload(self, principal: Principal, request: UploadRequest) -> PresignedUpload:
        """A presigned POST for one new object under the caller's `inputs/<userId>/`.

        Type and size are refused here with a reason; S3 enforces the same limits on the upload.
        """
        content_type = request.contentType.split(";")[0].strip().lower()
        cap = UPLOAD_RULES.get(content_type)
        if cap is None:
            raise UnsupportedUploadTypeError(
                f"content type {content_type!r} cannot be uploaded as a job input",
                details={"allowed": sorted(UPLOAD_RULES)},
            )
        if request.size > cap:
            raise UploadTooLargeError(
                f"{content_type} inputs are limited to {cap} bytes; this one is {request.size}",
                details={"contentType": content_type, "size": request.size, "limit": cap},
            )
        unique = new_job_id(int(self.clock().timestamp() * 1000))
        key = new_input_key(principal.user_id, unique, content_type, request.name)
        form = self.results.upload_form(key, content_type, cap)
        logger.info("upload form issued", extra={"inputRef": key, "contentType": content_type})
        return PresignedUpload(
            inputRef=form.key, url=form.url, method="POST", fields=form.fields, headers={},
            expiresIn=form.expires_in,
        )  # fmt: skip

    def get(self, principal: Principal, job_id: str) -> Job:
        """The caller's job; a malformed id, a missing job and another tenant's job are all 404."""
        store = self._store(principal)
        job = store.get(principal.user_id, job_id) if _JOB_ID.fullmatch(job_id) else None
        if job is None:  # another tenant's job is indistinguishable from a missing one
            raise NotFoundError(f"no job {job_id!r}")
        return job

    def wait_for(self, principal: Principal, job_id: str, seconds: float) -> Job:
        """The job as soon as it is finished, or as it is when `seconds` run out (long-poll).

        The row is read at once, then again after LONG_POLL_BACKOFF's pauses (the last repeats):
        at most about a dozen reads in 20 s, never a busy loop."""
        job = self.get(principal, job_id)
        deadline = self.monotonic() + seconds
        pauses = iter(LONG_POLL_BACKOFF)
        pause = LONG_POLL_BACKOFF[0]
        while not job.status.is_terminal:
            left = deadline - self.monotonic()
            if left <= 0:
                break
            pause = next(pauses, pause)
            self.sleep(min(pause, left))
            job = self.get(principal, job_id)
        return job

    def list_jobs(
        self,
        principal: Principal,
        *,
        status: JobStatus | None,
        kind: str | None,
        limit: int,
        cursor: str | None,
    ) -> Page:
        if kind is not None and kind not in self.queues.kinds:
            raise UnprocessableError(f"unknown kind {kind!r}", code="unknown_kind")
        return self._store(principal).list_jobs(
            principal.user_id, status=status, kind=kind, limit=limit, cursor=cursor
        )

    def cancel(self, principal: Principal, job_id: str) -> Job:
        """Cancel the caller's job (docs/concepts/api.md, the cancel route).

        A job not running (queued, waiting to retry, held) ends `failed_final` / `cancelled` at
        once, refunded in full (once). A job whose attempt is running cannot recall its model
        call: the row is marked, the attempt finishes, and the job is never tried again. It ends
        `succeeded` and charged if that attempt succeeds (the model worked and was paid for, so
        its result is delivered), else `cancelled` and refunded; the answer is the row still
        `running`, with `cancelRequestedAt`. A running workflow is marked the same way: its
        split stops, its children not started never run, the running ones finish (each that
        succeeds is charged), and then it ends `cancelled` without merging. Cancelling a job
        cancelled already answers it again; one that finished otherwise is a 409.
        """
        store = self._store(principal)
        job = self.get(principal, job_id)
        for _ in range(_CANCEL_TRIES):
            if job.status.is_terminal:
                break
            if job.status is JobStatus.RUNNING:
                requested = store.request_cancel(job, now=self.clock())
                if requested is not None:
                    logger.info("cancel requested of a running job", extra={"jobId": job.job_id})
                    return requested
            else:
                try:
                    # Only from the state read: a consumer that claimed the job since owns it now.
                    job = store.fail_final(
                        job, now=self.clock(), error_class=CANCELLED, message="cancelled by its owner",
                        own_claim=False, only_from=(job.status,),
                    )  # fmt: skip
                    job_ended(store, self.queues, job, self.clock())
                    logger.info("job cancelled", extra={"jobId": job.job_id, "kind": job.kind})
                    return job
                except TransitionConflict:
                    pass
            job = self.get(principal, job_id)  # it moved on meanwhile: decide again
        if job.status is JobStatus.FAILED_FINAL and job.last_error_class == CANCELLED:
            return job
        if not job.status.is_terminal:
            raise ServiceUnavailableError("the job kept changing while it was being cancelled: try again")
        raise ConflictError(
            f"job {job_id} already finished ({job.status.value})",
            code="job_finished",
            details={"status": job.status.value},
        )

    def children(
        self, principal: Principal, job_id: str, *, status: JobStatus | None, limit: int, cursor: str | None
    ) -> Page:
        """A workflow job's children in part order, one page at a time."""
        parent = self.get(principal, job_id)
        if not parent.is_parent:
            raise NotFoundError(f"job {job_id!r} is not a workflow job and has no children")
        return self._store(principal).list_children(
            principal.user_id, job_id, status=status, limit=limit, cursor=cursor
        )

    def classify(
        self, principal: Principal, request: ClassifyRequest, idempotency_key: str | None
    ) -> tuple[Job, bool]:
        """The synchronous `classify` kind (aijobs/kinds/classify.py) on its stage model, billed as
        a job is; returns (the call's succeeded row, replayed).

        A call is a row born `running` under this request's own claim, its price reserved in the
        same transaction (402 if the credits cannot cover it; 402 / 429 past the tenant's or the
        stage's spend cap; nothing is written then and the model is not called). Then the model
        call, and the row settled exactly once: `succeeded` with its usage and cost, the price
        charged and the day's spend counted, in one transaction, before the answer is given; or
        `failed_final` with the price refunded, in one transaction, when the call failed. A
        function that dies in between leaves the row `running`: the sweeper refunds it once its
        lease (SYNC_LEASE) lapses. The same Idempotency-Key and text answer the earlier call's
        result again (not charged again); a key whose call failed may be used again.
        """
        kind = kind_of(CLASSIFY)
        plan = self.plans.get(CLASSIFY)
        if kind is None or plan is None or plan.model is None:
            raise ServiceUnavailableError("classification is not configured on this stage")
        check_idempotency_key(idempotency_key)
        try:
            value = check_input(kind, request.text)
        except InputTooLargeError as error:
            raise PayloadTooLargeError(str(error)) from None
        except ProviderError as error:
            raise UnprocessableError(str(error), code="invalid_input") from None
        store = self._store(principal)
        digest = request_hash(request)
        # A second round only when the key's earlier call failed (and was refunded): it is freed.
        for _round in range(2):
            opened = self._open(
                store, principal, self._call_row(principal, plan), idempotency_key, digest, stage_cap=True
            )
            if not isinstance(opened, IdempotencyKeyExists):
                step = Step(job_id=opened.job_id, input=value, options={}, model=plan.model)
                return self._call(store, opened, kind, step), False
            earlier = self._replay(store, principal, opened, digest)
            if earlier.status is JobStatus.SUCCEEDED:
                return earlier, True
            if earlier.status is not JobStatus.FAILED_FINAL:
                raise ConflictError(
                    "the call with this Idempotency-Key is still running; retry in a few seconds",
                    code="call_in_progress",
                )
            assert idempotency_key is not None
            store.forget_idempotency(principal.user_id, idempotency_key, job_id=earlier.job_id)
        raise ConflictError("this Idempotency-Key is in use by another call; retry", code="call_in_progress")

    def _call_row(self, principal: Principal, plan: KindPlan) -> Job:
        """A synchronous call's row: `running` under this request's claim from the start. It keeps
        the answer, the model, usage and cost, never the text."""
        now = self.clock()
        return Job(
            job_id=new_job_id(int(now.timestamp() * 1000)),
            user_id=principal.user_id,
            kind=CLASSIFY,
            status=JobStatus.RUNNING,
            model=plan.model,
            provider=plan.provider,
            attempts=1,
            created_at=now,
            updated_at=now,
            started_at=now,
            lease_expires_at=now + SYNC_LEASE,
            claim_id=uuid.uuid4().hex,
            price=self.prices.get(CLASSIFY, 0),
        )

    def _call(self, store: JobStore, job: Job, kind: Kind, step: Step) -> Job:
        """Call the model for a paid row, then settle it once: charged with the answer, or refunded."""
        try:
            result = run(kind, self.provider, step)
        except Exception as error:
            self._refund_call(store, job, classify_exception(error))
            raise
        spent = spend(
            result.provider or self.provider.name, result.model or job.model, result.usage, given=result.cost
        )
        writes = []
        if self.spend is not None and spent.usd:
            writes = self.spend.count_writes(
                job_id=job.job_id, user_id=job.user_id, cost=spent.usd, shard_name=store.table_name
            )
        try:
            finished = store.succeed(
                job, now=self.clock(), result={"output": result.output}, result_ref=None,
                model=result.model or job.model, usage=result.usage, cost=spent.usd, extra_writes=writes,
            )  # fmt: skip
        except TransitionConflict:
            # Its row was finalized meanwhile, which refunded it: the sweeper, after the call
            # outlived its lease. (An owner's cancel of a running call only marks the row: the
            # call finishes and is charged, like a running job's attempt.)
            raise ConflictError(
                "this call was finalized while it ran; it was not charged", code="call_cancelled"
            ) from None
        except Exception:
            # Never an answer that was not charged: the call is refunded instead (or by the sweeper).
            logger.exception(
                "classify answered but could not be settled: refunded, its cost not counted",
                extra={"jobId": job.job_id, "model": result.model, "costUsd": spent.usd},
            )
            self._refund_call(store, job, InfrastructureError("the call could not be recorded"))
            raise ServiceUnavailableError(
                "the call could not be recorded and was not charged; retry"
            ) from None
        if spent.usd is not None:
            emit(
                METRIC_MODEL_SPEND, kind=CLASSIFY, value=spent.usd, unit=MetricUnit.NoUnit, model=spent.model
            )
        logger.info(
            "classify answered", extra={"jobId": job.job_id, "model": finished.model, "costUsd": spent.usd}
        )
        return finished

    def _refund_call(self, store: JobStore, job: Job, error: ProviderError) -> None:
        """A call that gives no answer: `failed_final` with its price refunded, in one transaction."""
        try:
            store.fail_final(job, now=self.clock(), error_class=error.error_class, message=str(error))
        except TransitionConflict:
            pass  # cancelled meanwhile: refunded by the cancel
        except Exception:
            logger.exception("classify refund failed: the sweeper refunds it when its lease lapses")

    @staticmethod
    def classify_view(job: Job) -> ClassifyResponse:
        """A settled call's answer (the same for a replayed Idempotency-Key)."""
        output = job.result["output"]
        return ClassifyResponse(
            label=output["label"], score=output["score"], tags=list(output["tags"]), model=job.model or "",
            jobId=job.job_id,
        )  # fmt: skip

    def view(self, job: Job) -> JobView:
        artifacts: list[ArtifactLink] = []
        if isinstance(job.result, dict):
            artifacts = [
                ArtifactLink(key=k, url=self.results.download_url(k)) for k in job.result.get("artifacts", [])
            ]
        return JobView(
            jobId=job.job_id,
            kind=job.kind,
            status=job.status,
            attempts=job.attempts,
            lastErrorClass=job.last_error_class,
            lastErrorMessage=job.last_error_message,
            createdAt=job.created_at,
            updatedAt=job.updated_at,
            startedAt=job.started_at,
            finishedAt=job.finished_at,
            model=job.model,
            usage=job.usage,
            costUsd=job.cost,
            price=job.price,
            charge=job.charge_state,
            cancelRequestedAt=job.cancel_requested_at,
            result=job.result.get("output") if isinstance(job.result, dict) else None,
            resultRef=job.result_ref,
            resultUrl=self.results.download_url(job.result_ref) if job.result_ref else None,
            artifacts=artifacts,
            deadLettered=job.dead_lettered,
            parentId=job.parent_id,
            part=job.part,
            phase=job.phase,
            progress=(
                Progress(
                    total=job.children_total or 0,
                    succeeded=job.children_succeeded,
                    failedFinal=job.children_failed,
                    pending=job.children_pending,
                )
                if job.is_parent
                else None
            ),
            callback=callback_view(job),
            links=links(job),
        )


def callback_view(job: Job) -> CallbackView | None:
    if job.callback_url is None:
        return None
    state = job.callback_state if job.status.is_terminal and job.callback_state else "waiting"
    return CallbackView(
        url=job.callback_url,
        state=state,
        attempts=job.callback_attempts,
        lastStatus=job.callback_status,
        lastError=job.callback_error,
        updatedAt=job.callback_at,
    )
