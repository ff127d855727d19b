"""`classify`: one short text -> a label, a confidence and up to three tags, synchronously.

The synchronous short-task path (`POST /classify`, docs/design.md §1): it runs in the API, not on a
queue, and each call is billed like a job (aijobs.api.service `JobService.classify`). An example of
structured output: the answer must validate against `Classification`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from aijobs.kinds.base import Inputs, Kind, TextOptions


class Options(TextOptions):
    maxTokens: int = Field(default=200, ge=1, le=1000)
    temperature: float | None = Field(default=0.0, ge=0, le=1)


class Classification(BaseModel):
    label: Literal["positive", "negative", "neutral", "question"]
    score: float = Field(ge=0.0, le=1.0, description="confidence from 0 to 1")
    tags: list[str] = Field(default_factory=list, max_length=3, description="lower-case keywords")

    @field_validator("tags", mode="before")
    @classmethod
    def _clean_tags(cls, value: Any) -> Any:
        if not isinstance(value, list):
            return value
        tags = [tag.strip().lower()[:40] for tag in value if isinstance(tag, str) and tag.strip()]
        return tags[:3]


KIND = Kind(
    name="classify",
    capability="text",
    description="a label (positive, negative, neutral, question), a confidence and tags for a short text",
    system=(
        "You classify short texts as positive, negative, neutral or question, with your confidence "
        "from 0 to 1 and up to 3 lower-case keywords from the text."
    ),
    models={"bedrock": "us.amazon.nova-micro-v1:0", "openai": "gpt-4o-mini", "local": "local-text-1"},
    options=Options,
    output=Classification,
    inputs=Inputs(max_chars=10_000),
    # Credits per call: reserved before the model is called, settled once (docs/concepts/credits.md).
    price=1,
    sync=True,
)
