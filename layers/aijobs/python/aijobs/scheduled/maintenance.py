"""The `*/10 * * * *` job (DESIGN.md §7): credit expiry and retention clean-up, per tenant shard.

1. read the credit-transaction and AI-task retention from the meta table once per run; missing or
   invalid fails the run loudly (no fallback to environment defaults);
2. list the active shards;
3. per shard: expire credits (limit 20), clean up credit transactions past retention (limit 100),
   clean up finished AI tasks past retention;
4. log one structured result with counts per shard.
Limits bound each run; what is left waits for the next run. Every step is conditional, so a
duplicate run (at-least-once schedules) cannot expire, refund or delete anything twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from aijobs.credits import CreditLedger
from aijobs.domain import JobStatus
from aijobs.errors import AijobsError
from aijobs.observability import METRIC_CREDITS_EXPIRED, emit, logger
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.store.jobs import JobStore
from aijobs.store.keys import CONFIG_PK, PK, SK, iso

if TYPE_CHECKING:
    from mypy_boto3_dynamodb.service_resource import Table

RETENTION_SK = "retention"
EXPIRE_LIMIT = 20
TRANSACTION_CLEANUP_LIMIT = 100
TASK_CLEANUP_LIMIT = 100
_FINISHED = (JobStatus.SUCCEEDED, JobStatus.FAILED_FINAL)


class RetentionConfigError(AijobsError):
    """The meta table's retention configuration is missing or invalid."""


@dataclass(frozen=True)
class Retention:
    credit_transaction_days: int
    ai_task_days: int


def read_retention(meta: Table) -> Retention:
    item = meta.get_item(Key={PK: CONFIG_PK, SK: RETENTION_SK}, ConsistentRead=True).get("Item")
    if item is None:
        raise RetentionConfigError(
            f"meta table has no {CONFIG_PK}/{RETENTION_SK} item; set it with `aijobs config retention`"
        )
    values = {}
    for name in ("credit_tx_retention_days", "ai_task_retention_days"):
        raw = item.get(name)
        try:
            days = int(str(raw))
        except ValueError:
            raise RetentionConfigError(f"{name}={raw!r} is not a whole number of days") from None
        if days < 1:
            raise RetentionConfigError(f"{name}={days} must be at least 1 day")
        values[name] = days
    return Retention(values["credit_tx_retention_days"], values["ai_task_retention_days"])


def write_retention(meta: Table, *, credit_tx_retention_days: int, ai_task_retention_days: int) -> None:
    """Set the dynamic retention configuration (operators; the local stack seeds it)."""
    if credit_tx_retention_days < 1 or ai_task_retention_days < 1:
        raise ValueError("retention must be at least 1 day")
    meta.put_item(
        Item={
            PK: CONFIG_PK,
            SK: RETENTION_SK,
            "credit_tx_retention_days": credit_tx_retention_days,
            "ai_task_retention_days": ai_task_retention_days,
        }
    )


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
    ledger = CreditLedger(table, ctx.clock, buckets=ctx.directory.buckets)
    expired = ledger.expire_due(now, limit=EXPIRE_LIMIT)
    if expired:
        emit(METRIC_CREDITS_EXPIRED, value=expired)
    transactions = ledger.cleanup_transactions(
        now - timedelta(days=retention.credit_transaction_days), limit=TRANSACTION_CLEANUP_LIMIT
    )
    tasks = _cleanup_tasks(
        JobStore(table, ctx.clock, buckets=ctx.directory.buckets),
        ctx.kinds,
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
