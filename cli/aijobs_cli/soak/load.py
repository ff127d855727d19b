"""A paced load with hard caps: the `LoadPlan` (rate, duration, caps on jobs and spend), the spend it
counts, the pacer of submission slots, and the CloudWatch metrics a load test reads on a deployed
stage (what throttles or piles up)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aijobs_cli.soak.workload import SoakJob
    from aijobs_cli.target import Target


@dataclass(frozen=True)
class LoadPlan:
    """Submit at `rate` jobs/s (None: as fast as the workers go) for `duration_seconds`, never more
    than `max_jobs` jobs, and stop before the spend counted reaches `max_spend_usd`.

    The spend counted is, per submitted job, the larger of `cost_per_job_usd` (the operator's upper
    bound of one job's model spend) and the spend recorded on its row: it never goes down, so the
    cap holds whatever the jobs in flight turn out to cost, provided the bound holds.
    """

    max_jobs: int
    max_spend_usd: float | None = None
    cost_per_job_usd: float = 0.0
    rate: float | None = None
    duration_seconds: float | None = None

    def stop_reason(self, submitted: int, spend: float, elapsed: float) -> str | None:
        """Why no further job may be submitted (None: the next one may go)."""
        if submitted >= self.max_jobs:
            return "max_jobs"
        if self.max_spend_usd is not None and spend + self.cost_per_job_usd > self.max_spend_usd:
            return "max_spend"
        if self.duration_seconds is not None and elapsed >= self.duration_seconds:
            return "duration"
        return None


def counted_spend(jobs: list[SoakJob], cost_per_job_usd: float) -> float:
    """What the spend cap counts: each submitted job at the larger of the bound and its recorded cost."""
    return sum(max(cost_per_job_usd, job.cost or 0.0) for job in jobs)


class Pacer:
    """Submission slots at a fixed rate: slot n is due `n / rate` seconds after the first."""

    def __init__(self, rate: float, clock: Callable[[], float], sleep: Callable[[float], None]) -> None:
        self.rate = rate
        self.clock = clock
        self.sleep = sleep
        self.start = clock()

    def wait(self, slot: int) -> None:
        due = self.start + slot / self.rate
        now = self.clock()
        if due > now:
            self.sleep(due - now)


def throttle_queries(target: Target) -> list[dict[str, Any]]:
    """CloudWatch `MetricDataQueries` for what throttles or piles up during a load test: Lambda
    `Throttles` per consumer and cron function and the account's peak `ConcurrentExecutions`,
    DynamoDB read/write throttle events per table and per global secondary index (the indexes the
    call profile writes), SQS peak in-flight messages and oldest message age per queue."""
    from aijobs_cdk.stage_config import queue_name_of
    from aijobs_cli.sizing.call_profile import default_profile

    indexes: dict[str, set[str]] = defaultdict(set)
    for path in default_profile().paths.values():
        for call in path.calls:
            for item in call.items:
                for entry in item.index_writes:
                    indexes[item.table].add(entry.index)
    metrics: list[tuple[str, str, str, list[dict[str, str]], str]] = []
    functions = [
        *target.consumer_functions.values(),
        *([target.cron_function] if target.cron_function else []),
    ]
    for function in functions:
        metrics.append(
            ("AWS/Lambda", "Throttles", "Sum", [{"Name": "FunctionName", "Value": function}], function)
        )
    metrics.append(("AWS/Lambda", "ConcurrentExecutions", "Maximum", [], "account"))
    tables = [("meta", target.meta_table)] if target.meta_table else []
    tables += [("shard", name) for name in target.shard_tables]
    for role, table in tables:
        for metric in ("ReadThrottleEvents", "WriteThrottleEvents"):
            metrics.append(("AWS/DynamoDB", metric, "Sum", [{"Name": "TableName", "Value": table}], table))
        for index in sorted(indexes.get(role, ())):
            dims = [
                {"Name": "TableName", "Value": table},
                {"Name": "GlobalSecondaryIndexName", "Value": index},
            ]
            metrics.append(("AWS/DynamoDB", "WriteThrottleEvents", "Sum", dims, f"{table}/{index}"))
    for url in [*target.queue_urls.values(), *target.dlq_urls.values()]:
        queue = queue_name_of(url)
        dims = [{"Name": "QueueName", "Value": queue}]
        for metric in ("ApproximateNumberOfMessagesNotVisible", "ApproximateAgeOfOldestMessage"):
            metrics.append(("AWS/SQS", metric, "Maximum", dims, queue))
    return [
        {
            "Id": f"m{number}",
            "Label": f"{namespace.removeprefix('AWS/')} {metric} {stat} {what}",
            "MetricStat": {
                "Metric": {"Namespace": namespace, "MetricName": metric, "Dimensions": dims},
                "Period": 60,
                "Stat": stat,
            },
            "ReturnData": True,
        }
        for number, (namespace, metric, stat, dims, what) in enumerate(metrics)
    ]


def fetch_metrics(
    cloudwatch: Any, queries: list[dict[str, Any]], start: datetime, end: datetime
) -> dict[str, float]:
    """Each query's value over the window (a Sum adds the periods up, a Maximum takes the largest),
    by label; every page of `GetMetricData` is read, 500 queries per request."""
    stats = {query["Id"]: query["MetricStat"]["Stat"] for query in queries}
    labels = {query["Id"]: query["Label"] for query in queries}
    values: dict[str, list[float]] = defaultdict(list)
    for first in range(0, len(queries), 500):
        token: str | None = None
        while True:
            request: dict[str, Any] = {
                "MetricDataQueries": queries[first : first + 500],
                "StartTime": start,
                "EndTime": end,
                "ScanBy": "TimestampAscending",
            }
            if token:
                request["NextToken"] = token
            page = cloudwatch.get_metric_data(**request)
            for result in page.get("MetricDataResults", []):
                values[result["Id"]].extend(float(v) for v in result.get("Values", []))
            token = page.get("NextToken")
            if not token:
                break
    return {
        labels[key]: (sum(found) if stats[key] == "Sum" else max(found, default=0.0))
        for key, found in ((key, values.get(key, [])) for key in labels)
    }


# --- the soak -----------------------------------------------------------------------------------
