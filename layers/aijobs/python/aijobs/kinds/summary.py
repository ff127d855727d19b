"""`summary`: a long text -> a faithful, concise summary in the text's own language.

The smallest useful kind: a text capability, a system prompt, models per provider, a fallback.
Its output keeps the shape the API has always answered with (`summary`, `truncated`).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from aijobs.kinds.base import Inputs, Kind, TextOptions
from aijobs.providers.base import TextResult


class Options(TextOptions):
    sentences: int = Field(default=3, ge=1, le=100, description="the longest summary, in sentences")


def shape(result: TextResult, options: Options) -> dict[str, Any]:
    return {"summary": result.text, "truncated": result.truncated}


KIND = Kind(
    name="summary",
    capability="text",
    description="a faithful, concise summary of a long text, in the text's own language",
    system=(
        "You summarise documents. Answer with a faithful, concise summary of the user's text in the "
        "text's own language, in at most {options.sentences} sentences. Do not add facts, opinions "
        "or a preamble."
    ),
    prompt="{input}",
    models={"bedrock": "us.amazon.nova-lite-v1:0", "openai": "gpt-4o-mini", "local": "local-text-1"},
    options=Options,
    allowed_models={"bedrock": ("us.amazon.nova-pro-v1:0",)},
    # Nova Pro answers when Nova Lite is throttled past the kind's patience or unavailable.
    fallbacks={"bedrock": ("bedrock:us.amazon.nova-pro-v1:0",), "local": ("local:local-text-2",)},
    inputs=Inputs(max_chars=200_000),
    price=1,
    shape=shape,
)
