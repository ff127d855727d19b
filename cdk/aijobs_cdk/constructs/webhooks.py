"""Webhook deliveries: their queue, its DLQ, and the consumer that signs and POSTs them."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs_cdk.constructs.job_queue import MAX_RETENTION
from aijobs_cdk.constructs.lambda_defaults import LambdaDefaults
from aijobs_cdk.constructs.naming import stage_queue
from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import (
    DLQ_SUFFIX,
    WEBHOOK_BATCH_SIZE,
    WEBHOOK_QUEUE,
    StageConfig,
    queue_resource_name,
)

WEBHOOK_HANDLER = "webhook_consumer.handler.handler"


class Webhooks(Construct):
    """`aijobs-<stage>-webhooks` + DLQ and its consumer. The consumer gives up a delivery and moves
    its message to the DLQ itself (the attempt count on the job row decides); SQS's redrive is the
    safety net. Nothing consumes the DLQ: an alarm watches it (docs/concepts/webhooks.md)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        functions: LambdaDefaults,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        name = queue_resource_name(config.stage, WEBHOOK_QUEUE)
        timeout = config.webhook_consumer_timeout_seconds
        self.dlq = stage_queue(
            self, "Dlq", config=config, name=name + DLQ_SUFFIX, retention_period=MAX_RETENTION
        )
        acknowledge(self.dlq, "AwsSolutions-SQS3", "This queue is itself a dead-letter queue")
        self.queue = stage_queue(
            self,
            "Queue",
            config=config,
            name=name,
            retention_period=Duration.days(config.queue_retention_days),
            visibility_timeout=Duration.seconds(6 * timeout),
            dead_letter_queue=sqs.DeadLetterQueue(
                queue=self.dlq, max_receive_count=config.webhook_max_receive_count
            ),
        )
        self.consumer: lambda_.Function = functions.function(
            self,
            "Consumer",
            handler=WEBHOOK_HANDLER,
            description=f"aijobs {config.stage} webhook consumer",
            timeout=Duration.seconds(timeout),
            environment={
                **environment,
                "WEBHOOK_QUEUE_URL": self.queue.queue_url,
                "WEBHOOK_DLQ_URL": self.dlq.queue_url,
                **config.webhook_settings_env(),
            },
        )
        self.consumer.add_event_source(
            event_sources.SqsEventSource(
                self.queue, batch_size=WEBHOOK_BATCH_SIZE, report_batch_item_failures=True
            )
        )
        # Given-up deliveries go to the DLQ by the consumer's own hand.
        self.dlq.grant_send_messages(self.consumer)
