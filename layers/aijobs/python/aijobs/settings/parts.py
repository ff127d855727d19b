"""Settings parts only some functions share: the job queues (API, cron, DLQ consumer), the provider plan (API,
consumer, cron), the provider adapters and the spend brake (API, consumer)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aijobs.bindings import binding_name, split_list
from aijobs.provider_plan import KindPlan, plans_from_setting
from aijobs.settings import FunctionSettings


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


class _PlanSettings(BaseModel):
    """Which provider and models serve each kind (the synth-time plan, see aijobs.provider_plan)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    kind_providers: str = Field(validation_alias="KIND_PROVIDERS", min_length=1)
    kind_models: str = Field(validation_alias="KIND_MODELS", default="")
    kind_allowed_models: str = Field(validation_alias="KIND_ALLOWED_MODELS", default="")
    kind_fallbacks: str = Field(validation_alias="KIND_FALLBACKS", default="")

    @property
    def plans(self) -> dict[str, KindPlan]:
        return plans_from_setting(
            {
                "KIND_PROVIDERS": self.kind_providers,
                "KIND_MODELS": self.kind_models,
                "KIND_ALLOWED_MODELS": self.kind_allowed_models,
                "KIND_FALLBACKS": self.kind_fallbacks,
            }
        )


class _ProviderSettings(_PlanSettings):
    """The plan plus what a function needs to build the provider adapters of its kinds."""

    provider: str = Field(validation_alias="PROVIDER", min_length=1)
    openai_base_url: str = Field(validation_alias="OPENAI_BASE_URL", min_length=1)
    # Deployed stages read the OpenAI-compatible key from this secret; the local stack from
    # the OPENAI_API_KEY environment variable of the developer's shell.
    openai_secret_name: str | None = Field(validation_alias="OPENAI_SECRET_NAME", default=None)


class _SpendSettings(BaseModel):
    """The spend brake (aijobs.spend): SPEND_DAILY_CAP_USD empty means no brake at all."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    spend_daily_cap_usd: str = Field(validation_alias="SPEND_DAILY_CAP_USD")
    spend_time_zone: str = Field(validation_alias="SPEND_TIME_ZONE", min_length=1)

    @field_validator("spend_time_zone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        from aijobs.bindings import time_zone

        time_zone(value)  # an unknown zone fails at cold start, never at the first midnight
        return value
