"""DynamoDB: the meta table and the tenant shard tables. Access patterns: TABLES.md beside this file."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from aijobs.stage_config import StageConfig
from aijobs.store.keys import CRON_RUN_PREFIX, META_INDEXES, PK, SHARD_INDEXES, SK, TTL_ATTRIBUTE

# Key and index names are the runtime's (aijobs.store.keys); TABLES.md documents them.


class Tables(Construct):
    """Meta table (users -> shard, API keys, dynamic configuration, dead letters) and shard tables."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self.meta = self._table("Meta", META_INDEXES)
        self.shards = [self._table(f"Shard{index}", SHARD_INDEXES) for index in range(config.shard_count)]

    def grant_cron_run_records(self, fn: lambda_.IFunction) -> None:
        """The cron dispatcher claims each scheduled run in the meta table (one run per firing); it
        may write those items and nothing else there."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:PutItem", "dynamodb:UpdateItem"],
                resources=[self.meta.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{CRON_RUN_PREFIX}*"]}},
            )
        )

    @property
    def all_tables(self) -> list[dynamodb.Table]:
        return [self.meta, *self.shards]

    def _table(self, construct_id: str, indexes: dict[str, tuple[str, str]]) -> dynamodb.Table:
        production = self._config.is_production
        table = dynamodb.Table(
            self,
            construct_id,
            partition_key=dynamodb.Attribute(name=PK, type=dynamodb.AttributeType.STRING),
            sort_key=dynamodb.Attribute(name=SK, type=dynamodb.AttributeType.STRING),
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            deletion_protection=production,
            removal_policy=RemovalPolicy.RETAIN if production else RemovalPolicy.DESTROY,
            time_to_live_attribute=TTL_ATTRIBUTE,
        )
        for index_name, (pk, sk) in indexes.items():
            table.add_global_secondary_index(
                index_name=index_name,
                partition_key=dynamodb.Attribute(name=pk, type=dynamodb.AttributeType.STRING),
                sort_key=dynamodb.Attribute(name=sk, type=dynamodb.AttributeType.STRING),
                projection_type=dynamodb.ProjectionType.ALL,
            )
        return table
