"""`report`: a long document -> chunks on paragraph and sentence boundaries -> one `summary` child per
chunk -> a final summary over the chunk summaries, with every chunk's summary in the result."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from aijobs.errors import InvalidInputError
from aijobs.providers.base import ProviderResult
from aijobs.workflows.base import ChildrenFailedError, MergeInput, Option, Part, Workflow

CHUNK_CHARS = Option("chunkChars", 6000, 500, 50_000, "characters per chunk")
_PARAGRAPH_BREAK = re.compile(r"\n[ \t]*\n")
# Sentence ends: ASCII, and the ideographic full stop and full-width marks of CJK text.
_SENTENCE_END = re.compile(r"(?<=[.!?\u3002\uff01\uff1f])\s*")


def chunk_text(text: str, size: int) -> list[str]:
    """Chunks of at most `size` characters, cut between paragraphs where possible, else between
    sentences, else at the last space (a very long sentence), else anywhere."""
    pieces: list[tuple[str, str]] = []  # (text, separator before it when it joins a chunk)
    for paragraph in _PARAGRAPH_BREAK.split(text):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        separator = "\n\n"
        for sentence in [paragraph] if len(paragraph) <= size else _SENTENCE_END.split(paragraph):
            sentence = sentence.strip()
            while len(sentence) > size:
                cut = sentence.rfind(" ", 0, size + 1)
                cut = cut if cut > 0 else size
                pieces.append((sentence[:cut].rstrip(), separator))
                sentence, separator = sentence[cut:].lstrip(), " "
            if sentence:
                pieces.append((sentence, separator))
                separator = " "
    chunks: list[str] = []
    current = ""
    for piece, separator in pieces:
        if current and len(current) + len(separator) + len(piece) > size:
            chunks.append(current)
            current = ""
        current = f"{current}{separator}{piece}" if current else piece
    if current:
        chunks.append(current)
    return chunks


def _document_text(value: Any) -> str:
    if isinstance(value, dict):
        value = value.get("text")
    if not isinstance(value, str) or not value.strip():
        raise InvalidInputError("report needs a non-empty text input (a string, `text`, or an uploaded file)")
    return value


def split(value: Any, options: Mapping[str, float]) -> list[Part]:
    return [Part(chunk) for chunk in chunk_text(_document_text(value), int(options[CHUNK_CHARS.name]))]


def estimate(value: Any, size: int | None, options: Mapping[str, float]) -> int:
    """Inline text: the exact chunk count. An upload: its size over the chunk size (bytes are at
    least characters, so the estimate is settled at the split, up or down)."""
    if value is not None:
        return len(split(value, options))
    return max(1, math.ceil((size or 0) / options[CHUNK_CHARS.name]))


def merge(merging: MergeInput) -> ProviderResult:
    parts = [
        {"index": outcome.index, "summary": outcome.output.get("summary")}
        for outcome in merging.outcomes()
        if isinstance(outcome.output, dict)
    ]
    if not parts:
        raise ChildrenFailedError("no chunk of the report was summarized")
    missing = merging.missing
    output: dict[str, Any] = {"parts": parts, "missingParts": missing, "total": merging.parent.children_total}
    if len(parts) == 1 and not missing:
        return ProviderResult(status="succeeded", output={"summary": parts[0]["summary"], **output})
    # The final summary is one more call of the child kind over the chunk summaries, in order.
    final = merging.provider.run(merging.request("\n\n".join(str(part["summary"]) for part in parts)))
    summary = final.output.get("summary") if isinstance(final.output, dict) else final.output
    return ProviderResult(
        status="succeeded",
        output={"summary": summary, **output},
        model=final.model,
        usage=final.usage,
        cost=final.cost,
    )


WORKFLOW = Workflow(
    kind="report",
    child_kind="summary",
    split=split,
    merge=merge,
    estimate=estimate,
    options=(CHUNK_CHARS,),
    description="summarize a long document chunk by chunk, then the summaries",
)
