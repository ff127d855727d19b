"""QUEUE_HANDLERS: the queue name (job kind) -> its handler. Register new kinds here.

Adding a queue: add the name to QUEUE_NAMES in .env.<stage> and a handler below; a test checks
that every configured queue has one.
"""

from __future__ import annotations

from aijobs.consumer import handlers
from aijobs.consumer.handlers import KindHandler

QUEUE_HANDLERS: dict[str, KindHandler] = {
    "summary": handlers.summarize,
    "embedding": handlers.embed,
    "image-generate": handlers.generate_image,
    "image-caption": handlers.caption_image,
    "tts-generate": handlers.synthesize_speech,
    "video-generate": handlers.generate_video,
}
