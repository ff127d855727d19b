"""The `bedrock` provider: Amazon Bedrock Runtime for every kind except speech.

| kind             | call                                   | model (example)                  |
|------------------|----------------------------------------|----------------------------------|
| summary          | Converse, system prompt                | us.amazon.nova-lite-v1:0         |
| classify (sync)  | Converse, system prompt, JSON answer   | us.amazon.nova-micro-v1:0        |
| image-caption    | Converse with an image content block   | us.amazon.nova-lite-v1:0         |
| embedding        | InvokeModel, Titan Text Embeddings V2  | amazon.titan-embed-text-v2:0     |
| image-generate   | InvokeModel, Nova Canvas TEXT_IMAGE    | amazon.nova-canvas-v1:0          |
| video-generate   | StartAsyncInvoke / GetAsyncInvoke,     | amazon.nova-reel-v1:0            |
|                  | Nova Reel TEXT_VIDEO into our bucket   |                                  |

`tts-generate` belongs to the `polly` provider. Failures map through `providers.failures`. The
adapter never logs input text, prompts or model output.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Collection, Mapping
from typing import Any
from urllib.parse import urlsplit

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from aijobs.errors import InputTooLargeError, InvalidInputError, ProviderAuthError, TransientProviderError
from aijobs.provider_plan import DEFAULT_MODELS as PLAN_DEFAULT_MODELS
from aijobs.providers.base import Artifact, Classification, ProviderRequest, ProviderResult
from aijobs.providers.failures import aws_failure, aws_task_failure
from aijobs.store.results import result_prefix

KINDS = ("summary", "embedding", "image-generate", "image-caption", "video-generate")
# `classify` is not a job kind but the synchronous path; it has its own model entry.
MODEL_KEYS = (*KINDS, "classify")

# The stage defaults (one table for the stage config, the adapters and the price checks).
DEFAULT_MODELS: Mapping[str, str] = PLAN_DEFAULT_MODELS["bedrock"]

_SYSTEM_PROMPTS = {
    "summary": (
        "You summarise documents. Answer with a faithful, concise summary of the user's text in the "
        "text's own language. Do not add facts, opinions or a preamble."
    ),
    "image-caption": "You caption images. Answer with one plain sentence describing the image.",
    "classify": (
        "You classify short texts. Answer with one JSON object and nothing else: "
        '{"label": "positive" | "negative" | "neutral" | "question", "score": <confidence 0..1>, '
        '"tags": [up to 3 lower-case keywords from the text]}'
    ),
}
_CAPTION_INSTRUCTION = "Describe this image in one sentence."
_LABELS = frozenset({"positive", "negative", "neutral", "question"})

# Limits checked before paying for a call (the same text limit as the local provider, so whether a
# job is accepted does not depend on the provider; the model's own token limit still applies).
_MAX_TEXT_CHARS = 200_000
_MAX_CLASSIFY_CHARS = 10_000
_MAX_IMAGE_BYTES = 3_932_160  # Converse: 3.75 MB per image
_MAX_EMBED_CHARS = 50_000  # Titan Text Embeddings V2: 50,000 characters (8,192 tokens) per text
_MAX_EMBED_TEXTS = 100  # one InvokeModel per text: bounded so a batch fits in one Lambda run
_MAX_CANVAS_PROMPT = 1024  # Nova Canvas textToImageParams.text: 1-1024 characters
_MAX_REEL_PROMPT = 512  # Nova Reel TEXT_VIDEO: 512 characters
_EMBED_DIMENSIONS = (256, 512, 1024)
_CANVAS_MAX_PIXELS = 4_194_304
_CANVAS_MAX_SEED = 858_993_459
_REEL_MAX_SEED = 2_147_483_646
# Nova Reel's single-shot TEXT_VIDEO task makes exactly 6 seconds at 1280x720, 24 fps; longer videos
# need the multi-shot tasks of nova-reel-v1:1, which this adapter does not build.
_REEL_SECONDS = 6
_ASYNC_ARN = re.compile(r"^arn:aws(?:-[^:]+)?:bedrock:[a-z0-9-]{1,20}:[0-9]{12}:async-invoke/([a-z0-9]{12})$")

_IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "png"),
    (b"\xff\xd8\xff", "jpeg"),
    (b"GIF87a", "gif"),
    (b"GIF89a", "gif"),
)


def client_config(*, connect_timeout: float = 5, read_timeout: float = 50) -> Config:
    """The boto3 client settings of the adapter.

    One attempt only (`max_attempts` 1): a throttled or failed call goes straight back to the
    consumer, which hands it to the queue with a back-off (and Retry-After) that outlives the
    Lambda, instead of boto sleeping through its own retries on the Lambda's billed time and
    timeout. Connect in 5 s or fail as a timeout; the 50 s read timeout lets a long summary finish
    inside the consumer's default 60 s timeout with time left to store the result.
    """
    return Config(
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
    )


def client_request_token(request: ProviderRequest) -> str:
    """The StartAsyncInvoke idempotency token of a job step: the same on every attempt.

    Derived from `jobId:step` (plus the re-run count, so an operator's re-run after a failed video
    starts a new one instead of getting the failed invocation back). Hashed because the token must
    be 1-256 printable ASCII characters whatever the step is called.
    """
    key = (
        request.idempotency_key if request.reruns == 0 else f"{request.idempotency_key}:rerun{request.reruns}"
    )
    return "aijobs-" + hashlib.sha256(key.encode("utf-8")).hexdigest()


class BedrockProvider:
    """Amazon Bedrock Runtime adapter (see the module docstring for the kinds and calls).

    `models` maps each kind (and `classify`) to a model id, inference profile ids such as
    `us.amazon.nova-lite-v1:0` included; it is sent unchanged. A job may name another model only if
    `allowed_models[kind]` lists it: a user-chosen model we have no access to would otherwise
    answer AccessDenied and pause the kind's consumer for everyone. `bucket` is the stage bucket
    that Nova Reel writes videos into, under `results/<jobId>/<step>/`. The client is created on
    first use (never at import); tests inject a stubbed one.
    """

    name: str = "bedrock"

    def __init__(
        self,
        *,
        models: Mapping[str, str],
        bucket: str,
        client: Any = None,
        allowed_models: Mapping[str, Collection[str]] | None = None,
        region_name: str | None = None,
        config: Config | None = None,
    ) -> None:
        unknown = set(models) - set(MODEL_KEYS)
        if unknown:
            raise ValueError(f"no such bedrock kind(s): {', '.join(sorted(unknown))}")
        if not all(isinstance(model, str) and model for model in models.values()):
            raise ValueError("every bedrock model id must be a non-empty string")
        if not bucket:
            raise ValueError("bucket is required (Nova Reel writes videos into it)")
        self._models = dict(models)
        self._allowed = {kind: frozenset(ids) for kind, ids in (allowed_models or {}).items()}
        self._bucket = bucket
        self._client = client
        self._region_name = region_name
        self._config = config or client_config()

    # --- plumbing -----------------------------------------------------------------------------

    def _runtime(self) -> Any:
        if self._client is None:
            self._client = boto3.client("bedrock-runtime", region_name=self._region_name, config=self._config)
        return self._client

    def _call(self, operation: str, **params: Any) -> dict[str, Any]:
        try:
            response: dict[str, Any] = getattr(self._runtime(), operation)(**params)
        except (ClientError, BotoCoreError) as error:
            raise aws_failure(error, service="Bedrock") from error
        return response

    def _model(self, key: str, requested: str | None = None) -> str:
        configured = self._models.get(key)
        if configured is None:
            # Configuration, not the user's fault: pause the kind and alert.
            raise ProviderAuthError(f"no Bedrock model is configured for {key!r}")
        if requested is None or requested == configured:
            return configured
        if requested in self._allowed.get(key, ()):
            return requested
        raise InvalidInputError(f"model {requested[:120]!r} is not allowed for {key} on bedrock")

    def _invoke_json(self, model: str, body: dict[str, Any]) -> dict[str, Any]:
        response = self._call(
            "invoke_model",
            modelId=model,
            body=json.dumps(body).encode("utf-8"),
            contentType="application/json",
            accept="application/json",
        )
        try:
            raw = response["body"].read()
        except (ClientError, BotoCoreError) as error:
            raise aws_failure(error, service="Bedrock") from error
        try:
            document = json.loads(raw)
        except ValueError:
            raise TransientProviderError("Bedrock answered with a body that is not JSON") from None
        if not isinstance(document, dict):
            raise TransientProviderError("Bedrock answered with an unexpected JSON body")
        return document

    # --- the provider interface ---------------------------------------------------------------

    def run(self, request: ProviderRequest) -> ProviderResult:
        """Do (or, with `request.handle`, check) one job step; raise a typed `ProviderError`."""
        if request.kind == "tts-generate":
            raise InvalidInputError("tts-generate is not a bedrock kind: use the polly provider")
        if request.kind not in KINDS:
            raise InvalidInputError(f"the bedrock provider has no kind {request.kind!r}")
        model = self._model(request.kind, request.model)
        if request.kind == "video-generate":
            return self._video(request, model)
        if request.kind == "summary":
            return self._summary(request, model)
        if request.kind == "image-caption":
            return self._caption(request, model)
        if request.kind == "embedding":
            return self._embedding(request, model)
        return self._image(request, model)

    def classify(self, text: str) -> Classification:
        """Label `text` positive / negative / neutral / question with the `classify` model."""
        text = _text(text, _MAX_CLASSIFY_CHARS)
        model = self._model("classify")
        response = self._converse(model, "classify", [{"text": text}], max_tokens=200, temperature=0.0)
        return _classification(_answer_text(response), model)

    # --- Converse kinds -----------------------------------------------------------------------

    def _converse(
        self, model: str, prompt: str, content: list[dict[str, Any]], *, max_tokens: int, temperature: float
    ) -> dict[str, Any]:
        return self._call(
            "converse",
            modelId=model,
            system=[{"text": _SYSTEM_PROMPTS[prompt]}],
            messages=[{"role": "user", "content": content}],
            inferenceConfig={"maxTokens": max_tokens, "temperature": temperature},
        )

    def _summary(self, request: ProviderRequest, model: str) -> ProviderResult:
        text = _text(_input_text(request.input), _MAX_TEXT_CHARS)
        max_tokens, temperature = _inference_options(request.options, default_tokens=1024)
        response = self._converse(
            model, "summary", [{"text": text}], max_tokens=max_tokens, temperature=temperature
        )
        summary = _answer_text(response)
        return _succeeded(
            {"summary": summary, "stopReason": response.get("stopReason")}, model, _token_usage(response)
        )

    def _caption(self, request: ProviderRequest, model: str) -> ProviderResult:
        data = request.input_bytes
        if not data:
            raise InvalidInputError("image-caption needs the image bytes")
        if len(data) > _MAX_IMAGE_BYTES:
            raise InputTooLargeError(
                f"image is larger than {_MAX_IMAGE_BYTES} bytes (Bedrock's per-image limit)"
            )
        image = {"image": {"format": image_format(data), "source": {"bytes": data}}}
        max_tokens, temperature = _inference_options(request.options, default_tokens=200)
        response = self._converse(
            model,
            "image-caption",
            [image, {"text": _CAPTION_INSTRUCTION}],
            max_tokens=max_tokens,
            temperature=temperature,
        )
        return _succeeded({"caption": _answer_text(response)}, model, _token_usage(response))

    # --- InvokeModel kinds --------------------------------------------------------------------

    def _embedding(self, request: ProviderRequest, model: str) -> ProviderResult:
        texts, batch = _embedding_texts(request.input)
        dimensions = request.options.get("dimensions", 1024)
        if isinstance(dimensions, bool) or dimensions not in _EMBED_DIMENSIONS:
            raise InvalidInputError("option 'dimensions' must be 256, 512 or 1024")
        normalize = request.options.get("normalize", True)
        if not isinstance(normalize, bool):
            raise InvalidInputError("option 'normalize' must be true or false")
        vectors: list[list[float]] = []
        tokens = 0
        # Titan V2 embeds one text per call. A failure part-way retries the whole job (and pays
        # again for the texts already embedded): simpler than storing partial batches.
        for text in texts:
            document = self._invoke_json(
                model, {"inputText": text, "dimensions": dimensions, "normalize": normalize}
            )
            vector = document.get("embedding")
            if not isinstance(vector, list) or len(vector) != dimensions:
                raise TransientProviderError("Bedrock answered without an embedding of the requested size")
            vectors.append([float(value) for value in vector])
            tokens += _int(document.get("inputTextTokenCount"))
        output: dict[str, Any] = {"dimensions": dimensions}
        if batch:
            output.update(vectors=vectors, count=len(vectors))
        else:
            output["vector"] = vectors[0]
        return _succeeded(output, model, {"inputTokens": tokens, "texts": len(texts)})

    def _image(self, request: ProviderRequest, model: str) -> ProviderResult:
        prompt = _text(_input_text(request.input, "prompt", "text"), _MAX_CANVAS_PROMPT)
        options = request.options
        width = _int_option(options, "width", 1024, 320, 4096)
        height = _int_option(options, "height", 1024, 320, 4096)
        if width % 16 or height % 16:
            raise InvalidInputError("options 'width' and 'height' must be multiples of 16")
        if width * height > _CANVAS_MAX_PIXELS or max(width, height) > 4 * min(width, height):
            raise InvalidInputError(
                "image must have at most 4,194,304 pixels and an aspect ratio within 1:4..4:1"
            )
        count = _int_option(options, "numberOfImages", 1, 1, 5)
        config: dict[str, Any] = {"numberOfImages": count, "width": width, "height": height}
        if "seed" in options:
            config["seed"] = _int_option(options, "seed", 0, 0, _CANVAS_MAX_SEED)
        document = self._invoke_json(
            model,
            {
                "taskType": "TEXT_IMAGE",
                "textToImageParams": {"text": prompt},
                "imageGenerationConfig": config,
            },
        )
        if document.get("error"):
            # Nova Canvas reports a moderated output in the body: the prompt's fault, final.
            raise InvalidInputError(f"Nova Canvas refused the image: {str(document['error'])[:200]}")
        images = document.get("images")
        if not isinstance(images, list) or not images:
            raise TransientProviderError("Nova Canvas answered without images")
        artifacts = tuple(
            Artifact(name=f"image-{index}.png", content_type="image/png", data=_b64(image))
            for index, image in enumerate(images, start=1)
        )
        return _succeeded(
            {"images": len(artifacts), "width": width, "height": height},
            model,
            {"images": len(artifacts)},
            artifacts,
        )

    # --- asynchronous video -------------------------------------------------------------------

    def _video(self, request: ProviderRequest, model: str) -> ProviderResult:
        prompt = _text(_input_text(request.input, "prompt", "text"), _MAX_REEL_PROMPT)
        seconds = _int_option(request.options, "durationSeconds", _REEL_SECONDS, _REEL_SECONDS, _REEL_SECONDS)
        if request.handle is not None:
            return self._check_video(request, model, request.handle, seconds)
        config: dict[str, Any] = {"durationSeconds": seconds, "fps": 24, "dimension": "1280x720"}
        if "seed" in request.options:
            config["seed"] = _int_option(request.options, "seed", 0, 0, _REEL_MAX_SEED)
        response = self._call(
            "start_async_invoke",
            modelId=model,
            modelInput={
                "taskType": "TEXT_VIDEO",
                "textToVideoParams": {"text": prompt},
                "videoGenerationConfig": config,
            },
            outputDataConfig={
                "s3OutputDataConfig": {
                    "s3Uri": f"s3://{self._bucket}/{result_prefix(request.job_id, request.step)}"
                }
            },
            # Same token on every attempt of this step: a retry after a lost answer gets the
            # invocation that was already started instead of paying for a second video.
            clientRequestToken=client_request_token(request),
        )
        return ProviderResult(status="running", handle=str(response["invocationArn"]), model=model)

    def _check_video(self, request: ProviderRequest, model: str, handle: str, seconds: int) -> ProviderResult:
        match = _ASYNC_ARN.match(handle)
        if match is None:
            raise InvalidInputError("unknown task handle for a Bedrock video")
        response = self._call("get_async_invoke", invocationArn=handle)
        status = response.get("status")
        if status == "InProgress":
            return ProviderResult(status="running", handle=handle, model=model)
        if status == "Failed":
            raise aws_task_failure(response.get("failureMessage"), service="Bedrock video")
        if status != "Completed":
            raise TransientProviderError(f"Bedrock video in an unknown state {str(status)[:40]!r}")
        uri = response.get("outputDataConfig", {}).get("s3OutputDataConfig", {}).get("s3Uri", "")
        bucket, folder = _split_s3_uri(str(uri))
        folder = folder.rstrip("/")
        # Nova Reel writes into a folder named after the invocation id under the given prefix; the
        # answer's s3Uri names that folder. Should it name only our prefix, add the id ourselves.
        if folder + "/" == result_prefix(request.job_id, request.step):
            folder = f"{folder}/{match.group(1)}"
        key = f"{folder}/output.mp4"
        # The video stays where Bedrock wrote it (never downloaded); the result points at it.
        return _succeeded(
            {"video": key, "bucket": bucket, "durationSeconds": seconds},
            model,
            {"videoSeconds": seconds},
        )


# --- helpers ------------------------------------------------------------------------------------


def image_format(data: bytes) -> str:
    """The Converse image format of `data` from its magic bytes; `InvalidInputError` otherwise."""
    for magic, name in _IMAGE_MAGIC:
        if data.startswith(magic):
            return name
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    raise InvalidInputError("image must be PNG, JPEG, GIF or WebP")


def _input_text(raw: str | dict[str, Any] | None, *fields: str) -> str | None:
    if isinstance(raw, dict):
        value = next((raw[name] for name in fields or ("text",) if isinstance(raw.get(name), str)), None)
        return value
    return raw


def _text(text: str | None, limit: int) -> str:
    if text is None or not text.strip():
        raise InvalidInputError("input text is empty or missing")
    if len(text) > limit:
        raise InputTooLargeError(f"input has {len(text)} characters; the limit is {limit}")
    return text


def _embedding_texts(raw: str | dict[str, Any] | None) -> tuple[list[str], bool]:
    """The texts to embed and whether the input was a batch (`{"texts": [...]}`)."""
    if isinstance(raw, dict) and "texts" in raw:
        texts = raw["texts"]
        if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
            raise InvalidInputError("input 'texts' must be a non-empty list of strings")
        if len(texts) > _MAX_EMBED_TEXTS:
            raise InputTooLargeError(f"at most {_MAX_EMBED_TEXTS} texts per embedding job")
        return [_text(text, _MAX_EMBED_CHARS) for text in texts], True
    return [_text(_input_text(raw), _MAX_EMBED_CHARS)], False


def _int_option(options: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise InvalidInputError(f"option {key!r} must be an integer from {low} to {high}")
    return value


def _inference_options(options: Mapping[str, Any], *, default_tokens: int) -> tuple[int, float]:
    """`maxTokens` (1..4096) and `temperature` (0..1) of a Converse call, else `InvalidInputError`."""
    max_tokens = _int_option(options, "maxTokens", default_tokens, 1, 4096)
    temperature = options.get("temperature", 0.2)
    if isinstance(temperature, bool) or not isinstance(temperature, int | float) or not 0 <= temperature <= 1:
        raise InvalidInputError("option 'temperature' must be a number from 0 to 1")
    return max_tokens, float(temperature)


def _answer_text(response: Mapping[str, Any]) -> str:
    """The text blocks of a Converse answer, joined; a filtered or empty answer raises."""
    if response.get("stopReason") in ("guardrail_intervened", "content_filtered"):
        raise InvalidInputError("Bedrock's content filter blocked this input")
    content = response.get("output", {}).get("message", {}).get("content", [])
    text = "".join(block["text"] for block in content if isinstance(block.get("text"), str)).strip()
    if not text:
        raise TransientProviderError("Bedrock answered without text")
    return text


def _token_usage(response: Mapping[str, Any]) -> dict[str, int]:
    usage = response.get("usage", {})
    return {"inputTokens": _int(usage.get("inputTokens")), "outputTokens": _int(usage.get("outputTokens"))}


def _classification(answer: str, model: str) -> Classification:
    """Parse the classify model's JSON answer; anything else is a transient model hiccup."""
    start, end = answer.find("{"), answer.rfind("}")
    try:
        document = json.loads(answer[start : end + 1]) if 0 <= start < end else None
    except ValueError:
        document = None
    if not isinstance(document, dict):
        raise TransientProviderError("the classify model did not answer with a JSON object")
    label, score, tags = document.get("label"), document.get("score"), document.get("tags", [])
    if (
        label not in _LABELS
        or isinstance(score, bool)
        or not isinstance(score, int | float)
        or not 0 <= score <= 1
    ):
        raise TransientProviderError("the classify model answered with an unknown label or score")
    if not isinstance(tags, list):
        tags = []
    clean = tuple(tag.strip().lower()[:40] for tag in tags if isinstance(tag, str) and tag.strip())[:3]
    return Classification(label=label, score=float(score), tags=clean, model=model)


def _b64(data: Any) -> bytes:
    try:
        return base64.b64decode(str(data), validate=True)
    except (binascii.Error, ValueError):
        raise TransientProviderError("Nova Canvas answered with an image that is not base64") from None


def _split_s3_uri(uri: str) -> tuple[str, str]:
    parts = urlsplit(uri)
    if parts.scheme != "s3" or not parts.netloc or not parts.path.strip("/"):
        raise TransientProviderError("Bedrock video completed without a usable output location")
    return parts.netloc, parts.path.lstrip("/")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _succeeded(
    output: Any, model: str, usage: dict[str, int], artifacts: tuple[Artifact, ...] = ()
) -> ProviderResult:
    return ProviderResult(status="succeeded", output=output, artifacts=artifacts, model=model, usage=usage)
