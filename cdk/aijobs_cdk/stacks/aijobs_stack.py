"""The aijobs stack: composes the constructs of one stage and creates nothing itself."""

from __future__ import annotations

from typing import Any

from aws_cdk import CfnOutput, Duration, Fn, Stack
from aws_cdk import aws_apigatewayv2 as apigw
from aws_cdk import aws_iam as iam
from aws_cdk.aws_apigatewayv2_authorizers import HttpJwtAuthorizer
from constructs import Construct

from aijobs.provider_plan import CLASSIFY
from aijobs_cdk.constructs.alerts import Alerts
from aijobs_cdk.constructs.api import Api
from aijobs_cdk.constructs.dashboard import Dashboard
from aijobs_cdk.constructs.dead_letters import DeadLetterParking, DeadLetters
from aijobs_cdk.constructs.job_queue import JobQueue
from aijobs_cdk.constructs.lambda_defaults import LambdaDefaults
from aijobs_cdk.constructs.model_access import ModelAccess, ModelLifecycleAccess
from aijobs_cdk.constructs.schedules import Schedules
from aijobs_cdk.constructs.storage import (
    ABORT_UPLOADS,
    INPUTS_PREFIX,
    READ_OBJECTS,
    RESULTS_PREFIX,
    WRITE_OBJECTS,
    JobStorage,
)
from aijobs_cdk.constructs.tables import Tables
from aijobs_cdk.constructs.webhooks import Webhooks
from aijobs_cdk.nag import acknowledge_grant_wildcards
from aijobs_cdk.stage_config import StageConfig, dead_letter_queues_env, event_source_mappings_env

API_HANDLER = "api.handler.handler"
API_TIMEOUT_SECONDS = 25
CRON_HANDLER = "cron_dispatcher.handler.handler"


def schedules_model_check(config: StageConfig) -> bool:
    """Whether one of the stage's CRONS runs the weekly model check (aijobs.scheduled.models)."""
    from aijobs.scheduled.models import run_model_check
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS

    return any(SCHEDULED_HANDLERS.get(cron.text) is run_model_check for cron in config.crons)


class AijobsStack(Stack):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        config: StageConfig,
        authorizer: apigw.IHttpRouteAuthorizer | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        # First: a production stage without an alert destination fails before any bundling.
        alerts = Alerts(self, "Alerts", config=config)
        functions = LambdaDefaults(self, "Functions", config=config)
        tables = Tables(self, "Tables", config=config)
        storage = JobStorage(self, "Storage", config=config)

        table_env = {
            "META_TABLE_NAME": tables.meta.table_name,
            "SHARD_TABLE_NAMES": Fn.join(",", [shard.table_name for shard in tables.shards]),
            **config.table_settings_env(),
        }
        alert_env = {"ALERT_TOPIC_ARN": alerts.topic.topic_arn}
        # Webhook deliveries: every function that finishes jobs queues them (WEBHOOK_QUEUE_URL).
        webhooks = Webhooks(self, "Webhooks", config=config, functions=functions, environment=dict(table_env))
        table_env["WEBHOOK_QUEUE_URL"] = webhooks.queue.queue_url
        parking = DeadLetterParking(self, "DlqParking", config=config)

        queues = [
            JobQueue(
                self,
                f"Queue-{kind}",
                config=config,
                kind=kind,
                functions=functions,
                environment={**table_env, **alert_env, "BUCKET_NAME": storage.bucket.bucket_name},
                dlq_redrive=parking.redrive,
            )
            for kind in config.queue_names
        ]
        queue_env = {
            "QUEUE_NAMES": ";".join(config.queue_names),
            **{config.bindings[q.kind]: q.queue.queue_url for q in queues},
        }
        by_kind = {q.kind: q for q in queues}
        # Workflows: a parent's consumer sends its children, the child kind's consumer the
        # parent's merge step (aijobs.workflows); each gets those queues' URLs and send rights.
        for job_queue in queues:
            for linked in config.linked_queues(job_queue.kind):
                job_queue.consumer.add_environment(config.bindings[linked], by_kind[linked].queue.queue_url)
                by_kind[linked].queue.grant_send_messages(job_queue.consumer)

        producer = functions.function(
            self,
            "ApiFunction",
            handler=API_HANDLER,
            description=f"aijobs {config.stage} HTTP API (producer)",
            # A long-poll (GET /jobs/{id}?wait=N, N <= 20) answers 2 s before this; the HTTP API's
            # integration gives up at 30 s.
            timeout=Duration.seconds(API_TIMEOUT_SECONDS),
            environment={
                **table_env,
                **queue_env,
                "BUCKET_NAME": storage.bucket.bucket_name,
                **config.api_settings_env(),
            },
        )
        # The console's operator routes (aijobs.api.admin): pause/resume and read each kind's
        # consumer mapping, read queue depths. Only these mappings; the queue depths need no grant
        # of their own: `grant_send_messages` below includes `sqs:GetQueueAttributes` on each queue.
        producer.add_environment(
            "CONSUMER_MAPPINGS",
            ";".join(f"{q.kind}={q.event_source.event_source_mapping_id}" for q in queues),
        )
        if queues:
            producer.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"],
                    resources=[q.event_source.event_source_mapping_arn for q in queues],
                )
            )
        if authorizer is None and config.auth_mode == "jwt":
            assert config.jwt_issuer_url
            assert config.jwt_audience
            authorizer = HttpJwtAuthorizer("Jwt", config.jwt_issuer_url, jwt_audience=[config.jwt_audience])
        api = Api(self, "Api", config=config, producer=producer, authorizer=authorizer)
        # The DLQ consumer sends to every kind's queue: a redriven job with attempts left goes back
        # to its own, a workflow whose last child died gets its merge.
        dead_letters = DeadLetters(
            self, "DeadLetters", config=config, queues=queues, functions=functions,
            environment={
                **table_env, **alert_env, **queue_env, **config.dlq_settings_env(),
                **dead_letter_queues_env({q.kind: q.dlq.queue_name for q in queues}),
            },
        )  # fmt: skip
        for job_queue in queues:
            job_queue.queue.grant_send_messages(dead_letters.consumer)
        dispatcher = functions.function(
            self,
            "CronDispatcher",
            handler=CRON_HANDLER,
            description=f"aijobs {config.stage} cron dispatcher",
            timeout=Duration.minutes(5),
            environment={
                **table_env,
                **alert_env,
                **queue_env,
                **config.cron_settings_env(),
                **event_source_mappings_env(
                    config, {q.kind: q.event_source.event_source_mapping_id for q in queues}
                ),
            },
        )
        # Adaptive concurrency: the cron reads and sets MaximumConcurrency on these mappings only.
        governed = [q for q in queues if q.kind in config.governed_kinds]
        if governed:
            dispatcher.add_to_role_policy(
                iam.PolicyStatement(
                    actions=["lambda:GetEventSourceMapping", "lambda:UpdateEventSourceMapping"],
                    resources=[q.event_source.event_source_mapping_arn for q in governed],
                )
            )
        # Retries and the dead-letter queue of scheduled invocations: see the Schedules construct.
        schedules = Schedules(self, "Schedules", config=config, dispatcher=dispatcher)

        # Alarms (every one notifies the stage's topic) and the dashboard.
        watched = {
            "api": producer,
            "dlq-consumer": dead_letters.consumer,
            "cron-dispatcher": dispatcher,
            "webhook-consumer": webhooks.consumer,
            **{f"{q.kind}-consumer": q.consumer for q in queues},
        }
        for name, fn in watched.items():
            alerts.watch_function(name, fn)
        alerts.watch_api(api.stage)
        for job_queue in queues:
            alerts.watch_queue(job_queue.kind, job_queue.queue, job_queue.dlq)
        alerts.watch_parked(
            parking.queue,
            name="dlq-parking",
            description="A dead letter the DLQ consumer could not handle was parked; see "
            "docs/operations/runbook.md",
        )
        alerts.watch_parked(
            webhooks.dlq,
            name="webhook-dead-letters",
            description="A webhook delivery was given up after its last attempt (the receiver kept "
            "failing); see docs/concepts/webhooks.md",
        )
        if schedules.dead_letter_queue is not None:
            alerts.watch_parked(
                schedules.dead_letter_queue,
                name="cron-dead-letters",
                description="A scheduled cron invocation failed before the dispatcher could alert "
                "(not delivered, import error, timeout or out of memory)",
            )
        Dashboard(
            self,
            "Dashboard",
            config=config,
            queues=queues,
            api=api.stage,
            functions=watched,
            parking=parking.queue,
            cron_dead_letters=schedules.dead_letter_queue,
        )

        # Grants: each function gets what its role needs, through grant_* only.
        for fn in (producer, dispatcher, dead_letters.consumer, *(q.consumer for q in queues)):
            webhooks.queue.grant_send_messages(fn)  # a finished job's webhook delivery
        tables.grant_webhook_secrets(producer)
        tables.grant_dead_letter_settling(producer)  # the operator routes' dead-letter list
        tables.grant_callback_rows(webhooks.consumer)
        tables.grant_meta_read(webhooks.consumer)
        for job_queue in queues:
            job_queue.queue.grant_send_messages(producer)
            job_queue.queue.grant_send_messages(dispatcher)
        # Table actions: exactly what each function's code uses (tests/infra/test_table_grants.py
        # records it). No function scans. The producer deletes only the Idempotency-Key of a job
        # it could not enqueue; the cron deletes finished jobs and credit transactions past
        # retention; consumers and the DLQ consumer never delete.
        tables.grant_jobs(producer, delete=True)
        tables.grant_jobs(dispatcher, delete=True)
        for fn in (dead_letters.consumer, *(q.consumer for q in queues)):
            tables.grant_jobs(fn, delete=False)
        for fn in (dispatcher, *(q.consumer for q in queues)):
            tables.grant_meta_read(fn)
        tables.grant_cron_run_records(dispatcher)
        tables.grant_flow_records(dispatcher, state=True)
        tables.grant_model_alerts(dispatcher)  # the weekly model check's markers
        for job_queue in queues:
            tables.grant_flow_records(job_queue.consumer, state=False)
            tables.grant_spend_records(job_queue.consumer)
            tables.grant_model_alerts(job_queue.consumer)
        # The operator-visible dead-letter list lives in the meta table.
        tables.grant_dead_letter_records(dead_letters.consumer)
        # With JWT auth the producer gives a new identity its tenant on its first request.
        tables.grant_meta_read(producer, register_tenants=config.auth_mode == "jwt")
        for fn in (dead_letters.consumer, dispatcher, *(q.consumer for q in queues)):
            alerts.topic.grant_publish(fn)
        # Object actions: exactly what each function's code calls (JobStorage explains why not
        # Bucket.grant_*). Producer: signs upload forms for inputs, checks at submit that an
        # `inputRef` exists (HeadObject), signs download links for results. Consumers: read
        # inputs, workflow parts and children's results; write results (and the video and speech
        # Bedrock and Polly write there for them). Nobody lists, deletes, tags or locks objects.
        storage.grant_objects(producer, WRITE_OBJECTS, INPUTS_PREFIX)
        storage.grant_objects(producer, READ_OBJECTS, INPUTS_PREFIX, RESULTS_PREFIX)
        for job_queue in queues:
            storage.grant_objects(job_queue.consumer, READ_OBJECTS, INPUTS_PREFIX, RESULTS_PREFIX)
            storage.grant_objects(job_queue.consumer, WRITE_OBJECTS + ABORT_UPLOADS, RESULTS_PREFIX)
        # AI providers: each consumer only the models of its kind, the producer only classify's.
        for job_queue in queues:
            ModelAccess(
                job_queue,
                "ModelAccess",
                fn=job_queue.consumer,
                plans=[config.plan(job_queue.kind)],
                openai_secret_name=config.openai_secret_name,
            )
        ModelAccess(
            self,
            "ClassifyModelAccess",
            fn=producer,
            plans=[config.plan(CLASSIFY)],
            openai_secret_name=config.openai_secret_name,
        )
        # The weekly model check, where the stage schedules it: the lifecycle of its models only.
        if schedules_model_check(config):
            ModelLifecycleAccess(
                self, "ModelLifecycleAccess", fn=dispatcher, plans=list(config.provider_plans)
            )
        for fn in (producer, *(q.consumer for q in queues)):
            acknowledge_grant_wildcards(
                fn,
                tables=tables.all_tables,
                bucket=storage.bucket,
                bucket_prefixes=(INPUTS_PREFIX, RESULTS_PREFIX),
            )
        for fn in (dead_letters.consumer, dispatcher, webhooks.consumer):
            acknowledge_grant_wildcards(fn, tables=tables.all_tables)

        CfnOutput(self, "ApiUrl", value=api.url, description="Base URL of the HTTP API")
        CfnOutput(self, "MetaTableName", value=tables.meta.table_name)
        CfnOutput(self, "ShardTableNames", value=table_env["SHARD_TABLE_NAMES"])
        # The operator CLI opens the shard tables with the functions' bucket counts.
        CfnOutput(self, "IndexBuckets", value=table_env["INDEX_BUCKETS"])
        CfnOutput(self, "IndexBucketsRead", value=table_env["INDEX_BUCKETS_READ"])
        CfnOutput(self, "BucketName", value=storage.bucket.bucket_name)
        CfnOutput(self, "AlertTopicArn", value=alerts.topic.topic_arn)
        CfnOutput(self, "QueueNames", value=queue_env["QUEUE_NAMES"] or "-")
        for job_queue in queues:
            binding = config.bindings[job_queue.kind]
            CfnOutput(self, f"QueueUrl{binding}", value=job_queue.queue.queue_url)
            CfnOutput(self, f"DlqUrl{binding}", value=job_queue.dlq.queue_url)
            CfnOutput(self, f"ConsumerFunction{binding}", value=job_queue.consumer.function_name)
        CfnOutput(self, "CronDispatcherFunction", value=dispatcher.function_name)
        if config.spend_daily_cap_usd:  # the spend brake, for `aijobs spend`
            CfnOutput(self, "SpendDailyCapUsd", value=config.spend_daily_cap_usd)
            CfnOutput(self, "SpendTimeZone", value=config.spend_time_zone)
        CfnOutput(self, "DlqParkingUrl", value=parking.queue.queue_url)
        CfnOutput(self, "WebhookQueueUrl", value=webhooks.queue.queue_url)
        CfnOutput(self, "WebhookDlqUrl", value=webhooks.dlq.queue_url)
        CfnOutput(self, "WebhookConsumerFunction", value=webhooks.consumer.function_name)
        if schedules.dead_letter_queue is not None:
            CfnOutput(self, "CronDeadLetterQueueUrl", value=schedules.dead_letter_queue.queue_url)
