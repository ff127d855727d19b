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
# A sentence ends at `.`, `!` or `?` followed by whitespace (so `3.14` or `e.g.x` are not cut),
# or right after an ideographic full stop or a full-width `!`/`?` (CJK text has no spaces).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|(?<=[\u3002\uff01\uff1f])\s*")


def chunk_text(text: str, size: int) -> list[str]:
    """Chunks of at most `size` characters, cut between paragraphs where possible, else between
    sentences, else at the last whitespace (a very long sentence), else anywhere."""
    pieces: list[tuple[str, str]] = []  # (text, separator before it when it joins a chunk)
    for paragraph in _PARAGRAPH_BREAK.split(text.replace("\r\n", "\n")):
        paragraph = paragraph.strip()
        if not paragraph:
            continue
        separator = "\n\n"
        for sentence, spacing in [(paragraph, "")] if len(paragraph) <= size else _sentences(paragraph):
            if pieces and separator != "\n\n":
                separator = spacing
            while len(sentence) > size:
                cut = _last_space(sentence, size)
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


def _sentences(paragraph: str) -> list[tuple[str, str]]:
    """(sentence, what separated it from the previous one: a space, or nothing after a CJK stop)."""
    found: list[tuple[str, str]] = []
    start, spacing = 0, ""
    for match in _SENTENCE_END.finditer(paragraph):
        if match.end() == start or match.end() >= len(paragraph):
            continue
        found.append((paragraph[start : match.start()].strip(), spacing))
        start, spacing = match.end(), " " if match.group() else ""
    found.append((paragraph[start:].strip(), spacing))
    return [(sentence, spacing) for sentence, spacing in found if sentence]


def _last_space(sentence: str, size: int) -> int:
    """Where to cut a sentence longer than `size`: after its last whitespace within the limit."""
    for index in range(size, 0, -1):
        if sentence[index].isspace():
            return index
    return size


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
    summary, calls = reduce_summaries(merging, [str(part["summary"]) for part in parts])
    usage: dict[str, int] = {}
    for call in calls:
        for unit, amount in call.usage.items():
            usage[unit] = usage.get(unit, 0) + amount
    costs = [call.cost for call in calls]
    return ProviderResult(
        status="succeeded",
        output={"summary": summary, **output},
        model=calls[-1].model,
        usage=usage,
        cost=sum(cost for cost in costs if cost is not None) if any(c is not None for c in costs) else None,
    )


def reduce_summaries(merging: MergeInput, summaries: list[str]) -> tuple[str, list[ProviderResult]]:
    """The final summary over the chunk summaries. Joined, they may be too long for one call (a
    200-page report makes ~100 of them): then they are summarized in groups no longer than a chunk
    (what the model already took), level by level, until one call over what is left fits."""
    size = int(merging.workflow.option_values(merging.parent.options)[CHUNK_CHARS.name])
    calls: list[ProviderResult] = []
    texts, level = summaries, 0
    while len("\n\n".join(texts)) > size:
        groups = _groups(texts, size)
        if len(groups) >= len(texts):
            break  # every summary is a chunk on its own: no grouping can shrink the input further
        step = [
            merging.run_child_kind("\n\n".join(g), step=f"merge-{level}-{i}") for i, g in enumerate(groups)
        ]
        calls += step
        texts, level = [_summary_of(result) for result in step], level + 1
    final = merging.run_child_kind("\n\n".join(texts))
    return _summary_of(final), [*calls, final]


def _groups(texts: list[str], size: int) -> list[list[str]]:
    groups: list[list[str]] = [[]]
    length = 0
    for text in texts:
        if groups[-1] and length + 2 + len(text) > size:
            groups.append([])
            length = 0
        groups[-1].append(text)
        length += len(text) + 2
    return groups


def _summary_of(result: ProviderResult) -> str:
    output = result.output
    return str(output.get("summary") if isinstance(output, dict) else output)


WORKFLOW = Workflow(
    kind="report",
    child_kind="summary",
    split=split,
    merge=merge,
    estimate=estimate,
    options=(CHUNK_CHARS,),
    description="summarize a long document chunk by chunk, then the summaries",
    # Pays for the final summary over the chunk summaries.
    price=1,
)
