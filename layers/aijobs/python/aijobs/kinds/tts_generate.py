"""`tts-generate`: a text -> speech audio (Amazon Polly on AWS stages).

Short texts are spoken within the attempt; long ones (Polly: up to 100,000 characters) become a
synthesis task the consumer re-checks without spending attempts.
"""

from __future__ import annotations

from aijobs.kinds.base import Inputs, Kind, Tuning

KIND = Kind(
    name="tts-generate",
    capability="speech",
    description="speech audio of a text (voice, engine, format and text type as options)",
    # Polly has voices and engines, not models: the voice is an option.
    models={"polly": None, "local": "local-tts-1"},
    inputs=Inputs(max_chars=100_000),
    price=3,
    # Polly's audio of a short text comes back in the response and is held whole until stored:
    # more memory than the stage's text consumers (docs/operations/cost.md, "Memory per function").
    tuning=Tuning(memory_mb=512),
)
