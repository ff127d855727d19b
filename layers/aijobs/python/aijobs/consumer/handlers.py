"""The handler of a declared kind's job: read its input, run the kind (aijobs.kinds.run).

A handler returns the step's result or raises a typed error (aijobs.errors); the dispatcher
does the claiming, result writing, retries and acknowledgement. A kind's own code (prompt,
options, output) lives in its module under aijobs/kinds/; nothing here names a kind. What a
handler gets and how it reads the job's input: aijobs.kinds.context.
"""

from __future__ import annotations

from collections.abc import Callable

from aijobs.kinds.context import JobContext, kind_input
from aijobs.providers.base import ProviderResult

# A handler returns the step's result, or None when it parked the job itself (a workflow parent
# now waiting for its children).
KindHandler = Callable[[JobContext], ProviderResult | None]


def kind_step(name: str) -> KindHandler:
    """The handler of declared kind `name`: its declaration is imported on the first job, so a
    consumer loads only its own kind's module."""

    def handle(ctx: JobContext) -> ProviderResult:
        from aijobs.kinds.registry import require
        from aijobs.kinds.run import run_chain

        kind = require(name)
        return run_chain(kind, ctx.candidates(), ctx.step(kind_input(kind, ctx)))

    handle.__name__ = f"kind_{name.replace('-', '_')}"
    return handle
