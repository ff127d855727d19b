"""One job kind: its SQS queue, its DLQ and its consumer function with a partial-batch mapping."""

from __future__ import annotations

from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as event_sources
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from aijobs_cdk.constructs.lambda_defaults import LambdaDefaults
from aijobs_cdk.constructs.naming import stage_queue
from aijobs_cdk.nag import acknowledge
from aijobs_cdk.stage_config import DLQ_SUFFIX, SQS_RETENTION_MAX_DAYS, StageConfig, queue_resource_name

# The ends of the redrive chains (the parking queue, the webhook DLQ) keep what SQS allows at most.
# A job queue keeps QUEUE_RETENTION_DAYS, its DLQ DLQ_RETENTION_DAYS, the parking queue this: each
# longer than the one before, since SQS counts from the message's first send (stage_queue checks).
MAX_RETENTION = Duration.days(SQS_RETENTION_MAX_DAYS)
CONSUMER_HANDLER = "queue_consumer.handler.handler"
# The DLQ consumer only records and alerts; its queue visibility follows the same 6x rule.
DLQ_CONSUMER_TIMEOUT = Duration.seconds(30)


class JobQueue(Construct):
    """The queue of one kind. Its consumer runs the shared dispatcher (`QUEUE_HANDLERS`)."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        kind: str,
        functions: LambdaDefaults,
        environment: dict[str, str],
        dlq_redrive: sqs.DeadLetterQueue | None = None,
    ) -> None:
        """`dlq_redrive`: where the DLQ sends a letter its own consumer keeps failing (parking)."""
        super().__init__(scope, construct_id)
        self.kind = kind
        name = queue_resource_name(config.stage, kind)
        # The stage's values, changed where the kind's declaration says (aijobs.kinds.base.Tuning).
        tuning = config.queue_tuning(kind)
        self.dlq = stage_queue(
            self,
            "Dlq",
            config=config,
            name=name + DLQ_SUFFIX,
            retention_period=Duration.days(config.dlq_retention_days),
            visibility_timeout=Duration.seconds(
                6 * int(DLQ_CONSUMER_TIMEOUT.to_seconds()) + config.batch_window_seconds
            ),
            dead_letter_queue=dlq_redrive,
        )
        acknowledge(
            self.dlq,
            "AwsSolutions-SQS3",
            "This queue is itself a dead-letter queue",
        )
        self.queue = stage_queue(
            self,
            "Queue",
            config=config,
            name=name,
            retention_period=Duration.days(config.queue_retention_days),
            visibility_timeout=Duration.seconds(tuning.visibility_timeout_seconds),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dlq, max_receive_count=tuning.max_receive_count),
        )
        self.consumer: lambda_.Function = functions.function(
            self,
            "Consumer",
            handler=CONSUMER_HANDLER,
            description=f"aijobs {config.stage} consumer of {kind}",
            timeout=Duration.seconds(tuning.timeout_seconds),
            memory_size=tuning.memory_mb,
            # A cap of 1 (QUEUE_MAX_CONCURRENCY or the kind's): see QueueTuning.reserved_concurrency.
            reserved_concurrency=tuning.reserved_concurrency,
            environment={
                **environment,
                "QUEUE_NAME": kind,
                "QUEUE_URL": self.queue.queue_url,
                "DLQ_URL": self.dlq.queue_url,
                **config.consumer_settings_env(kind),
            },
        )
        # The adaptive concurrency cron sizes this mapping (MaximumConcurrency) by its id and ARN.
        self.event_source = event_sources.SqsEventSource(
            self.queue,
            batch_size=tuning.batch_size,
            max_batching_window=Duration.seconds(tuning.batch_window_seconds),
            report_batch_item_failures=True,
            max_concurrency=tuning.esm_max_concurrency,
        )
        self.consumer.add_event_source(self.event_source)
        # Delayed re-sends (provider still running) go to its own queue; the attempt cap to its DLQ.
        self.queue.grant_send_messages(self.consumer)
        self.dlq.grant_send_messages(self.consumer)
        self._allow_pausing_itself()

    def _allow_pausing_itself(self) -> None:
        """On a provider 401/403 the consumer disables its own mapping (docs/design.md §4). Lambda has no
        grant_* for this: listing mappings takes no resource, and the update is limited to mappings
        whose function is this consumer."""
        mappings = Stack.of(self).format_arn(
            service="lambda",
            resource="event-source-mapping",
            resource_name="*",
            arn_format=ArnFormat.COLON_RESOURCE_NAME,
        )
        policy = iam.Policy(
            self,
            "PauseOwnMapping",
            statements=[
                iam.PolicyStatement(actions=["lambda:ListEventSourceMappings"], resources=["*"]),
                iam.PolicyStatement(
                    actions=["lambda:UpdateEventSourceMapping"],
                    resources=[mappings],
                    conditions={"StringEquals": {"lambda:FunctionArn": self.consumer.function_arn}},
                ),
            ],
        )
        assert self.consumer.role is not None
        policy.attach_to_role(self.consumer.role)
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::*]",
            "lambda:ListEventSourceMappings supports no resource-level permissions; it only reads mappings",
        )
        acknowledge(
            policy,
            "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:lambda:<AWS::Region>:<AWS::AccountId>:"
            "event-source-mapping:*]",
            "Mapping ids are not known before deploy; the lambda:FunctionArn condition limits updates to "
            "this consumer's own mappings",
        )
