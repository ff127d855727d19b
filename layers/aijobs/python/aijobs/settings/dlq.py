"""The dead-letter consumer's settings."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import Field, field_validator, model_validator

from aijobs.bindings import DEAD_LETTER_QUEUES, KIND_LIMITS, KindLimits, parse_limits
from aijobs.provider_plan import kind_pairs
from aijobs.settings import _WebhookQueueSettings, register_getter
from aijobs.settings.parts import _QueueSettings


class DlqSettings(_QueueSettings, _WebhookQueueSettings):
    """The dead-letter consumer. It sends to every kind's queue (QUEUE_NAMES, one `Q_*` each): a
    job SQS redrove with attempts left goes back to its own, and a workflow whose last child died
    gets its merge step."""

    alert_topic_arn: str = Field(validation_alias="ALERT_TOPIC_ARN", min_length=1)
    # DLQ name -> job kind, from DEAD_LETTER_QUEUES (kind=name;...): names are not parsed.
    dead_letter_kinds: dict[str, str] = Field(validation_alias=DEAD_LETTER_QUEUES)
    # Per kind, its attempt budget (a kind's declaration may change it): only a spent one
    # finalizes a job. The cron's format; the DLQ consumer reads `attempts` only.
    kind_limits: dict[str, KindLimits] = Field(validation_alias=KIND_LIMITS)

    @field_validator("dead_letter_kinds", mode="before")
    @classmethod
    def _parse_dead_letter_queues(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        return {name: kind for kind, name in kind_pairs(DEAD_LETTER_QUEUES, value).items()}

    @field_validator("kind_limits", mode="before")
    @classmethod
    def _parse_limits(cls, value: Any) -> Any:
        return parse_limits(value) if isinstance(value, str) else value

    @model_validator(mode="after")
    def _every_kind_has_its_budget_and_queue(self) -> DlqSettings:
        kinds = set(self.dead_letter_kinds.values())
        without_budget = sorted(kinds - set(self.kind_limits))
        if without_budget:
            raise ValueError(f"{KIND_LIMITS} has no attempt budget for {without_budget}")
        without_queue = sorted(kinds - set(self.queue_urls))
        if without_queue:
            raise ValueError(f"QUEUE_NAMES does not name the queues of {without_queue}")
        return self


@register_getter
@cache
def dlq_settings() -> DlqSettings:
    return DlqSettings.from_env()
