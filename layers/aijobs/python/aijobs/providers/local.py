"""The `local` provider: honest, deterministic, dependency-free work done in-process.

It lets the whole job pipeline run (and be tested) without any external AI service. Every
capability does real, if modest, work with the standard library only: text as an extractive
answer (or schema-valid JSON), a hashed bag-of-words embedding, a generated PNG, an image
description from its decoded pixels, a WAV of tones, and an asynchronous "video" of PNG frames.

Like a payment sandbox's test card numbers, leading `#` directives in the input text make the
provider misbehave on purpose (see `LocalProvider`). The provider never logs input text.

This module is the adapter (its models, `check_request` and `LocalProvider`); the work itself
lives beside it: the directives' parsing in `local_directives`, the text work in `local_text`,
the images and sound in `local_media`.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable

from aijobs.domain import Artifact
from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    ProviderAuthError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.provider_plan import LOCAL_MODELS, PROVIDER_CAPABILITIES
from aijobs.providers.base import (
    Call,
    CapabilityRequest,
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    ProviderResult,
    SpeechRequest,
    TextRequest,
    TextResult,
    VideoRequest,
)
from aijobs.providers.local_directives import Directives, Fail, SimulatedCrash, directives_of, end_of_life
from aijobs.providers.local_media import (
    MAX_AUDIO_SECONDS,
    SAMPLE_RATE,
    describe_image,
    local_size,
    render_image,
    speech_samples,
    synthesize_wav,
)
from aijobs.providers.local_text import (
    extract_answer,
    fill_schema,
    hashed_embedding,
    sentence_limit_of,
    word_tokens,
)

CAPABILITIES = PROVIDER_CAPABILITIES["local"]
# The local models: the plan's one per capability, plus a second text model to fall back to (a
# kind's fallback can be watched on a laptop: `#fail:503@local-text-1` fails only the first).
MODELS = {capability: (model,) for capability, model in LOCAL_MODELS.items()} | {
    "text": (LOCAL_MODELS["text"], "local-text-2")
}

_MAX_TEXT_CHARS = 1_000_000
# The sizes the local embedding model makes (checked by `check_request`, at submit and in `embed`).
EMBED_DIMENSIONS = (8, 1024)
_EMBED_DEFAULT_DIMENSIONS = 64
_MAX_EMBED_BATCH = 2048


def _require_text(text: str | None, limit: int) -> str:
    """Non-empty text within `limit` characters."""
    if text is None or not text.strip():
        raise InvalidInputError("input text is empty or missing")
    if len(text) > limit:
        raise InputTooLargeError(f"input has {len(text)} characters; the limit is {limit}")
    return text.strip()


# --- the provider -------------------------------------------------------------------------------


def task_handle(call: Call) -> str:
    """The deterministic task id of a job step: "local-" + 16 hex digits of sha256(job_id + step)."""
    return "local-" + hashlib.sha256((call.job_id + call.step).encode("utf-8")).hexdigest()[:16]


def check_request(request: CapabilityRequest) -> None:
    """Refuse, without work, an option the local models do not take: an embedding `dimensions`
    outside `EMBED_DIMENSIONS` (`InvalidOptionError` naming the option, the range and the model).
    The adapter runs it before the work; the API runs it at submit."""
    if isinstance(request, EmbeddingRequest):
        _dimensions(request)


def _dimensions(request: EmbeddingRequest) -> int:
    dimensions = request.dimensions if request.dimensions is not None else _EMBED_DEFAULT_DIMENSIONS
    low, high = EMBED_DIMENSIONS
    if not low <= dimensions <= high:
        raise InvalidOptionError(
            "dimensions", f"{low} to {high}", request.call.model or "the local embedding model"
        )
    return dimensions


class LocalProvider:
    """The in-process provider: every capability, deterministic (the same request gives the same
    answer), no network. Its models are `MODELS`; any other model id is refused as unavailable.

    - text: the most representative sentences of the user turn (as many as an "at most N
      sentences" in the system text says, else about a third of them, within `max_tokens` words;
      the one instruction it follows); with an image, its size and main colour; with an output schema, a
      schema-valid JSON object made from the text (`fill_schema`);
    - embedding: a hashed bag-of-words vector per text (64 dimensions unless asked);
    - image: a PNG pattern in the prompt's colours (64 px on the short side, per aspect ratio);
    - speech: a WAV of one tone per word;
    - video: asynchronous; `running` until checked `video_checks` times, then four PNG frames.

    Magic directives, `#` words opening a line of the input text, are stripped before the work
    and may be combined:

    - `#fail:503xN`, `#fail:502xN`, `#fail:timeoutxN`: `TransientProviderError` while
      `attempt <= N`; `#fail:429xN`: `ThrottledError(retry_after=throttle_retry_after)`.
    - `#fail:400` / `401` / `403` / `413`: `InvalidInputError` / `ProviderAuthError` /
      `InputTooLargeError` on every attempt (an `xN` suffix limits any failure to attempts <= N;
      without it a transient failure also happens on every attempt).
    - `#fail:eol`: the model reached its end of life: the `ModelUnavailableError` Bedrock's
      `ResourceNotFoundException` maps to (aijobs.providers.failures), naming the call's model, on
      every attempt: the job fails for good, the consumer is not paused and
      the operator is alerted once per model.
    - `#running:N`: speech and video (the asynchronous capabilities) answer `running` while
      `checks < N` (for video it replaces `video_checks`).
    - `#sleep:S`: sleep S seconds (at most 30) before working.
    - `#crash` / `#crash:N`: raise `SimulatedCrash` (a `BaseException`) on attempt 1 / while
      `attempt <= N`, after any sleep: the attempt dies like a Lambda killed by its timeout.
    - `#fail:CODE@MODEL` (e.g. `#fail:503@local-text-1`): the failure hits only calls on MODEL, so
      a kind's fallback model answers.
    - `#cost:USD`: the answer reports this cost (e.g. `#cost:0.05`) instead of 0, so the spend
      brake can be tried locally.
    """

    name: str = "local"
    capabilities: frozenset[str] = CAPABILITIES

    def __init__(
        self,
        *,
        throttle_retry_after: float = 1.0,
        video_checks: int = 1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if throttle_retry_after < 0 or video_checks < 0:
            raise ValueError("throttle_retry_after and video_checks must not be negative")
        self._throttle_retry_after = throttle_retry_after
        self._video_checks = video_checks
        self._sleep = sleep

    # --- capabilities -------------------------------------------------------------------------

    def generate_text(self, request: TextRequest) -> TextResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "text")
        cut = False
        if request.images:
            answer = describe_image(request.images[0])
        else:
            answer, cut = extract_answer(
                _require_text(prompt, _MAX_TEXT_CHARS), request.max_tokens, sentence_limit_of(request.system)
            )
        data = None
        if request.output_schema is not None:
            data = fill_schema(request.output_schema, prompt if not request.images else answer)
            answer = json.dumps(data, ensure_ascii=False)
        words = len(word_tokens(answer))
        return TextResult(
            text=answer,
            data=data,
            truncated=cut,
            model=request.call.model,
            usage={"input_tokens": len(word_tokens(prompt)), "output_tokens": words},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        directives, first = directives_of(request.texts[0])
        self._simulate(request.call, directives, "embedding")
        if len(request.texts) > _MAX_EMBED_BATCH:
            raise InputTooLargeError(f"at most {_MAX_EMBED_BATCH} texts per request")
        dimensions = _dimensions(request)
        texts = (first, *request.texts[1:])
        if not any(word_tokens(text) for text in texts):
            raise InvalidInputError("input has no words to embed")
        vectors = tuple(
            tuple(hashed_embedding(_require_text(text, _MAX_TEXT_CHARS), dimensions)) for text in texts
        )
        return EmbeddingResult(
            vectors=vectors,
            dimensions=dimensions,
            model=request.call.model,
            usage={"input_tokens": sum(len(word_tokens(text)) for text in texts), "texts": len(texts)},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def generate_image(self, request: ImageRequest) -> ImageResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "image")
        prompt = _require_text(prompt, _MAX_TEXT_CHARS)
        width, height = local_size(request.aspect_ratio)
        images = tuple(
            Artifact(
                name="image.png" if request.count == 1 else f"image-{index}.png",
                content_type="image/png",
                data=render_image(prompt if index == 1 else f"{prompt} #{index}", width, height),
            )
            for index in range(1, request.count + 1)
        )
        return ImageResult(
            images=images,
            model=request.call.model,
            usage={"images": len(images), "pixels": width * height * len(images)},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        directives, text = directives_of(request.text)
        self._simulate(request.call, directives, "speech")
        text = _require_text(text, _MAX_TEXT_CHARS)
        if directives.running is not None and request.call.checks < directives.running:
            return _running(request.call)
        words = word_tokens(text)
        if not words:
            raise InvalidInputError("input has no words to speak")
        samples = speech_samples(len(words))
        if samples > MAX_AUDIO_SECONDS * SAMPLE_RATE:
            raise InputTooLargeError(f"speech would exceed {MAX_AUDIO_SECONDS:.0f} seconds")
        return ProviderResult(
            status="succeeded",
            output={"audio": "speech.wav", "duration_seconds": samples / SAMPLE_RATE, "words": len(words)},
            artifacts=(Artifact(name="speech.wav", content_type="audio/wav", data=synthesize_wav(words)),),
            model=request.call.model,
            usage={"characters": len(text), "audio_ms": samples * 1000 // SAMPLE_RATE},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    def start_video(self, request: VideoRequest) -> ProviderResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "video")
        _require_text(prompt, _MAX_TEXT_CHARS)
        return _running(request.call)

    def check_video(self, request: VideoRequest) -> ProviderResult:
        directives, prompt = directives_of(request.prompt)
        self._simulate(request.call, directives, "video")
        prompt = _require_text(prompt, _MAX_TEXT_CHARS)
        if request.call.handle != task_handle(request.call):
            raise InvalidInputError("unknown task handle")
        checks = self._video_checks if directives.running is None else directives.running
        if request.call.checks < checks:
            return _running(request.call)
        width, height = local_size(request.aspect_ratio, short=32)
        frames = tuple(
            Artifact(
                name=f"frame-{index:03d}.png",
                content_type="image/png",
                data=render_image(prompt, width, height, phase=index),
            )
            for index in range(4)
        )
        return ProviderResult(
            status="succeeded",
            output={"frames": len(frames), "width": width, "height": height},
            artifacts=frames,
            model=request.call.model,
            usage={"videoSeconds": request.duration_seconds or 4, "frames": len(frames)},
            cost=directives.cost if directives.cost is not None else 0.0,
        )

    # --- directives ---------------------------------------------------------------------------

    def _simulate(self, call: Call, directives: Directives, capability: str) -> None:
        """Refuse a model it does not have; sleep, then crash or raise the first directed failure
        that applies to this attempt."""
        if call.model not in MODELS[capability]:
            raise InvalidInputError(
                f"the local provider has no {capability} model {call.model[:80]!r} "
                f"(it has {', '.join(MODELS[capability])})"
            )
        for seconds in directives.sleeps:
            self._sleep(seconds)
        if directives.crash is not None and call.attempt <= directives.crash:
            raise SimulatedCrash(f"local provider: simulated crash on attempt {call.attempt}")
        for fail in directives.fails:
            if fail.until_rerun and call.reruns > 0:
                continue
            if fail.model is not None and fail.model != call.model.lower():
                continue
            if fail.times is None or call.attempt <= fail.times:
                raise self._failure(fail, call)

    def _failure(self, fail: Fail, call: Call) -> Exception:
        if fail.code == "eol":
            return end_of_life(call)
        what = f"local provider: simulated {fail.code} on attempt {call.attempt}"
        if fail.code in ("502", "503"):
            return TransientProviderError(what, status=int(fail.code))
        if fail.code == "timeout":
            return TransientProviderError(f"{what}: the request timed out")
        if fail.code == "429":
            return ThrottledError(what, retry_after=self._throttle_retry_after)
        if fail.code == "413":
            return InputTooLargeError(what, status=413)
        if fail.code == "400":
            return InvalidInputError(what, status=400)
        return ProviderAuthError(what, status=int(fail.code))


def _running(call: Call) -> ProviderResult:
    return ProviderResult(status="running", handle=task_handle(call), model=call.model, cost=0.0)
