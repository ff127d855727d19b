"""The stuck-job sweeper (beyond the source): nothing stays `running` or `queued` forever.

- `running` whose lease expired: its consumer was killed (timeout, out of memory). Re-queue it
  within the attempt budget, or finalize it (refunding its credits) when the budget is spent.
  One still waiting on its provider gets its lost re-check message re-sent instead.
- `queued` / `failed_retryable` older than STUCK_QUEUED_SECONDS: its message never arrived (or
  was lost). Re-send it within the budget, or finalize it. A `failed_retryable` row waits until
  its own retry time (back-off, Retry-After) is STUCK_QUEUED_SECONDS overdue, and a held row (spend
  brake, tenant running cap) until its hold is: until then its one copy is waiting in the queue.
- a synchronous call (`POST /classify`) still `running` past its lease: its API function died
  before it settled, and its caller got no answer. It is finalized with its price refunded; never
  re-queued (it has no queue).
- a finished job whose webhook delivery is still `pending` and never tried a minute later: its
  message was lost after the final commit; queue it again (aijobs.webhooks.recovery).
Every action first wins a conditional update on the row, so two overlapping runs act once.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.errors import CANCELLED, TransitionConflict
from aijobs.job_end import job_ended
from aijobs.observability import METRIC_SWEPT, emit, logger
from aijobs.provider_plan import CLASSIFY
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.store.jobs import JobStore
from aijobs.webhooks.recovery import resend_lost

LEASE_EXPIRED = "lease_expired"
NEVER_DELIVERED = "never_delivered"
SWEEP_LIMIT = 100
BUDGET_SPENT = "attempt budget spent (found by the sweeper)"
NOT_DUE = "not_due"
RESENT = "resent"


def run_sweeper(run: CronRun, ctx: CronContext) -> dict[str, Any]:
    now = ctx.clock()
    actions: Counter[str] = Counter()
    resent = 0
    # The jobs re-sent as lost (`_sweep_stale`): a duplicate message each, so operators (and the
    # chaos soak, which checks no held row is among them) can tell which.
    resent_jobs: list[str] = []
    for index in ctx.directory.active_shards():
        store = ctx.directory.job_store(ctx.directory.shard_tables[index], ctx.clock)
        for kind in ctx.kinds:
            for job in store.query_kind_status(kind, JobStatus.RUNNING, before=now, limit=SWEEP_LIMIT):
                if job.lease_expires_at is not None and job.lease_expires_at < now:
                    actions[f"{kind}:{_sweep_running(store, ctx, job)}"] += 1
            for status in (JobStatus.QUEUED, JobStatus.FAILED_RETRYABLE):
                stale = store.query_kind_status(kind, status, before=now - ctx.stuck_after, limit=SWEEP_LIMIT)
                for job in stale:
                    action = _sweep_stale(store, ctx, job)
                    actions[f"{kind}:{action}"] += 1
                    if action == RESENT:
                        resent_jobs.append(job.job_id)
        for job in store.query_kind_status(CLASSIFY, JobStatus.RUNNING, before=now, limit=SWEEP_LIMIT):
            if job.lease_expires_at is not None and job.lease_expires_at < now:
                message = "the call's function ended before it was settled (found by the sweeper): refunded"
                actions[f"{CLASSIFY}:{_finalize(store, ctx, job, LEASE_EXPIRED, message)}"] += 1
        # Webhook deliveries whose message was lost after the job's final commit.
        resent += resend_lost(
            ctx.directory.shard_tables[index], ctx.queues, ctx.kinds, now, buckets=ctx.directory.buckets
        )
    for key, count in actions.items():
        kind, action = key.split(":", 1)
        if action not in ("skipped", NOT_DUE):
            emit(METRIC_SWEPT, kind=kind, value=count, action=action)
    result = {
        "cron": run.expression,
        "actions": dict(actions),
        "resentJobs": resent_jobs,
        "webhooksResent": resent,
    }
    logger.info("sweeper result", extra=result)
    return result


def _sweep_running(store: JobStore, ctx: CronContext, job: Job) -> str:
    now = ctx.clock()
    if job.awaiting_provider:
        if not store.touch(job, now=now, hold=ctx.recheck + ctx.lease_of(job.kind)):
            return "skipped"
        _send(ctx, job)
        return "recheck_resent"
    if job.cancel_requested_at is not None:
        # Its owner cancelled it and its attempt never reported: it ends cancelled, refunded.
        return _finalize(
            store, ctx, job, CANCELLED, "cancelled by its owner; its attempt never finished (refunded)"
        )
    if job.attempts >= ctx.max_attempts_of(job.kind):
        return _finalize(store, ctx, job, LEASE_EXPIRED, BUDGET_SPENT)
    if not store.release_expired_lease(job, now=now, error_class=LEASE_EXPIRED):
        return "skipped"
    _send(ctx, job)
    return "requeued"


def _sweep_stale(store: JobStore, ctx: CronContext, job: Job) -> str:
    now = ctx.clock()
    due = max((at for at in (job.next_attempt_at, job.held_until) if at is not None), default=None)
    if due is not None and now < due + ctx.stuck_after:
        # Its retry or the end of its hold is not overdue yet (a long back-off, a provider's
        # Retry-After, a hold longer than `stuck_after`): the message is still waiting in the
        # queue. Only one that is late by `stuck_after` is re-sent.
        return NOT_DUE
    if job.attempts >= ctx.max_attempts_of(job.kind):
        return _finalize(store, ctx, job, job.last_error_class or NEVER_DELIVERED, BUDGET_SPENT)
    if not store.touch(job, now=now):
        return "skipped"
    _send(ctx, job)
    return RESENT


def _finalize(store: JobStore, ctx: CronContext, job: Job, error_class: str, message: str) -> str:
    try:
        finished = store.fail_final(
            job, now=ctx.clock(), error_class=error_class, message=message, own_claim=False
        )
    except TransitionConflict:
        return "skipped"
    job_ended(store, ctx.queues, finished, ctx.clock())
    return "finalized"


def _send(ctx: CronContext, job: Job) -> None:
    # A lost re-check is re-sent with the id it was waiting for, so it can still claim the row.
    check = job.recheck_id if job.awaiting_provider else None
    ctx.queues.send(
        QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind, check=check), kind=job.kind
    )
    logger.info(
        "stuck job re-sent", extra={"jobId": job.job_id, "kind": job.kind, "status": job.status.value}
    )
