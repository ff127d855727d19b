"""Logging and metrics shared by every function, plus the names CDK alarms watch.

Logs are structured JSON (powertools Logger); the job id is the correlation id. Metrics are
CloudWatch EMF lines (powertools), one metric per line so each carries its own dimensions.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

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
METRIC_CRON_FAILED = "CronRunFailed"
METRIC_CRON_SKIPPED = "CronRunSkipped"
METRIC_SWEPT = "JobsSwept"
METRIC_CREDITS_EXPIRED = "CreditGrantsExpired"

logger = Logger(service=os.environ.get("POWERTOOLS_SERVICE_NAME", "aijobs"))


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
    dimensions = {"service": os.environ.get("POWERTOOLS_SERVICE_NAME", "aijobs"), **dimensions}
    if kind is not None:
        dimensions[KIND_DIMENSION] = kind
    if error_class is not None:
        dimensions[ERROR_CLASS_DIMENSION] = error_class
    with single_metric(
        name=name, unit=unit, value=value, namespace=METRICS_NAMESPACE, default_dimensions=dimensions
    ):
        pass
