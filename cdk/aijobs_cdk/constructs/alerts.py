"""The stage's alert topic and every alarm that pages through it.

Each alarm notifies the topic when it fires and again when it recovers (OK). Missing data is
chosen per alarm: a metric that only exists while something is wrong (errors, arrivals, a
non-empty queue) counts silence as healthy.
"""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs.observability import (
    KIND_DIMENSION,
    METRIC_DEAD_LETTERED,
    METRICS_NAMESPACE,
    SERVICE_DIMENSION,
    service_name,
)
from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import StageConfig, check_alert_destination, resource_prefix

PERIOD = Duration.minutes(5)
# A queued job older than this means consumers are paused, failing or far behind.
OLDEST_MESSAGE_ALARM = Duration.minutes(15)
OLDEST_MESSAGE_PERIODS = 2
# A DLQ that never empties for this long: its consumer is not receiving (mapping disabled or
# deleted, no permission). A consumer that receives but fails parks the message instead.
DLQ_STUCK_PERIODS = 6
# Lambda throttles sustained this many periods in a row (a single throttled burst does not page).
THROTTLE_PERIODS = 3
# HTTP API: page when more than this share of requests fail with 5xx in two periods running...
API_5XX_RATE_PERCENT = 5
API_5XX_PERIODS = 2
# ...counted only with enough requests that one failure is not a rate (the function's Errors
# alarm covers a failing producer at any volume).
API_5XX_MIN_REQUESTS = 10
API_5XX_RATE_EXPRESSION = f"IF(requests >= {API_5XX_MIN_REQUESTS}, 100 * FILL(errors, 0) / requests, 0)"


class Alerts(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        check_alert_destination(config)
        self._config = config
        self._prefix = resource_prefix(config.stage)
        if config.alert_topic_arn:
            # An existing topic (e.g. the team's paging integration) instead of a new one. It must
            # be a standard topic in this account and region whose policy (and KMS key, if any)
            # lets CloudWatch alarms publish.
            self.topic: sns.ITopic = sns.Topic.from_topic_arn(self, "Topic", config.alert_topic_arn)
        else:
            topic = sns.Topic(self, "Topic", display_name=f"aijobs {config.stage} alerts", enforce_ssl=True)
            acknowledge(
                topic,
                "AwsSolutions-SNS2",
                "Alerts carry job ids and error classes, never user input or secrets; the "
                "AWS-managed SNS key would stop CloudWatch alarms from publishing here",
            )
            self.topic = topic
        if config.alert_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alert_email))
        self._action = cw_actions.SnsAction(self.topic)

    def _alarm(
        self,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        name: str,
        description: str,
        threshold: float,
        comparison: cloudwatch.ComparisonOperator,
        evaluation_periods: int = 1,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            alarm_name=f"{self._prefix}-{name}",
            alarm_description=description,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=evaluation_periods,
            datapoints_to_alarm=evaluation_periods,
            treat_missing_data=missing,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        return alarm

    def watch_function(self, name: str, fn: lambda_.IFunction) -> None:
        """Any unhandled error (the handlers catch what they expect, so an error is a bug, a crash,
        a timeout or running out of memory), and throttling that lasts."""
        self._alarm(
            f"Errors-{name}",
            fn.metric_errors(period=PERIOD, statistic="Sum"),
            name=f"{name}-errors",
            description=f"{name}: the function failed (unhandled error, timeout or out of memory)",
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )
        self._alarm(
            f"Throttles-{name}",
            fn.metric_throttles(period=PERIOD, statistic="Sum"),
            name=f"{name}-throttles",
            description=f"{name}: invocations throttled for {THROTTLE_PERIODS * PERIOD.to_minutes()} min "
            "(for a queue consumer each throttled batch spends a receive)",
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            evaluation_periods=THROTTLE_PERIODS,
        )

    def watch_api(self, stage: apigw.HttpStage) -> None:
        rate = cloudwatch.MathExpression(
            expression=API_5XX_RATE_EXPRESSION,
            using_metrics={
                "errors": stage.metric_server_error(period=PERIOD, statistic="Sum"),
                "requests": stage.metric_count(period=PERIOD, statistic="Sum"),
            },
            period=PERIOD,
            label="5xx rate (%)",
        )
        self._alarm(
            "Api5xxRate",
            rate,
            name="api-5xx-rate",
            description=f"HTTP API: more than {API_5XX_RATE_PERCENT}% of requests failed with 5xx "
            f"(at least {API_5XX_MIN_REQUESTS} requests per {PERIOD.to_minutes()} min)",
            threshold=API_5XX_RATE_PERCENT,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=API_5XX_PERIODS,
        )

    def watch_queue(self, kind: str, queue: sqs.IQueue, dlq: sqs.IQueue) -> None:
        """Dead-letter arrivals (not DLQ depth: the DLQ consumer drains it), backlog age, and a
        DLQ that stays non-empty (its consumer is not draining it)."""
        dead_letters = cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=METRIC_DEAD_LETTERED,
            dimensions_map={SERVICE_DIMENSION: service_name(self._config.stage), KIND_DIMENSION: kind},
            statistic="Sum",
            period=PERIOD,
        )
        self._alarm(
            f"DeadLetters-{kind}",
            dead_letters,
            name=f"{kind}-dead-letters",
            description=f"{kind}: a job reached the dead-letter queue",
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )
        self._alarm(
            f"Backlog-{kind}",
            queue.metric_approximate_age_of_oldest_message(period=PERIOD, statistic="Maximum"),
            name=f"{kind}-backlog-age",
            description=f"{kind}: the oldest queued job waits longer than "
            f"{OLDEST_MESSAGE_ALARM.to_minutes()} min",
            threshold=OLDEST_MESSAGE_ALARM.to_seconds(),
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=OLDEST_MESSAGE_PERIODS,
        )
        self._alarm(
            f"DlqStuck-{kind}",
            # Minimum: non-empty at every sample of the period, not just when a letter arrives.
            dlq.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Minimum"),
            name=f"{kind}-dlq-not-draining",
            description=f"{kind}: the dead-letter queue has not emptied for "
            f"{DLQ_STUCK_PERIODS * PERIOD.to_minutes()} min; is its consumer's mapping enabled?",
            threshold=0,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            evaluation_periods=DLQ_STUCK_PERIODS,
        )

    def watch_parked(self, queue: sqs.IQueue, *, name: str, description: str) -> None:
        """A queue nothing consumes (parked dead letters, failed cron invocations): any message is
        an incident, and the alarm stays in ALARM (one notification) until an operator drains it."""
        self._alarm(
            f"Parked-{name}",
            queue.metric_approximate_number_of_messages_visible(period=PERIOD, statistic="Maximum"),
            name=name,
            description=description,
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        )
