"""`image-generate`: a prompt -> images (stored as the job's artifacts).

Bedrock's image models today are Stability AI's (docs/how-to/real-models.md: Nova Canvas reached end of
life on 2026-09-30); Stable Image Core is the default, Ultra and SD 3.5 Large may be chosen.
"""

from __future__ import annotations

from aijobs.kinds.base import Inputs, Kind, Tuning

KIND = Kind(
    name="image-generate",
    capability="image",
    description="images from a text prompt",
    prompt="{input}",
    models={"bedrock": "stability.stable-image-core-v1:1", "openai": "gpt-image-1", "local": "local-image-1"},
    allowed_models={"bedrock": ("stability.stable-image-ultra-v1:1", "stability.sd3-5-large-v1:0")},
    inputs=Inputs(fields=("prompt", "text"), max_chars=4_000),
    price=5,
    # Up to four images of several seconds each: one job per consumer invocation, so no job waits
    # behind another's images and a batch never runs into the consumer's timeout.
    # The images come back base64-encoded in the response and are held (encoded and decoded) until
    # stored: more memory than the stage's text consumers (docs/operations/cost.md, "Memory per function").
    tuning=Tuning(batch_size=1, memory_mb=512),
)
