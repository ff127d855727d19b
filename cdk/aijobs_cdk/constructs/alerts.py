"""The operator alert topic and the alarms that publish to it."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cw_actions
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs.observability import KIND_DIMENSION, METRIC_DEAD_LETTERED, METRICS_NAMESPACE, service_name
from aijobs.stage_config import StageConfig
from aijobs_cdk.nag import acknowledge

# A queued job older than this means consumers are paused, failing or far behind.
OLDEST_MESSAGE_ALARM = Duration.minutes(15)


class Alerts(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self.topic = sns.Topic(self, "Topic", display_name=f"aijobs {config.stage} alerts", enforce_ssl=True)
        if config.alert_email:
            self.topic.add_subscription(subscriptions.EmailSubscription(config.alert_email))
        self._action = cw_actions.SnsAction(self.topic)
        acknowledge(
            self.topic,
            "AwsSolutions-SNS2",
            "Alerts carry job ids and error classes, never user input or secrets; the "
            "AWS-managed SNS key would stop CloudWatch alarms from publishing here",
        )

    def watch_queue(self, kind: str, queue: sqs.Queue) -> None:
        """Alarm on dead-letter arrivals (not DLQ depth: the DLQ consumer drains it) and on backlog age."""
        dead_letters = cloudwatch.Metric(
            namespace=METRICS_NAMESPACE,
            metric_name=METRIC_DEAD_LETTERED,
            dimensions_map={"service": service_name(self._config.stage), KIND_DIMENSION: kind},
            statistic="Sum",
            period=Duration.minutes(5),
        )
        arrivals = dead_letters.create_alarm(
            self,
            f"DeadLetters-{kind}",
            alarm_description=f"{kind}: a job reached the dead-letter queue",
            threshold=1,
            evaluation_periods=1,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        backlog = queue.metric_approximate_age_of_oldest_message(
            period=Duration.minutes(5), statistic="Maximum"
        ).create_alarm(
            self,
            f"Backlog-{kind}",
            alarm_description=f"{kind}: the oldest queued job waits longer than "
            f"{OLDEST_MESSAGE_ALARM.to_minutes()} min",
            threshold=OLDEST_MESSAGE_ALARM.to_seconds(),
            evaluation_periods=2,
            comparison_operator=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            treat_missing_data=cloudwatch.TreatMissingData.NOT_BREACHING,
        )
        for alarm in (arrivals, backlog):
            alarm.add_alarm_action(self._action)
