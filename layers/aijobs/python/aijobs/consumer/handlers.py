"""One handler per job kind: check the row's input for that kind, then call the provider.

A handler returns the provider's result or raises a typed error (aijobs.errors); the dispatcher
does the claiming, result writing, retries and acknowledgement. Handlers stay small on purpose:
adding a kind means adding a function here and a line in registry.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from aijobs.domain import Job
from aijobs.errors import InvalidInputError
from aijobs.providers.base import Provider, ProviderRequest, ProviderResult
from aijobs.store.results import ResultStore, is_part_ref

if TYPE_CHECKING:
    from aijobs.queues import JobQueues
    from aijobs.store.jobs import JobStore


@dataclass(frozen=True)
class JobContext:
    """What a handler gets: the claimed row and the adapters it may use."""

    job: Job
    provider: Provider
    results: ResultStore
    # What a workflow step also needs (aijobs.workflows): the row's store, the queues it sends
    # children or merge messages to, the clock and the lease it must keep renewing.
    store: JobStore | None = None
    queues: JobQueues | None = None
    clock: Callable[[], datetime] | None = None
    lease_seconds: float = 0.0
    hold_seconds: float = 0.0

    def request(
        self, *, input: Any = None, input_bytes: bytes | None = None, step: str = "main"
    ) -> ProviderRequest:
        return ProviderRequest(
            job_id=self.job.job_id,
            kind=self.job.kind,
            step=step,
            input=input,
            input_bytes=input_bytes,
            options=self.job.options,
            model=self.job.model,
            attempt=self.job.attempts,
            checks=self.job.provider_checks,
            handle=self.job.provider_handle,
            reruns=self.job.reruns,
        )


# A handler returns the step's result, or None when it parked the job itself (a workflow parent
# now waiting for its children).
KindHandler = Callable[[JobContext], ProviderResult | None]


def _input_bytes(ctx: JobContext) -> bytes:
    """The uploaded input named by `inputRef`. Gone (removed or expired by the bucket's lifecycle)
    is the input's fault and final: no retry can bring it back."""
    assert ctx.job.input_ref is not None
    try:
        return ctx.results.read_input(ctx.job.input_ref)
    except ClientError as error:
        if error.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
            raise InvalidInputError(f"the input object {ctx.job.input_ref!r} does not exist") from None
        raise


def input_value(ctx: JobContext) -> Any:
    """The job's input: inline, the UTF-8 text of its uploaded `inputRef`, or the JSON value of a
    workflow part (a split stores parts too large for a row under `results/<parent>/parts/`)."""
    job = ctx.job
    if job.input is not None or job.input_ref is None:
        return job.input
    data = _input_bytes(ctx)
    if is_part_ref(job.input_ref):
        return json.loads(data)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InvalidInputError(
            f"the input object is not UTF-8 text (invalid byte at offset {error.start})"
        ) from None


def _text(ctx: JobContext, *fields: str) -> str:
    """The job's text input: a string, the first of `fields` in an object input, or the UTF-8 text
    of the object its `inputRef` names."""
    job = ctx.job
    value = input_value(ctx)
    if isinstance(value, dict):
        value = next((value[name] for name in fields if isinstance(value.get(name), str)), None)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{job.kind} needs a non-empty text input ({' or '.join(fields)})")
    return value


def summarize(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx, "text")))


def embed(ctx: JobContext) -> ProviderResult:
    # `{"texts": [...]}` embeds a batch in one job; the adapter checks its size and shape.
    value = input_value(ctx)
    if isinstance(value, dict) and "texts" in value:
        return ctx.provider.run(ctx.request(input={"texts": value["texts"]}))
    return ctx.provider.run(ctx.request(input=_text(ctx, "text")))


def generate_image(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx, "prompt", "text")))


def caption_image(ctx: JobContext) -> ProviderResult:
    if ctx.job.input_ref is None:
        raise InvalidInputError("image-caption needs the image by reference (inputRef)")
    return ctx.provider.run(ctx.request(input_bytes=_input_bytes(ctx)))


def synthesize_speech(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx, "text")))


def generate_video(ctx: JobContext) -> ProviderResult:
    # Asynchronous provider: the first call starts a task, later calls (re-checks) poll it.
    return ctx.provider.run(ctx.request(input=_text(ctx, "prompt", "text")))
