"""Running a kind: its input checked, one capability request built and sent, the answer shaped.

The same code checks an inline input at submit (`check_input`, so an empty input is a 422 there)
and runs the step in the consumer (`run`); a workflow's merge runs its child kind through `run` too.
`check_model_options` builds the request the consumer would send and asks the provider adapter's
own pure check whether the model takes its options (at submit, before anything is written).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from aijobs.domain import Artifact
from aijobs.errors import (
    InfrastructureError,
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    InvalidOutputError,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.kinds.base import (
    EmbeddingOptions,
    ImageOptions,
    Kind,
    KindInput,
    KindOptions,
    SpeechOptions,
    TextOptions,
    VideoOptions,
)
from aijobs.observability import logger
from aijobs.providers.base import (
    Call,
    CapabilityRequest,
    Embedder,
    EmbeddingRequest,
    EmbeddingResult,
    ImageGenerator,
    ImageRequest,
    ImageResult,
    Provider,
    ProviderResult,
    SpeechRequest,
    SpeechSynthesizer,
    TextGenerator,
    TextRequest,
    TextResult,
    VideoGenerator,
    VideoRequest,
)


@dataclass(frozen=True)
class Step:
    """One step of one job, as the consumer (or a workflow merge) runs it."""

    job_id: str
    input: KindInput
    options: dict[str, Any]
    model: str
    step: str = "main"
    attempt: int = 1
    checks: int = 0
    handle: str | None = None
    reruns: int = 0
    tasks: int = 0

    def call(self, model: str | None = None) -> Call:
        return Call(
            job_id=self.job_id,
            step=self.step,
            model=model or self.model,
            attempt=self.attempt,
            checks=self.checks,
            handle=self.handle,
            reruns=self.reruns,
            tasks=self.tasks,
        )


def check_input(kind: Kind, raw: Any) -> KindInput:
    """A job's input as `kind` reads it; `InvalidInputError` / `InputTooLargeError` say what is wrong."""
    spec = kind.inputs
    if spec.type == "image":
        if raw is not None:
            raise InvalidInputError(f"{kind.name} takes an uploaded image: send its `inputRef`, not `input`")
        return KindInput()
    if isinstance(raw, dict):
        if spec.list_field is not None and spec.list_field in raw:
            return KindInput(texts=_texts(kind, raw[spec.list_field]), raw=raw)
        text = next((raw[name] for name in spec.fields if isinstance(raw.get(name), str)), None)
        if text is None:
            names = " or ".join(f"`{name}`" for name in (*spec.fields, *filter(None, [spec.list_field])))
            raise InvalidInputError(f"{kind.name} needs an input object with {names}")
        return KindInput(text=_text(kind, text), raw=raw)
    if isinstance(raw, str):
        return KindInput(text=_text(kind, raw), raw=raw)
    raise InvalidInputError(f"{kind.name} needs a text input")


def _text(kind: Kind, text: str) -> str:
    if not text.strip():
        raise InvalidInputError(f"{kind.name} needs a non-empty text input")
    if len(text) > kind.inputs.max_chars:
        raise InputTooLargeError(
            f"input has {len(text)} characters; {kind.name} takes at most {kind.inputs.max_chars}"
        )
    return text


def _texts(kind: Kind, value: Any) -> tuple[str, ...]:
    field = kind.inputs.list_field
    if not isinstance(value, list) or not value or not all(isinstance(item, str) for item in value):
        raise InvalidInputError(f"input {field!r} must be a non-empty list of strings")
    if len(value) > kind.inputs.max_items:
        raise InputTooLargeError(f"at most {kind.inputs.max_items} texts per {kind.name} job")
    return tuple(_text(kind, item) for item in value)


def options_of(kind: Kind, options: dict[str, Any]) -> KindOptions:
    """The job's options as the kind's model. Checked at submit already: a failure here is a row
    written by something else (final, `invalid_input`)."""
    try:
        return kind.parse_options(options)
    except ValidationError as error:
        raise InvalidInputError(f"{kind.name}: invalid options: {first_problem(error)}") from None


def problems(error: ValidationError, *, field: str = "option") -> list[dict[str, str]]:
    """What a pydantic model refused, one `{field, problem}` per error (at most 10), for a message
    or a 422's details."""
    return [
        {
            field: ".".join(str(part) for part in item.get("loc", ())) or "options",
            "problem": item.get("msg", ""),
        }
        for item in error.errors(include_url=False)[:10]
    ]


def first_problem(error: ValidationError) -> str:
    first = problems(error, field="where")[0]
    return f"{first['where']}: {first['problem']}"


def check_model_options(
    kind: Kind, options: Mapping[str, Any], value: KindInput | None, *, provider: str, model: str
) -> None:
    """The job's options against the bounds of the model it will run on (`InvalidOptionError`
    naming the option, the allowed values and the model), before anything is written.

    The kind's request is built as the consumer builds it (the kind's own `build` or the default)
    from the inline input, or from a stand-in when the input is uploaded, and handed to the
    provider adapter's `check_request`: the function the adapter itself runs before its call, so
    there is one table of bounds. A kind's own `build` that cannot work on the stand-in is left
    to the consumer; with the real input its refusal (a ProviderError) is the caller's to map.
    """
    from aijobs.providers.registry import request_check

    parsed = kind.parse_options(dict(options))
    stand_in = value is None
    try:
        arguments = (kind.build or _BUILDERS[kind.capability])(kind, value or _STAND_IN, parsed)
        request = _REQUESTS[kind.capability](call=Call(job_id="", model=model), **arguments)
    except ProviderError:
        if stand_in:
            return
        raise
    except Exception:  # a kind's own build failing otherwise is reported with the job
        logger.warning("options not checked at submit: the kind's build failed", extra={"kind": kind.name})
        return
    request_check(provider)(request)


# What a kind's build sees at submit when the input is uploaded (its bytes are read in the consumer).
_STAND_IN = KindInput(text="input", image=b"", raw="input")


def run(kind: Kind, provider: Provider, step: Step) -> ProviderResult:
    """Build the kind's capability request, call `provider`, shape the answer into the job's output."""
    options = options_of(kind, step.options)
    arguments = (kind.build or _BUILDERS[kind.capability])(kind, step.input, options)
    call = step.call()
    capability = kind.capability
    if capability == "text":
        text = _serving(provider, TextGenerator, kind).generate_text(TextRequest(call=call, **arguments))
        data = _validated(kind, text)
        return _succeeded(text, (kind.shape or _shape_text)(text.model_copy(update={"data": data}), options))
    if capability == "embedding":
        embedding = _serving(provider, Embedder, kind).embed(EmbeddingRequest(call=call, **arguments))
        output = kind.shape(embedding, options) if kind.shape else _shape_embedding(embedding, step.input)
        return _succeeded(embedding, output)
    if capability == "image":
        images = _serving(provider, ImageGenerator, kind).generate_image(ImageRequest(call=call, **arguments))
        return _succeeded(images, (kind.shape or _shape_images)(images, options), images.images)
    if capability == "speech":
        speech = _serving(provider, SpeechSynthesizer, kind)
        return _shaped(kind, speech.synthesize_speech(SpeechRequest(call=call, **arguments)), options)
    video = _serving(provider, VideoGenerator, kind)
    request = VideoRequest(call=call, **arguments)
    result = video.start_video(request) if step.handle is None else video.check_video(request)
    return _shaped(kind, result, options)


@dataclass(frozen=True)
class Candidate:
    """A model a step may run on, and the provider that serves it."""

    provider: Provider
    model: str


def run_chain(kind: Kind, candidates: Sequence[Candidate], step: Step) -> ProviderResult:
    """`run` on the first model, moving on to the next within the same attempt when the model is
    unavailable (at once), or throttled or failing with a 5xx from the kind's `patience`-th attempt
    on; the last model's failure is the attempt's. The answer names the model (and provider) that
    answered and the models found unavailable. An asynchronous task already started is checked on
    the first model only (its handle belongs to it)."""
    chain = candidates[:1] if step.handle is not None else candidates
    unavailable: list[str] = []
    # The failure the attempt ends with should no later model take the job.
    pending: ProviderError | None = None
    for index, candidate in enumerate(chain):
        last = index + 1 == len(chain)
        try:
            result = run(kind, candidate.provider, replace(step, model=candidate.model))
        except InvalidOptionError:
            # The options were checked against the job's first model at submit; a fallback whose
            # bounds differ cannot take this job, so it is passed over, never the job's failure.
            if pending is None:
                raise
            logger.warning(
                "fallback model does not take the job's options: passed over",
                extra={"fallbackModel": candidate.model},
            )
            if last:
                raise pending from None
            continue
        except ModelUnavailableError as error:
            final = error.named(candidate.model)
            final.earlier = tuple(unavailable)
            if last:
                raise final from None
            pending = final
            unavailable.append(error.model or candidate.model)
            reason = error.error_class
        except (ThrottledError, TransientProviderError) as error:
            # Our own AWS dependencies failing (InfrastructureError) is no reason to change models.
            if last or step.attempt < kind.patience or isinstance(error, InfrastructureError):
                raise
            pending = error
            reason = error.error_class
        else:
            update: dict[str, Any] = {
                "model": result.model or candidate.model,
                "unavailable": tuple(unavailable),
            }
            if index:
                update["provider"] = candidate.provider.name
            return result.model_copy(update=update)
        logger.warning(
            "model failed: trying the next one",
            extra={"failedModel": candidate.model, "nextModel": chain[index + 1].model, "errorClass": reason},
        )
    raise AssertionError("unreachable: the last candidate returns or raises")


def _succeeded(
    answer: TextResult | EmbeddingResult | ImageResult, output: Any, artifacts: tuple[Artifact, ...] = ()
) -> ProviderResult:
    """The step's result from a synchronous capability's answer (its model, usage and cost)."""
    return ProviderResult(
        status="succeeded",
        output=output,
        artifacts=artifacts,
        model=answer.model,
        usage=answer.usage,
        cost=answer.cost,
    )


def _shaped(kind: Kind, result: ProviderResult, options: KindOptions) -> ProviderResult:
    if kind.shape is None or result.status != "succeeded":
        return result
    return result.model_copy(update={"output": kind.shape(result, options)})


def _serving(provider: Provider, port: type[Any], kind: Kind) -> Any:
    """The provider as the capability's port. Synth refuses a kind on a provider without its
    capability (aijobs.provider_plan), so this failing is a set-up error: it pauses the kind."""
    if kind.capability not in provider.capabilities or not isinstance(provider, port):
        raise ProviderAuthError(
            f"provider {provider.name!r} does not offer the {kind.capability} capability kind "
            f"{kind.name!r} needs: set KIND_PROVIDERS={kind.name}=<a provider that does>"
        )
    return provider


def _validated(kind: Kind, result: TextResult) -> dict[str, Any] | None:
    """The structured answer checked against the kind's output model; invalid is retryable."""
    if kind.output is None:
        return None
    data = result.data
    if data is None:
        try:
            data = json.loads(result.text)
        except ValueError:
            raise InvalidOutputError(f"{kind.name}: the model did not answer with JSON") from None
    try:
        validated: BaseModel = kind.output.model_validate(data)
        return validated.model_dump(mode="json")
    except ValidationError as error:
        raise InvalidOutputError(
            f"{kind.name}: the answer does not match its output model ({first_problem(error)})"
        ) from None


# --- default builders: a job -> the capability request's fields -------------------------------


def _need_text(kind: Kind, value: KindInput) -> str:
    if value.text is None:
        raise InvalidInputError(f"{kind.name} needs a text input")
    return value.text


def _build_text(kind: Kind, value: KindInput, options: Any) -> dict[str, Any]:
    opts = cast(TextOptions, options)
    images: tuple[bytes, ...] = ()
    if kind.inputs.type == "image":
        if value.image is None:
            raise InvalidInputError(f"{kind.name} needs an uploaded image")
        images = (value.image,)
        text = ""
    else:
        text = _need_text(kind, value)
    return {
        "system": kind.render(kind.system, text, opts) if kind.system else None,
        "prompt": kind.render(kind.prompt, text, opts),
        "images": images,
        "max_tokens": opts.maxTokens,
        "temperature": opts.temperature,
        "output_schema": output_schema(kind.output) if kind.output is not None else None,
        "output_name": kind.name.replace("-", "_"),
    }


@cache
def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """An output model's JSON schema, made once per model (every text job of the kind sends it)."""
    return model.model_json_schema()


def _build_embedding(kind: Kind, value: KindInput, options: Any) -> dict[str, Any]:
    opts = cast(EmbeddingOptions, options)
    texts = value.texts if value.texts is not None else (_need_text(kind, value),)
    return {"texts": texts, "dimensions": opts.dimensions, "normalize": opts.normalize}


def _build_image(kind: Kind, value: KindInput, options: Any) -> dict[str, Any]:
    opts = cast(ImageOptions, options)
    return {
        "prompt": kind.render(kind.prompt, _need_text(kind, value), opts),
        "negative_prompt": opts.negativePrompt,
        "aspect_ratio": opts.aspectRatio,
        "count": opts.count,
        "seed": opts.seed,
    }


def _build_speech(kind: Kind, value: KindInput, options: Any) -> dict[str, Any]:
    opts = cast(SpeechOptions, options)
    return {
        "text": _need_text(kind, value),
        "voice": opts.voice,
        "engine": opts.engine,
        "format": opts.format,
        "text_type": opts.textType,
    }


def _build_video(kind: Kind, value: KindInput, options: Any) -> dict[str, Any]:
    opts = cast(VideoOptions, options)
    return {
        "prompt": kind.render(kind.prompt, _need_text(kind, value), opts),
        "duration_seconds": opts.durationSeconds,
        "aspect_ratio": opts.aspectRatio,
        "resolution": opts.resolution,
        "seed": opts.seed,
        "loop": opts.loop,
    }


_BUILDERS = {
    "text": _build_text,
    "embedding": _build_embedding,
    "image": _build_image,
    "speech": _build_speech,
    "video": _build_video,
}
_REQUESTS: dict[str, type[CapabilityRequest]] = {
    "text": TextRequest,
    "embedding": EmbeddingRequest,
    "image": ImageRequest,
    "speech": SpeechRequest,
    "video": VideoRequest,
}


# --- default shapes: the answer -> the job's output ---------------------------------------------


def _shape_text(result: TextResult, options: Any) -> Any:
    if result.data is not None:
        return result.data
    return {"text": result.text, "truncated": result.truncated}


def _shape_embedding(result: EmbeddingResult, value: KindInput) -> Any:
    vectors = [list(vector) for vector in result.vectors]
    if value.texts is not None:
        return {"vectors": vectors, "count": len(vectors), "dimensions": result.dimensions}
    return {"vector": vectors[0], "dimensions": result.dimensions}


def _shape_images(result: ImageResult, options: Any) -> Any:
    ratio = cast(ImageOptions, options).aspectRatio
    output: dict[str, Any] = {"images": len(result.images), "aspectRatio": ratio}
    if result.blocked:
        # Some images were blocked by the provider's content filter; the job keeps the others.
        output |= {"blocked": result.blocked, "blockedReason": result.blocked_reason}
    return output
