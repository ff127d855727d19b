"""Typed runtime settings, one model per function, read from the environment once per container.

The CDK app sets exactly these variables (an infra test validates every function's environment
against its model), so a missing variable fails at cold start instead of falling back silently.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aijobs.bindings import (
    DEAD_LETTER_QUEUES,
    ESM_MAX_CONCURRENCY_MAX,
    EVENT_SOURCE_MAPPINGS,
    binding_name,
    parse_prices,
    split_list,
)
from aijobs.provider_plan import KindPlan, kind_pairs, plans_from_setting
from aijobs.store.keys import MAX_INDEX_BUCKETS, IndexBuckets

if TYPE_CHECKING:
    from aijobs.flow import FlowSettings


class FunctionSettings(BaseModel):
    # Every settings model here builds its validator when it first reads the environment
    # (`defer_build`): a function builds its own one, never the other functions' four.
    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    stage: str = Field(validation_alias="STAGE", min_length=1)
    meta_table_name: str = Field(validation_alias="META_TABLE_NAME", min_length=1)
    shard_table_names: tuple[str, ...] = Field(validation_alias="SHARD_TABLE_NAMES", min_length=1)
    # Write sharding of the index partitions all tenants share (aijobs.store.keys.IndexBuckets).
    index_buckets_write: int = Field(validation_alias="INDEX_BUCKETS", ge=1, le=MAX_INDEX_BUCKETS)
    index_buckets_read: int = Field(validation_alias="INDEX_BUCKETS_READ", ge=1, le=MAX_INDEX_BUCKETS)

    @field_validator("shard_table_names", mode="before")
    @classmethod
    def _split_shards(cls, value: Any) -> Any:
        return (
            tuple(part.strip() for part in value.split(",") if part.strip())
            if isinstance(value, str)
            else value
        )

    @model_validator(mode="after")
    def _check_buckets(self) -> Self:
        IndexBuckets(self.index_buckets_write, self.index_buckets_read)  # raises if READ < INDEX_BUCKETS
        return self

    @property
    def index_buckets(self) -> IndexBuckets:
        return IndexBuckets(self.index_buckets_write, self.index_buckets_read)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Self:
        return cls.model_validate(dict(os.environ if env is None else env))


class _QueueSettings(FunctionSettings):
    """Settings of functions that send to the job queues: names plus one URL per binding."""

    queue_names: tuple[str, ...] = Field(validation_alias="QUEUE_NAMES")
    queue_urls: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_queue_urls(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        names = split_list(data.get("QUEUE_NAMES"))
        missing = [binding_name(name) for name in names if not data.get(binding_name(name))]
        if missing:
            raise ValueError(f"queue URL variables missing: {missing}")
        return {
            **data,
            "QUEUE_NAMES": names,
            "queue_urls": {name: data[binding_name(name)] for name in names},
        }


class _WebhookQueueSettings(BaseModel):
    """Functions that finish jobs queue each finished job's webhook delivery (aijobs.webhooks)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    webhook_queue_url: str = Field(validation_alias="WEBHOOK_QUEUE_URL", min_length=1)


class _ProviderSettings(BaseModel):
    """Which provider and models serve each kind (the synth-time plan, see aijobs.provider_plan)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    provider: str = Field(validation_alias="PROVIDER", min_length=1)
    kind_providers: str = Field(validation_alias="KIND_PROVIDERS", min_length=1)
    kind_models: str = Field(validation_alias="KIND_MODELS", default="")
    kind_allowed_models: str = Field(validation_alias="KIND_ALLOWED_MODELS", default="")
    openai_base_url: str = Field(validation_alias="OPENAI_BASE_URL", min_length=1)
    # Deployed stages read the OpenAI-compatible key from this secret; the local stack from
    # the OPENAI_API_KEY environment variable of the developer's shell.
    openai_secret_name: str | None = Field(validation_alias="OPENAI_SECRET_NAME", default=None)

    @property
    def plans(self) -> dict[str, KindPlan]:
        return plans_from_setting(
            {
                "KIND_PROVIDERS": self.kind_providers,
                "KIND_MODELS": self.kind_models,
                "KIND_ALLOWED_MODELS": self.kind_allowed_models,
            }
        )


class _SpendSettings(BaseModel):
    """The spend brake (aijobs.spend): SPEND_DAILY_CAP_USD empty means no brake at all."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    spend_daily_cap_usd: str = Field(validation_alias="SPEND_DAILY_CAP_USD")
    spend_time_zone: str = Field(validation_alias="SPEND_TIME_ZONE", min_length=1)

    @field_validator("spend_time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from aijobs.spend import time_zone

        time_zone(value)  # an unknown zone fails at cold start, never at the first midnight
        return value


class ApiSettings(_QueueSettings, _ProviderSettings, _WebhookQueueSettings, _SpendSettings):
    """The HTTP API (producer) function."""

    @field_validator("kind_prices", mode="before")
    @classmethod
    def _parse_prices(cls, value: Any) -> Any:
        return parse_prices(value) if isinstance(value, str) else value

    bucket_name: str = Field(validation_alias="BUCKET_NAME", min_length=1)
    max_inline_input_bytes: int = Field(validation_alias="MAX_INLINE_INPUT_BYTES", gt=0)
    # Credits per job by kind, `kind:credits;...`; every configured kind is listed by the stack.
    kind_prices: dict[str, int] = Field(validation_alias="KIND_PRICES")
    # api_key: the producer checks hashed keys; jwt: the gateway's JWT authorizer already did.
    auth_mode: Literal["api_key", "jwt"] = Field(validation_alias="AUTH_MODE")
    # A callbackUrl may name a loopback host (the local stage's WEBHOOK_ALLOW_LOOPBACK=1).
    webhook_allow_loopback: bool = Field(validation_alias="WEBHOOK_ALLOW_LOOPBACK")
    # The console's pause/resume (aijobs.api.admin): kind -> its consumer's event-source mapping id,
    # `kind=id;...`. Always set (unlike the cron's EVENT_SOURCE_MAPPINGS, empty on some stages).
    consumer_mappings: dict[str, str] = Field(validation_alias="CONSUMER_MAPPINGS")

    @field_validator("consumer_mappings", mode="before")
    @classmethod
    def _parse_consumer_mappings(cls, value: Any) -> Any:
        return kind_pairs("CONSUMER_MAPPINGS", value) if isinstance(value, str) else value


class ConsumerSettings(FunctionSettings, _ProviderSettings, _WebhookQueueSettings, _SpendSettings):
    """A queue consumer function: one per job kind, each running the shared dispatcher."""

    queue_name: str = Field(validation_alias="QUEUE_NAME", min_length=1)
    queue_url: str = Field(validation_alias="QUEUE_URL", min_length=1)
    dlq_url: str = Field(validation_alias="DLQ_URL", min_length=1)
    bucket_name: str = Field(validation_alias="BUCKET_NAME", min_length=1)
    max_retries: int = Field(validation_alias="MAX_RETRIES", ge=0)
    alert_topic_arn: str = Field(validation_alias="ALERT_TOPIC_ARN", min_length=1)
    retry_base_delay_seconds: int = Field(validation_alias="RETRY_BASE_DELAY_SECONDS", ge=0)
    retry_max_delay_seconds: int = Field(validation_alias="RETRY_MAX_DELAY_SECONDS", ge=1)
    throttle_delay_seconds: int = Field(validation_alias="THROTTLE_DELAY_SECONDS", ge=0)
    provider_recheck_seconds: int = Field(validation_alias="PROVIDER_RECHECK_SECONDS", ge=0)
    job_lease_seconds: int = Field(validation_alias="JOB_LEASE_SECONDS", ge=1)
    stuck_queued_seconds: int = Field(validation_alias="STUCK_QUEUED_SECONDS", ge=1)
    # Per-tenant running cap per kind (0: none) and how long a job over it waits; see
    # aijobs.consumer.fairness.
    tenant_max_running: int = Field(default=0, validation_alias="TENANT_MAX_RUNNING", ge=0)
    tenant_hold_seconds: int = Field(default=30, validation_alias="TENANT_HOLD_SECONDS", ge=1, le=900)
    # Other kinds' queues this consumer sends to: a workflow's children, or the workflows whose
    # children it runs (to queue their merge step). `LINKED_QUEUES` plus one `Q_*` URL each.
    linked_queue_urls: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _collect_linked_queues(cls, data: Any) -> Any:
        return _with_linked_queues(data)

    @property
    def max_attempts(self) -> int:
        return self.max_retries + 1


def _with_linked_queues(data: Any) -> Any:
    if not isinstance(data, dict):
        return data
    if "LINKED_QUEUES" not in data:  # set (maybe empty) by every stack: missing means miswired
        raise ValueError("LINKED_QUEUES is missing (the other kinds' queues this function sends to)")
    names = split_list(data.get("LINKED_QUEUES"))
    missing = [binding_name(name) for name in names if not data.get(binding_name(name))]
    if missing:
        raise ValueError(f"queue URL variables missing for LINKED_QUEUES: {missing}")
    return {**data, "linked_queue_urls": {name: data[binding_name(name)] for name in names}}


class DlqSettings(FunctionSettings, _WebhookQueueSettings):
    """The dead-letter consumer (it queues the merge step of a workflow whose last child died)."""

    alert_topic_arn: str = Field(validation_alias="ALERT_TOPIC_ARN", min_length=1)
    linked_queue_urls: dict[str, str] = Field(default_factory=dict)
    # DLQ name -> job kind, from DEAD_LETTER_QUEUES (kind=name;...): names are not parsed.
    dead_letter_kinds: dict[str, str] = Field(validation_alias=DEAD_LETTER_QUEUES)

    @model_validator(mode="before")
    @classmethod
    def _collect_linked_queues(cls, data: Any) -> Any:
        return _with_linked_queues(data)

    @field_validator("dead_letter_kinds", mode="before")
    @classmethod
    def _parse_dead_letter_queues(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return {name: kind for kind, name in kind_pairs(DEAD_LETTER_QUEUES, value).items()}


class CronSettings(_QueueSettings, _WebhookQueueSettings):
    """The cron dispatcher (its jobs may re-queue work, so it knows the queues)."""

    alert_topic_arn: str = Field(validation_alias="ALERT_TOPIC_ARN", min_length=1)
    max_retries: int = Field(validation_alias="MAX_RETRIES", ge=0)
    job_lease_seconds: int = Field(validation_alias="JOB_LEASE_SECONDS", ge=1)
    provider_recheck_seconds: int = Field(validation_alias="PROVIDER_RECHECK_SECONDS", ge=0)
    stuck_queued_seconds: int = Field(validation_alias="STUCK_QUEUED_SECONDS", ge=1)
    # Adaptive concurrency (aijobs.scheduled.concurrency): kind -> its consumer's mapping id.
    event_source_mappings: dict[str, str] = Field(validation_alias=EVENT_SOURCE_MAPPINGS)
    queue_max_concurrency: int | None = Field(validation_alias="QUEUE_MAX_CONCURRENCY", ge=1)
    throttle_narrow_percent: int = Field(validation_alias="THROTTLE_NARROW_PERCENT", ge=1, le=100)
    throttle_narrow_min: int = Field(validation_alias="THROTTLE_NARROW_MIN", ge=1)
    throttle_window_minutes: int = Field(validation_alias="THROTTLE_WINDOW_MINUTES", ge=1)
    concurrency_cooldown_seconds: int = Field(validation_alias="CONCURRENCY_COOLDOWN_SECONDS", ge=0)
    concurrency_quiet_seconds: int = Field(validation_alias="CONCURRENCY_QUIET_SECONDS", ge=0)
    concurrency_step: int = Field(validation_alias="CONCURRENCY_STEP", ge=1)

    @field_validator("event_source_mappings", mode="before")
    @classmethod
    def _parse_mappings(cls, value: Any) -> Any:
        return kind_pairs(EVENT_SOURCE_MAPPINGS, value) if isinstance(value, str) else value

    @field_validator("queue_max_concurrency", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def flow(self) -> FlowSettings:
        from aijobs.flow import FlowSettings  # the cron dispatcher's own code

        return FlowSettings(
            ceiling=self.queue_max_concurrency or ESM_MAX_CONCURRENCY_MAX,
            narrow_percent=self.throttle_narrow_percent,
            narrow_min_throttles=self.throttle_narrow_min,
            window=timedelta(minutes=self.throttle_window_minutes),
            cooldown=timedelta(seconds=self.concurrency_cooldown_seconds),
            quiet=timedelta(seconds=self.concurrency_quiet_seconds),
            step=self.concurrency_step,
        )


class WebhookSettings(FunctionSettings, _WebhookQueueSettings):
    """The webhook consumer (aijobs.webhooks.delivery)."""

    webhook_dlq_url: str = Field(validation_alias="WEBHOOK_DLQ_URL", min_length=1)
    timeout_seconds: int = Field(validation_alias="WEBHOOK_TIMEOUT_SECONDS", ge=1, le=30)
    max_attempts: int = Field(validation_alias="WEBHOOK_MAX_ATTEMPTS", ge=1)
    retry_base_delay_seconds: int = Field(validation_alias="WEBHOOK_RETRY_BASE_DELAY_SECONDS", ge=0)
    retry_max_delay_seconds: int = Field(validation_alias="WEBHOOK_RETRY_MAX_DELAY_SECONDS", ge=1)
    allow_loopback: bool = Field(validation_alias="WEBHOOK_ALLOW_LOOPBACK")

    @property
    def allow_http(self) -> bool:
        """Plain http callbacks: the local stage only (a receiver on the developer's machine)."""
        return self.stage == "local"


@cache
def api_settings() -> ApiSettings:
    return ApiSettings.from_env()


@cache
def consumer_settings() -> ConsumerSettings:
    return ConsumerSettings.from_env()


@cache
def dlq_settings() -> DlqSettings:
    return DlqSettings.from_env()


@cache
def cron_settings() -> CronSettings:
    return CronSettings.from_env()


@cache
def webhook_settings() -> WebhookSettings:
    return WebhookSettings.from_env()
