"""`embedding-batch`: many documents -> pages of `pageSize` texts -> one `embedding` child per page
-> one JSONL object in S3 (`{"id": ..., "embedding": [...]}` per document, in input order)."""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from typing import Any

from aijobs.errors import InvalidInputError
from aijobs.providers.base import ProviderResult
from aijobs.store.results import result_prefix
from aijobs.workflows.base import ChildrenFailedError, MergeInput, Option, Part, Workflow

PAGE_SIZE = Option("pageSize", 50, 1, 100, "texts per embedding child")
RESULT_NAME = "embeddings.jsonl"
# The estimate for an upload: its size over this many bytes per document (settled at the split).
_ESTIMATED_DOCUMENT_BYTES = 200


def documents(value: Any) -> list[tuple[str, str]]:
    """(id, text) pairs in order. Inline: `{"texts": [...]}` or `{"documents": [{"id", "text"}]}`.
    An upload: JSON Lines (a string, or an object with `text` and optional `id`), or plain text
    with one document per line. Without an id, a document's id is its position (from 0)."""
    if isinstance(value, str):
        entries: list[Any] = []
        for number, line in enumerate(value.splitlines(), start=1):
            line = line.strip()
            if not line:
                continue
            if line[0] in '{"':
                try:
                    entries.append(json.loads(line))
                    continue
                except json.JSONDecodeError:
                    if line[0] == "{":
                        raise InvalidInputError(f"line {number} is not valid JSON") from None
            entries.append(line)  # plain text (also a quotation that is not a JSON string)
    elif isinstance(value, dict) and isinstance(value.get("texts"), list):
        entries = list(value["texts"])
    elif isinstance(value, dict) and isinstance(value.get("documents"), list):
        entries = list(value["documents"])
    else:
        raise InvalidInputError("embedding-batch needs `texts`, `documents`, or an uploaded JSONL/text file")
    pairs: list[tuple[str, str]] = []
    for position, entry in enumerate(entries):
        text, ident = (entry, str(position)) if isinstance(entry, str) else (None, None)
        if isinstance(entry, dict):
            given = entry.get("id")
            text, ident = entry.get("text"), str(position) if given is None else str(given)
        if not isinstance(text, str) or not text.strip():
            raise InvalidInputError(f"document {position} has no text")
        pairs.append((ident or str(position), text))
    if not pairs:
        raise InvalidInputError("embedding-batch input has no documents")
    return pairs


def _pages(pairs: list[tuple[str, str]], size: int) -> list[list[tuple[str, str]]]:
    return [pairs[start : start + size] for start in range(0, len(pairs), size)]


def split(value: Any, options: Mapping[str, float]) -> list[Part]:
    pages = _pages(documents(value), int(options[PAGE_SIZE.name]))
    return [Part({"texts": [text for _, text in page]}) for page in pages]


def estimate(value: Any, size: int | None, options: Mapping[str, float]) -> int:
    if value is not None:
        return len(split(value, options))
    return max(1, math.ceil((size or 0) / (_ESTIMATED_DOCUMENT_BYTES * options[PAGE_SIZE.name])))


def merge(merging: MergeInput) -> ProviderResult:
    """Stream the vectors, page by page in input order, into one JSONL object (never all in memory)."""
    pages = _pages(
        documents(merging.read_input()),
        int(merging.workflow.option_values(merging.parent.options)[PAGE_SIZE.name]),
    )
    counts = {"written": 0, "dimensions": 0}
    missing_ids: list[str] = []

    def lines() -> Iterator[bytes]:
        for outcome in merging.outcomes():
            page = pages[outcome.index]
            vectors = outcome.output.get("vectors") if isinstance(outcome.output, dict) else None
            if not isinstance(vectors, list) or len(vectors) != len(page):
                missing_ids.extend(ident for ident, _ in page)
                continue
            counts["dimensions"] = len(vectors[0]) if vectors else 0
            yield "".join(
                json.dumps({"id": ident, "embedding": vector}, separators=(",", ":")) + "\n"
                for (ident, _), vector in zip(page, vectors, strict=True)
            ).encode()
            counts["written"] += len(page)

    key = result_prefix(merging.parent.job_id, "main") + RESULT_NAME
    size = merging.results.write_stream(key, lines(), "application/x-ndjson")
    if not counts["written"]:
        raise ChildrenFailedError("no page of the batch was embedded")
    output = {
        "count": counts["written"],
        "dimensions": counts["dimensions"],
        "object": key,
        "bytes": size,
        "missingParts": merging.missing,
        "missingIds": missing_ids[:1000],
        "missingCount": len(missing_ids),
        "total": merging.parent.children_total,
    }
    return ProviderResult(status="succeeded", output=output, stored_artifacts=(key,))


WORKFLOW = Workflow(
    kind="embedding-batch",
    child_kind="embedding",
    split=split,
    merge=merge,
    estimate=estimate,
    options=(PAGE_SIZE,),
    description="embed many documents in pages, into one JSONL object",
)
