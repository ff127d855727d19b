"""The webhook consumer's settings (aijobs.webhooks.delivery)."""

from __future__ import annotations

from functools import cache

from pydantic import Field

from aijobs.settings import FunctionSettings, _WebhookQueueSettings, register_getter


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


@register_getter
@cache
def webhook_settings() -> WebhookSettings:
    return WebhookSettings.from_env()
