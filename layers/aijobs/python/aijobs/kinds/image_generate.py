"""`image-generate`: a prompt -> images (stored as the job's artifacts).

Bedrock's image models today are Stability AI's (README "Models": Nova Canvas reached end of
life on 2026-09-30); Stable Image Core is the default, Ultra and SD 3.5 Large may be chosen.
"""

from __future__ import annotations

from aijobs.kinds.base import Inputs, Kind

KIND = Kind(
    name="image-generate",
    capability="image",
    description="images from a text prompt",
    prompt="{input}",
    models={"bedrock": "stability.stable-image-core-v1:1", "openai": "gpt-image-1", "local": "local-image-1"},
    allowed_models={"bedrock": ("stability.stable-image-ultra-v1:1", "stability.sd3-5-large-v1:0")},
    inputs=Inputs(fields=("prompt", "text"), max_chars=4_000),
    price=5,
)
