"""The cron dispatcher: run the handler registered under the schedule's exact expression.

A run that fails is handled here: logged, counted (`CronRunFailed`), its claim given back, and
alerted once per incident (aijobs.store.cron_incidents): the first failure of an expression
alerts, later ones are counted, and the next success sends a "recovered" notice. A handled
failure returns `status: failed` instead of raising, so the invocation itself succeeds: Lambda's
retries and the dispatcher's dead-letter queue are kept for invocations that fail before this
code can alert (import error, timeout, out of memory), and neither repeats an alert per run.
"""

from __future__ import annotations

from typing import Any

from aijobs.observability import (
    METRIC_CRON_DUPLICATE,
    METRIC_CRON_FAILED,
    METRIC_CRON_SKIPPED,
    METRIC_CRON_SUCCEEDED,
    emit,
    log_context,
    logger,
)
from aijobs.scheduled.context import CronContext, CronRun
from aijobs.scheduled.registry import ScheduledHandler
from aijobs.store.cron_incidents import CronIncidents
from aijobs.store.cron_runs import CronRuns

# Keys of the schedule payload (the CDK Schedules construct writes them).
PAYLOAD_CRON = "cron"
PAYLOAD_SCHEDULED_TIME = "scheduledTime"
PAYLOAD_EXECUTION_ID = "executionId"

STATUS_OK, STATUS_FAILED, STATUS_SKIPPED, STATUS_DUPLICATE = "ok", "failed", "skipped", "duplicate"


def dispatch(
    event: dict[str, Any], ctx: CronContext, handlers: dict[str, ScheduledHandler]
) -> dict[str, Any]:
    expression = event.get(PAYLOAD_CRON)
    handler = handlers.get(expression) if isinstance(expression, str) else None
    if handler is None:
        logger.warning("unknown cron expression skipped", extra={"cron": expression})
        emit(METRIC_CRON_SKIPPED)
        return {"cron": expression, "status": STATUS_SKIPPED}
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
            return {"cron": run.expression, "status": STATUS_DUPLICATE}
        try:
            result = handler(run, ctx)
        except Exception as error:
            if runs is not None:
                runs.finish(run.expression, str(run.scheduled_time), succeeded=False, now=ctx.clock())
            # Fail loudly: error log and metric on every run, an alert once per incident.
            logger.exception("cron run failed")
            emit(METRIC_CRON_FAILED, cron=run.expression)
            detail = f"{type(error).__name__}: {error}"
            _alert_failure(run, ctx, detail)
            return {"cron": run.expression, "status": STATUS_FAILED, "error": detail}
        if runs is not None:
            runs.finish(run.expression, str(run.scheduled_time), succeeded=True, now=ctx.clock())
        emit(METRIC_CRON_SUCCEEDED, cron=run.expression)
        _notice_recovery(run, ctx)
    return {"cron": run.expression, "status": STATUS_OK, "result": result}


def _alert_failure(run: CronRun, ctx: CronContext, detail: str) -> None:
    incidents = CronIncidents(ctx.meta)
    try:
        opened = incidents.record_failure(run.expression, error=detail, now=ctx.clock())
    except Exception:
        # Without incident state, alert anyway: a repeated alert beats a silent failure.
        logger.exception("cron incident state unavailable; alerting for this run")
        opened = True
    if not opened:
        logger.info("cron incident already open: failure counted, not alerted")
        return
    try:
        ctx.alerts.publish(
            f"aijobs {ctx.stage}: cron '{run.expression}' failing",
            {
                "cron": run.expression,
                "scheduledTime": run.scheduled_time,
                "error": detail,
                "incident": "opened",
                "note": "further failures of this cron are counted, not alerted, until a run succeeds",
            },
        )
    except Exception:
        # Give the opening back so a later failure alerts; failing the invocation lets Lambda's
        # retries, the function's Errors alarm and the dispatcher's dead-letter queue take over.
        incidents.withdraw(run.expression)
        raise


def _notice_recovery(run: CronRun, ctx: CronContext) -> None:
    try:
        incident = CronIncidents(ctx.meta).record_success(run.expression, now=ctx.clock())
    except Exception:
        # The run itself succeeded; the next success closes the incident instead.
        logger.exception("could not close the cron incident")
        return
    if incident is None:
        return
    logger.info("cron recovered", extra={"failures": incident.failures, "openedAt": incident.opened_at})
    ctx.alerts.publish(
        f"aijobs {ctx.stage}: cron '{run.expression}' recovered",
        {
            "cron": run.expression,
            "scheduledTime": run.scheduled_time,
            "incident": "closed",
            "openedAt": incident.opened_at,
            "closedAt": incident.closed_at,
            "failedRuns": incident.failures,
            "lastError": incident.last_error,
        },
    )
