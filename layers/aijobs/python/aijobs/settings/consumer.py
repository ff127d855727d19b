"""A queue consumer function's settings."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import Field, model_validator

from aijobs.settings import FunctionSettings, _WebhookQueueSettings, _with_linked_queues, register_getter
from aijobs.settings.parts import _ProviderSettings, _SpendSettings


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


@register_getter
@cache
def consumer_settings() -> ConsumerSettings:
    return ConsumerSettings.from_env()
