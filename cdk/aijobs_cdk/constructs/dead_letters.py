"""The DLQ consumer: one function reading every kind's DLQ; it records, finalizes and alerts when
the job's attempt budget is spent, and sends a job SQS redrove with attempts left back to its queue."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs_cdk.constructs.job_queue import DLQ_CONSUMER_TIMEOUT, MAX_RETENTION, JobQueue
from aijobs_cdk.constructs.lambda_defaults import LambdaDefaults
from aijobs_cdk.constructs.naming import stage_queue
from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import PARKING_QUEUE, StageConfig, resource_prefix

DLQ_HANDLER = "dlq_consumer.handler.handler"
PARKING_SUFFIX = "-" + PARKING_QUEUE
# Receives the DLQ consumer gets at a dead letter before SQS parks it. Added to the main queue's
# maxReceiveCount: a message SQS itself dead-lettered may keep its receive count in the DLQ.
DLQ_CONSUMER_RECEIVES = 5


class DeadLetterParking(Construct):
    """Where a dead letter goes when the DLQ consumer itself cannot handle it (its own failure),
    instead of being retried until the DLQ's retention silently drops it. Nothing consumes this
    queue: an alarm watches its depth and an operator inspects and drains it (docs/operations/runbook.md)."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self.queue = stage_queue(
            self,
            "Queue",
            config=config,
            name=resource_prefix(config.stage) + PARKING_SUFFIX,
            # SQS counts retention from a message's first enqueue, so keep the longest allowed:
            # longer than the DLQs it catches (DLQ_RETENTION_DAYS), or a letter parked late in
            # its DLQ life would be gone at once.
            retention_period=MAX_RETENTION,
        )
        acknowledge(self.queue, "AwsSolutions-SQS3", "This queue is the dead-letter queue of the DLQs")
        self.redrive = sqs.DeadLetterQueue(
            queue=self.queue, max_receive_count=config.max_receive_count + DLQ_CONSUMER_RECEIVES
        )


class DeadLetters(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        queues: list[JobQueue],
        functions: LambdaDefaults,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, construct_id)
        self.consumer: lambda_.Function = functions.function(
            self,
            "Consumer",
            handler=DLQ_HANDLER,
            description=f"aijobs {config.stage} dead-letter consumer",
            timeout=DLQ_CONSUMER_TIMEOUT,
            environment=environment,
        )
        for job_queue in queues:
            self.consumer.add_event_source(
                event_sources.SqsEventSource(
                    job_queue.dlq,
                    batch_size=config.batch_size,
                    max_batching_window=Duration.seconds(config.batch_window_seconds),
                    # A record that could not be written stays in the DLQ for the next try.
                    report_batch_item_failures=True,
                )
            )
