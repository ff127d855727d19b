"""The cron dispatcher: run the handler registered under the schedule's exact expression."""

from __future__ import annotations

from typing import Any

from aijobs.observability import METRIC_CRON_FAILED, METRIC_CRON_SKIPPED, emit, logger
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.registry import ScheduledHandler

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
    with logger.append_context_keys(cron=run.expression, scheduledTime=run.scheduled_time):
        try:
            result = handler(run, ctx)
        except Exception as error:
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
    return {"cron": run.expression, "status": "ok", "result": result}
