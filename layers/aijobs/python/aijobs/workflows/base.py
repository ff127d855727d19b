"""What a workflow is: its split, the kind its parts run as, its merge, its options and policy."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from aijobs.domain import Job, JobStatus
from aijobs.errors import CANCELLED, ProviderError
from aijobs.providers.base import Provider, ProviderResult
from aijobs.store.results import ResultStore

# Failure policy: the share of children that may fail before the parent fails (0: any failure
# fails it). Up to that share, the merge runs on what succeeded and names the missing parts.
MAX_FAILED_SHARE = "maxFailedShare"
# Child results read at once by a merge (S3 GETs in flight).
MERGE_READ_WINDOW = 16


class ChildrenFailedError(ProviderError):
    """More children failed than the workflow's policy allows: the parent fails for good."""

    error_class = "children_failed"


class WorkflowCancelledError(ProviderError):
    """Its owner cancelled the workflow: once every child it started has finished (those that
    succeeded are charged), the parent ends `cancelled` without merging."""

    error_class = CANCELLED


class InsufficientCreditsError(ProviderError):
    """The split made more parts than the credits reserved at submit, and the balance cannot pay
    for the rest: the parent fails (its reservation is refunded)."""

    error_class = "insufficient_credits"


@dataclass(frozen=True)
class Option:
    """A workflow option (`options.<name>` at submit), checked by the API before anything is written."""

    name: str
    default: float
    low: float
    high: float
    doc: str
    integer: bool = True

    def read(self, options: Mapping[str, Any]) -> float:
        value = options.get(self.name, self.default)
        number_ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        if not number_ok or (self.integer and value != int(value)) or not self.low <= value <= self.high:
            kind = "a whole number" if self.integer else "a number"
            raise ValueError(
                f"options.{self.name} must be {kind} from {self.low:g} to {self.high:g} ({self.doc})"
            )
        return int(value) if self.integer else float(value)


@dataclass(frozen=True)
class Part:
    """One child's input: text or a JSON object (a split keeps the order of parts)."""

    input: str | dict[str, Any]


@dataclass(frozen=True)
class ChildOutcome:
    index: int
    job: Job
    # The child's result document (`{"output": ..., "artifacts": [...]}`) when it succeeded.
    document: dict[str, Any] | None

    @property
    def output(self) -> Any:
        return None if self.document is None else self.document.get("output")

    @property
    def artifacts(self) -> list[str]:
        return [] if self.document is None else list(self.document.get("artifacts", []))


@dataclass(frozen=True)
class MergeInput:
    """What a merge step gets: the parent, its children in index order, and the adapters."""

    workflow: Workflow
    parent: Job
    children: list[Job]
    provider: Provider
    results: ResultStore
    # The parent's input read again (a split is deterministic; merges that need ids re-split).
    read_input: Callable[[], Any]
    # The child kind's default model on this stage (the parent's own `model` wins).
    model: str | None = None

    @property
    def missing(self) -> list[int]:
        """Indexes of parts that did not succeed (failed, or cancelled before they ran)."""
        present = {child.part for child in self.children if child.status is JobStatus.SUCCEEDED}
        return [index for index in range(self.parent.children_total or 0) if index not in present]

    def outcomes(self) -> Iterator[ChildOutcome]:
        """Every child in index order with its result document, read a window at a time."""
        with ThreadPoolExecutor(max_workers=MERGE_READ_WINDOW) as pool:
            for start in range(0, len(self.children), MERGE_READ_WINDOW):
                window = self.children[start : start + MERGE_READ_WINDOW]
                for child, document in zip(window, pool.map(self._document, window), strict=True):
                    yield ChildOutcome(index=child.part or 0, job=child, document=document)

    def _document(self, child: Job) -> dict[str, Any] | None:
        if child.status is not JobStatus.SUCCEEDED:
            return None
        if isinstance(child.result, dict):
            return child.result
        if child.result_ref:
            document = self.results.read_json(child.result_ref)
            return document if isinstance(document, dict) else None
        return None

    def run_child_kind(self, text: str, *, step: str = "merge") -> ProviderResult:
        """A call of the merge step as the child kind (a report's final summary is a summary)."""
        from aijobs.kinds.registry import require
        from aijobs.kinds.run import Step, check_input, run

        kind = require(self.workflow.child_kind)
        model = self.parent.model or self.model or ""
        return run(
            kind,
            self.provider,
            Step(
                job_id=self.parent.job_id,
                input=check_input(kind, text),
                options=self.workflow.child_options(self.parent.options),
                model=model,
                step=step,
                attempt=max(1, self.parent.attempts),
                reruns=self.parent.reruns,
            ),
        )


SplitFn = Callable[[Any, Mapping[str, float]], list[Part]]
MergeFn = Callable[[MergeInput], ProviderResult]
# Parts expected at submit, from the inline input (or None) and the uploaded input's size (or None).
EstimateFn = Callable[[Any, int | None, Mapping[str, float]], int]


@dataclass(frozen=True)
class Workflow:
    kind: str
    child_kind: str
    split: SplitFn
    merge: MergeFn
    estimate: EstimateFn
    options: tuple[Option, ...] = ()
    max_failed_share: float = 0.0
    description: str = ""
    # Credits of the parent itself; each child costs its own kind's price on top (docs/concepts/credits.md).
    price: int = 0

    @property
    def all_options(self) -> tuple[Option, ...]:
        policy = Option(
            MAX_FAILED_SHARE, self.max_failed_share, 0.0, 1.0,
            "the share of parts that may fail before the whole job fails", integer=False,
        )  # fmt: skip
        return (*self.options, policy)

    def option_values(self, options: Mapping[str, Any]) -> dict[str, float]:
        """The workflow's own options, defaults applied; ValueError names the bad one."""
        return {option.name: option.read(options) for option in self.all_options}

    def child_options(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """What the children get: every option except the workflow's own."""
        own = {option.name for option in self.all_options}
        return {name: value for name, value in options.items() if name not in own}

    def failures_allowed(self, options: Mapping[str, Any], total: int) -> int:
        return math.floor(self.option_values(options)[MAX_FAILED_SHARE] * total + 1e-9)
