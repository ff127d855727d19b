"""The provider interface: what a consumer hands to an AI provider and what it gets back.

Adapters (the `local` provider here, HTTP/AWS adapters later) take a `ProviderRequest` and
return a `ProviderResult`, or raise one of the typed errors of `aijobs.errors` (the retry
taxonomy). They never see queue messages or rows, and never log input text.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field


class ProviderRequest(BaseModel):
    # The provider models build their validators on first use (`defer_build`): only the consumers
    # and the API's classify route use them, and none at import.
    model_config = ConfigDict(defer_build=True, frozen=True)

    job_id: str
    kind: str
    # The step of a multi-step job; with job_id it is the idempotency key of side effects.
    step: str = "main"
    input: str | dict[str, Any] | None = None
    # Bytes of a by-reference input (already read from S3 by the consumer), if any.
    input_bytes: bytes | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    model: str | None = None
    # 1 for the first attempt; the row's attempt counter.
    attempt: int = 1
    # How many times an asynchronous provider task was already checked (re-check path).
    checks: int = 0
    # The provider's own task id from an earlier `running` answer.
    handle: str | None = None
    # How many times an operator re-ran the job (a re-run usually follows a fix).
    reruns: int = 0

    @property
    def idempotency_key(self) -> str:
        return f"{self.job_id}:{self.step}"


class Artifact(BaseModel):
    """A binary output the consumer stores under `results/<jobId>/<step>/<name>`."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str = Field(pattern=r"^[A-Za-z0-9._-]{1,100}$")
    content_type: str
    data: bytes


class ProviderResult(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    status: Literal["succeeded", "running"]
    # Small JSON output (summary text, vector, caption, manifest); stored on the row when small.
    output: Any = None
    artifacts: tuple[Artifact, ...] = ()
    model: str | None = None
    usage: dict[str, int] = Field(default_factory=dict)
    cost: float | None = None
    # For `running`: the provider's task id, passed back on the next check.
    handle: str | None = None
    # Keys of artifacts a step already wrote to the result bucket itself (a workflow merge that
    # streams a large object); listed with `artifacts` in the result document.
    stored_artifacts: tuple[str, ...] = ()


class Classification(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    label: str
    score: float = Field(ge=0.0, le=1.0)
    tags: tuple[str, ...] = ()
    model: str


class Provider(Protocol):
    """An AI provider adapter."""

    name: str

    def run(self, request: ProviderRequest) -> ProviderResult:
        """Do (or check) the work of one job step; raise a `ProviderError` subclass on failure."""
        ...

    def classify(self, text: str) -> Classification:
        """The synchronous short-task path (one-line tag/classification)."""
        ...
