"""The dead-letter consumer's settings."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import Field, field_validator, model_validator

from aijobs.bindings import DEAD_LETTER_QUEUES
from aijobs.provider_plan import kind_pairs
from aijobs.settings import FunctionSettings, _WebhookQueueSettings, _with_linked_queues, register_getter


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


@register_getter
@cache
def dlq_settings() -> DlqSettings:
    return DlqSettings.from_env()
