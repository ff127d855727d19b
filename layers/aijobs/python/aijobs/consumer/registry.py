"""QUEUE_HANDLERS: the queue name (job kind) -> its handler. Register new kinds here.

Adding a queue: add the name to QUEUE_NAMES in .env.<stage> and a handler below; a test checks
that every configured queue has one. Workflow kinds (a job split into child jobs, then merged)
are registered in aijobs/workflows/registry.py (WORKFLOWS) and join this table at the end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aijobs.consumer import handlers
from aijobs.consumer.handlers import JobContext, KindHandler
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


QUEUE_HANDLERS: dict[str, KindHandler] = {
    "summary": handlers.summarize,
    "embedding": handlers.embed,
    "image-generate": handlers.generate_image,
    "image-caption": handlers.caption_image,
    "tts-generate": handlers.synthesize_speech,
    "video-generate": handlers.generate_video,
    # report, embedding-batch, image-batch: each runs its parent steps (split, wait, merge).
    **{kind: workflow_step(kind) for kind in WORKFLOWS},
}
