"""Logging and metrics shared by every function, plus the names CDK alarms watch.

Logs are structured JSON (powertools Logger); the job id is the correlation id. Metrics are
CloudWatch EMF lines (powertools), one metric per line so each carries its own dimensions.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.lambda_context import build_lambda_context_model
from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities import jmespath_utils

# CloudWatch namespace of every aijobs EMF metric (POWERTOOLS_METRICS_NAMESPACE).
METRICS_NAMESPACE = "aijobs"
# Dimension that carries the job kind (the queue name) on per-kind metrics.
KIND_DIMENSION = "kind"
ERROR_CLASS_DIMENSION = "error_class"
# One data point per dead letter recorded by the DLQ consumer. Alarms watch arrivals, because a
# DLQ drained by its own consumer always shows depth 0.
METRIC_DEAD_LETTERED = "DeadLettered"
METRIC_ACCEPTED = "JobsAccepted"
METRIC_SUCCEEDED = "JobsSucceeded"
METRIC_RETRIED = "JobsRetried"
METRIC_FAILED_FINAL = "JobsFailedFinal"
METRIC_DURATION = "JobDuration"
METRIC_POISON = "PoisonMessages"
METRIC_CONSUMER_PAUSED = "ConsumerPaused"
# A job re-sent to wait because its tenant is at its running cap (per-tenant fairness).
METRIC_TENANT_HELD = "TenantCapHeld"
# A job re-sent to wait because the stage (or its tenant) reached its daily spend cap (aijobs.spend).
METRIC_SPEND_HELD = "SpendCapHeld"
METRIC_CRON_SUCCEEDED = "CronRunSucceeded"
METRIC_CRON_FAILED = "CronRunFailed"
METRIC_CRON_SKIPPED = "CronRunSkipped"
# A second delivery of a schedule firing that already ran (or is running): skipped.
METRIC_CRON_DUPLICATE = "CronRunDuplicate"
METRIC_SWEPT = "JobsSwept"
METRIC_CREDITS_EXPIRED = "CreditGrantsExpired"
# USD a succeeded job spent on its model (aijobs.pricing), dimensions kind + model. CloudWatch has
# no currency unit, so the unit is None and the value is dollars.
METRIC_MODEL_SPEND = "ModelSpend"
# A kind's consumer MaximumConcurrency after each adaptive concurrency run (aijobs.aimd); the
# ceiling when its mapping has none.
METRIC_CONSUMER_CONCURRENCY = "ConsumerConcurrency"

SERVICE_DIMENSION = "service"
CRON_DIMENSION = "cron"
MODEL_DIMENSION = "model"
ACTION_DIMENSION = "action"
# The dimensions each metric is emitted with besides `service` (which every metric carries).
# CloudWatch treats another dimension set as another metric, so the dashboard graphs each metric
# with exactly these; a unit test checks every `emit()` call against this table.
METRIC_DIMENSIONS: dict[str, tuple[str, ...]] = {
    METRIC_ACCEPTED: (KIND_DIMENSION,),
    METRIC_SUCCEEDED: (KIND_DIMENSION,),
    METRIC_RETRIED: (KIND_DIMENSION, ERROR_CLASS_DIMENSION),
    METRIC_FAILED_FINAL: (KIND_DIMENSION, ERROR_CLASS_DIMENSION),
    METRIC_DEAD_LETTERED: (KIND_DIMENSION,),
    METRIC_DURATION: (KIND_DIMENSION,),
    METRIC_POISON: (KIND_DIMENSION,),
    METRIC_CONSUMER_PAUSED: (KIND_DIMENSION,),
    METRIC_CONSUMER_CONCURRENCY: (KIND_DIMENSION,),
    METRIC_TENANT_HELD: (KIND_DIMENSION,),
    METRIC_SPEND_HELD: (KIND_DIMENSION,),
    METRIC_MODEL_SPEND: (KIND_DIMENSION, MODEL_DIMENSION),
    METRIC_CRON_SUCCEEDED: (CRON_DIMENSION,),
    METRIC_CRON_FAILED: (CRON_DIMENSION,),
    METRIC_CRON_DUPLICATE: (CRON_DIMENSION,),
    METRIC_CRON_SKIPPED: (),
    METRIC_SWEPT: (KIND_DIMENSION, ACTION_DIMENSION),
    METRIC_CREDITS_EXPIRED: (),
}

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "aijobs"))

_Result = TypeVar("_Result")
LambdaHandler = Callable[[dict[str, Any], Any], _Result]


@contextmanager
def log_context(**keys: Any) -> Iterator[None]:
    """Add `keys` to the log lines the calling thread writes inside the block.

    Use it instead of `logger.append_context_keys` / `logger.set_correlation_id`: those change the
    logger's global keys, which every thread shares, and the local stack runs all functions (and
    several batches) as threads of one process. The keys live in powertools' thread-local (context
    variable) store, so blocks nest and, on exit, the thread's keys are exactly what they were
    before. `log_context(correlation_id=job_id)` sets the correlation id.
    """
    previous = dict(logger.thread_safe_get_current_keys())
    logger.thread_safe_append_keys(**keys)
    try:
        yield
    finally:
        # Replace rather than remove in place: powertools' remove mutates the current dict.
        logger.thread_safe_clear_keys()
        if previous:
            logger.thread_safe_append_keys(**previous)


_warm_functions: set[str] = set()
_warm_lock = threading.Lock()


def _cold_start(function_name: str) -> bool:
    """True for the first invocation of a function in this process (one process is one container
    in Lambda; the local stack hosts every function in one process, so count per function)."""
    if os.environ.get("AWS_LAMBDA_INITIALIZATION_TYPE") == "provisioned-concurrency":
        return False
    with _warm_lock:
        if function_name in _warm_functions:
            return False
        _warm_functions.add(function_name)
        return True


def log_lambda_context(
    *, correlation_id_path: str | None = None
) -> Callable[[LambdaHandler[_Result]], LambdaHandler[_Result]]:
    """Entry-point decorator: `logger.inject_lambda_context(clear_state=True, ...)`, thread-local.

    Each invocation's lines carry cold_start, function_name/arn/memory/request id and, with
    `correlation_id_path` (a JMESPath into the event), the correlation id; the calling thread's
    keys are cleared before and after the invocation, and no other thread ever sees them.
    """

    def decorate(handler: LambdaHandler[_Result]) -> LambdaHandler[_Result]:
        @functools.wraps(handler)
        def invoke(event: dict[str, Any], context: Any) -> _Result:
            lambda_keys = build_lambda_context_model(context).__dict__
            cold_start = _cold_start(str(lambda_keys.get("function_name")))
            keys: dict[str, Any] = {"cold_start": cold_start, **lambda_keys}
            if correlation_id_path:
                keys["correlation_id"] = jmespath_utils.query(data=event, envelope=correlation_id_path)
            if logger.sampling_rate and not cold_start:
                logger.refresh_sample_rate_calculation()
            logger.thread_safe_clear_keys()
            logger.thread_safe_append_keys(**keys)
            try:
                return handler(event, context)
            finally:
                logger.thread_safe_clear_keys()

        return invoke

    return decorate


def in_lambda() -> bool:
    """Running in AWS Lambda (or `sam local invoke`), not in tests or the local stack."""
    return bool(os.environ.get("AWS_LAMBDA_FUNCTION_NAME"))


def lambda_tracing(handler: LambdaHandler[_Result]) -> LambdaHandler[_Result]:
    """Entry-point decorator: X-Ray subsegments for the invocation and every AWS call, with the
    powertools Tracer created on the first invocation and only in Lambda. Building it loads the
    X-Ray SDK and patches botocore (about a fifth of a handler's import time), which nothing
    outside Lambda needs; POWERTOOLS_TRACE_DISABLED still turns it off in Lambda."""
    traced: list[LambdaHandler[_Result]] = []

    @functools.wraps(handler)
    def invoke(event: dict[str, Any], context: Any) -> _Result:
        if not traced:
            if in_lambda():
                from aws_lambda_powertools import Tracer

                traced.append(Tracer().capture_lambda_handler(handler))
            else:
                traced.append(handler)
        return traced[0](event, context)

    return invoke


def service_name(stage: str) -> str:
    """POWERTOOLS_SERVICE_NAME of every function on a stage (also a metric dimension)."""
    return f"aijobs-{stage}"


def emit(
    name: str,
    *,
    kind: str | None = None,
    value: float = 1,
    unit: MetricUnit = MetricUnit.Count,
    error_class: str | None = None,
    **dimensions: str,
) -> None:
    """One EMF metric with dimensions service + kind (+ error class, + any others given).

    Honours POWERTOOLS_METRICS_DISABLED (the CLI keeps stdout for its own output)."""
    if os.environ.get("POWERTOOLS_METRICS_DISABLED", "").lower() == "true":
        return
    dimensions = {SERVICE_DIMENSION: os.environ.get("POWERTOOLS_SERVICE_NAME", "aijobs"), **dimensions}
    if kind is not None:
        dimensions[KIND_DIMENSION] = kind
    if error_class is not None:
        dimensions[ERROR_CLASS_DIMENSION] = error_class
    with single_metric(
        name=name, unit=unit, value=value, namespace=METRICS_NAMESPACE, default_dimensions=dimensions
    ):
        pass
