"""The cron dispatcher: run the handler registered under the schedule's exact expression."""

from __future__ import annotations

from typing import Any

from aijobs.observability import (
    METRIC_CRON_DUPLICATE,
    METRIC_CRON_FAILED,
    METRIC_CRON_SKIPPED,
    emit,
    log_context,
    logger,
)
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.registry import ScheduledHandler
from aijobs.store.cron_runs import CronRuns

# Keys of the schedule payload (the CDK Schedules construct writes them).
PAYLOAD_CRON = "cron"
PAYLOAD_SCHEDULED_TIME = "scheduledTime"
PAYLOAD_EXECUTION_ID = "executionId"


def dispatch(
    event: dict[str, Any], ctx: CronContext, handlers: dict[str, ScheduledHandler]
) -> dict[str, Any]:
    expression = event.get(PAYLOAD_CRON)
    handler = handlers.get(expression) if isinstance(expression, str) else None
    if handler is None:
        logger.warning("unknown cron expression skipped", extra={"cron": expression})
        emit(METRIC_CRON_SKIPPED)
        return {"cron": expression, "status": "skipped"}
    run = CronRun(
        expression=str(expression),
        scheduled_time=event.get(PAYLOAD_SCHEDULED_TIME),
        execution_id=event.get(PAYLOAD_EXECUTION_ID),
    )
    with log_context(cron=run.expression, scheduledTime=run.scheduled_time):
        runs = CronRuns(ctx.meta) if run.scheduled_time else None
        if runs is not None and not runs.begin(
            run.expression, str(run.scheduled_time), run.execution_id, ctx.clock()
        ):
            # At-least-once schedules: this firing is running or done already. Limits are per run.
            logger.info("duplicate delivery of a scheduled run skipped")
            emit(METRIC_CRON_DUPLICATE, cron=run.expression)
            return {"cron": run.expression, "status": "duplicate"}
        try:
            result = handler(run, ctx)
        except Exception as error:
            if runs is not None:
                runs.finish(run.expression, str(run.scheduled_time), succeeded=False, now=ctx.clock())
            # Fail loudly: error log, metric and alert; the next scheduled run is the retry.
            logger.exception("cron run failed")
            emit(METRIC_CRON_FAILED, cron=run.expression)
            ctx.alerts.publish(
                f"aijobs {ctx.stage}: cron '{run.expression}' failed",
                {
                    "cron": run.expression,
                    "scheduledTime": run.scheduled_time,
                    "error": f"{type(error).__name__}: {error}",
                },
            )
            raise
        if runs is not None:
            runs.finish(run.expression, str(run.scheduled_time), succeeded=True, now=ctx.clock())
    return {"cron": run.expression, "status": "ok", "result": result}
