"""Submitting a job: the request checked (kind, model, options, input, callback, Idempotency-Key),
priced and its credits reserved, the spend caps checked, the `queued` row written with its
idempotency record in one transaction, and its message sent; a replayed key answers the earlier
job. `JobService` (aijobs.api.service) builds on it; its synchronous calls reuse the same steps."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from pydantic import ValidationError

from aijobs.api.schemas import ClassifyRequest, JobRequest
from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import (
    ConflictError,
    InputRefNotFoundError,
    InputRefTooLargeError,
    InputTooLargeError,
    InvalidOptionError,
    MalformedRequestError,
    PayloadTooLargeError,
    PaymentRequiredError,
    ProviderError,
    ServiceUnavailableError,
    SpendCapReachedError,
    StageSpendCapReachedError,
    TenantRateLimitedError,
    UnauthorizedError,
    UnprocessableError,
    is_dynamodb_throttle,
)
from aijobs.ids import new_job_id
from aijobs.kinds.registry import kind as kind_of
from aijobs.kinds.run import check_input, check_model_options, first_problem, problems
from aijobs.observability import METRIC_ACCEPTED, emit, logger
from aijobs.provider_plan import KindPlan
from aijobs.queues import JobQueues
from aijobs.spend import HOLD_SECONDS, SpendBrake
from aijobs.store.job_creation import IdempotencyKeyExists
from aijobs.store.job_items import PHASE_SPLIT
from aijobs.store.jobs import JobStore
from aijobs.store.keys import MAX_CHILDREN
from aijobs.store.results import UPLOAD_RULES, ResultStore, input_ref_is_owned, kind_input_cap
from aijobs.store.tenants import Directory, Principal
from aijobs.webhooks.secrets import WebhookSecrets
from aijobs.webhooks.urls import CallbackUrlError, UrlPolicy, check_url
from aijobs.workflows.registry import workflow as workflow_of

IDEMPOTENCY_KEY_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"
_IDEMPOTENCY_KEY = re.compile(IDEMPOTENCY_KEY_PATTERN)


def check_idempotency_key(key: str | None) -> None:
    """A malformed Idempotency-Key is a 400, before anything is read or written."""
    if key is not None and not _IDEMPOTENCY_KEY.fullmatch(key):
        raise MalformedRequestError(
            "Idempotency-Key must be 1-128 letters, digits or _.:-", code="invalid_idempotency_key"
        )


def request_hash(request: JobRequest | ClassifyRequest) -> str:
    """Fingerprint of a request, to tell an idempotent replay from a reused key.

    The request's depth is bounded before it gets here (see `aijobs.api.screening.MAX_JSON_DEPTH`).
    """
    canonical = json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


@dataclass(kw_only=True)
class JobSubmission:
    """What a submit needs and does; `JobService` adds the reads, cancels and synchronous calls."""

    directory: Directory
    queues: JobQueues
    results: ResultStore
    provider_name: str
    max_inline_input_bytes: int
    clock: Callable[[], datetime]
    prices: dict[str, int] = field(default_factory=dict)
    # Provider and model per kind (aijobs.provider_plan): a job's `model` must be one of its kind's.
    plans: dict[str, KindPlan] = field(default_factory=dict)
    # The daily spend brake (aijobs.spend); None: the stage sets no SPEND_DAILY_CAP_USD.
    spend: SpendBrake | None = None
    # Webhooks (aijobs.webhooks): the tenants' signing secrets and what a callbackUrl may be.
    webhook_secrets: WebhookSecrets | None = None
    webhook_policy: UrlPolicy = field(default_factory=UrlPolicy)

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
        check_idempotency_key(idempotency_key)
        if request.input is not None:
            # The bytes the row stores (aijobs.store.job_items): the client's characters, never escaped.
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
