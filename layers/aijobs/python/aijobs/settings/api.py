"""The HTTP API (producer) function's settings."""

from __future__ import annotations

from functools import cache
from typing import Any, Literal

from pydantic import Field, field_validator

from aijobs.bindings import parse_prices
from aijobs.provider_plan import kind_pairs
from aijobs.settings import _WebhookQueueSettings, register_getter
from aijobs.settings.parts import _ProviderSettings, _QueueSettings, _SpendSettings


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
    # jwt: the members of exactly this Cognito group are operators (the stage config's default
    # `aijobs-operators` is always written out).
    jwt_operator_group: str = Field(validation_alias="JWT_OPERATOR_GROUP", min_length=1)
    # A callbackUrl may name a loopback host (the local stage's WEBHOOK_ALLOW_LOOPBACK=1).
    webhook_allow_loopback: bool = Field(validation_alias="WEBHOOK_ALLOW_LOOPBACK")
    # The console's pause/resume (aijobs.api.admin): kind -> its consumer's event-source mapping id,
    # `kind=id;...`. Always set (unlike the cron's EVENT_SOURCE_MAPPINGS, empty on some stages).
    consumer_mappings: dict[str, str] = Field(validation_alias="CONSUMER_MAPPINGS")

    @field_validator("consumer_mappings", mode="before")
    @classmethod
    def _parse_consumer_mappings(cls, value: Any) -> Any:
        return kind_pairs("CONSUMER_MAPPINGS", value) if isinstance(value, str) else value


@register_getter
@cache
def api_settings() -> ApiSettings:
    return ApiSettings.from_env()
