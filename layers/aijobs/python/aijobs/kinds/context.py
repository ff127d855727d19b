"""What a job's step gets (the claimed row and the adapters it may use) and how it reads the job's
input: shared by a declared kind's handler (aijobs.consumer.handlers) and a workflow's steps
(aijobs.workflows.runner), so neither imports the other's package.
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
from aijobs.providers.base import Provider
from aijobs.store.results import ResultStore, is_missing_object, is_part_ref

if TYPE_CHECKING:
    from aijobs.kinds.base import Kind, KindInput
    from aijobs.kinds.run import Candidate, Step
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

    # The kind's default model on this stage (its plan); a job's own `model` wins.
    model: str | None = None
    # The kind's fallback models after it, each with the provider that serves it (its plan).
    fallbacks: tuple[tuple[Provider, str], ...] = ()

    def candidates(self) -> list[Candidate]:
        """The models this job may run on, in order: its own or its kind's, then the fallbacks."""
        from aijobs.kinds.run import Candidate

        first = Candidate(self.provider, self.job.model or self.model or "")
        rest = [
            # A fallback on the kind's own provider runs on the very adapter the kind uses.
            Candidate(self.provider if provider.name == self.provider.name else provider, model)
            for provider, model in self.fallbacks
            if model != first.model
        ]
        return [first, *rest]

    def step(self, value: KindInput, *, step: str = "main") -> Step:
        """The kind step of this job's attempt (aijobs.kinds.run)."""
        from aijobs.kinds.run import Step

        # No model only for a provider without models (the synth refuses a kind without one elsewhere).
        model = self.job.model or self.model or ""
        return Step(
            job_id=self.job.job_id,
            input=value,
            options=self.job.options,
            model=model,
            step=step,
            attempt=self.job.attempts,
            checks=self.job.provider_checks,
            handle=self.job.provider_handle,
            reruns=self.job.reruns,
            tasks=self.job.provider_tasks,
        )


def _input_bytes(ctx: JobContext) -> bytes:
    """The uploaded input named by `inputRef`. Gone (removed or expired by the bucket's lifecycle)
    is the input's fault and final: no retry can bring it back."""
    assert ctx.job.input_ref is not None
    try:
        return ctx.results.read_input(ctx.job.input_ref)
    except ClientError as error:
        if is_missing_object(error):
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


def kind_input(kind: Kind, ctx: JobContext) -> KindInput:
    """The job's input as its kind reads it: an uploaded image's bytes, or the inline/uploaded
    text checked against the kind's input limits."""
    from aijobs.kinds.base import KindInput
    from aijobs.kinds.run import check_input

    if kind.inputs.type == "image":
        if ctx.job.input_ref is None:
            raise InvalidInputError(f"{kind.name} needs the image by reference (inputRef)")
        return KindInput(image=_input_bytes(ctx))
    return check_input(kind, input_value(ctx))
