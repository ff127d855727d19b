"""One CloudWatch dashboard per stage: queues, jobs, latency and spend, consumers, API, crons.

Every aijobs metric on it is built from the names and dimension sets the code emits
(aijobs.observability: METRIC_* and METRIC_DIMENSIONS), so a renamed metric or a changed
dimension fails synth or the infra tests instead of leaving a blank graph. Metrics whose
dimension values are known at synth (kind, cron) are graphed one line per value; those with open
values (error class, model, sweeper action) through a SEARCH over their exact dimension set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aws_cdk import Duration
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs.observability import (
    CRON_DIMENSION,
    KIND_DIMENSION,
    METRIC_ACCEPTED,
    METRIC_CONSUMER_CONCURRENCY,
    METRIC_CONSUMER_PAUSED,
    METRIC_CREDITS_EXPIRED,
    METRIC_CRON_DUPLICATE,
    METRIC_CRON_FAILED,
    METRIC_CRON_SKIPPED,
    METRIC_CRON_SUCCEEDED,
    METRIC_DEAD_LETTERED,
    METRIC_DIMENSIONS,
    METRIC_DURATION,
    METRIC_FAILED_FINAL,
    METRIC_MODEL_SPEND,
    METRIC_POISON,
    METRIC_RETRIED,
    METRIC_SPEND_HELD,
    METRIC_SUCCEEDED,
    METRIC_SWEPT,
    METRIC_TENANT_HELD,
    METRICS_NAMESPACE,
    SERVICE_DIMENSION,
    service_name,
)
from aijobs_cdk.constructs.job_queue import JobQueue
from aijobs_cdk.stage_config import StageConfig, resource_prefix

PERIOD = Duration.minutes(5)
WIDTH = 8  # three graphs per row (the dashboard grid is 24 wide)
HEIGHT = 6


class Dashboard(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        queues: Sequence[JobQueue],
        api: apigw.HttpStage,
        functions: Mapping[str, lambda_.IFunction],
        parking: sqs.IQueue,
        cron_dead_letters: sqs.IQueue | None,
    ) -> None:
        """`functions`: every function by the short name its alarms use (`<kind>-consumer`, ...)."""
        super().__init__(scope, construct_id)
        self._service = service_name(config.stage)
        kinds = [q.kind for q in queues]
        crons = [cron.text for cron in config.crons]
        consumers = {q.kind: q.consumer for q in queues}
        self.dashboard = cloudwatch.Dashboard(
            self,
            "Dashboard",
            dashboard_name=resource_prefix(config.stage),
            default_interval=Duration.hours(6),
        )

        def per_kind(name: str, statistic: str = "Sum") -> list[cloudwatch.IMetric]:
            return [self.emf(name, statistic, label=kind, **{KIND_DIMENSION: kind}) for kind in kinds]

        def per_cron(name: str, outcome: str) -> list[cloudwatch.IMetric]:
            return [
                self.emf(name, "Sum", label=f"{outcome} {cron}", **{CRON_DIMENSION: cron}) for cron in crons
            ]

        dead_letter_queues: list[cloudwatch.IMetric] = [
            q.dlq.metric_approximate_number_of_messages_visible(
                period=PERIOD, statistic="Maximum", label=q.kind
            )
            for q in queues
        ]
        dead_letter_queues.append(
            parking.metric_approximate_number_of_messages_visible(
                period=PERIOD, statistic="Maximum", label="parking (DLQ consumer failed)"
            )
        )
        if cron_dead_letters is not None:
            dead_letter_queues.append(
                cron_dead_letters.metric_approximate_number_of_messages_visible(
                    period=PERIOD, statistic="Maximum", label="cron invocations dead-lettered"
                )
            )

        self._section(
            "Queues",
            _graph(
                "Backlog per kind (messages visible)",
                [
                    q.queue.metric_approximate_number_of_messages_visible(
                        period=PERIOD, statistic="Maximum", label=q.kind
                    )
                    for q in queues
                ],
            ),
            _graph(
                "Oldest queued message per kind (seconds)",
                [
                    q.queue.metric_approximate_age_of_oldest_message(
                        period=PERIOD, statistic="Maximum", label=q.kind
                    )
                    for q in queues
                ],
            ),
            _graph("Dead-letter queues (messages visible)", dead_letter_queues),
        )
        self._section(
            "Jobs",
            _graph("Jobs accepted", per_kind(METRIC_ACCEPTED)),
            _graph("Jobs succeeded", per_kind(METRIC_SUCCEEDED)),
            _graph("Jobs dead-lettered", per_kind(METRIC_DEAD_LETTERED)),
            _graph("Jobs retried by kind and error class", [self.search(METRIC_RETRIED, "Sum")]),
            _graph("Jobs failed_final by kind and error class", [self.search(METRIC_FAILED_FINAL, "Sum")]),
            _graph("Poison messages (unreadable, acknowledged)", per_kind(METRIC_POISON)),
        )
        self._section(
            "Latency and spend",
            _graph("Job duration p50 (ms)", per_kind(METRIC_DURATION, "p50")),
            _graph("Job duration p95 (ms)", per_kind(METRIC_DURATION, "p95")),
            _graph("Model spend (USD) by kind and model", [self.search(METRIC_MODEL_SPEND, "Sum")]),
            _graph("Jobs held: daily spend cap reached", per_kind(METRIC_SPEND_HELD)),
        )
        self._section(
            "Consumers and functions",
            _graph(
                "Consumer throttles (Lambda)",
                [
                    fn.metric_throttles(period=PERIOD, statistic="Sum", label=kind)
                    for kind, fn in consumers.items()
                ],
            ),
            _graph("Consumers paused (provider 401/403)", per_kind(METRIC_CONSUMER_PAUSED)),
            _graph(
                "Consumer MaximumConcurrency (adaptive, on 429s)",
                per_kind(METRIC_CONSUMER_CONCURRENCY, "Minimum"),
            ),
            _graph("Jobs waiting: tenant at its running cap", per_kind(METRIC_TENANT_HELD)),
            _graph(
                "Function errors (Lambda)",
                [
                    fn.metric_errors(period=PERIOD, statistic="Sum", label=name)
                    for name, fn in functions.items()
                ],
            ),
        )
        self._section(
            "HTTP API",
            _graph("API requests", [api.metric_count(period=PERIOD, statistic="Sum", label="requests")]),
            _graph(
                "API 4xx / 5xx",
                [
                    api.metric_client_error(period=PERIOD, statistic="Sum", label="4xx"),
                    api.metric_server_error(period=PERIOD, statistic="Sum", label="5xx"),
                ],
            ),
            _graph(
                "API latency (ms)",
                [
                    api.metric_latency(period=PERIOD, statistic="p50", label="p50"),
                    api.metric_latency(period=PERIOD, statistic="p95", label="p95"),
                ],
            ),
        )
        self._section(
            "Crons",
            _graph(
                "Cron runs: succeeded / failed",
                [*per_cron(METRIC_CRON_SUCCEEDED, "succeeded"), *per_cron(METRIC_CRON_FAILED, "failed")],
            ),
            _graph(
                "Cron deliveries skipped: duplicate / unknown expression",
                [
                    *per_cron(METRIC_CRON_DUPLICATE, "duplicate"),
                    self.emf(METRIC_CRON_SKIPPED, "Sum", label="unknown"),
                ],
            ),
            _graph(
                "Sweeper and credit expiry",
                [
                    self.search(METRIC_SWEPT, "Sum"),
                    self.emf(METRIC_CREDITS_EXPIRED, "Sum", label="credit grants expired"),
                ],
            ),
        )

    def _section(self, title: str, *graphs: cloudwatch.GraphWidget) -> None:
        """A heading, then the graphs in rows of three."""
        self.dashboard.add_widgets(cloudwatch.TextWidget(markdown=f"## {title}", width=24, height=1))
        per_row = 24 // WIDTH
        for start in range(0, len(graphs), per_row):
            self.dashboard.add_widgets(*graphs[start : start + per_row])

    def emf(self, name: str, statistic: str, *, label: str, **dimensions: str) -> cloudwatch.Metric:
        """One aijobs metric with exactly the dimensions the code emits it with."""
        expected = set(METRIC_DIMENSIONS[name])
        if set(dimensions) != expected:
            raise ValueError(
                f"{name} is emitted with dimensions {sorted(expected)}, not {sorted(dimensions)}"
            )
        return cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=name,
            dimensions_map={SERVICE_DIMENSION: self._service, **dimensions},
            statistic=statistic,
            period=PERIOD,
            label=label,
        )

    def search(self, name: str, statistic: str) -> cloudwatch.MathExpression:
        """Every series of a metric whose dimension values are open (error class, model, action)."""
        dimensions = METRIC_DIMENSIONS[name]
        schema = ",".join([METRICS_NAMESPACE, SERVICE_DIMENSION, *dimensions])
        query = f'{{{schema}}} MetricName="{name}" {SERVICE_DIMENSION}="{self._service}"'
        return cloudwatch.MathExpression(
            expression=f"SEARCH('{query}', '{statistic}', {int(PERIOD.to_seconds())})",
            using_metrics={},
            # A dynamic label: each series is named by its dimension values.
            label=" ".join(f"${{PROP('Dim.{dimension}')}}" for dimension in dimensions),
            period=PERIOD,
        )


def _graph(title: str, metrics: Sequence[cloudwatch.IMetric]) -> cloudwatch.GraphWidget:
    return cloudwatch.GraphWidget(title=title, left=list(metrics), width=WIDTH, height=HEIGHT)
