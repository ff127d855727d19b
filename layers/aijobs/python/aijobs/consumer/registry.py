"""QUEUE_HANDLERS: the queue name (job kind) -> its handler. Register new kinds here.

Adding a queue: add the name to QUEUE_NAMES in .env.<stage> and a handler below; a test checks
that every configured queue has one. Workflow kinds (a job split into child jobs, then merged)
are registered in aijobs/workflows/registry.py (WORKFLOWS) and join this table at the end.
"""

from __future__ import annotations

from aijobs.consumer import handlers
from aijobs.consumer.handlers import KindHandler
from aijobs.workflows.registry import WORKFLOWS
from aijobs.workflows.runner import workflow_handler

QUEUE_HANDLERS: dict[str, KindHandler] = {
    "summary": handlers.summarize,
    "embedding": handlers.embed,
    "image-generate": handlers.generate_image,
    "image-caption": handlers.caption_image,
    "tts-generate": handlers.synthesize_speech,
    "video-generate": handlers.generate_video,
    # report, embedding-batch, image-batch: each runs its parent steps (split, wait, merge).
    **{kind: workflow_handler(workflow) for kind, workflow in WORKFLOWS.items()},
}
