"""What the API does, independent of HTTP: submit, read and list jobs; classify synchronously."""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError
from pydantic import ValidationError

from aijobs.api.schemas import (
    ArtifactLink,
    CallbackView,
    ClassifyRequest,
    ClassifyResponse,
    CreditsView,
    DaySpend,
    GrantView,
    JobRequest,
    JobView,
    Links,
    PresignedUpload,
    Progress,
    TransactionView,
    UploadRequest,
)
from aijobs.bindings import DEFAULT_JWT_OPERATOR_GROUP
from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import (
    CANCELLED,
    ConflictError,
    InfrastructureError,
    InputRefNotFoundError,
    InputRefTooLargeError,
    InputTooLargeError,
    InvalidOptionError,
    MalformedRequestError,
    NotFoundError,
    PayloadTooLargeError,
    PaymentRequiredError,
    ProviderError,
    ServiceUnavailableError,
    SpendCapReachedError,
    StageSpendCapReachedError,
    TenantRateLimitedError,
    TransitionConflict,
    UnauthorizedError,
    UnprocessableError,
    UnsupportedUploadTypeError,
    UploadTooLargeError,
    classify_exception,
    is_dynamodb_throttle,
)
from aijobs.ids import new_job_id
from aijobs.job_end import job_ended
from aijobs.kinds.base import Kind
from aijobs.kinds.registry import kind as kind_of
from aijobs.kinds.run import Step, check_input, check_model_options, first_problem, problems, run
from aijobs.observability import METRIC_ACCEPTED, METRIC_MODEL_SPEND, emit, logger
from aijobs.pricing import spend
from aijobs.provider_plan import CLASSIFY, KindPlan
from aijobs.providers.base import Provider
from aijobs.queues import JobQueues
from aijobs.spend import HOLD_SECONDS, SpendBrake, day_of
from aijobs.store.jobs import PHASE_SPLIT, IdempotencyKeyExists, JobStore, Page
from aijobs.store.keys import MAX_CHILDREN
from aijobs.store.results import (
    UPLOAD_RULES,
    ResultStore,
    input_ref_is_owned,
    kind_input_cap,
    new_input_key,
)
from aijobs.store.tenants import OPERATOR_ROLE, USER_ROLE, Directory, Principal
from aijobs.webhooks.secrets import IssuedSecret, SecretStatus, WebhookSecrets
from aijobs.webhooks.urls import CallbackUrlError, UrlPolicy, check_url
from aijobs.workflows.registry import workflow as workflow_of

IDEMPOTENCY_KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
# GET /credits shows this much of the tenant's model spend per day.
SPEND_HISTORY = timedelta(days=30)
# A cancel re-reads a row that changed under it (claimed, retried) at most this many times.
_CANCEL_TRIES = 4
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)
# What `new_job_id` makes (a workflow child adds `.<5-digit index>`): anything else cannot be a job.
_JOB_ID = re.compile(r"[0-9A-HJKMNP-TV-Z]{26}(?:\.[0-9]{5})?")


def _check_idempotency_key(key: str | None) -> None:
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise MalformedRequestError(
            "Idempotency-Key must be 1-128 letters, digits or _.:-", code="invalid_idempotency_key"
        )


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


def request_hash(request: JobRequest | ClassifyRequest) -> str:
    """Fingerprint of a request, to tell an idempotent replay from a reused key.

    The request's depth is bounded before it gets here (see `aijobs.api.screening.MAX_JSON_DEPTH`).
    """
    canonical = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


# GET /jobs/{id}?wait=N: the longest wait (an HTTP API integration times out at 30 s) and the
# pauses between reads of the row while the job is not finished (the last one repeats).
LONG_POLL_MAX_SECONDS = 20
LONG_POLL_BACKOFF = (0.25, 0.5, 1.0, 2.0)
# A synchronous call's row is `running` under its request's claim for this long: longer than the API
# function may run (25 s; the HTTP API gives up at 30 s), so only a call whose function died outlives
# it, and the sweeper then refunds it (aijobs.scheduled.sweeper).
SYNC_LEASE = timedelta(seconds=60)


@dataclass
class JobService:
    directory: Directory
    queues: JobQueues
    results: ResultStore
    provider: Provider
    provider_name: str
    max_inline_input_bytes: int
    clock: Callable[[], datetime]
    prices: dict[str, int] = field(default_factory=dict)
    # Provider and model per kind (aijobs.provider_plan): a job's `model` must be one of its kind's.
    plans: dict[str, KindPlan] = field(default_factory=dict)
    auth_mode: str = "api_key"
    # AUTH_MODE=jwt: members of exactly this Cognito group are operators (JWT_OPERATOR_GROUP).
    jwt_operator_group: str = DEFAULT_JWT_OPERATOR_GROUP
    # The daily spend brake (aijobs.spend); None: the stage sets no SPEND_DAILY_CAP_USD.
    spend: SpendBrake | None = None
    # Long-poll pacing (GET /jobs/{id}?wait=N); tests pass a fake clock and sleep.
    sleep: Callable[[float], None] = time.sleep
    monotonic: Callable[[], float] = time.monotonic
    # Webhooks (aijobs.webhooks): the tenants' signing secrets and what a callbackUrl may be.
    webhook_secrets: WebhookSecrets | None = None
    webhook_policy: UrlPolicy = field(default_factory=UrlPolicy)

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

    def _store(self, principal: Principal) -> JobStore:
        table = self.directory.shard_for(principal.user_id)
        if table is None:
            raise UnauthorizedError("the API key's user has no tenant", code="unknown_user")
        return self.directory.job_store(table, self.clock)

    def submit(
        self, principal: Principal, request: JobRequest, idempotency_key: str | None
    ) -> tuple[Job, bool]:
        """Write the `queued` row and send its reference; returns (job, replayed)."""
        input_size = self._check(principal, request, idempotency_key)
        store = self._store(principal)
        now = self.clock()
        job = Job(
            job_id=new_job_id(int(now.timestamp() * 1000)),
            user_id=principal.user_id,
            kind=request.kind,
            status=JobStatus.QUEUED,
            input=request.input,
            input_ref=request.inputRef,
            options=request.options,
            model=request.model,
            provider=self._plan_provider(request.kind),
            created_at=now,
            updated_at=now,
            callback_url=request.callbackUrl,
        )
        job = self._priced(job, request, input_size)
        digest = request_hash(request)
        opened = self._open(store, principal, job, idempotency_key, digest)
        if isinstance(opened, IdempotencyKeyExists):
            return self._replay(store, principal, opened, digest), True
        job = opened
        try:
            self.queues.send(QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind), kind=job.kind)
        except Exception:
            # Never leave a `queued` row without a message: finalize it, free the key, ask for a retry.
            logger.exception("enqueue failed: job finalized", extra={"jobId": job.job_id})
            store.fail_final(
                job,
                now=self.clock(),
                error_class="enqueue_failed",
                message="the queue was unavailable",
                own_claim=False,
                callback=False,  # the client was answered 503: no webhook for this job
            )
            if idempotency_key is not None:
                store.forget_idempotency(principal.user_id, idempotency_key)
            raise ServiceUnavailableError(
                "the job queue is unavailable; retry with the same Idempotency-Key"
            ) from None
        emit(METRIC_ACCEPTED, kind=job.kind)
        logger.info("job accepted", extra={"jobId": job.job_id, "kind": job.kind, "userId": job.user_id})
        return job, False

    def _open(
        self,
        store: JobStore,
        principal: Principal,
        job: Job,
        idempotency_key: str | None,
        digest: str,
        *,
        stage_cap: bool = False,
    ) -> Job | IdempotencyKeyExists:
        """The spend caps checked, then the row and its payment written; or what an earlier request
        with the same Idempotency-Key made (the caller answers it as a replay)."""
        # No read of the Idempotency-Key first: the transaction that writes the job is conditional
        # on the key being new, and its cancellation says when it is not.
        try:
            self._within_spend_cap(principal)
            if stage_cap:
                self._within_stage_cap()
            return self._create_paid(store, job, idempotency_key, digest)
        except IdempotencyKeyExists as existing:  # an earlier (or concurrent) request used the key
            return existing
        except (PaymentRequiredError, ConflictError, StageSpendCapReachedError):
            # Refused before the transaction could see the key (credits or the day's spend used up,
            # or busy, since): a replay is still answered as one; only this path reads the key.
            seen = store.get_idempotency(principal.user_id, idempotency_key) if idempotency_key else None
            if seen is None:
                raise
            return IdempotencyKeyExists(*seen)

    def _within_stage_cap(self) -> None:
        """Past the stage's daily spend cap a queued job waits in its consumer; a synchronous call
        cannot wait, so it is refused (429) and nothing is written. A tenant is not told the
        stage's figures, only when the day resets."""
        if self.spend is None:
            return
        state = self.spend.state()
        if state.released or state.stage_usd < self.spend.stage_cap(state):
            return
        resets = self.spend.resets_at()
        raise StageSpendCapReachedError(
            "the service's model spend today reached its daily cap; retry later (at the latest "
            f"{resets.isoformat()}, midnight {self.spend.zone})",
            retry_after=HOLD_SECONDS,
            details={"resetsAt": resets.isoformat()},
        )

    def _within_spend_cap(self, principal: Principal) -> None:
        """A tenant past its own daily spend cap gets a 402 and nothing is written. The stage's
        cap refuses nobody: its jobs are accepted and wait in the consumers."""
        if self.spend is None:
            return
        profile = self.directory.profile(principal.user_id)
        cap = profile.spend_cap_usd if profile is not None else None
        spent = self.spend.tenant_over(principal.user_id, self.directory.shard_for(principal.user_id), cap)
        if spent is None or cap is None:
            return
        resets = self.spend.resets_at()
        raise SpendCapReachedError(
            f"your model spend today ({spent} USD) reached your daily cap of {cap} USD; new jobs are "
            f"accepted again at {resets.isoformat()} (midnight {self.spend.zone}), or when an operator "
            "raises the cap",
            details={"capUsd": str(cap), "spentUsd": str(spent), "resetsAt": resets.isoformat()},
        )

    def _priced(self, job: Job, request: JobRequest, input_size: int | None) -> Job:
        """The job's price; a workflow's is its own plus its child kind's per part it will make
        (known from an inline input, estimated from an upload's size and settled at the split)."""
        workflow = workflow_of(job.kind)
        if workflow is None:
            return job.model_copy(update={"price": self.prices.get(job.kind, 0)})
        try:
            options = workflow.option_values(request.options)
            parts = workflow.estimate(request.input, input_size, options)
        except ValueError as error:
            raise UnprocessableError(str(error), code="invalid_options") from None
        except ProviderError as error:  # the inline input cannot be split
            raise UnprocessableError(str(error), code="invalid_input") from None
        if parts > MAX_CHILDREN and request.input is None:
            parts = MAX_CHILDREN  # an estimate from an upload's size: the split decides exactly
        if parts > MAX_CHILDREN:
            raise UnprocessableError(
                f"{job.kind}: this input makes about {parts} parts; at most {MAX_CHILDREN} per job",
                code="too_many_parts",
                details={"parts": parts, "limit": MAX_CHILDREN},
            )
        base, each = self.prices.get(job.kind, 0), self.prices.get(workflow.child_kind, 0)
        return job.model_copy(
            update={
                "phase": PHASE_SPLIT,
                "base_price": base,
                "child_price": each,
                "price": base + each * parts,
            }
        )

    def _create_paid(self, store: JobStore, job: Job, idempotency_key: str | None, digest: str) -> Job:
        """Write the row, its idempotency record and its credit debit in one transaction."""
        price = job.price
        for _attempt in range(3):
            writes: list[dict[str, Any]] = []
            if price:
                writes, allocation = store.ledger.reserve(job.user_id, job.job_id, price)
                job = job.model_copy(
                    update={"price": price, "charge_state": "reserved", "charge_allocation": allocation}
                )
            try:
                store.create(job, idempotency_key=idempotency_key, request_hash=digest, extra_writes=writes)
            except ClientError as error:
                if is_dynamodb_throttle(error):
                    # The tenant's own items (its balance, its partition) are over DynamoDB's
                    # per-item rate: say so, instead of a 500 or a hot retry loop. Nothing was written.
                    logger.warning("submit throttled by DynamoDB", extra={"userId": job.user_id})
                    raise TenantRateLimitedError(
                        "you are submitting faster than your account can take; retry after Retry-After",
                        retry_after=1.0,
                    ) from None
                if error.response["Error"]["Code"] != "TransactionCanceledException":
                    raise
                continue  # credits changed between reading and writing: read again
            return job
        raise ConflictError("your credits changed while this job was submitted; retry", code="credits_busy")

    @staticmethod
    def _replay(store: JobStore, principal: Principal, existing: IdempotencyKeyExists, digest: str) -> Job:
        if existing.request_hash != digest:
            raise ConflictError(
                "this Idempotency-Key was already used with a different request",
                code="idempotency_key_reused",
            )
        earlier = store.get(principal.user_id, existing.job_id)
        if earlier is None:  # the earlier job was removed by retention: the key is spent
            raise ConflictError("this Idempotency-Key belongs to a job that no longer exists")
        logger.info("idempotent replay: same job returned", extra={"jobId": earlier.job_id})
        return earlier

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

    def _plan_provider(self, kind: str) -> str:
        plan = self.plans.get(kind)
        return plan.provider if plan is not None else self.provider_name

    def _check(self, principal: Principal, request: JobRequest, idempotency_key: str | None) -> int | None:
        """Refuse what cannot run; returns the size of the `inputRef` object (if any)."""
        if request.kind not in self.queues.kinds:
            raise UnprocessableError(
                f"unknown kind {request.kind!r}",
                code="unknown_kind",
                details={"kinds": list(self.queues.kinds)},
            )
        plan = self.plans.get(request.kind)
        if request.model is not None and plan is not None and request.model not in plan.choosable_models:
            raise UnprocessableError(
                f"model {request.model!r} is not available for {request.kind}",
                code="model_not_allowed",
                details={"models": list(plan.choosable_models)},
            )
        image_input = self._check_kind(request)
        if request.callbackUrl is not None:
            self._check_callback(principal, request.callbackUrl)
        _check_idempotency_key(idempotency_key)
        if request.input is not None:
            # The bytes the row stores (aijobs.store.jobs): the client's characters, never escaped.
            size = len(json.dumps(request.input, separators=(",", ":"), ensure_ascii=False).encode())
            if size > self.max_inline_input_bytes:
                raise PayloadTooLargeError(
                    f"input is {size} bytes of UTF-8; inline inputs are limited to "
                    f"{self.max_inline_input_bytes} bytes",
                    details={
                        "limit": self.max_inline_input_bytes,
                        "hint": "upload the input with `POST /uploads` and send its `inputRef`",
                    },
                )
        if request.inputRef is not None:
            if not input_ref_is_owned(request.inputRef, principal.user_id):
                raise UnprocessableError(
                    f"inputRef must name an object under inputs/{principal.user_id}/",
                    code="invalid_input_ref",
                )
            # A missing or oversized object would only fail later, in the consumer, after credits
            # were reserved.
            found = self.results.input_object(request.inputRef)
            if found is None:
                raise InputRefNotFoundError(
                    f"inputRef {request.inputRef!r} does not exist: upload the input first, then submit",
                    details={"inputRef": request.inputRef},
                )
            stored = found.size
            wanted = "an image" if image_input else "text"
            if found.content_type in UPLOAD_RULES and found.content_type.startswith("image/") != image_input:
                # The upload's own Content-Type (checked by S3 at upload) says it cannot be this
                # kind's input: refuse now rather than fail in the consumer after a charge.
                raise UnprocessableError(
                    f"{request.kind} takes {wanted} input; {request.inputRef!r} is {found.content_type}",
                    code="input_ref_wrong_type",
                    details={"inputRef": request.inputRef, "contentType": found.content_type},
                )
            cap = kind_input_cap(image=image_input)
            if stored > cap:
                raise InputRefTooLargeError(
                    f"the input is {stored} bytes; {request.kind} takes inputs of up to {cap} bytes",
                    details={"inputRef": request.inputRef, "size": stored, "limit": cap},
                )
            return stored
        return None

    def _check_kind(self, request: JobRequest) -> bool:
        """The kind's own rules, before anything is written: its options (its pydantic model) and
        an inline input (its input limits) are a 422 here, never a failed job later. Returns
        whether the kind takes an image."""
        workflow = workflow_of(request.kind)
        name = workflow.child_kind if workflow is not None else request.kind
        kind = kind_of(name)
        if kind is None:
            return False
        options = workflow.child_options(request.options) if workflow is not None else request.options
        try:
            kind.parse_options(options)
        except ValidationError as error:
            raise UnprocessableError(
                f"{request.kind}: invalid options: {first_problem(error)}",
                code="invalid_options",
                details={"options": problems(error)},
            ) from None
        plan = self.plans.get(request.kind)
        # The model the job runs on: its own, else the kind's (fallbacks are not asked: one whose
        # bounds differ is passed over in the consumer, aijobs.kinds.run.run_chain).
        model = request.model or (plan.model if plan is not None else None) or ""
        try:
            value = (
                check_input(kind, request.input) if workflow is None and request.input is not None else None
            )
            if plan is not None:
                # The provider adapter's own check of the request the consumer will send it.
                check_model_options(kind, options, value, provider=plan.provider, model=model)
        except InvalidOptionError as error:
            raise UnprocessableError(
                f"{request.kind}: invalid options: {error.option}: {error.problem}",
                code="invalid_options",
                details={
                    "options": [{"option": error.option, "problem": error.problem}],
                    "model": model or None,
                },
            ) from None
        except InputTooLargeError as error:
            raise PayloadTooLargeError(str(error)) from None
        except ProviderError as error:
            raise UnprocessableError(str(error), code="invalid_input") from None
        return workflow is None and kind.inputs.type == "image"

    def _check_callback(self, principal: Principal, url: str) -> None:
        """A callbackUrl must be acceptable (no private targets) and its owner must have a signing
        secret: an unsigned webhook could not be told from a forged one."""
        try:
            check_url(url, self.webhook_policy)
        except CallbackUrlError as error:
            raise UnprocessableError(str(error), code="invalid_callback_url") from None
        if not self._webhook_secrets().status(principal.user_id).exists:
            raise UnprocessableError(
                "create your webhook signing secret first (`POST /webhooks/secret`), then submit",
                code="webhook_secret_missing",
            )

    def _webhook_secrets(self) -> WebhookSecrets:
        if self.webhook_secrets is None:
            raise ServiceUnavailableError("webhooks are not configured here")
        return self.webhook_secrets

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
        _check_idempotency_key(idempotency_key)
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
