"""`image-batch`: a list of prompts -> one `image-generate` child per prompt -> a manifest of the
images (their artifact keys, in prompt order; the prompts that produced none are listed)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from aijobs.errors import InvalidInputError
from aijobs.providers.base import ProviderResult
from aijobs.workflows.base import MergeInput, Part, Workflow

PROMPT_MAX_CHARS = 4000
# A prompt line in an uploaded file is rarely shorter: the estimate for an upload is its size
# over this (settled at the split).
_ESTIMATED_PROMPT_BYTES = 64


def prompts(value: Any) -> list[str]:
    """`{"prompts": [...]}` inline, or an upload: that JSON object, or one prompt per line."""
    if isinstance(value, str):
        text = value.strip()
        if text.startswith("{"):
            try:
                value = json.loads(value)  # the text as uploaded, so the line number is the file's
            except json.JSONDecodeError as error:
                raise InvalidInputError(
                    f"image-batch input is not valid JSON (line {error.lineno})"
                ) from None
        else:
            value = {"prompts": [line.strip() for line in text.splitlines() if line.strip()]}
    found = value.get("prompts") if isinstance(value, dict) else None
    if not isinstance(found, list) or not found:
        raise InvalidInputError("image-batch needs `prompts`: a non-empty list of strings")
    for index, prompt in enumerate(found):
        if not isinstance(prompt, str) or not prompt.strip() or len(prompt) > PROMPT_MAX_CHARS:
            raise InvalidInputError(
                f"prompts[{index}] must be a non-empty string of at most {PROMPT_MAX_CHARS} characters"
            )
    return found


def split(value: Any, options: Mapping[str, float]) -> list[Part]:
    return [Part(prompt) for prompt in prompts(value)]


def estimate(value: Any, size: int | None, options: Mapping[str, float]) -> int:
    if value is not None:
        return len(prompts(value))
    return max(1, math.ceil((size or 0) / _ESTIMATED_PROMPT_BYTES))


def merge(merging: MergeInput) -> ProviderResult:
    images = [
        {"index": outcome.index, "artifacts": outcome.artifacts, "output": outcome.output}
        for outcome in merging.outcomes()
        if outcome.document is not None
    ]
    manifest = {"images": images, "missingParts": merging.missing, "total": merging.parent.children_total}
    return ProviderResult(status="succeeded", output=manifest)


WORKFLOW = Workflow(
    kind="image-batch",
    child_kind="image-generate",
    split=split,
    merge=merge,
    estimate=estimate,
    description="one image per prompt, with a manifest",
)
