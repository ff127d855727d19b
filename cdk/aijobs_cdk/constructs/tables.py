"""DynamoDB: the meta table and the tenant shard tables. Access patterns: TABLES.md beside this file."""

from __future__ import annotations

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from aijobs.store.keys import (
    CRON_RUN_PREFIX,
    DEAD_LETTER_PREFIX,
    FLOW_PREFIX,
    META_INDEXES,
    MODEL_PREFIX,
    PK,
    SHARD_INDEXES,
    SK,
    TTL_ATTRIBUTE,
    WEBHOOK_SECRET_PREFIX,
)
from aijobs.store.spend import SPEND_PREFIX
from aijobs_cdk.constructs.naming import stateful_removal
from aijobs_cdk.stage_config import StageConfig

# Key and index names are the runtime's (aijobs.store.keys); TABLES.md documents them.

JOB_READ_ACTIONS = ("dynamodb:GetItem", "dynamodb:Query")
# A TransactWriteItems is authorized item by item by these (and DeleteItem for a delete).
JOB_WRITE_ACTIONS = ("dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:ConditionCheckItem")
# The tenant directory's lookups (aijobs.store.tenants.Directory): a container's first one brings
# the stage's retention in the same BatchGetItem. On the meta table only: the shard tables never.
META_READ_ACTIONS = (*JOB_READ_ACTIONS, "dynamodb:BatchGetItem")


class Tables(Construct):
    """Meta table (users -> shard, API keys, dynamic configuration, dead letters) and shard tables."""

    def __init__(self, scope: Construct, construct_id: str, *, config: StageConfig) -> None:
        super().__init__(scope, construct_id)
        self._config = config
        self.meta = self._table("Meta", META_INDEXES)
        self.shards = [self._table(f"Shard{index}", SHARD_INDEXES) for index in range(config.shard_count)]

    def grant_jobs(self, fn: lambda_.IFunction, *, delete: bool) -> None:
        """What the producer and the cron do on the shard tables: read, query (indexes too), and
        write through conditional puts/updates and transactions; `delete` where the code deletes.
        Never Scan or the batch actions (tests/infra/test_table_grants.py holds the code to it)."""
        actions = [*JOB_READ_ACTIONS, *JOB_WRITE_ACTIONS, *(["dynamodb:DeleteItem"] if delete else [])]
        for shard in self.shards:
            shard.grant(fn, *actions)

    def grant_meta_read(self, fn: lambda_.IFunction, *, register_tenants: bool = False) -> None:
        """Tenant directory, API keys and dynamic configuration lookups (GetItem, BatchGetItem,
        Query); `register_tenants`: also give a new identity its tenant (JWT auth, on its first
        request)."""
        writes = ("dynamodb:PutItem", "dynamodb:UpdateItem") if register_tenants else ()
        self.meta.grant(fn, *META_READ_ACTIONS, *writes)

    def grant_dead_letter_records(self, fn: lambda_.IFunction) -> None:
        """The DLQ consumer reads tenants and writes the operator-visible dead-letter list."""
        self.meta.grant(fn, *META_READ_ACTIONS, "dynamodb:PutItem")

    def grant_dead_letter_settling(self, fn: lambda_.IFunction) -> None:
        """The operator routes move dead-letter entries within their list (`DEADLETTER#<kind>`
        items only, UpdateItem): a re-run marks its job's entry, a listing settles what the job's
        row resolved. Reading them is part of `grant_meta_read`."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[self.meta.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{DEAD_LETTER_PREFIX}*"]}},
            )
        )

    def grant_webhook_secrets(self, fn: lambda_.IFunction) -> None:
        """The producer creates and rotates tenants' webhook signing secrets (`WEBHOOK#<userId>`
        items only, PutItem); reading them is part of `grant_meta_read`."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:PutItem"],
                resources=[self.meta.table_arn],
                conditions={
                    "ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{WEBHOOK_SECRET_PREFIX}*"]}
                },
            )
        )

    def grant_callback_rows(self, fn: lambda_.IFunction) -> None:
        """The webhook consumer reads a job row and updates its delivery state (never its status)."""
        for shard in self.shards:
            shard.grant(fn, "dynamodb:GetItem", "dynamodb:UpdateItem")

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

    def grant_flow_records(self, fn: lambda_.IFunction, *, state: bool) -> None:
        """Adaptive concurrency (`FLOW#<kind>` items only): a consumer adds to its kind's minute
        counters (UpdateItem); the cron (`state`) also writes each kind's state (PutItem)."""
        actions = ["dynamodb:UpdateItem", *(["dynamodb:PutItem"] if state else [])]
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=actions,
                resources=[self.meta.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{FLOW_PREFIX}*"]}},
            )
        )

    def grant_spend_records(self, fn: lambda_.IFunction) -> None:
        """The spend brake (`SPEND#<day>` items only): a consumer adds a finished job's cost to the
        day's counters and writes the day's alert marker (UpdateItem)."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[self.meta.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{SPEND_PREFIX}*"]}},
            )
        )

    def grant_model_alerts(self, fn: lambda_.IFunction) -> None:
        """Once-per-model alerts (`MODEL#<model id>` items only, UpdateItem): a consumer marks a
        model its jobs found unavailable, the weekly model check one it found Legacy or gone."""
        fn.add_to_role_policy(
            iam.PolicyStatement(
                actions=["dynamodb:UpdateItem"],
                resources=[self.meta.table_arn],
                conditions={"ForAllValues:StringLike": {"dynamodb:LeadingKeys": [f"{MODEL_PREFIX}*"]}},
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
            removal_policy=stateful_removal(self._config),
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
