"""The cron dispatcher's settings."""

from __future__ import annotations

from datetime import timedelta
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import Field, field_validator

from aijobs.bindings import (
    ESM_MAX_CONCURRENCY_MAX,
    EVENT_SOURCE_MAPPINGS,
    KIND_LIMITS,
    KindLimits,
    parse_limits,
)
from aijobs.provider_plan import kind_pairs
from aijobs.settings import _WebhookQueueSettings, register_getter
from aijobs.settings.parts import _PlanSettings, _QueueSettings

if TYPE_CHECKING:
    from aijobs.aimd import ConcurrencySettings


class CronSettings(_QueueSettings, _WebhookQueueSettings, _PlanSettings):
    """The cron dispatcher (its jobs may re-queue work, so it knows the queues; the weekly model
    check reads the provider plan)."""

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
    # Per kind: attempt budget, lease and concurrency ceiling (a kind's declaration may change them).
    kind_limits: dict[str, KindLimits] = Field(validation_alias=KIND_LIMITS, default_factory=dict)

    @field_validator("event_source_mappings", mode="before")
    @classmethod
    def _parse_mappings(cls, value: Any) -> Any:
        return kind_pairs(EVENT_SOURCE_MAPPINGS, value) if isinstance(value, str) else value

    @field_validator("kind_limits", mode="before")
    @classmethod
    def _parse_limits(cls, value: Any) -> Any:
        return parse_limits(value) if isinstance(value, str) else value

    @field_validator("queue_max_concurrency", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def concurrency(self) -> ConcurrencySettings:
        from aijobs.aimd import ConcurrencySettings  # the cron dispatcher's own code

        return ConcurrencySettings(
            ceiling=self.queue_max_concurrency or ESM_MAX_CONCURRENCY_MAX,
            narrow_percent=self.throttle_narrow_percent,
            narrow_min_throttles=self.throttle_narrow_min,
            window=timedelta(minutes=self.throttle_window_minutes),
            cooldown=timedelta(seconds=self.concurrency_cooldown_seconds),
            quiet=timedelta(seconds=self.concurrency_quiet_seconds),
            step=self.concurrency_step,
        )


@register_getter
@cache
def cron_settings() -> CronSettings:
    return CronSettings.from_env()
