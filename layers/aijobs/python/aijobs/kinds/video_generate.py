"""`video-generate`: a prompt -> a video, asynchronously (start, then re-checks).

Bedrock's video model today is Luma Ray 2 (docs/how-to/real-models.md: Nova Reel reached end of life on
2026-09-30). The provider writes the video into the stage bucket; the job's result points at it.
"""

from __future__ import annotations

from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="video-generate",
    capability="video",
    description="a short video from a text prompt (asynchronous)",
    prompt="{input}",
    models={"bedrock": "luma.ray-v2:0", "local": "local-video-1"},
    inputs=Inputs(fields=("prompt", "text"), max_chars=5_000),
    price=20,
)
