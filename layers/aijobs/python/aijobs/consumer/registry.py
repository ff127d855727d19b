"""QUEUE_HANDLERS: the queue name (job kind) -> its handler. Nothing to register by hand.

Every declared kind (a module of aijobs/kinds/, see aijobs/kinds/base.py) is run by the same
handler (`kind_step`: read the input, run the kind). Workflow kinds (a job split into child jobs,
then merged) are listed in aijobs/workflows/registry.py (WORKFLOWS) and run their parent steps.
A consumer looks up only its own kind, which imports only that kind's module; listing all of
them (synth, tests) imports every kind.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING

from aijobs.consumer.handlers import KindHandler, kind_step
from aijobs.kinds.context import JobContext
from aijobs.workflows.registry import WORKFLOWS, workflow

if TYPE_CHECKING:
    from aijobs.providers.base import ProviderResult


def workflow_step(kind: str) -> KindHandler:
    """The handler of workflow `kind`'s parent steps (split, wait, merge: aijobs.workflows.runner).

    It imports the workflow code on its first job: one consumer function serves one kind, so the
    consumers of the other kinds never load it (tests/unit/test_import_graph.py).
    """

    def handle(ctx: JobContext) -> ProviderResult | None:
        from aijobs.workflows.runner import run_step

        definition = workflow(kind)
        assert definition is not None, kind
        return run_step(definition, ctx)

    handle.__name__ = f"workflow_{kind.replace('-', '_')}"
    return handle


class _Handlers(Mapping[str, KindHandler]):
    """Queue name -> handler, built on lookup."""

    def __init__(self) -> None:
        self._built: dict[str, KindHandler] = {}

    def __getitem__(self, name: str) -> KindHandler:
        handler = self._built.get(name)
        if handler is None:
            handler = self._built[name] = self._build(name)
        return handler

    @staticmethod
    def _build(name: str) -> KindHandler:
        if name in WORKFLOWS:
            return workflow_step(name)
        from aijobs.kinds.registry import kind

        declared = kind(name)
        if declared is None or declared.sync:
            raise KeyError(name)
        return kind_step(name)

    def __iter__(self) -> Iterator[str]:
        from aijobs.kinds.registry import queued

        return iter((*queued(), *WORKFLOWS))

    def __len__(self) -> int:
        return sum(1 for _ in self)


QUEUE_HANDLERS: Mapping[str, KindHandler] = _Handlers()
