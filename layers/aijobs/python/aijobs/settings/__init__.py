"""Typed runtime settings, one model per function, read from the environment once per container.

The CDK app sets exactly these variables (an infra test validates every function's environment
against its model), so a missing variable fails at cold start instead of falling back silently.

Each function's model lives in its own module (`aijobs.settings.api`, `.consumer`, `.dlq`,
`.cron`, `.webhook`) with the parts only some functions share (`.parts`): a function imports its
own, and creating the other functions' pydantic classes (about 0.07x of `import boto3` for all of
them) is never paid. `from aijobs.settings import ApiSettings` still works: the names below load
their module on first access.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from aijobs.bindings import binding_name, split_list
from aijobs.store.keys import MAX_INDEX_BUCKETS, IndexBuckets

if TYPE_CHECKING:
    from aijobs.settings.api import ApiSettings, api_settings
    from aijobs.settings.consumer import ConsumerSettings, consumer_settings
    from aijobs.settings.cron import CronSettings, cron_settings
    from aijobs.settings.dlq import DlqSettings, dlq_settings
    from aijobs.settings.parts import _ProviderSettings
    from aijobs.settings.webhook import WebhookSettings, webhook_settings

__all__ = [
    "ApiSettings",
    "ConsumerSettings",
    "CronSettings",
    "DlqSettings",
    "FunctionSettings",
    "WebhookSettings",
    "_ProviderSettings",
    "api_settings",
    "consumer_settings",
    "cron_settings",
    "dlq_settings",
    "reset_settings",
    "webhook_settings",
]
# Name -> the module that defines it, loaded on first access (PEP 562).
_LAZY = {
    "ApiSettings": "api",
    "api_settings": "api",
    "ConsumerSettings": "consumer",
    "consumer_settings": "consumer",
    "CronSettings": "cron",
    "cron_settings": "cron",
    "DlqSettings": "dlq",
    "dlq_settings": "dlq",
    "WebhookSettings": "webhook",
    "webhook_settings": "webhook",
    "_ProviderSettings": "parts",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


# The cached getters of the settings modules loaded so far (each module registers its own).
_GETTERS: list[Callable[[], object]] = []
_Getter = TypeVar("_Getter", bound=Callable[[], object])


def register_getter(getter: _Getter) -> _Getter:
    _GETTERS.append(getter)
    return getter


def reset_settings() -> None:
    """Forget every settings model read so far (tests, local stack reloads)."""
    for getter in _GETTERS:
        getter.cache_clear()  # type: ignore[attr-defined]


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


class _WebhookQueueSettings(BaseModel):
    """Functions that finish jobs queue each finished job's webhook delivery (aijobs.webhooks)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="ignore")

    webhook_queue_url: str = Field(validation_alias="WEBHOOK_QUEUE_URL", min_length=1)


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
