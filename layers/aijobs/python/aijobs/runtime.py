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
from aijobs.settings import (
    ConsumerSettings,
    CronSettings,
    DlqSettings,
    FunctionSettings,
    api_settings,
    consumer_settings,
    cron_settings,
    dlq_settings,
)
from aijobs.store.tenants import Directory

# Each factory imports its own function's code: a handler's import graph holds nothing of the
# other functions (tests/unit/test_import_graph.py), which keeps every cold start to its own path.
if TYPE_CHECKING:
    from aijobs.api.service import JobService
    from aijobs.consumer.dispatcher import Consumer
    from aijobs.dead_letters import DeadLetterConsumer
    from aijobs.scheduled.context import CronContext


def directory(settings: FunctionSettings) -> Directory:
    resource = aws.dynamodb()
    return Directory(
        resource.Table(settings.meta_table_name),
        tuple(resource.Table(name) for name in settings.shard_table_names),
        buckets=settings.index_buckets,
    )


@cache
def consumer() -> Consumer:
    return build_consumer(consumer_settings())


def build_consumer(settings: ConsumerSettings, clock: Callable[[], datetime] = utcnow) -> Consumer:
    from aijobs.consumer.control import ConsumerControl
    from aijobs.consumer.dispatcher import Consumer
    from aijobs.consumer.registry import QUEUE_HANDLERS
    from aijobs.consumer.retry import RetryPolicy
    from aijobs.providers.registry import build_provider
    from aijobs.store.results import ResultStore

    return Consumer(
        stage=settings.stage,
        kind=settings.queue_name,
        directory=directory(settings),
        queues=JobQueues(
            aws.sqs(),
            {settings.queue_name: settings.queue_url, **settings.linked_queue_urls},
            {settings.queue_name: settings.dlq_url},
        ),
        results=ResultStore(aws.s3(), settings.bucket_name),
        provider=build_provider(settings.provider, settings, bucket=settings.bucket_name),
        handlers=QUEUE_HANDLERS,
        policy=RetryPolicy(
            base_delay_seconds=settings.retry_base_delay_seconds,
            max_delay_seconds=settings.retry_max_delay_seconds,
            throttle_delay_seconds=settings.throttle_delay_seconds,
        ),
        control=ConsumerControl(aws.lambda_()),
        alerts=Alerts(aws.sns(), settings.alert_topic_arn),
        max_attempts=settings.max_attempts,
        lease=timedelta(seconds=settings.job_lease_seconds),
        recheck=timedelta(seconds=settings.provider_recheck_seconds),
        hold=timedelta(seconds=settings.stuck_queued_seconds),
        clock=clock,
    )


@cache
def api_service() -> JobService:
    from aijobs.api.service import JobService
    from aijobs.providers.registry import build_provider
    from aijobs.store.results import ResultStore

    settings = api_settings()
    return JobService(
        directory=directory(settings),
        queues=JobQueues(aws.sqs(), settings.queue_urls),
        results=ResultStore(aws.s3(), settings.bucket_name),
        provider=build_provider(settings.provider, settings, bucket=settings.bucket_name),
        provider_name=settings.provider,
        plans=settings.plans,
        max_inline_input_bytes=settings.max_inline_input_bytes,
        clock=utcnow,
        prices=settings.kind_prices,
        auth_mode=settings.auth_mode,
    )


@cache
def dead_letter_consumer() -> DeadLetterConsumer:
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
        queues=JobQueues(aws.sqs(), settings.linked_queue_urls),
    )


@cache
def cron_context() -> CronContext:
    return build_cron_context(cron_settings())


def build_cron_context(settings: CronSettings, clock: Callable[[], datetime] = utcnow) -> CronContext:
    from aijobs.scheduled.context import CronContext

    return CronContext(
        stage=settings.stage,
        directory=directory(settings),
        meta=aws.dynamodb().Table(settings.meta_table_name),
        queues=JobQueues(aws.sqs(), settings.queue_urls),
        alerts=Alerts(aws.sns(), settings.alert_topic_arn),
        kinds=settings.queue_names,
        max_attempts=settings.max_retries + 1,
        lease=timedelta(seconds=settings.job_lease_seconds),
        recheck=timedelta(seconds=settings.provider_recheck_seconds),
        stuck_after=timedelta(seconds=settings.stuck_queued_seconds),
        clock=clock,
    )


def reset_runtime() -> None:
    """Forget every cached setting, client and collaborator (tests, local stack reloads)."""
    for factory in (
        api_settings,
        consumer_settings,
        dlq_settings,
        cron_settings,
        consumer,
        api_service,
        dead_letter_consumer,
        cron_context,
    ):
        factory.cache_clear()
    aws.reset_clients()
    reset_providers()
