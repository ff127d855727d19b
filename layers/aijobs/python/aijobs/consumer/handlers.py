"""One handler per job kind: check the row's input for that kind, then call the provider.

A handler returns the provider's result or raises a typed error (aijobs.errors); the dispatcher
does the claiming, result writing, retries and acknowledgement. Handlers stay small on purpose:
adding a kind means adding a function here and a line in registry.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aijobs.domain import Job
from aijobs.errors import InvalidInputError
from aijobs.providers.base import Provider, ProviderRequest, ProviderResult
from aijobs.store.results import ResultStore


@dataclass(frozen=True)
class JobContext:
    """What a handler gets: the claimed row and the adapters it may use."""

    job: Job
    provider: Provider
    results: ResultStore

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


KindHandler = Callable[[JobContext], ProviderResult]


def _text(job: Job, *fields: str) -> str:
    """The job's text input: a string, or the first of `fields` in an object input."""
    value: Any = job.input
    if isinstance(value, dict):
        value = next((value[name] for name in fields if isinstance(value.get(name), str)), None)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError(f"{job.kind} needs a non-empty text input ({' or '.join(fields)})")
    return value


def summarize(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx.job, "text")))


def embed(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx.job, "text")))


def generate_image(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx.job, "prompt", "text")))


def caption_image(ctx: JobContext) -> ProviderResult:
    if ctx.job.input_ref is None:
        raise InvalidInputError("image-caption needs the image by reference (inputRef)")
    return ctx.provider.run(ctx.request(input_bytes=ctx.results.read_input(ctx.job.input_ref)))


def synthesize_speech(ctx: JobContext) -> ProviderResult:
    return ctx.provider.run(ctx.request(input=_text(ctx.job, "text")))


def generate_video(ctx: JobContext) -> ProviderResult:
    # Asynchronous provider: the first call starts a task, later calls (re-checks) poll it.
    return ctx.provider.run(ctx.request(input=_text(ctx.job, "prompt", "text")))
