"""The DLQ consumer: one function reading every kind's DLQ; it records and alerts, never re-queues."""

from __future__ import annotations

from aws_cdk import Duration
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from constructs import Construct

from aijobs.stage_config import StageConfig
from aijobs_cdk.constructs.job_queue import DLQ_CONSUMER_TIMEOUT, JobQueue
from aijobs_cdk.constructs.lambda_defaults import LambdaDefaults

DLQ_HANDLER = "dlq_consumer.handler.handler"


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
