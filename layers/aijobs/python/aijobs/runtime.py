"""Builds each function's collaborators once per container from its typed settings.

Handlers call these cached factories; tests clear them (`reset_runtime()`) after starting moto.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from functools import cache
from typing import TYPE_CHECKING

from aijobs import aws
from aijobs.alerts import Alerts
from aijobs.domain import utcnow
from aijobs.providers.registry import reset_providers
from aijobs.queues import JobQueues
from aijobs.settings import reset_settings
from aijobs.store.tenants import Directory

# Each factory imports its own function's code: a handler's import graph holds nothing of the
# other functions (tests/unit/test_import_graph.py), which keeps every cold start to its own path.
# So do the settings: each handler imports its own settings module (aijobs.settings.<function>).
if TYPE_CHECKING:
    from aijobs.api.admin import AdminService
    from aijobs.api.service import JobService
    from aijobs.consumer.attempts import Consumer
    from aijobs.dead_letters import DeadLetterConsumer
    from aijobs.provider_plan import KindPlan
    from aijobs.providers.base import Provider
    from aijobs.scheduled.context import CronContext
    from aijobs.settings import FunctionSettings
    from aijobs.settings.api import ApiSettings
    from aijobs.settings.consumer import ConsumerSettings
    from aijobs.settings.cron import CronSettings
    from aijobs.settings.dlq import DlqSettings
    from aijobs.settings.webhook import WebhookSettings
    from aijobs.spend import SpendBrake
    from aijobs.webhooks.delivery import WebhookConsumer
    from aijobs.webhooks.urls import Resolver


def directory(settings: FunctionSettings) -> Directory:
    resource = aws.dynamodb()
    return Directory(
        resource.Table(settings.meta_table_name),
        tuple(resource.Table(name) for name in settings.shard_table_names),
        buckets=settings.index_buckets,
    )


@cache
def consumer() -> Consumer:
    from aijobs.settings.consumer import consumer_settings

    return build_consumer(consumer_settings())


def build_consumer(settings: ConsumerSettings, clock: Callable[[], datetime] = utcnow) -> Consumer:
    from aijobs.consumer.attempts import Consumer
    from aijobs.consumer.control import ConsumerControl
    from aijobs.consumer.meter import ThrottleMeter
    from aijobs.consumer.registry import QUEUE_HANDLERS
    from aijobs.consumer.retry import RetryPolicy
    from aijobs.providers.registry import build_provider
    from aijobs.store.model_alerts import ModelAlerts
    from aijobs.store.results import ResultStore
    from aijobs.store.throttle_counts import ThrottleCounts

    plan = settings.plans.get(settings.queue_name)
    return Consumer(
        stage=settings.stage,
        kind=settings.queue_name,
        directory=directory(settings),
        # A success touches DynamoDB and S3 only; SQS (retries, webhooks, children), Lambda (pausing
        # the kind) and SNS (alerts) are created when first called.
        queues=JobQueues(
            aws.on_first_use(aws.sqs),
            {settings.queue_name: settings.queue_url, **settings.linked_queue_urls},
            {settings.queue_name: settings.dlq_url},
            webhook_url=settings.webhook_queue_url,
        ),
        results=ResultStore(aws.s3(), settings.bucket_name),
        provider=build_provider(settings.provider, settings, bucket=settings.bucket_name),
        handlers=QUEUE_HANDLERS,
        policy=RetryPolicy(
            base_delay_seconds=settings.retry_base_delay_seconds,
            max_delay_seconds=settings.retry_max_delay_seconds,
            throttle_delay_seconds=settings.throttle_delay_seconds,
        ),
        control=ConsumerControl(aws.on_first_use(aws.lambda_)),
        alerts=Alerts(aws.on_first_use(aws.sns), settings.alert_topic_arn),
        max_attempts=settings.max_attempts,
        lease=timedelta(seconds=settings.job_lease_seconds),
        recheck=timedelta(seconds=settings.provider_recheck_seconds),
        hold=timedelta(seconds=settings.stuck_queued_seconds),
        clock=clock,
        tenant_max_running=settings.tenant_max_running,
        tenant_hold=timedelta(seconds=settings.tenant_hold_seconds),
        meter=ThrottleMeter(
            ThrottleCounts(aws.dynamodb().Table(settings.meta_table_name)), settings.queue_name, clock
        ),
        spend=spend_brake(settings, clock),
        model=plan.model if plan is not None else None,
        fallbacks=_fallbacks(settings, plan),
        model_alerts=ModelAlerts(aws.dynamodb().Table(settings.meta_table_name)),
    )


def spend_brake(settings: ApiSettings | ConsumerSettings, clock: Callable[[], datetime]) -> SpendBrake | None:
    """The stage's spend brake; None (no calls at all) without SPEND_DAILY_CAP_USD."""
    from aijobs.spend import build_brake

    return build_brake(
        aws.dynamodb().Table(settings.meta_table_name),
        settings.spend_daily_cap_usd,
        settings.spend_time_zone,
        clock,
    )


@cache
def api_service() -> JobService:
    from aijobs.api.service import JobService
    from aijobs.providers.registry import build_provider
    from aijobs.settings.api import api_settings
    from aijobs.store.results import ResultStore
    from aijobs.webhooks.secrets import WebhookSecrets
    from aijobs.webhooks.urls import UrlPolicy

    settings = api_settings()
    return JobService(
        directory=directory(settings),
        queues=JobQueues(aws.sqs(), settings.queue_urls, webhook_url=settings.webhook_queue_url),
        # S3 serves uploads, inputs by reference and result links, not a plain submit or poll.
        results=ResultStore(aws.on_first_use(aws.s3), settings.bucket_name),
        provider=build_provider(settings.provider, settings, bucket=settings.bucket_name),
        provider_name=settings.provider,
        plans=settings.plans,
        max_inline_input_bytes=settings.max_inline_input_bytes,
        clock=utcnow,
        prices=settings.kind_prices,
        auth_mode=settings.auth_mode,
        jwt_operator_group=settings.jwt_operator_group,
        spend=spend_brake(settings, utcnow),
        webhook_secrets=WebhookSecrets(aws.dynamodb().Table(settings.meta_table_name), utcnow),
        webhook_policy=UrlPolicy(
            allow_http=settings.stage == "local", allow_loopback=settings.webhook_allow_loopback
        ),
    )


@cache
def admin_service() -> AdminService:
    """The operator routes' logic (aijobs.api.admin), next to the API's own service."""
    from aijobs.api.admin import AdminService
    from aijobs.mappings import ConsumerControl
    from aijobs.operator import Operator
    from aijobs.settings.api import api_settings
    from aijobs.store.spend import SpendRecords

    settings = api_settings()
    jobs = api_service()
    meta = aws.dynamodb().Table(settings.meta_table_name)
    return AdminService(
        directory=jobs.directory,
        operator=Operator(jobs.directory, jobs.queues, utcnow),
        sqs=aws.sqs(),
        queue_urls=settings.queue_urls,
        control=ConsumerControl(aws.on_first_use(aws.lambda_)),
        mappings=settings.consumer_mappings,
        spend=SpendRecords(meta),
        spend_zone=settings.spend_time_zone,
        spend_counted=bool(settings.spend_daily_cap_usd.strip()),
        clock=utcnow,
    )


@cache
def dead_letter_consumer() -> DeadLetterConsumer:
    from aijobs.settings.dlq import dlq_settings

    return build_dead_letter_consumer(dlq_settings())


def build_dead_letter_consumer(
    settings: DlqSettings, clock: Callable[[], datetime] = utcnow
) -> DeadLetterConsumer:
    from aijobs.dead_letters import DeadLetterConsumer

    return DeadLetterConsumer(
        stage=settings.stage,
        directory=directory(settings),
        meta=aws.dynamodb().Table(settings.meta_table_name),
        alerts=Alerts(aws.sns(), settings.alert_topic_arn),
        clock=clock,
        kinds_by_queue=settings.dead_letter_kinds,
        max_attempts={kind: limits.attempts for kind, limits in settings.kind_limits.items()},
        # SQS only for a redriven job's own queue, a workflow child's parent or a webhook.
        queues=JobQueues(
            aws.on_first_use(aws.sqs), settings.queue_urls, webhook_url=settings.webhook_queue_url
        ),
    )


@cache
def cron_context() -> CronContext:
    from aijobs.settings.cron import cron_settings

    return build_cron_context(cron_settings())


def build_cron_context(settings: CronSettings, clock: Callable[[], datetime] = utcnow) -> CronContext:
    from aijobs.mappings import ConsumerControl
    from aijobs.scheduled.context import CronContext

    return CronContext(
        stage=settings.stage,
        directory=directory(settings),
        meta=aws.dynamodb().Table(settings.meta_table_name),
        # A run with nothing due reads DynamoDB only: SQS (re-sending stuck jobs), SNS (alerts) and
        # Lambda (sizing consumers) are created when first called.
        queues=JobQueues(
            aws.on_first_use(aws.sqs), settings.queue_urls, webhook_url=settings.webhook_queue_url
        ),
        alerts=Alerts(aws.on_first_use(aws.sns), settings.alert_topic_arn),
        kinds=settings.queue_names,
        max_attempts=settings.max_retries + 1,
        lease=timedelta(seconds=settings.job_lease_seconds),
        recheck=timedelta(seconds=settings.provider_recheck_seconds),
        stuck_after=timedelta(seconds=settings.stuck_queued_seconds),
        clock=clock,
        control=ConsumerControl(aws.on_first_use(aws.lambda_)),
        mappings=settings.event_source_mappings,
        concurrency=settings.concurrency,
        limits=settings.kind_limits,
        plans=settings.plans,
        # Bedrock's control plane (the weekly model check only), in the function's own region.
        bedrock=aws.bedrock,
    )


@cache
def webhook_consumer() -> WebhookConsumer:
    from aijobs.settings.webhook import webhook_settings

    return build_webhook_consumer(webhook_settings())


def build_webhook_consumer(
    settings: WebhookSettings,
    clock: Callable[[], datetime] = utcnow,
    resolver: Resolver | None = None,
) -> WebhookConsumer:
    """`resolver`: the host -> addresses lookup (tests inject one; the system resolver by default)."""
    from aijobs.webhooks.delivery import WEBHOOK_QUEUE, Backoff, WebhookConsumer
    from aijobs.webhooks.secrets import WebhookSecrets
    from aijobs.webhooks.transport import Poster
    from aijobs.webhooks.urls import UrlPolicy, system_resolver

    return WebhookConsumer(
        directory=directory(settings),
        secrets=WebhookSecrets(aws.dynamodb().Table(settings.meta_table_name), clock),
        queues=JobQueues(
            aws.sqs(), {WEBHOOK_QUEUE: settings.webhook_queue_url}, {WEBHOOK_QUEUE: settings.webhook_dlq_url}
        ),
        poster=Poster(
            policy=UrlPolicy(allow_http=settings.allow_http, allow_loopback=settings.allow_loopback),
            timeout_seconds=settings.timeout_seconds,
            resolver=resolver or system_resolver,
        ),
        backoff=Backoff(settings.retry_base_delay_seconds, settings.retry_max_delay_seconds),
        max_attempts=settings.max_attempts,
        # Longer than one POST can take, so a live attempt is never taken over.
        lease=timedelta(seconds=settings.timeout_seconds + 30),
        clock=clock,
    )


def reset_runtime() -> None:
    """Forget every cached setting, client and collaborator (tests, local stack reloads)."""
    reset_settings()
    functions = (consumer, api_service, admin_service, dead_letter_consumer, cron_context, webhook_consumer)
    for factory in functions:
        factory.cache_clear()
    aws.reset_clients()
    reset_providers()


def _fallbacks(settings: ConsumerSettings, plan: KindPlan | None) -> tuple[tuple[Provider, str], ...]:
    """The plan's fallback models, each with its provider's adapter (built once, like the first)."""
    from aijobs.providers.registry import build_provider

    if plan is None:
        return ()
    return tuple(
        (build_provider(provider, settings, bucket=settings.bucket_name), model or "")
        for provider, model in plan.chain[1:]
    )
