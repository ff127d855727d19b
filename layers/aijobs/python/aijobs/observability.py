"""Names shared by the functions that emit metrics and the CDK alarms that watch them."""

from __future__ import annotations

# CloudWatch namespace of every aijobs EMF metric (POWERTOOLS_METRICS_NAMESPACE).
METRICS_NAMESPACE = "aijobs"
# Dimension that carries the job kind (the queue name) on per-kind metrics.
KIND_DIMENSION = "kind"
# One data point per dead letter recorded by the DLQ consumer. Alarms watch arrivals, because a
# DLQ drained by its own consumer always shows depth 0.
METRIC_DEAD_LETTERED = "DeadLettered"


def service_name(stage: str) -> str:
    """POWERTOOLS_SERVICE_NAME of every function on a stage (also a metric dimension)."""
    return f"aijobs-{stage}"
