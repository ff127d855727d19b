"""`image-caption`: an uploaded image -> one sentence describing it.

A text kind whose input is an image (`inputRef` of an upload): the image goes to the model as an
attachment of the user turn.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from aijobs.kinds.base import Inputs, Kind, TextOptions
from aijobs.providers.base import TextResult


class Options(TextOptions):
    maxTokens: int = Field(default=200, ge=1, le=1000)


def shape(result: TextResult, options: Options) -> dict[str, Any]:
    return {"caption": result.text}


KIND = Kind(
    name="image-caption",
    capability="text",
    description="one sentence describing an uploaded image",
    system="You caption images. Answer with one plain sentence describing the image.",
    prompt="Describe this image in one sentence.",
    models={"bedrock": "us.amazon.nova-lite-v1:0", "openai": "gpt-4o-mini", "local": "local-text-1"},
    options=Options,
    inputs=Inputs(type="image"),
    price=2,
    shape=shape,
)
