"""The parent's steps, run by the workflow kind's consumer like any handler (see base.py):

1. `split` (a claimed attempt, retried like any): the parts are computed (deterministically), the
   count is fixed on the row and the credit reservation settled to it, then child rows (100 per
   transaction, only if absent) and their messages (10 per call) are written a slice at a time,
   with a checkpoint on the row after each batch. A crash resumes at the checkpoint; a long split
   continues in a fresh invocation (a re-check, no attempt spent).
2. `children`: the parent is parked (`running`, no claim) until `fanin.try_merge` moves it on
   (called by aijobs.job_end for its last child).
3. `merge` (a fresh attempt budget): fails the parent when more children failed than its policy
   allows, else merges what succeeded. The dispatcher stores the result and settles the credits.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta

from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import InputTooLargeError, InvalidInputError, PaymentRequiredError
from aijobs.kinds.context import JobContext, input_value
from aijobs.observability import logger
from aijobs.providers.base import ProviderResult
from aijobs.queues import JobQueues
from aijobs.store.job_items import PHASE_CHILDREN, PHASE_MERGE
from aijobs.store.jobs import JobStore
from aijobs.store.keys import MAX_CHILDREN, child_job_id
from aijobs.store.workflow_rows import CHILD_WRITE_BATCH
from aijobs.workflows.base import (
    ChildrenFailedError,
    InsufficientCreditsError,
    MergeInput,
    Part,
    Workflow,
    WorkflowCancelledError,
)
from aijobs.workflows.fanin import try_merge

# Children written per invocation of the split step (then it continues in a fresh one).
SPLIT_SLICE = 5_000
# A part larger than this (as JSON) is stored in S3 and the child gets an `inputRef` to it.
INLINE_PART_BYTES = 8 * 1024


def run_step(workflow: Workflow, ctx: JobContext) -> ProviderResult | None:
    if ctx.job.phase == PHASE_MERGE:
        return _merge(workflow, ctx)
    if ctx.job.phase == PHASE_CHILDREN:
        _wait(ctx)
        return None
    return _split(workflow, ctx)


def _adapters(ctx: JobContext) -> tuple[JobStore, JobQueues, Callable[[], datetime]]:
    if ctx.store is None or ctx.queues is None or ctx.clock is None:
        raise TypeError("a workflow step needs the consumer's store, queues and clock")
    return ctx.store, ctx.queues, ctx.clock


def _split(workflow: Workflow, ctx: JobContext) -> ProviderResult | None:
    store, queues, clock = _adapters(ctx)
    job = ctx.job
    try:
        options = workflow.option_values(job.options)
    except ValueError as error:
        raise InvalidInputError(str(error)) from None
    parts = workflow.split(input_value(ctx), options)
    if not parts:
        raise InvalidInputError(f"{workflow.kind}: the input splits into no parts")
    if len(parts) > MAX_CHILDREN:
        raise InputTooLargeError(f"{workflow.kind}: {len(parts)} parts; at most {MAX_CHILDREN} per job")
    lease = timedelta(seconds=ctx.lease_seconds)
    try:
        job = store.fix_children(
            job, total=len(parts), failures_allowed=workflow.failures_allowed(job.options, len(parts)),
            now=clock(), lease=lease,
        )  # fmt: skip
    except PaymentRequiredError as error:
        raise InsufficientCreditsError(f"the input split into {len(parts)} parts: {error}") from None
    end = min(len(parts), job.children_split + SPLIT_SLICE)
    for start in range(job.children_split, end, CHILD_WRITE_BATCH):
        if job.cancel_requested_at is not None:
            break  # cancelled by its owner (each checkpoint reads the row back): no more children
        stop = min(end, start + CHILD_WRITE_BATCH)
        now = clock()
        children = [_child(ctx, workflow, job, index, parts[index], now) for index in range(start, stop)]
        store.create_children(children)
        queues.send_batch(
            [QueueMessage(jobId=child.job_id, userId=child.user_id, kind=child.kind) for child in children],
            kind=workflow.child_kind,
        )
        job = store.checkpoint_split(job, done=stop, now=now, lease=lease)
    if job.cancel_requested_at is not None and job.children_split < len(parts):
        job = store.stop_split(job, done=job.children_split, now=clock())
        logger.info("split stopped by a cancel", extra={"children": job.children_split})
    elif end < len(parts):
        logger.info("split continues in the next invocation", extra={"written": end, "total": len(parts)})
        return ProviderResult(status="running")
    logger.info(
        "split done: waiting for children", extra={"total": len(parts), "childKind": workflow.child_kind}
    )
    _park(ctx, job)
    return None


def _child(ctx: JobContext, workflow: Workflow, parent: Job, index: int, part: Part, now: datetime) -> Job:
    inline = len(json.dumps(part.input).encode()) <= INLINE_PART_BYTES
    return Job(
        job_id=child_job_id(parent.job_id, index),
        user_id=parent.user_id,
        kind=workflow.child_kind,
        status=JobStatus.QUEUED,
        input=part.input if inline else None,
        input_ref=None if inline else ctx.results.write_part(parent.job_id, index, part.input),
        options=workflow.child_options(parent.options),
        model=parent.model,
        provider=parent.provider,
        created_at=now,
        updated_at=now,
        parent_id=parent.job_id,
        part=index,
    )


def _park(ctx: JobContext, job: Job) -> None:
    store, queues, clock = _adapters(ctx)
    parked = store.park_parent(job, now=clock(), hold=timedelta(seconds=ctx.hold_seconds))
    # Children can finish while the split still runs: the last of them found the parent in its
    # split and could not move it on, so the split's end tries too.
    try_merge(store, queues, parked.user_id, parked.job_id, clock())


def _wait(ctx: JobContext) -> None:
    """A re-check of a parent waiting for children (the sweeper found its hold expired)."""
    logger.info(
        "parent still waiting for children",
        extra={"done": ctx.job.children_done, "total": ctx.job.children_total},
    )
    _park(ctx, ctx.job)


def _merge(workflow: Workflow, ctx: JobContext) -> ProviderResult:
    store, _, _ = _adapters(ctx)
    job = ctx.job
    if job.cancel_requested_at is not None:
        raise WorkflowCancelledError(
            f"cancelled by its owner: {job.children_succeeded} of {job.children_total} parts had "
            "succeeded (charged), the others were not run"
        )
    if job.children_failed > job.failures_allowed:
        raise ChildrenFailedError(
            f"{job.children_failed} of {job.children_total} parts failed; the policy allows "
            f"{job.failures_allowed} ({workflow.kind} option maxFailedShare)"
        )
    children = store.list_children(job.user_id, job.job_id, limit=None).jobs
    return workflow.merge(
        MergeInput(
            workflow=workflow,
            parent=job,
            children=children,
            provider=ctx.provider,
            results=ctx.results,
            read_input=lambda: input_value(ctx),
            model=ctx.model,
        )
    )
