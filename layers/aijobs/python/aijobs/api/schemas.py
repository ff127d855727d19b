"""API request and response models (the OpenAPI document is generated from these)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aijobs.domain import JobStatus


def require_utf8(value: Any) -> Any:
    """Refuse strings that UTF-8 cannot encode, anywhere in `value` (keys included).

    JSON escapes of unpaired surrogates (`"\\ud800"`) parse into such strings; DynamoDB, S3 and the
    providers would refuse them later, so they are a schema error at the door.
    """
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text must be valid Unicode (no unpaired surrogates such as \\ud800)") from None
    return value


class ApiModel(BaseModel):
    """Base of the API's request and response models (and the operator routes'). Each builds its
    validator on first use (`defer_build`): a cold start builds none, a request those of its route."""

    model_config = ConfigDict(defer_build=True)


class JobRequest(ApiModel):
    """`POST /jobs`: what to do. Exactly one of `input` (inline) or `inputRef` (an uploaded object)."""

    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=80, description="a configured job kind, e.g. `summary`")
    input: str | dict[str, Any] | None = Field(
        default=None, description="the text or prompt (string), or an object for kinds that need fields"
    )
    inputRef: str | None = Field(
        default=None,
        max_length=300,
        description="S3 key of an input uploaded under `inputs/<your user id>/` (large inputs, images)",
    )
    model: str | None = Field(default=None, max_length=120, description="provider model override")
    options: dict[str, Any] = Field(default_factory=dict, description="kind-specific options")
    callbackUrl: str | None = Field(
        default=None,
        max_length=2048,
        description="an https URL that gets the job's final outcome as a signed POST (docs/"
        "concepts/webhooks.md); create your signing secret first with `POST /webhooks/secret`",
    )

    _utf8 = field_validator("kind", "input", "inputRef", "model", "options", "callbackUrl")(require_utf8)

    @model_validator(mode="after")
    def _one_input(self) -> JobRequest:
        if (self.input is None) == (self.inputRef is None):
            raise ValueError("give exactly one of `input` or `inputRef`")
        return self


class UploadRequest(ApiModel):
    """`POST /uploads`: what the client is about to upload (checked against the type's size cap)."""

    model_config = ConfigDict(extra="forbid")

    contentType: str = Field(
        min_length=1, max_length=100, description="the file's media type, e.g. `text/plain`, `image/png`"
    )
    size: int = Field(ge=1, description="the file's size in bytes")
    name: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        description="the file's name, kept (sanitized) as the end of the key for readability",
    )

    _utf8 = field_validator("contentType", "name")(require_utf8)


class PresignedUpload(ApiModel):
    """`POST /uploads`: where and how to upload, and the `inputRef` to submit afterwards."""

    inputRef: str = Field(description="the key to send as `inputRef` once the upload succeeded")
    url: str = Field(description="where to send the upload")
    method: Literal["POST"] = Field(
        description="`POST`: a multipart/form-data body with every `fields` entry, then the file as `file`"
    )
    fields: dict[str, str] = Field(description="form fields to send as they are, before the file")
    headers: dict[str, str] = Field(description="request headers to add (none for a POST form)")
    expiresIn: int = Field(description="seconds the form stays valid")


class Links(ApiModel):
    self: str
    children: str | None = Field(default=None, description="a workflow's children (`GET`)")
    parent: str | None = Field(default=None, description="a child's parent workflow job")
    cancel: str | None = Field(default=None, description="`POST` here to cancel the job")


class Progress(ApiModel):
    """A workflow job's children: `total` is known once its split ran (0 before)."""

    total: int
    succeeded: int
    failedFinal: int
    pending: int


class JobAccepted(ApiModel):
    jobId: str
    status: JobStatus
    kind: str
    createdAt: datetime
    links: Links


class ArtifactLink(ApiModel):
    key: str
    url: str


class CallbackView(ApiModel):
    """The webhook delivery of a job's final outcome."""

    url: str
    state: Literal["waiting", "pending", "delivered", "failed"] = Field(
        description="waiting: the job has not finished; pending: being delivered (retries included); "
        "delivered: the receiver answered 2xx; failed: given up (see lastStatus / lastError)"
    )
    attempts: int
    lastStatus: int | None = Field(default=None, description="the HTTP status of the last attempt")
    lastError: str | None = None
    updatedAt: datetime | None = None


class JobView(ApiModel):
    """`GET /jobs/{jobId}`: the job as its owner sees it."""

    jobId: str
    kind: str
    status: JobStatus
    attempts: int
    lastErrorClass: str | None = None
    lastErrorMessage: str | None = None
    createdAt: datetime
    updatedAt: datetime
    startedAt: datetime | None = None
    finishedAt: datetime | None = None
    model: str | None = Field(
        default=None, description="the model that answered (with fallbacks, the last tried)"
    )
    usage: dict[str, int] = Field(
        default_factory=dict, description="what the model call reported using (tokens, images, seconds...)"
    )
    costUsd: float | None = Field(
        default=None, description="what the model call cost, in USD (reported, or priced from `usage`)"
    )
    price: int = Field(default=0, description="the credits the job costs")
    charge: str | None = Field(
        default=None, description="its credits: `reserved` (not settled yet), `settled` (charged), `refunded`"
    )
    cancelRequestedAt: datetime | None = Field(
        default=None,
        description="when its owner cancelled it while an attempt ran (that attempt finishes; the job is "
        "not tried again)",
    )
    result: Any = Field(default=None, description="the job's output when small enough to inline")
    resultRef: str | None = Field(default=None, description="S3 key of the result document")
    resultUrl: str | None = Field(default=None, description="short-lived download URL of the result")
    artifacts: list[ArtifactLink] = Field(default_factory=list)
    deadLettered: bool = False
    parentId: str | None = Field(default=None, description="the workflow job this job is a part of")
    part: int | None = Field(default=None, description="this part's index in its parent (from 0)")
    phase: str | None = Field(default=None, description="a workflow's step: split, children or merge")
    progress: Progress | None = Field(default=None, description="a workflow's children so far")
    callback: CallbackView | None = Field(default=None, description="the job's webhook, if it has one")
    links: Links


class JobList(ApiModel):
    jobs: list[JobView]
    nextCursor: str | None = None


class ClassifyRequest(ApiModel):
    model_config = ConfigDict(extra="forbid")

    text: str = Field(
        min_length=1, max_length=10_000, pattern=r"\S", description="at least one non-blank character"
    )

    _utf8 = field_validator("text")(require_utf8)


class ClassifyResponse(ApiModel):
    label: str
    score: float
    tags: list[str]
    model: str
    jobId: str = Field(
        description="the call's record (`GET /jobs/{jobId}`), and the `jobId` of its debit in `GET /credits`"
    )


class ErrorBody(ApiModel):
    code: str = Field(description="machine-readable reason")
    message: str = Field(description="for people")
    details: Any = None


class GrantView(ApiModel):
    grantId: str
    amount: int
    remaining: int
    expiresAt: datetime
    expired: bool


class TransactionView(ApiModel):
    txId: str
    type: str = Field(description="grant, debit, refund or expire")
    amount: int
    jobId: str | None = None
    createdAt: datetime


class DaySpend(ApiModel):
    day: str = Field(description="the day (YYYY-MM-DD) in the stage's SPEND_TIME_ZONE")
    usd: float = Field(description="the model cost of your jobs that day, in USD")


class CreditsView(ApiModel):
    """`GET /credits`: balance, grants, the most recent transactions and the model spend per day."""

    balance: int
    grants: list[GrantView]
    transactions: list[TransactionView]
    prices: dict[str, int] = Field(description="credits per job of each kind")
    spendCounted: bool = Field(
        default=False, description="whether this stage counts model spend (it has a daily spend cap)"
    )
    spendByDay: list[DaySpend] = Field(
        default_factory=list,
        description="your model spend on each of the last 30 days that had any, oldest first",
    )


class WebhookSecretIssued(ApiModel):
    """`POST /webhooks/secret`: the new signing secret, shown this once and never again."""

    secret: str = Field(description="`whsec_...`: keep it where your receiver can read it")
    createdAt: datetime
    previousExpiresAt: datetime | None = Field(
        default=None, description="until when the secret it replaced still signs deliveries (24 hours)"
    )


class WebhookSecretStatus(ApiModel):
    """`GET /webhooks/secret`: whether you have a signing secret, never the secret itself."""

    exists: bool
    createdAt: datetime | None = None
    previousExpiresAt: datetime | None = None
