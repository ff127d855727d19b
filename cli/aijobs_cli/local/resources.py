"""Create a stage's resources on an AWS-compatible endpoint (moto) from the stage configuration.

Names, key schema and queue rules come from the same sources as the CDK stack (`StageConfig`,
`aijobs.store.keys`, `queue_resource_name`), and every function environment built here is
validated by the same settings models that the infra tests check the CDK stack against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import boto3

from aijobs.settings import ApiSettings, ConsumerSettings, CronSettings, DlqSettings, WebhookSettings
from aijobs.store.keys import META_INDEXES, PK, SHARD_INDEXES, SK
from aijobs_cdk.stage_config import (
    DLQ_SUFFIX,
    SQS_RETENTION_MAX_DAYS,
    WEBHOOK_QUEUE,
    StageConfig,
    dead_letter_queues_env,
    event_source_mappings_env,
    queue_name_of,
    queue_resource_name,
    resource_prefix,
)


@dataclass
class StageResources:
    config: StageConfig
    region: str
    meta_table: str
    shard_tables: list[str]
    bucket: str
    topic_arn: str
    queue_urls: dict[str, str] = field(default_factory=dict)
    queue_arns: dict[str, str] = field(default_factory=dict)
    dlq_urls: dict[str, str] = field(default_factory=dict)
    dlq_arns: dict[str, str] = field(default_factory=dict)
    # Webhook deliveries (aijobs.webhooks): their queue and its DLQ.
    webhook_queue_url: str = ""
    webhook_queue_arn: str = ""
    webhook_dlq_url: str = ""

    def _common_env(self) -> dict[str, str]:
        return {
            "STAGE": self.config.stage,
            "POWERTOOLS_SERVICE_NAME": f"aijobs-{self.config.stage}",
            "POWERTOOLS_METRICS_NAMESPACE": "aijobs",
            "META_TABLE_NAME": self.meta_table,
            "SHARD_TABLE_NAMES": ",".join(self.shard_tables),
            # Every function that finishes jobs queues their webhooks.
            "WEBHOOK_QUEUE_URL": self.webhook_queue_url,
            **self.config.table_settings_env(),
        }

    def _queue_env(self) -> dict[str, str]:
        return {
            "QUEUE_NAMES": ";".join(self.config.queue_names),
            **{self.config.bindings[kind]: url for kind, url in self.queue_urls.items()},
        }

    def _linked_env(self, kinds: tuple[str, ...]) -> dict[str, str]:
        """The `Q_*` URLs of other kinds' queues a function sends to (workflow parents, children)."""
        return {self.config.bindings[kind]: self.queue_urls[kind] for kind in kinds}

    def api_env(self) -> dict[str, str]:
        env = {
            **self._common_env(),
            **self._queue_env(),
            "BUCKET_NAME": self.bucket,
            **self.config.api_settings_env(),
            # The console's pause/resume: the local stack's control takes queue ARNs as mapping ids.
            "CONSUMER_MAPPINGS": ";".join(f"{kind}={arn}" for kind, arn in self.queue_arns.items()),
        }
        ApiSettings.from_env(env)
        return env

    def consumer_env(self, kind: str) -> dict[str, str]:
        env = {
            **self._common_env(),
            "ALERT_TOPIC_ARN": self.topic_arn,
            "BUCKET_NAME": self.bucket,
            "QUEUE_NAME": kind,
            "QUEUE_URL": self.queue_urls[kind],
            "DLQ_URL": self.dlq_urls[kind],
            **self.config.consumer_settings_env(kind),
            **self._linked_env(self.config.linked_queues(kind)),
        }
        ConsumerSettings.from_env(env)
        return env

    def dlq_env(self) -> dict[str, str]:
        env = {
            **self._common_env(),
            "ALERT_TOPIC_ARN": self.topic_arn,
            **self._queue_env(),
            **self.config.dlq_settings_env(),
            **dead_letter_queues_env({kind: queue_name_of(url) for kind, url in self.dlq_urls.items()}),
        }
        DlqSettings.from_env(env)
        return env

    def webhook_env(self) -> dict[str, str]:
        env = {
            **self._common_env(),
            "WEBHOOK_DLQ_URL": self.webhook_dlq_url,
            **self.config.webhook_settings_env(),
        }
        WebhookSettings.from_env(env)
        return env

    def cron_env(self) -> dict[str, str]:
        env = {
            **self._common_env(),
            **self._queue_env(),
            "ALERT_TOPIC_ARN": self.topic_arn,
            **self.config.cron_settings_env(),
            # No Lambda mappings on moto: the local stack adds its own (see LocalStack.fire_cron).
            **event_source_mappings_env(self.config, {}),
        }
        CronSettings.from_env(env)
        return env


def provision(
    config: StageConfig, *, region: str = "us-east-1", endpoint_url: str | None = None
) -> StageResources:
    """Create (idempotently) the tables, bucket, topic and queues of a stage."""
    session = boto3.session.Session(region_name=region)
    dynamodb = session.client("dynamodb", endpoint_url=endpoint_url)
    sqs = session.client("sqs", endpoint_url=endpoint_url)
    s3 = session.client("s3", endpoint_url=endpoint_url)
    sns = session.client("sns", endpoint_url=endpoint_url)
    prefix = resource_prefix(config.stage)

    resources = StageResources(
        config=config,
        region=region,
        meta_table=f"{prefix}-meta",
        shard_tables=[f"{prefix}-shard-{index}" for index in range(config.shard_count)],
        bucket=f"{prefix}-jobs-local",
        topic_arn=sns.create_topic(Name=f"{prefix}-alerts")["TopicArn"],
    )
    existing = set(dynamodb.list_tables()["TableNames"])
    _create_table(dynamodb, resources.meta_table, META_INDEXES, existing)
    for name in resources.shard_tables:
        _create_table(dynamodb, name, SHARD_INDEXES, existing)
    if region == "us-east-1":
        s3.create_bucket(Bucket=resources.bucket)
    else:
        s3.create_bucket(Bucket=resources.bucket, CreateBucketConfiguration={"LocationConstraint": region})  # type: ignore[typeddict-item]

    for kind in config.queue_names:
        tuning = config.queue_tuning(kind)
        url, arn, dlq_url, dlq_arn = _create_queue_pair(
            sqs,
            queue_resource_name(config.stage, kind),
            visibility_seconds=tuning.visibility_timeout_seconds,
            max_receive_count=tuning.max_receive_count,
            retention_days=(config.queue_retention_days, config.dlq_retention_days),
        )
        resources.queue_urls[kind], resources.queue_arns[kind] = url, arn
        resources.dlq_urls[kind], resources.dlq_arns[kind] = dlq_url, dlq_arn
    # The webhook delivery queue and its DLQ (the consumer moves a given-up delivery there itself;
    # SQS's redrive is the safety net for receives that never reach its code).
    url, arn, dlq_url, _ = _create_queue_pair(
        sqs,
        queue_resource_name(config.stage, WEBHOOK_QUEUE),
        visibility_seconds=6 * config.webhook_consumer_timeout_seconds,
        max_receive_count=config.webhook_max_receive_count,
        retention_days=(config.queue_retention_days, SQS_RETENTION_MAX_DAYS),
    )
    resources.webhook_queue_url, resources.webhook_queue_arn, resources.webhook_dlq_url = url, arn, dlq_url
    return resources


def _create_queue_pair(
    sqs: Any, name: str, *, visibility_seconds: int, max_receive_count: int, retention_days: tuple[int, int]
) -> tuple[str, str, str, str]:
    """A queue redriving to its `-dlq`, each kept as the deployed stage keeps it (`retention_days`:
    the queue's, then the longer one of its DLQ): (url, arn, DLQ url, DLQ arn)."""
    queue_days, dlq_days = retention_days

    def arn_of(url: str) -> str:
        return str(
            sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
        )

    dlq_url = str(
        sqs.create_queue(
            QueueName=name + DLQ_SUFFIX, Attributes={"MessageRetentionPeriod": str(dlq_days * 86_400)}
        )["QueueUrl"]
    )
    dlq_arn = arn_of(dlq_url)
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(max_receive_count)}
    url = str(
        sqs.create_queue(
            QueueName=name,
            Attributes={
                "VisibilityTimeout": str(visibility_seconds),
                "MessageRetentionPeriod": str(queue_days * 86_400),
                "RedrivePolicy": json.dumps(redrive),
            },
        )["QueueUrl"]
    )
    return url, arn_of(url), dlq_url, dlq_arn


def _create_table(dynamodb: Any, name: str, indexes: dict[str, tuple[str, str]], existing: set[str]) -> None:
    if name in existing:
        return
    attributes = {PK, SK} | {key for pair in indexes.values() for key in pair}
    dynamodb.create_table(
        TableName=name,
        BillingMode="PAY_PER_REQUEST",
        AttributeDefinitions=[{"AttributeName": a, "AttributeType": "S"} for a in sorted(attributes)],
        KeySchema=[{"AttributeName": PK, "KeyType": "HASH"}, {"AttributeName": SK, "KeyType": "RANGE"}],
        GlobalSecondaryIndexes=[
            {
                "IndexName": index,
                "KeySchema": [
                    {"AttributeName": pk, "KeyType": "HASH"},
                    {"AttributeName": sk, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
            for index, (pk, sk) in indexes.items()
        ],
    )
