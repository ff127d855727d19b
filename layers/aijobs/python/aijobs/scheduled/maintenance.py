"""The `*/10 * * * *` job (docs/design.md §7): credit expiry and retention clean-up, per tenant shard.

1. read the credit-transaction and AI-task retention from the meta table once per run; missing or
   invalid fails the run loudly (no fallback to environment defaults);
2. list the active shards;
3. per shard: expire credits (limit 20), clean up credit transactions past retention (limit 100),
   clean up finished AI tasks past retention (limit 100: the backstop of the rows' own TTL, which
   the functions that finish jobs stamp from the same configuration, aijobs.store.retention);
4. log one structured result with counts per shard.
Limits bound each run; what is left waits for the next run. Every step is conditional, so a
duplicate run (at-least-once schedules) cannot expire, refund or delete anything twice.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aijobs.domain import JobStatus
from aijobs.observability import METRIC_CREDITS_EXPIRED, emit, logger
from aijobs.provider_plan import CLASSIFY
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.store.credits import CreditLedger
from aijobs.store.jobs import JobStore
from aijobs.store.keys import iso
from aijobs.store.retention import Retention, read_retention

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

EXPIRE_LIMIT = 20
TRANSACTION_CLEANUP_LIMIT = 100
TASK_CLEANUP_LIMIT = 100
_FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED_FINAL)


def run_maintenance(run: CronRun, ctx: CronContext) -> dict[str, Any]:
    retention = read_retention(ctx.meta)  # once per run; raises loudly when missing or invalid
    now = ctx.clock()
    shards: dict[str, dict[str, Any]] = {}
    for index in ctx.directory.active_shards():
        table = ctx.directory.shard_tables[index]
        try:
            shards[str(index)] = _maintain_shard(table, ctx, now, retention)
        except Exception as error:  # one broken shard must not starve the others
            logger.exception("shard maintenance failed", extra={"shard": index})
            shards[str(index)] = {"error": f"{type(error).__name__}: {error}"}
    result = {"cron": run.expression, "scheduledTime": run.scheduled_time, "shards": shards}
    logger.info("cron maintenance result", extra=result)
    failed = [shard for shard, counts in shards.items() if "error" in counts]
    if failed:
        raise RuntimeError(f"maintenance failed on shards {failed}")
    return result


def _maintain_shard(table: Table, ctx: CronContext, now: Any, retention: Retention) -> dict[str, int]:
    # The run knows the retention: an expiry's transaction is folded and expires by TTL too.
    kept = timedelta(days=retention.credit_transaction_days)
    ledger = CreditLedger(table, ctx.clock, buckets=ctx.directory.buckets, retention=lambda: kept)
    expired = ledger.expire_due(now, limit=EXPIRE_LIMIT)
    if expired:
        emit(METRIC_CREDITS_EXPIRED, value=expired)
    transactions = ledger.cleanup_transactions(
        now - timedelta(days=retention.credit_transaction_days), limit=TRANSACTION_CLEANUP_LIMIT
    )
    tasks = _cleanup_tasks(
        ctx.directory.job_store(table, ctx.clock),
        (*ctx.kinds, CLASSIFY),  # a synchronous call's row too (its record, aijobs.api.service)
        now - timedelta(days=retention.ai_task_days),
    )
    return {"creditsExpired": expired, "transactionsRemoved": transactions, "tasksRemoved": tasks}


def _cleanup_tasks(store: JobStore, kinds: tuple[str, ...], cutoff: Any) -> int:
    removed = 0
    for kind in kinds:
        for status in _FINISHED:
            budget = TASK_CLEANUP_LIMIT - removed
            if budget <= 0:
                return removed
            for job in store.query_kind_status(kind, status, before=cutoff, limit=budget):
                removed += store.delete_finished(job)
    logger.debug("tasks removed", extra={"cutoff": iso(cutoff), "removed": removed})
    return removed
